//! Log records in Karpenter's JSON shape (`level`, `time`, `logger`, `message`, `controller`,
//! then the fields), stamped with simulated time.

use std::time::Duration;

use serde_json::{Map, Value};

/// The records of one run, in order.
#[derive(Debug, Default)]
pub struct Log {
    records: Vec<Value>,
}

impl Log {
    fn push(&mut self, level: &str, t: Duration, controller: &str, message: &str, fields: Value) {
        let mut record: Map<String, Value> = Map::new();
        record.insert("level".into(), level.into());
        record.insert("time".into(), crate::clock::rfc3339(t).into());
        record.insert("logger".into(), "controller".into());
        record.insert("message".into(), message.into());
        record.insert("controller".into(), controller.into());
        if let Value::Object(extra) = fields {
            record.extend(extra);
        }
        self.records.push(Value::Object(record));
    }

    /// An INFO record.
    pub fn info(&mut self, t: Duration, controller: &str, message: &str, fields: Value) {
        self.push("INFO", t, controller, message, fields);
    }

    /// An ERROR record.
    pub fn error(&mut self, t: Duration, controller: &str, message: &str, fields: Value) {
        self.push("ERROR", t, controller, message, fields);
    }

    /// The records, leaving the log empty.
    pub fn take(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.records)
    }
}

/// One record as the single JSON line Karpenter would print.
pub fn line(record: &Value) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

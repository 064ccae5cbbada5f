//! Log records in Karpenter's JSON shape (`level`, `time`, `logger`, `message`, `controller`,
//! then the fields, as [`LogRecord::to_json`] builds them for every shell), stamped with
//! simulated time.

use std::time::Duration;

use kerf_core::controllers::{Level, LogRecord};
use serde_json::Value;

/// The records of one run, in order.
#[derive(Debug, Default)]
pub struct Log {
    records: Vec<Value>,
}

impl Log {
    /// A record from the controllers, at `t`.
    pub fn record(&mut self, t: Duration, record: &LogRecord) {
        self.records.push(record.to_json(&crate::clock::rfc3339(t)));
    }

    /// An INFO record of the simulated world's own (the cloud's notices).
    pub fn info(
        &mut self,
        t: Duration,
        controller: &'static str,
        message: &'static str,
        fields: Value,
    ) {
        self.own(t, Level::Info, controller, message, fields);
    }

    /// An ERROR record of the simulated world's own.
    pub fn error(
        &mut self,
        t: Duration,
        controller: &'static str,
        message: &'static str,
        fields: Value,
    ) {
        self.own(t, Level::Error, controller, message, fields);
    }

    fn own(
        &mut self,
        t: Duration,
        level: Level,
        controller: &'static str,
        message: &'static str,
        fields: Value,
    ) {
        let record = LogRecord {
            level,
            controller,
            message,
            fields,
        };
        self.record(t, &record);
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

//! The operator's JSON log lines, in the shape Karpenter prints (`level`, `time`, `logger`,
//! `message`, `controller`, fields), filtered by `LOG_LEVEL`.

use std::sync::atomic::{AtomicU8, Ordering};

use kerf_core::clock::rfc3339;
use kerf_core::controllers::{Level, LogRecord};
use serde_json::{Value, json};

use crate::execute::now;
use crate::settings::LogLevel;

/// The least severe level printed (`LogLevel as u8`).
static THRESHOLD: AtomicU8 = AtomicU8::new(LogLevel::Info as u8);

/// Prints lines at `level` and above from now on.
pub fn set_level(level: LogLevel) {
    THRESHOLD.store(level as u8, Ordering::Relaxed);
}

fn enabled(level: LogLevel) -> bool {
    level as u8 >= THRESHOLD.load(Ordering::Relaxed)
}

/// Prints a controller's log record.
pub fn record(r: &LogRecord) {
    let level = match r.level {
        Level::Info => LogLevel::Info,
        Level::Error => LogLevel::Error,
    };
    if enabled(level) {
        println!("{}", r.to_json(&rfc3339(now())));
    }
}

/// Prints a failure of the operator's own.
pub fn error(message: &str, error: &str) {
    operator_failure(LogLevel::Error, "ERROR", message, error);
}

/// One line of the operator's own at `level`: what it was doing and the error it met.
fn operator_failure(level: LogLevel, name: &str, message: &str, error: &str) {
    if enabled(level) {
        let line = json!({
            "level": name, "time": rfc3339(now()), "logger": "controller",
            "message": message, "controller": "operator", "error": error,
        });
        println!("{line}");
    }
}

/// Prints a failure the operator expects and gets past on its own (an optimistic write that
/// lost a race and is tried again on a fresh read), from `LOG_LEVEL=debug` only.
pub fn debug(message: &str, error: &str) {
    operator_failure(LogLevel::Debug, "DEBUG", message, error);
}

/// Prints something the operator met that needs a person (shown from `LOG_LEVEL=info`,
/// Karpenter's default, and up: there is no level between info and error to choose).
pub fn warn(controller: &str, message: &str, fields: Value) {
    if enabled(LogLevel::Info) {
        let mut line = json!({
            "level": "WARN", "time": rfc3339(now()), "logger": "controller",
            "message": message, "controller": controller,
        });
        if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
            l.extend(f);
        }
        println!("{line}");
    }
}

/// Prints something the operator itself did, with its fields.
pub fn info(controller: &str, message: &str, fields: Value) {
    if enabled(LogLevel::Info) {
        let mut line = json!({
            "level": "INFO", "time": rfc3339(now()), "logger": "controller",
            "message": message, "controller": controller,
        });
        if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
            l.extend(f);
        }
        println!("{line}");
    }
}

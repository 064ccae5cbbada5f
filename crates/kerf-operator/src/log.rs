//! The operator's JSON log lines, in the shape Karpenter prints (`level`, `time`, `logger`,
//! `message`, `controller`, fields), filtered by `LOG_LEVEL`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{LazyLock, Mutex};

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

/// The last error said of each call the operator makes again and again (a listing, a
/// refresh, a poll, a retried cloud call), by what it was doing, and when it was said.
static REPEATED: LazyLock<Mutex<HashMap<&'static str, (String, std::time::Instant)>>> =
    LazyLock::new(Mutex::default);

/// How often the same failure of the same call is said again.
const SAID_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// A failure of a call made again and again: printed when it differs from the last one
/// printed for `message`, or that one is a minute old, so a refusal that lasts (a permission
/// not granted) is a line a minute, not one a try; [`recovered`] says the call works again.
pub fn error_when_changed(message: &'static str, error: &str) {
    let mut said = REPEATED.lock().unwrap_or_else(|e| e.into_inner());
    if said
        .get(message)
        .is_some_and(|(last, at)| last == error && at.elapsed() < SAID_AGAIN_AFTER)
    {
        return;
    }
    said.insert(message, (error.to_string(), std::time::Instant::now()));
    drop(said);
    self::error(message, error);
}

/// The call `message` of [`error_when_changed`] worked: its next failure is printed.
pub fn recovered(message: &'static str) {
    REPEATED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(message);
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
    line(LogLevel::Info, "WARN", controller, message, fields);
}

/// Prints something the operator itself did, with its fields.
pub fn info(controller: &str, message: &str, fields: Value) {
    line(LogLevel::Info, "INFO", controller, message, fields);
}

/// Prints an error a controller met, with its fields (Karpenter's error lines of a
/// controller, as `unauthorized to call ec2:CreateFleet`).
pub fn error_in(controller: &str, message: &str, fields: Value) {
    line(LogLevel::Error, "ERROR", controller, message, fields);
}

/// One line of a controller's at `level`, named `name`, with its fields.
fn line(level: LogLevel, name: &str, controller: &str, message: &str, fields: Value) {
    if enabled(level) {
        let mut line = json!({
            "level": name, "time": rfc3339(now()), "logger": "controller",
            "message": message, "controller": controller,
        });
        if let (Value::Object(l), Value::Object(f)) = (&mut line, fields) {
            l.extend(f);
        }
        println!("{line}");
    }
}

//! Durations as Karpenter's API writes them: Go duration strings (`30s`, `1h30m`, `720h`)
//! and, where the API allows it, `Never`.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration (expected a number and unit such as 30s, 5m, 1h30m)")]
pub struct DurationError(pub String);

/// Parses a Go duration string made of `<integer><unit>` parts, units `h`, `m`, `s`, `ms`.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(text.to_string());
    let mut rest = text;
    if rest.is_empty() {
        return Err(err());
    }
    let mut total_ms: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
        if digits == 0 {
            return Err(err());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms: u64 = match &rest[..unit_len] {
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1_000,
            "ms" => 1,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        total_ms = n
            .checked_mul(unit_ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(err)?;
    }
    Ok(Duration::from_millis(total_ms))
}

/// Writes a duration compactly in Go's units: `720h`, `1h30m`, `30s`, `0s`.
pub fn format_go_duration(d: Duration) -> String {
    let mut ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// A Go duration that is always finite (`terminationGracePeriod`, budget `duration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub Duration);

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_go_duration(self.0))
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_go_duration(&text)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^([0-9]+(s|m|h))+$"})
    }
}

/// A duration that may be `Never` (`expireAfter`, `consolidateAfter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NillableDuration {
    /// The action never happens.
    Never,
    /// The action happens after this long.
    After(Duration),
}

impl NillableDuration {
    /// The finite duration, if any.
    pub fn duration(self) -> Option<Duration> {
        match self {
            NillableDuration::Never => None,
            NillableDuration::After(d) => Some(d),
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NillableDuration::Never => f.write_str("Never"),
            NillableDuration::After(d) => f.write_str(&format_go_duration(*d)),
        }
    }
}

impl std::str::FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "Never" {
            Ok(NillableDuration::Never)
        } else {
            parse_go_duration(text).map(NillableDuration::After)
        }
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NillableDuration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(
            parse_go_duration("720h").unwrap(),
            Duration::from_secs(720 * 3600)
        );
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(parse_go_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(format_go_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_go_duration(Duration::from_secs(30)), "30s");
        for bad in ["", "h", "10", "10d", "1.5h", "-1s", "Never"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            "Never".parse::<NillableDuration>().unwrap(),
            NillableDuration::Never
        );
        assert_eq!(
            "1m".parse::<NillableDuration>().unwrap().duration(),
            Some(Duration::from_secs(60))
        );
    }
}

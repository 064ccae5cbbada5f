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

/// Why Go's `time.ParseDuration` refuses a text, in its own words (`time: invalid duration
/// "soon"`, `time: missing unit in duration "5"`, `time: unknown unit "x" in duration
/// "1x"`): Karpenter passes these on in what it tells users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("time: {0}")]
pub struct GoDurationError(String);

impl GoDurationError {
    fn invalid(text: &str) -> GoDurationError {
        GoDurationError(format!("invalid duration {}", go_time_quote(text)))
    }
}

/// Go's `time.ParseDuration`, to the nanosecond and with its errors: an optional sign, then
/// one or more decimal numbers (`1.5`, `.5`, `5.`) each with a unit (`ns`, `us`, `µs`, `μs`,
/// `ms`, `s`, `m`, `h`), or a bare `0`. Signed nanoseconds, as Go's `time.Duration`.
pub fn parse_go_duration_nanos(text: &str) -> Result<i64, GoDurationError> {
    const LIMIT: u64 = 1 << 63;
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(GoDurationError::invalid(text));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(GoDurationError::invalid(text));
        }
        // the whole part: an overflow is an invalid duration
        let whole_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let mut whole: u64 = 0;
        for d in rest[..whole_len].bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(d - b'0')))
                .filter(|w| *w <= LIMIT)
                .ok_or_else(|| GoDurationError::invalid(text))?;
        }
        rest = &rest[whole_len..];
        // the fraction: digits past what fits are read and dropped, as Go does
        let (mut fraction, mut scale, mut had_fraction) = (0u64, 1f64, false);
        if let Some(after) = rest.strip_prefix('.') {
            let len = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            let mut overflowed = false;
            for d in after[..len].bytes() {
                if overflowed {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(d - b'0')))
                {
                    Some(f) if f <= LIMIT => {
                        fraction = f;
                        scale *= 10.0;
                    }
                    _ => overflowed = true,
                }
            }
            had_fraction = len > 0;
            rest = &after[len..];
        }
        if whole_len == 0 && !had_fraction {
            return Err(GoDurationError::invalid(text));
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(GoDurationError(format!(
                "missing unit in duration {}",
                go_time_quote(text)
            )));
        }
        let unit_text = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit: u64 = match unit_text {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(GoDurationError(format!(
                    "unknown unit {} in duration {}",
                    go_time_quote(unit_text),
                    go_time_quote(text)
                )));
            }
        };
        if whole > LIMIT / unit {
            return Err(GoDurationError::invalid(text));
        }
        let mut value = whole * unit;
        if fraction > 0 {
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(GoDurationError::invalid(text));
            }
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= LIMIT)
            .ok_or_else(|| GoDurationError::invalid(text))?;
    }
    if negative {
        // -(1<<63) is the one negative duration with no positive twin
        return Ok(if total == LIMIT {
            i64::MIN
        } else {
            -(total as i64)
        });
    }
    i64::try_from(total).map_err(|_| GoDurationError::invalid(text))
}

/// How Go's `time` package quotes a text in its errors: in double quotes, `"` and `\`
/// escaped, each byte of a non-ASCII or control character as `\xNN`.
fn go_time_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        if (c as u32) >= 0x80 || c < ' ' {
            let mut bytes = [0u8; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
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
    fn go_durations_parse_as_go_parses_them() {
        let ok = |text: &str| parse_go_duration_nanos(text).expect(text);
        assert_eq!(ok("1.5h"), 5_400_000_000_000);
        assert_eq!(ok(".5s"), 500_000_000);
        assert_eq!(ok("5.s"), 5_000_000_000);
        assert_eq!(ok("+1h30m"), 5_400_000_000_000);
        assert_eq!(ok("-5m"), -300_000_000_000);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("2µs"), 2_000);
        assert_eq!(ok("9223372036854775807ns"), i64::MAX);
        assert_eq!(ok("-9223372036854775808ns"), i64::MIN);
        let err = |text: &str| parse_go_duration_nanos(text).unwrap_err().to_string();
        assert_eq!(err("soon"), r#"time: invalid duration "soon""#);
        assert_eq!(err(""), r#"time: invalid duration """#);
        assert_eq!(err("5"), r#"time: missing unit in duration "5""#);
        assert_eq!(err("1x"), r#"time: unknown unit "x" in duration "1x""#);
        assert_eq!(err(".s"), r#"time: invalid duration ".s""#);
        assert_eq!(
            err("9223372036854775808ns"),
            r#"time: invalid duration "9223372036854775808ns""#
        );
        assert_eq!(err("é5m"), r#"time: invalid duration "\xc3\xa95m""#);
    }

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

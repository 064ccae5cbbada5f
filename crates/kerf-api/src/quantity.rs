//! Kubernetes resource quantities (`100m`, `1.5Gi`, `16`, `1e3`).
//!
//! A [`Quantity`] keeps the text the user wrote, so manifests round-trip unchanged, and
//! exposes its value in milli-units (`1` → 1000, `100m` → 100, `1Ki` → 1_024_000), the one
//! integer scale that holds both CPU millicores and memory bytes exactly.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A resource quantity as written in a manifest, with its parsed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    text: String,
    milli: i128,
}

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a quantity (expected a number with an optional suffix such as m, Ki, Mi, Gi, k, M, G)"
)]
pub struct QuantityError(pub String);

impl Quantity {
    /// Parses the Kubernetes quantity grammar: a signed decimal number, then an optional
    /// binary (`Ki`…`Ei`), decimal (`n u m k M G T P E`) or exponent (`e3`, `E-2`) suffix.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = || QuantityError(text.to_string());
        let s = text.trim();
        if s.is_empty() {
            return Err(err());
        }
        let (negative, s) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // value = digits × 10^(-frac_len) × multiplier; keep an exact rational as (numerator, denominator)
        let digits: String = format!("{int_part}{frac_part}");
        let mantissa: i128 = digits.parse().map_err(|_| err())?;
        let mut numerator = mantissa;
        let mut denominator: i128 = 10i128.checked_pow(frac_part.len() as u32).ok_or_else(err)?;
        let mul = |n: i128, by: i128| n.checked_mul(by).ok_or_else(err);
        match suffix {
            "" => {}
            "Ki" => numerator = mul(numerator, 1 << 10)?,
            "Mi" => numerator = mul(numerator, 1 << 20)?,
            "Gi" => numerator = mul(numerator, 1 << 30)?,
            "Ti" => numerator = mul(numerator, 1 << 40)?,
            "Pi" => numerator = mul(numerator, 1 << 50)?,
            "Ei" => numerator = mul(numerator, 1 << 60)?,
            "n" => denominator = mul(denominator, 1_000_000_000)?,
            "u" => denominator = mul(denominator, 1_000_000)?,
            "m" => denominator = mul(denominator, 1_000)?,
            "k" => numerator = mul(numerator, 1_000)?,
            "M" => numerator = mul(numerator, 1_000_000)?,
            "G" => numerator = mul(numerator, 1_000_000_000)?,
            "T" => numerator = mul(numerator, 1_000_000_000_000)?,
            "P" => numerator = mul(numerator, 1_000_000_000_000_000)?,
            "E" => numerator = mul(numerator, 1_000_000_000_000_000_000)?,
            exp if exp.starts_with(['e', 'E']) => {
                let e: i32 = exp[1..].parse().map_err(|_| err())?;
                if e.unsigned_abs() > 30 {
                    return Err(err());
                }
                let p = 10i128.pow(e.unsigned_abs());
                if e >= 0 {
                    numerator = mul(numerator, p)?;
                } else {
                    denominator = mul(denominator, p)?;
                }
            }
            _ => return Err(err()),
        }
        // milli-units, rounded up as Kubernetes rounds quantities up to the next milli
        let scaled = mul(numerator, 1000)?;
        let mut milli = scaled / denominator;
        if scaled % denominator != 0 {
            milli += 1;
        }
        Ok(Quantity {
            text: text.to_string(),
            milli: if negative { -milli } else { milli },
        })
    }

    /// A quantity of whole units (cores, bytes, pods).
    pub fn from_units(units: i64) -> Quantity {
        Quantity {
            text: units.to_string(),
            milli: i128::from(units) * 1000,
        }
    }

    /// A quantity of milli-units, written as `<n>m` unless it is whole.
    pub fn from_milli(milli: i64) -> Quantity {
        let text = if milli % 1000 == 0 {
            (milli / 1000).to_string()
        } else {
            format!("{milli}m")
        };
        Quantity {
            text,
            milli: i128::from(milli),
        }
    }

    /// The value in milli-units (value × 1000, rounded up).
    pub fn milli(&self) -> i128 {
        self.milli
    }

    /// The value in whole units, rounded up (bytes for memory, cores for cpu).
    pub fn units_ceil(&self) -> i128 {
        (self.milli + 999).div_euclid(1000)
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // YAML users write `cpu: 1000` as often as `cpu: "1000"`: accept numbers too.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        let text = match Raw::deserialize(deserializer)? {
            Raw::Text(s) => s,
            Raw::Int(i) => i.to_string(),
            Raw::Float(f) => f.to_string(),
        };
        Quantity::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        let milli = |s: &str| Quantity::parse(s).unwrap().milli();
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("1Ki"), 1024 * 1000);
        assert_eq!(milli("1.5Gi"), 1_610_612_736 * 1000);
        assert_eq!(milli("1000Gi"), 1000 * (1i128 << 30) * 1000);
        assert_eq!(milli("2k"), 2_000_000);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1n"), 1); // rounded up to a milli
        assert_eq!(milli("-1"), -1000);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "1Zi", "Gi", ".", "1e999"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accepts_yaml_numbers_and_keeps_text() {
        let q: Quantity = serde_yaml::from_str("1000").unwrap();
        assert_eq!(q.as_str(), "1000");
        assert_eq!(q.units_ceil(), 1000);
        let q: Quantity = serde_yaml::from_str("\"16\"").unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"16\"");
    }
}

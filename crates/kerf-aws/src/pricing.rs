//! Prices: an on-demand model fitted to AWS's us-east-1 list prices, and a deterministic
//! spot model for the simulator.
//!
//! On-demand: `usd_per_vcpu_hour × vCPU + usd_per_gib_hour × GiB + usd_per_accelerator_hour ×
//! accelerators`, one rate triple per family, plus named exceptions for types that break their
//! family's pattern (mostly bare metal). `scripts/fit-prices.py` fits it; a test checks every
//! listed price is within 2%. A type without a price is not offered.
//!
//! Spot: AWS publishes no spot price list, so the simulator uses a fixed model. A spot price
//! is the on-demand price times a factor between 0.20 and 0.45 (a 55–80% discount, the range
//! AWS advertises for spot), drawn per instance type and zone from an FNV-1a hash of
//! `type/zone`: stable across runs and releases, cheaper than on-demand everywhere, and
//! different between types and zones so that zone choice matters. The live AWS provider
//! reads real spot prices instead.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use crate::catalog::InstanceTypeInfo;

/// Cheapest spot price as a share of on-demand.
pub const SPOT_FACTOR_MIN: f64 = 0.20;
/// Dearest spot price as a share of on-demand.
pub const SPOT_FACTOR_MAX: f64 = 0.45;

/// The rates of one instance family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FamilyRates {
    /// USD per vCPU-hour.
    pub usd_per_vcpu_hour: f64,
    /// USD per GiB-hour of memory.
    pub usd_per_gib_hour: f64,
    /// USD per accelerator-hour (GPU or Neuron device).
    pub usd_per_accelerator_hour: f64,
}

/// The fitted on-demand price model.
#[derive(Debug, Default)]
pub struct PriceModel {
    families: BTreeMap<String, FamilyRates>,
    exceptions: BTreeMap<String, f64>,
}

static MODEL: LazyLock<PriceModel> = LazyLock::new(|| {
    PriceModel::parse(include_str!("../data/price-model.tsv"))
        .expect("embedded price model is valid (checked by tests)")
});

/// The embedded model.
pub fn model() -> &'static PriceModel {
    &MODEL
}

impl PriceModel {
    /// Reads the TSV written by `scripts/fit-prices.py`.
    pub fn parse(text: &str) -> Result<PriceModel, String> {
        let mut m = PriceModel::default();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            let num = |s: &str| {
                s.parse::<f64>()
                    .map_err(|e| format!("line {}: {s:?}: {e}", n + 1))
            };
            match f.as_slice() {
                ["exception", name, price] => {
                    m.exceptions.insert(name.to_string(), num(price)?);
                }
                [family, vcpu, gib, acc] => {
                    m.families.insert(
                        family.to_string(),
                        FamilyRates {
                            usd_per_vcpu_hour: num(vcpu)?,
                            usd_per_gib_hour: num(gib)?,
                            usd_per_accelerator_hour: num(acc)?,
                        },
                    );
                }
                _ => {
                    return Err(format!(
                        "line {}: expected 3 or 4 tab-separated fields",
                        n + 1
                    ));
                }
            }
        }
        Ok(m)
    }

    /// The on-demand price of a type in USD per hour, or None when the type is not priced.
    pub fn on_demand(&self, info: &InstanceTypeInfo) -> Option<f64> {
        if let Some(p) = self.exceptions.get(&info.name) {
            return Some(*p);
        }
        let family = info.name.split('.').next()?;
        let r = self.families.get(family)?;
        let accelerators =
            info.gpu.as_ref().map_or(0, |g| g.count) + info.neuron.as_ref().map_or(0, |n| n.count);
        let price = r.usd_per_vcpu_hour * f64::from(info.vcpu)
            + r.usd_per_gib_hour * info.memory_mib as f64 / 1024.0
            + r.usd_per_accelerator_hour * f64::from(accelerators);
        (price > 0.0).then_some(price)
    }

    /// Whether the type is a named exception.
    pub fn is_exception(&self, name: &str) -> bool {
        self.exceptions.contains_key(name)
    }
}

/// The simulated spot price of a type in a zone, given its on-demand price.
pub fn spot_price(instance_type: &str, zone: &str, on_demand: f64) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in instance_type
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(zone.bytes())
    {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let unit = (hash >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    on_demand * (SPOT_FACTOR_MIN + unit * (SPOT_FACTOR_MAX - SPOT_FACTOR_MIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_is_cheaper_stable_and_varies() {
        let a = spot_price("m5.large", "us-east-1a", 0.096);
        assert_eq!(a, spot_price("m5.large", "us-east-1a", 0.096));
        assert!((0.096 * SPOT_FACTOR_MIN..0.096 * SPOT_FACTOR_MAX).contains(&a));
        assert_ne!(a, spot_price("m5.large", "us-east-1b", 0.096));
        assert_ne!(a, spot_price("c5.large", "us-east-1a", 0.096));
    }

    #[test]
    fn rejects_malformed_model() {
        assert!(PriceModel::parse("m5\t0.048\n").is_err());
        assert!(PriceModel::parse("m5\tx\t0\t0\n").is_err());
    }
}

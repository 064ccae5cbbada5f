//! NodeOverlay (karpenter.sh/v1alpha1, Karpenter's `NodeOverlay` feature gate): a price, a
//! price adjustment or extra extended-resource capacity laid over the instance types (and
//! offerings) its requirements select, for the NodePools they select. It is how users tell
//! the autoscaler about Savings Plans, Reserved Instance discounts or hugepages.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, NodeSelectorRequirementWithMinValues, ResourceList};

/// An absolute price: digits, optionally a fraction.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";
/// A signed amount (`+0.5`, `-0.02`), a positive percent of any size (`+25%`) or a negative
/// percent of at most two integer digits (`-10%`, `-12.5%`), or `-100%`.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";

/// Desired state of a NodeOverlay.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    doc = "NodeOverlay lays a price or extra capacity over the instance types it selects.",
    plural = "nodeoverlays",
    shortname = "overlays",
    category = "karpenter",
    derive = "PartialEq",
    status = "NodeOverlayStatus",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.price) || !has(self.priceAdjustment)", "message": "cannot set both 'price' and 'priceAdjustment'"}
]))]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings (and, by `karpenter.sh/nodepool`, which
    /// NodePools) the overlay applies to.
    #[schemars(schema_with = "crate::crd_schema::overlay_requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The price of each selected offering, in place of the cloud's (`0.0326`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// A change to the price of each selected offering: `-10%`, `+0.5`, `-0.02`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
    ))]
    pub price_adjustment: Option<String>,
    /// Extended resources the selected instance types have besides their own (hugepages,
    /// devices); cpu, memory, ephemeral-storage and pods may not be set.
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))", "message": "invalid resource restricted"}
    ]))]
    pub capacity: ResourceList,
    /// Which overlay wins where several select the same offering: the higher weight; of
    /// equal weights, the name that sorts last (the other is a conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// Observed state of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` (reasons `RuntimeValidation`, `Conflict`) and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::conditions")]
    pub conditions: Vec<Condition>,
}

/// How a price changes: the new price given the cloud's, per `price` or `priceAdjustment`
/// as Karpenter applies them (a percent of the price, or an amount added; never below 0).
/// `None` when neither is set or the text does not parse.
pub fn adjusted_price(spec: &NodeOverlaySpec, price: f64) -> Option<f64> {
    if let Some(p) = &spec.price {
        return p.parse().ok();
    }
    let change = spec.price_adjustment.as_deref()?;
    let adjusted = match change.strip_suffix('%') {
        Some(percent) => price * (1.0 + percent.parse::<f64>().ok()? / 100.0),
        None => price + change.parse::<f64>().ok()?,
    };
    Some(adjusted.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(price: Option<&str>, adjustment: Option<&str>) -> NodeOverlaySpec {
        NodeOverlaySpec {
            requirements: Vec::new(),
            price: price.map(String::from),
            price_adjustment: adjustment.map(String::from),
            capacity: ResourceList::new(),
            weight: None,
        }
    }

    #[test]
    fn prices_adjust_as_karpenters_examples() {
        // Karpenter v1.15's own cases (pkg/cloudprovider/suite_test.go)
        for (adjustment, base, want) in [
            ("-10%", 10.0, 9.0),
            ("-25%", 1.5, 1.125),
            ("-15", 10.0, 0.0),
            ("+0.75", 1.25, 2.0),
            ("+50%", 2.0, 3.0),
            ("-100%", 3.0, 0.0),
        ] {
            let got = adjusted_price(&spec(None, Some(adjustment)), base).unwrap();
            assert!((got - want).abs() < 1e-12, "{adjustment} on {base}: {got}");
        }
        assert_eq!(adjusted_price(&spec(Some("80.0"), None), 10.0), Some(80.0));
        assert_eq!(adjusted_price(&spec(None, None), 10.0), None);
    }

    #[test]
    fn the_patterns_take_what_karpenters_crd_takes() {
        let adjustment = regex::Regex::new(PRICE_ADJUSTMENT_PATTERN).unwrap();
        for ok in ["-10%", "+0.5", "-0.02", "+150%", "-12.5%", "-100%", "+.5"] {
            assert!(adjustment.is_match(ok), "{ok}");
        }
        for bad in ["10%", "1.2", "-150%", "-100.5%", "+", "ten"] {
            assert!(!adjustment.is_match(bad), "{bad}");
        }
        let price = regex::Regex::new(PRICE_PATTERN).unwrap();
        assert!(price.is_match("0.0326") && price.is_match("80"));
        assert!(!price.is_match("-1") && !price.is_match("1.") && !price.is_match("$1"));
    }
}

//! The simulated EC2: picks the offering a fleet request would get, and reports the
//! offerings that had no capacity (insufficient-capacity windows of the scenario).

use std::collections::BTreeMap;

use kerf_api::{NodeSelectorRequirementWithMinValues, labels};
use kerf_aws::InstanceType;
use kerf_scheduling::resources::Resources;
use rand::RngExt;

use crate::scenario::NoticeKind;

/// A running instance.
#[derive(Clone, Debug)]
pub struct Instance {
    /// `i-…`.
    pub id: String,
    /// `aws:///<zone>/<id>`.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Price per hour.
    pub price_per_hour: f64,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Capacity.
    pub capacity: Resources,
    /// The instance type's labels.
    pub labels: BTreeMap<String, String>,
    /// Whether a spot interruption warning has been sent for it.
    pub interrupted: bool,
}

/// What a launch request got.
#[derive(Debug, Default)]
pub struct Attempt {
    /// The instance, unless every offering tried lacked capacity.
    pub instance: Option<Instance>,
    /// Offerings tried without capacity: (capacity type, instance type, zone).
    pub insufficient: Vec<(String, String, String)>,
}

fn allows(reqs: &[NodeSelectorRequirementWithMinValues], key: &str, value: &str) -> bool {
    reqs.iter()
        .filter(|r| r.key == key)
        .all(|r| r.matches(Some(value)))
}

/// Launches one of `options` (cheapest first) within the requirements: spot when allowed and
/// offered, else on-demand; offerings in price order, skipping those `no_capacity` covers.
pub fn launch(
    reqs: &[NodeSelectorRequirementWithMinValues],
    options: &[String],
    catalog: &[InstanceType],
    zones: &[String],
    no_capacity: impl Fn(&str, &str, &str) -> bool,
    rng: &mut impl rand::Rng,
) -> Attempt {
    let by_name: BTreeMap<&str, &InstanceType> = catalog.iter().map(|t| (t.name(), t)).collect();
    let mut offers: Vec<(f64, &InstanceType, &str, &str)> = Vec::new();
    for name in options {
        let Some(t) = by_name.get(name.as_str()) else {
            continue;
        };
        for o in &t.offerings {
            if zones.contains(&o.zone)
                && allows(reqs, labels::ZONE, &o.zone)
                && allows(reqs, labels::CAPACITY_TYPE, o.capacity_type)
            {
                offers.push((o.price_per_hour, t, o.zone.as_str(), o.capacity_type));
            }
        }
    }
    let spot = offers.iter().any(|o| o.3 == labels::CAPACITY_TYPE_SPOT);
    let wanted = if spot {
        labels::CAPACITY_TYPE_SPOT
    } else {
        labels::CAPACITY_TYPE_ON_DEMAND
    };
    offers.retain(|o| o.3 == wanted);
    offers.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| a.1.name().cmp(b.1.name()))
            .then_with(|| a.2.cmp(b.2))
    });
    let mut attempt = Attempt::default();
    for (price, t, zone, ct) in offers {
        if no_capacity(ct, t.name(), zone) {
            attempt
                .insufficient
                .push((ct.to_string(), t.name().to_string(), zone.to_string()));
            continue;
        }
        // EC2 ids have 17 hex digits; 64 random bits, zero-padded, look the same
        let id = format!("i-{:017x}", rng.random::<u64>());
        attempt.instance = Some(Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            id,
            instance_type: t.name().to_string(),
            zone: zone.to_string(),
            capacity_type: ct.to_string(),
            price_per_hour: price,
            allocatable: t.allocatable.clone(),
            capacity: t.capacity.clone(),
            labels: t.labels.clone(),
            interrupted: false,
        });
        break;
    }
    attempt
}

/// The EventBridge message body AWS puts on the interruption queue for a notice about an
/// instance: the shapes Kerf's interruption controller parses.
pub fn notice_message(
    kind: Option<NoticeKind>,
    instance_id: &str,
    zone: &str,
    region: &str,
    time: &str,
) -> String {
    let arn = format!("arn:aws:ec2:{zone}:instance/{instance_id}");
    let ec2 = |detail_type: &str, detail: serde_json::Value| {
        serde_json::json!({
            "version": "0", "id": format!("{instance_id}-{time}"), "detail-type": detail_type,
            "source": "aws.ec2", "account": "000000000000", "time": time, "region": region,
            "resources": [arn], "detail": detail,
        })
    };
    let state = |s: &str| {
        ec2(
            "EC2 Instance State-change Notification",
            serde_json::json!({"instance-id": instance_id, "state": s}),
        )
    };
    let v = match kind {
        None => ec2(
            "EC2 Spot Instance Interruption Warning",
            serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"}),
        ),
        Some(NoticeKind::Rebalance) => ec2(
            "EC2 Instance Rebalance Recommendation",
            serde_json::json!({"instance-id": instance_id}),
        ),
        Some(NoticeKind::Stopping) => state("stopping"),
        Some(NoticeKind::Terminated) => state("terminated"),
        Some(NoticeKind::ScheduledChange) => serde_json::json!({
            "version": "0", "id": format!("{instance_id}-{time}"), "detail-type": "AWS Health Event",
            "source": "aws.health", "account": "000000000000", "time": time, "region": region,
            "resources": [instance_id],
            "detail": {
                "service": "EC2", "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "affectedEntities": [{"entityValue": instance_id}],
            },
        }),
    };
    v.to_string()
}

//! The simulated EC2: picks the offering a fleet request would get, and reports the
//! offerings that had no capacity (insufficient-capacity windows of the scenario).

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use kerf_aws::InstanceType;
use kerf_aws::capacity::NodeSettings;
use kerf_core::cluster::{CapacityType, ClaimRecord, Launched};
use kerf_core::fleet::{self, Candidate};
use kerf_scheduling::resources::Resources;
use rand::RngExt;

use crate::scenario::NoticeKind;

/// The simulated cloud's state: its running instances, the zones it offers and what it last
/// offered Kerf. Only what Kerf asks of it ([`launch`], a listing, a termination) and the
/// Nodes its kubelets register reach the rest of the world.
pub(crate) struct Cloud {
    /// Running instances by provider id, with the NodeClaim each was launched for.
    pub instances: BTreeMap<String, (String, Instance)>,
    /// The zones the run offers.
    pub zones: Vec<String>,
    /// Nodes named so far: the next node's number.
    pub node_counter: u64,
    /// Each node class's instance types, as the run's catalog offers them.
    pub catalogs: HashMap<String, Arc<Vec<InstanceType<'static>>>>,
    /// Each class's reservations and their room as last offered to the controllers.
    pub reservations_offered: HashMap<String, Vec<(String, u32)>>,
}

impl Cloud {
    /// A cloud with no instance yet, offering `zones`.
    pub fn new(zones: Vec<String>) -> Cloud {
        Cloud {
            instances: BTreeMap::new(),
            zones,
            node_counter: 0,
            catalogs: HashMap::default(),
            reservations_offered: HashMap::default(),
        }
    }

    /// A node class's instance types as the cloud offers them in `region`, listed once
    /// (with the class's `settings`, asked only then) and kept until the class changes.
    pub fn catalog<'a>(
        &mut self,
        class: &str,
        region: &str,
        settings: impl FnOnce() -> NodeSettings<'a>,
    ) -> Arc<Vec<InstanceType<'static>>> {
        if let Some(c) = self.catalogs.get(class) {
            return c.clone();
        }
        let types = Arc::new(self.types_for(region, &settings()));
        self.catalogs.insert(class.to_string(), types.clone());
        types
    }

    /// The running instances as a listing returns them, each with the NodeClaim it was
    /// launched for.
    pub fn listing(&self) -> Vec<kerf_core::cluster::CloudInstance> {
        (self.instances.values())
            .map(|(claim, i)| kerf_core::cluster::CloudInstance {
                provider_id: i.provider_id.clone(),
                nodeclaim: claim.clone(),
                image_id: None,
                network: None,
                reservation: Some(i.reservation.clone()),
            })
            .collect()
    }

    /// The instance types a node class with `settings` is offered in `region`: the
    /// catalog's, with only the offerings in the run's zones.
    pub fn types_for(&self, region: &str, settings: &NodeSettings) -> Vec<InstanceType<'static>> {
        let mut types = kerf_aws::instance_types(region, settings).unwrap_or_default();
        for t in &mut types {
            t.offerings.retain(|o| self.zones.contains(&o.zone));
        }
        types.retain(|t| !t.offerings.is_empty());
        types
    }
}

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
    /// The capacity reservation it runs in.
    pub reservation: Option<String>,
}

impl Instance {
    /// What the cloud says of a launched instance, as the launch answer carries it.
    pub fn launched(&self, region: &str) -> Launched {
        let mut labels = self.labels.clone();
        labels.insert(kerf_api::labels::REGION.into(), region.to_string());
        Launched {
            provider_id: self.provider_id.clone(),
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
            capacity_type: CapacityType::parse(&self.capacity_type)
                .unwrap_or(CapacityType::OnDemand),
            price_per_hour: self.price_per_hour,
            capacity: self.capacity.clone(),
            allocatable: self.allocatable.clone(),
            labels,
            image_id: None,
            network: None,
        }
    }
}

/// What a launch request got.
#[derive(Debug, Default)]
pub struct Attempt {
    /// The instance, unless every offering tried lacked capacity.
    pub instance: Option<Instance>,
    /// Offerings tried without capacity: (capacity type, instance type, zone).
    pub insufficient: Vec<(String, String, String)>,
}

/// Launches one of the offerings of the NodeClaim's instance types that a request built as
/// every cloud builds it ([`fleet::request`]: what `available` allows, spot first, cheapest
/// first as Kerf priced them, at most 60) asks for, in its order, skipping those `no_capacity`
/// covers: as EC2 Fleet does with its overrides.
pub fn launch(
    claim: &ClaimRecord,
    catalog: &[InstanceType],
    zones: &[String],
    available: impl Fn(&str, &str, &str) -> bool,
    no_capacity: impl Fn(&str, &str, &str) -> bool,
    rng: &mut impl rand::Rng,
) -> Attempt {
    let by_name: BTreeMap<&str, &InstanceType> = catalog.iter().map(|t| (t.name(), t)).collect();
    let overlaid = &claim.overlaid_prices;
    let candidates = (claim.instance_types.iter())
        .filter_map(|name| by_name.get(name.as_str()).copied())
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| zones.contains(&o.zone))
                .map(move |o| {
                    let key = (
                        t.name().to_string(),
                        o.zone.clone(),
                        o.capacity_type.to_string(),
                    );
                    Candidate {
                        instance_type: t.name(),
                        zone: &o.zone,
                        capacity_type: o.capacity_type,
                        // as Kerf priced it: a NodeOverlay's price where one applies
                        price: overlaid.get(&key).map_or(o.price_per_hour, |p| *p),
                        reservation: o.reservation.as_ref().map(|r| r.id.as_str()),
                        item: (t, o),
                    }
                })
        });
    let mut attempt = Attempt::default();
    for c in fleet::request(&claim.requirements, candidates, available) {
        let ((t, o), zone, ct) = (c.item, c.zone, c.capacity_type);
        // a full reservation answers as EC2 does (ReservationCapacityExceeded)
        let full = o.reservation.as_ref().is_some_and(|r| r.capacity == 0);
        if full || no_capacity(ct, t.name(), zone) {
            attempt
                .insufficient
                .push((ct.to_string(), t.name().to_string(), zone.to_string()));
            continue;
        }
        // EC2 ids have 17 hex digits; 64 random bits, zero-padded, look the same
        let id = format!("i-{:017x}", rng.random::<u64>());
        let mut labels = t.labels.clone();
        if let Some(r) = &o.reservation {
            labels.extend(r.labels());
        }
        attempt.instance = Some(Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            id,
            instance_type: t.name().to_string(),
            zone: zone.to_string(),
            capacity_type: ct.to_string(),
            price_per_hour: c.price,
            allocatable: t.allocatable.clone(),
            capacity: t.capacity.clone(),
            labels,
            interrupted: false,
            reservation: o.reservation.as_ref().map(|r| r.id.clone()),
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
        Some(NoticeKind::CapacityReservationInterruption) => ec2(
            "EC2 Capacity Reservation Instance Interruption Warning",
            serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"}),
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

//! What the simulated cloud tells of its instances: spot interruption warnings and the other
//! notices a scenario sends (`spec.cloud.spotInterruptions`, `spec.cloud.notices`). It picks
//! the instances a notice reaches, as AWS picks them, from the API server's NodeClaims and
//! the cloud's instances, and marks those the cloud will take away.

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::labels;

use super::api_server::ApiServer;
use crate::cloud::{Cloud, Instance};
use crate::scenario::{CapacityReservation, Notice, NoticeKind, SpotInterruption};

/// How long after its warning a spot instance is reclaimed (as a capacity reservation's
/// interrupted instance is).
pub(super) const INTERRUPTION_NOTICE: Duration = Duration::from_secs(120);
/// How long a stopping instance takes to go away.
const STOP_DELAY: Duration = Duration::from_secs(60);

/// One instance a notice reaches.
pub(super) struct Reached {
    /// Its Node.
    pub node: String,
    /// Its provider id.
    pub provider_id: String,
    /// Its EC2 instance id, as the message names it.
    pub instance_id: String,
    /// Its zone.
    pub zone: String,
    /// When (after the notice) the cloud takes it away, and the cloud's word for why;
    /// none when it keeps running.
    pub gone: Option<(Duration, &'static str)>,
}

/// The spot instances a warning reaches; each is reclaimed [`INTERRUPTION_NOTICE`] later.
pub(super) fn spot_interruption(
    spec: &SpotInterruption,
    api: &ApiServer,
    cloud: &mut Cloud,
) -> Vec<Reached> {
    let targets = targets(
        api,
        cloud,
        |inst| inst.capacity_type == labels::CAPACITY_TYPE_SPOT,
        spec.nodepool.as_ref(),
        spec.instance_type.as_ref(),
        spec.count,
    );
    let gone = Some((INTERRUPTION_NOTICE, "spot instance reclaimed"));
    reach(cloud, targets, |_| gone)
}

/// The instances a scheduled-maintenance, stop, terminate, rebalance or reservation
/// interruption notice reaches. A reservation's owner takes back one instance's capacity
/// for good with each interruption (`reservations`' counts go down).
pub(super) fn notice(
    spec: &Notice,
    reservations: &mut [CapacityReservation],
    api: &ApiServer,
    cloud: &mut Cloud,
) -> Vec<Reached> {
    let interruptible: Vec<&str> = (reservations.iter())
        .filter(|r| r.interruptible)
        .map(|r| r.id.as_str())
        .collect();
    let reclaim = spec.kind == NoticeKind::CapacityReservationInterruption;
    let targets = targets(
        api,
        cloud,
        |inst| {
            !reclaim || (inst.reservation.as_deref()).is_some_and(|r| interruptible.contains(&r))
        },
        spec.nodepool.as_ref(),
        spec.instance_type.as_ref(),
        spec.count,
    );
    reach(cloud, targets, |inst| match spec.kind {
        NoticeKind::Stopping => Some((STOP_DELAY, "instance stopped")),
        NoticeKind::Terminated => Some((Duration::ZERO, "instance terminated")),
        NoticeKind::CapacityReservationInterruption => {
            let r = (reservations.iter_mut()).find(|r| Some(&r.id) == inst.reservation.as_ref());
            if let Some(r) = r {
                r.count = r.count.saturating_sub(1);
            }
            Some((INTERRUPTION_NOTICE, "capacity reservation reclaimed"))
        }
        NoticeKind::ScheduledChange | NoticeKind::Rebalance => None,
    })
}

/// The reached instances, each marked interrupted when the cloud will take it away.
fn reach(
    cloud: &mut Cloud,
    targets: Vec<(String, String)>,
    mut gone: impl FnMut(&Instance) -> Option<(Duration, &'static str)>,
) -> Vec<Reached> {
    let mut out = Vec::new();
    for (node, provider_id) in targets {
        let Some((_, inst)) = cloud.instances.get_mut(&provider_id) else {
            continue;
        };
        let gone = gone(inst);
        if gone.is_some() {
            inst.interrupted = true;
        }
        out.push(Reached {
            node,
            instance_id: inst.id.clone(),
            zone: inst.zone.clone(),
            provider_id,
            gone,
        });
    }
    out
}

/// The Node and provider id of the stored NodeClaims whose instance runs a registered Node,
/// oldest first, filtered as a notice says: read off the API server and the cloud, as AWS
/// picks instances.
fn targets(
    api: &ApiServer,
    cloud: &Cloud,
    only: impl Fn(&Instance) -> bool,
    nodepool: Option<&String>,
    instance_type: Option<&String>,
    count: u32,
) -> Vec<(String, String)> {
    let nodes: BTreeMap<&str, &String> = (api.nodes.iter())
        .map(|(name, n)| (n.provider_id.as_str(), name))
        .collect();
    let mut candidates: Vec<(Duration, &String, &String, &String)> = (api.nodeclaims.iter())
        .filter_map(|(name, c)| {
            let status = c.object.status.as_ref()?;
            let provider_id = status.provider_id.as_deref()?;
            let (_, inst) = cloud.instances.get(provider_id)?;
            let node = nodes.get(provider_id)?;
            let ok = only(inst)
                && !inst.interrupted
                && nodepool.is_none_or(|p| Some(p.as_str()) == c.pool())
                && instance_type.is_none_or(|t| *t == inst.instance_type);
            ok.then_some((c.born(), name, *node, &inst.provider_id))
        })
        .collect();
    candidates.sort();
    (candidates.into_iter().take(count as usize))
        .map(|(_, _, node, provider_id)| (node.clone(), provider_id.clone()))
        .collect()
}

//! ARC zonal shifts of the EKS cluster (`ENABLE_ZONAL_SHIFT`), as Karpenter follows them: the
//! cluster's managed resource is read every half minute (`arc-zonal-shift:GetManagedResource`),
//! and while a shift away from a zone is applied and unexpired, nothing launches into that
//! zone and the cloud leaves its instances alone (no termination or reboot).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use aws_sdk_arczonalshift::types::AppliedStatus;

use kerf_api::ec2nodeclass::SubnetStatus;

use crate::launch::Fleet;
use crate::{AwsError, classify};

/// One zone's shift as last read: when it ends (seconds since the Unix epoch) and whether it
/// is applied.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shift {
    expiry: i64,
    applied: bool,
}

/// The cluster's zonal shifts, read from ARC.
#[derive(Debug)]
pub struct ZonalShifts {
    client: aws_sdk_arczonalshift::Client,
    /// The cluster's ARN, ARC's name for it.
    cluster_arn: String,
    /// By zone id (`use1-az1`).
    held: Mutex<BTreeMap<String, Shift>>,
}

impl ZonalShifts {
    /// Reads the shifts of the cluster `cluster_arn`.
    pub fn new(config: &aws_config::SdkConfig, cluster_arn: String) -> ZonalShifts {
        ZonalShifts {
            client: crate::client!(aws_sdk_arczonalshift, config),
            cluster_arn,
            held: Mutex::default(),
        }
    }

    /// Over a given client (tests answer it).
    pub fn with_client(client: aws_sdk_arczonalshift::Client, cluster_arn: String) -> ZonalShifts {
        ZonalShifts {
            client,
            cluster_arn,
            held: Mutex::default(),
        }
    }

    /// Reads the cluster's shifts again. As Karpenter keeps them: an answer with none
    /// forgets every shift; one with some adds or replaces those it lists and keeps the
    /// others until they expire.
    pub async fn update(&self) -> Result<(), AwsError> {
        let out = (self.client.get_managed_resource())
            .resource_identifier(&self.cluster_arn)
            .send()
            .await
            .map_err(|e| {
                classify(
                    "GetManagedResource",
                    "arc-zonal-shift:GetManagedResource",
                    e,
                )
            })?;
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if out.zonal_shifts().is_empty() {
            held.clear();
        }
        for shift in out.zonal_shifts() {
            let read = Shift {
                expiry: shift.expiry_time().secs(),
                applied: *shift.applied_status() == AppliedStatus::Applied,
            };
            held.insert(shift.away_from().to_string(), read);
        }
        Ok(())
    }

    /// The zone ids shifted away from at `now` (seconds since the Unix epoch).
    pub fn shifted(&self, now: i64) -> BTreeSet<String> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        (held.iter())
            .filter(|(_, s)| s.applied && s.expiry > now)
            .map(|(zone, _)| zone.clone())
            .collect()
    }

    /// Whether ARC knows the cluster at all, asked once at start: Karpenter does not start
    /// with `ENABLE_ZONAL_SHIFT` on a cluster not enabled for zonal shift, and says why.
    pub async fn check(&self) -> Result<(), String> {
        match self.update().await {
            Ok(()) => Ok(()),
            Err(e) => Err(format!(
                "Unable to find Cluster {} in Zonal Shift. Please check that the cluster is enabled for Zonal Shift and roles have appropriate permissions {e}",
                self.cluster_arn
            )),
        }
    }
}

/// What the fleet knows of zones: their ids by name (from the classes' subnets) and the ids
/// shifted away from.
#[derive(Debug, Default)]
pub struct Zones {
    ids: BTreeMap<String, String>,
    shifted: BTreeSet<String>,
}

impl Fleet {
    /// The zones a class's subnets are in, with their ids.
    pub fn learn_zones(&self, subnets: &[SubnetStatus]) {
        let mut zones = self.zonal.lock().unwrap_or_else(PoisonError::into_inner);
        for s in subnets {
            if let Some(id) = &s.zone_id {
                zones.ids.insert(s.zone.clone(), id.clone());
            }
        }
    }

    /// The zone ids shifted away from are now `shifted`: the instance types offered are made
    /// anew (nothing is offered in those zones).
    pub fn set_shifted(&self, shifted: BTreeSet<String>) {
        let mut zones = self.zonal.lock().unwrap_or_else(PoisonError::into_inner);
        if zones.shifted != shifted {
            zones.shifted = shifted;
            self.room_changed.notify_one();
        }
    }

    /// The zone ids shifted away from.
    pub fn shifted(&self) -> BTreeSet<String> {
        let zones = self.zonal.lock().unwrap_or_else(PoisonError::into_inner);
        zones.shifted.clone()
    }

    /// The zone of an `aws:///<zone>/<id>` provider id, and its id when known.
    pub(crate) fn zone_of(&self, provider_id: &str) -> (String, String) {
        let zone = (provider_id.trim_start_matches("aws:///").split('/').next()).unwrap_or("");
        let zones = self.zonal.lock().unwrap_or_else(PoisonError::into_inner);
        let id = zones.ids.get(zone).cloned().unwrap_or_default();
        (zone.to_string(), id)
    }

    /// Refuses a call on an instance in a zone shifted away from, as Karpenter skips it
    /// (`instance i-… is in zonally shifted availability zone us-east-1a (use1-az1), skipping
    /// termination`): the caller tries again once the shift ends.
    pub(crate) fn unless_shifted(
        &self,
        provider_id: &str,
        call: &'static str,
        skipping: &str,
    ) -> Result<(), AwsError> {
        let (zone, zone_id) = self.zone_of(provider_id);
        let shifted = (self.zonal.lock().unwrap_or_else(PoisonError::into_inner))
            .shifted
            .contains(&zone_id);
        if !shifted {
            return Ok(());
        }
        let instance = crate::launch::instance_id(provider_id).unwrap_or(provider_id);
        Err(AwsError::Api {
            call,
            message: format!(
                "instance {instance} is in zonally shifted availability zone {zone} ({zone_id}), skipping {skipping}"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_arczonalshift::operation::get_managed_resource::GetManagedResourceOutput;
    use aws_sdk_arczonalshift::primitives::DateTime;
    use aws_sdk_arczonalshift::types::ZonalShiftInResource;
    use aws_smithy_mocks::{RuleMode, mock};

    fn shift(zone: &str, expiry: i64, applied: bool) -> ZonalShiftInResource {
        ZonalShiftInResource::builder()
            .away_from(zone)
            .expiry_time(DateTime::from_secs(expiry))
            .start_time(DateTime::from_secs(0))
            .applied_status(if applied {
                AppliedStatus::Applied
            } else {
                AppliedStatus::NotApplied
            })
            .zonal_shift_id("z")
            .resource_identifier("arn")
            .comment("")
            .build()
            .expect("a shift")
    }

    #[tokio::test]
    async fn shifts_are_applied_until_they_expire_and_an_empty_answer_forgets_them() {
        let answers = [
            vec![shift("use1-az1", 100, true), shift("use1-az2", 100, false)],
            // a zone no longer listed beside another is kept (as Karpenter merges them)
            vec![shift("use1-az3", 200, true)],
            vec![],
        ];
        let rules: Vec<_> = answers
            .into_iter()
            .map(|shifts| {
                mock!(aws_sdk_arczonalshift::Client::get_managed_resource)
                    .match_requests(|r| r.resource_identifier() == Some("arn:cluster"))
                    .then_output(move || {
                        GetManagedResourceOutput::builder()
                            .set_zonal_shifts(Some(shifts.clone()))
                            .set_applied_weights(Some(Default::default()))
                            .set_autoshifts(Some(Vec::new()))
                            .build()
                            .expect("an answer")
                    })
            })
            .collect();
        let mut interceptor =
            aws_smithy_mocks::MockResponseInterceptor::new().rule_mode(RuleMode::Sequential);
        for rule in &rules {
            interceptor = interceptor.with_rule(rule);
        }
        let config = aws_sdk_arczonalshift::Config::builder()
            .behavior_version(aws_sdk_arczonalshift::config::BehaviorVersion::latest())
            .region(aws_sdk_arczonalshift::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_arczonalshift::config::Credentials::new(
                "test", "test", None, None, "tests",
            ))
            .http_client(aws_smithy_mocks::create_mock_http_client())
            .interceptor(interceptor)
            .build();
        let client = aws_sdk_arczonalshift::Client::from_conf(config);
        let shifts = ZonalShifts::with_client(client, "arn:cluster".into());
        shifts.update().await.expect("first");
        assert_eq!(shifts.shifted(50), BTreeSet::from(["use1-az1".into()]));
        assert!(shifts.shifted(100).is_empty(), "expired");
        shifts.update().await.expect("second");
        let both = BTreeSet::from(["use1-az1".to_string(), "use1-az3".to_string()]);
        assert_eq!(shifts.shifted(50), both);
        shifts.update().await.expect("third");
        assert!(shifts.shifted(50).is_empty());
    }
}

//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules and
//! controller-runtime's timings (15 s lease, 10 s renew deadline, 2 s retry): of several
//! replicas one acts, and one that cannot renew stops acting before another may take over.
//!
//! Written here rather than taken from kube-lease-manager: that crate keeps reporting
//! leadership while its renewals fail (the API server unreachable), and "no write after the
//! lease is lost" needs a deadline the holder enforces on itself. The guarantee: a renewal sent
//! at local time `t` lets this replica act until `t + renew_deadline`; another replica takes the
//! Lease only after it has seen the same record unchanged for `lease_duration`, which starts
//! after `t`. Writes go through `replace` with the read `resourceVersion`, so two candidates
//! cannot both win one round.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::log;

/// Where and as whom to elect.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// How long a record not renewed keeps others out.
    pub lease_duration: Duration,
    /// How long after its last successful renewal the holder still acts.
    pub renew_deadline: Duration,
    /// How often a candidate tries and the holder renews.
    pub retry_period: Duration,
}

impl Config {
    /// controller-runtime's timings for a Lease.
    pub fn new(namespace: String, name: String, identity: String) -> Config {
        Config {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Held by the leader: whether it may still act.
#[derive(Debug)]
pub struct Leadership {
    valid_until: Mutex<Instant>,
}

impl Leadership {
    /// A Lease held until `until`, for the gate's tests.
    #[cfg(test)]
    pub(crate) fn held_until(until: Instant) -> Leadership {
        Leadership {
            valid_until: Mutex::new(until),
        }
    }

    /// Whether the last renewal is recent enough to act on: every write checks it first.
    pub fn holds(&self) -> bool {
        Instant::now() < *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn extend(&self, until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }
}

/// A Lease record as a candidate last saw it, and when (local clock) it last changed.
#[derive(Debug)]
struct Observation {
    record: Option<(String, Option<MicroTime>)>,
    since: Instant,
}

/// What one round of the election writes.
#[derive(Debug, PartialEq)]
enum Step {
    /// No Lease yet: create it, held by us.
    Create(Box<Lease>),
    /// Take or renew it.
    Update(Box<Lease>),
    /// Someone else holds a record that has not run out.
    Wait,
}

/// One round: given the Lease as read (if any) and whether its record ran out, what to write.
fn step(current: Option<&Lease>, config: &Config, expired: bool, now: MicroTime) -> Step {
    let seconds = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(lease) = current else {
        return Step::Create(Box::new(Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    let ours = holder == Some(config.identity.as_str());
    if !ours && holder.is_some() && !expired {
        return Step::Wait;
    }
    let mut next = lease.clone();
    next.spec = Some(LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(seconds),
        acquire_time: if ours {
            spec.acquire_time
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!ours)),
        ..spec
    });
    Step::Update(Box::new(next))
}

/// What one round of the election came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Our own record, renewed.
    Renewed,
    /// The Lease created, or taken from an expired or released record.
    Acquired,
    /// Someone else holds it.
    Waiting,
}

/// A candidate for, then holder of, the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: Config,
    seen: Observation,
}

impl Elector {
    /// A candidate that has seen nothing yet.
    pub fn new(client: kube::Client, config: Config) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            seen: Observation {
                record: None,
                since: Instant::now(),
            },
        }
    }

    fn lease_text(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// One round: whether we hold the Lease after it, and whether we renewed our own record
    /// or took the Lease. The time is taken before the read, so a renewal's deadline counts
    /// from before the API server saw it.
    async fn round(&mut self) -> Result<Round, kube::Error> {
        let current = self.api.get_opt(&self.config.name).await?;
        let record = current.as_ref().and_then(|l| l.spec.as_ref()).map(|s| {
            let holder = s.holder_identity.clone().unwrap_or_default();
            (holder, s.renew_time.clone())
        });
        if record != self.seen.record {
            self.seen = Observation {
                record,
                since: Instant::now(),
            };
        }
        // the holder's own duration counts, as client-go reads it (a released record says 1 s)
        let duration = (current.as_ref().and_then(|l| l.spec.as_ref()))
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|d| u64::try_from(d).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        let expired = self.seen.since.elapsed() >= duration;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let post = PostParams::default();
        let ours = current
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        let written = match step(current.as_ref(), &self.config, expired, now) {
            Step::Wait => return Ok(Round::Waiting),
            Step::Create(lease) => self.api.create(&post, &lease).await,
            Step::Update(lease) => self.api.replace(&self.config.name, &post, &lease).await,
        };
        match written {
            Ok(_) if ours => Ok(Round::Renewed),
            Ok(_) => Ok(Round::Acquired),
            // another candidate wrote first: this round is theirs
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Round::Waiting),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease; then keeps renewing it in the background.
    /// While a renewal is overdue (the API server unreachable) the replica does not act, and
    /// acts again once its own record is renewed; when another replica holds, or has held, the
    /// Lease meanwhile, the process ends (exit status 1), as controller-runtime's does, and the
    /// Deployment restarts it as a candidate.
    pub async fn lead(mut self) -> (Arc<Leadership>, tokio::task::JoinHandle<()>) {
        log::info(
            "leader-election",
            "attempting to acquire leader lease",
            json!({"lease": self.lease_text(), "identity": self.config.identity}),
        );
        let leadership = loop {
            let sent = Instant::now();
            match self.round().await {
                Ok(Round::Renewed | Round::Acquired) => {
                    break Arc::new(Leadership {
                        valid_until: Mutex::new(sent + self.config.renew_deadline),
                    });
                }
                Ok(Round::Waiting) => {}
                Err(e) => log::error("acquiring leader lease", &e.to_string()),
            }
            tokio::time::sleep(self.config.retry_period).await;
        };
        log::info(
            "leader-election",
            "successfully acquired lease",
            json!({"lease": self.lease_text(), "identity": self.config.identity}),
        );
        let held = Arc::clone(&leadership);
        let renew = tokio::spawn(async move {
            let mut lapsed = false;
            loop {
                tokio::time::sleep(self.config.retry_period).await;
                let sent = Instant::now();
                match self.round().await {
                    // our own record, untouched since our last renewal: nobody else can have
                    // led meanwhile, so acting resumes where it stopped
                    Ok(Round::Renewed) => {
                        held.extend(sent + self.config.renew_deadline);
                        if std::mem::take(&mut lapsed) {
                            log::info(
                                "leader-election",
                                "renewed leader lease after it lapsed, acting again",
                                json!({"lease": self.lease_text()}),
                            );
                        }
                    }
                    // someone else holds it, or held it since: what they did is not in this
                    // replica's state, so it starts over as a candidate, as controller-runtime
                    // does (the Deployment restarts it)
                    Ok(Round::Waiting | Round::Acquired) => {
                        held.extend(sent);
                        log::error(
                            "leader election lost",
                            &format!("{} is held by another replica", self.lease_text()),
                        );
                        std::process::exit(1);
                    }
                    Err(e) => log::error("renewing leader lease", &e.to_string()),
                }
                // overdue (the API server unreachable, say): no write goes out until the
                // record is renewed, but the replica keeps its state and stays up
                if !held.holds() && !lapsed {
                    lapsed = true;
                    log::error(
                        "leader election lost",
                        &format!(
                            "{} not renewed within the renew deadline; not acting until it is",
                            self.lease_text()
                        ),
                    );
                }
            }
        });
        (leadership, renew)
    }

    /// Hands the Lease back at shutdown so another replica takes over at once.
    pub async fn release(client: kube::Client, config: &Config) {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let Ok(Some(mut lease)) = api.get_opt(&config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        match api
            .replace(&config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => log::info(
                "leader-election",
                "released leader lease",
                json!({"lease": format!("{}/{}", config.namespace, config.name)}),
            ),
            Err(e) => log::error("releasing leader lease", &e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, Step, step};
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn config(me: &str) -> Config {
        Config::new("kube-system".into(), "kerf".into(), me.into())
    }

    fn now() -> MicroTime {
        MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn held_by(holder: Option<&str>, transitions: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn written(s: Step) -> LeaseSpec {
        match s {
            Step::Create(l) | Step::Update(l) => l.spec.unwrap(),
            Step::Wait => panic!("nothing written"),
        }
    }

    #[test]
    fn a_live_record_of_another_replica_is_waited_on() {
        let lease = held_by(Some("b"), 3);
        assert_eq!(step(Some(&lease), &config("a"), false, now()), Step::Wait);
    }

    #[test]
    fn a_run_out_or_released_record_is_taken_and_counted_as_a_transition() {
        for lease in [
            held_by(Some("b"), 3),
            held_by(None, 3),
            held_by(Some(""), 3),
        ] {
            let expired = lease.spec.as_ref().unwrap().holder_identity.as_deref() == Some("b");
            let spec = written(step(Some(&lease), &config("a"), expired, now()));
            assert_eq!(spec.holder_identity.as_deref(), Some("a"));
            assert_eq!(spec.lease_transitions, Some(4));
            assert_eq!(spec.lease_duration_seconds, Some(15));
        }
    }

    #[test]
    fn the_holder_renews_without_a_transition() {
        let lease = held_by(Some("a"), 3);
        let spec = written(step(Some(&lease), &config("a"), false, now()));
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.renew_time, Some(now()));
    }

    #[test]
    fn no_lease_is_created_held() {
        let Step::Create(lease) = step(None, &config("a"), false, now()) else {
            panic!("not created");
        };
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));
    }
}

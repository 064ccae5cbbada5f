//! What the run does next, in time order ([`Agenda`]): the scenario's timed inputs, the
//! cloud's and kubelets' delayed answers, samples, and the controllers' wake-ups.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::time::Duration;

use crate::scenario::Scenario;

/// One thing due at a time.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
    /// The scenario's event of this index (a scale, an apply, a delete, a node fault).
    Scenario(usize),
    /// The instance with this provider id registers its node.
    Registered(String),
    /// The node becomes Ready (and its startup taints are removed).
    Ready(String),
    /// The scenario's spot interruption of this index.
    Interrupt(usize),
    /// The scenario's notice of this index.
    Notice(usize),
    /// The instance with this provider id goes away, with the cloud's words for why.
    Reclaim(String, &'static str),
    /// The report samples the cluster.
    Sample,
    /// The controllers asked to be polled.
    Wake,
    /// Kerf crashes and starts again.
    Restart,
    /// A capacity reservation turns `expiring` or ends.
    Reservations,
}

/// The things due, by time and then by the order they were added.
#[derive(Default)]
pub(super) struct Agenda {
    queue: BinaryHeap<Reverse<(Duration, u64, Ev)>>,
    seq: u64,
    /// Wake-ups already queued for the controllers.
    wakes: BTreeSet<Duration>,
}

impl Agenda {
    /// The agenda of a scenario at its start: its events, interruptions, notices, operator
    /// restarts, reservation ends (and the time each capacity block turns `expiring`), the
    /// ends of API-server outages (the cluster moves again then), and the first sample.
    pub fn of(scenario: &Scenario) -> Agenda {
        let mut agenda = Agenda::default();
        let spec = &scenario.spec;
        for (i, e) in spec.events.iter().enumerate() {
            agenda.push(e.at.0, Ev::Scenario(i));
        }
        for (i, s) in spec.cloud.spot_interruptions.iter().enumerate() {
            agenda.push(s.at.0, Ev::Interrupt(i));
        }
        for (i, n) in spec.cloud.notices.iter().enumerate() {
            agenda.push(n.at.0, Ev::Notice(i));
        }
        for at in &spec.operator_restarts {
            agenda.push(at.0, Ev::Restart);
        }
        let ends = (spec.cloud.reservations.iter()).filter_map(|r| r.end.map(|e| e.0));
        for end in ends {
            let expiring = end.saturating_sub(kerf_aws::reservations::CAPACITY_BLOCK_EXPIRY);
            agenda.push(expiring, Ev::Reservations);
            agenda.push(end, Ev::Reservations);
        }
        for outage in &spec.api_server.outages {
            agenda.wake_at(outage.until.0);
        }
        agenda.push(Duration::ZERO, Ev::Sample);
        agenda
    }

    /// Adds `ev`, due at `at`.
    pub fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    /// Polls the controllers at `at`, unless a wake-up is queued for then already.
    pub fn wake_at(&mut self, at: Duration) {
        if self.wakes.insert(at) {
            self.push(at, Ev::Wake);
        }
    }

    /// The wake-up at `at` came.
    pub fn woke(&mut self, at: Duration) {
        self.wakes.remove(&at);
    }

    /// The next thing due, and when.
    pub fn pop(&mut self) -> Option<(Duration, Ev)> {
        self.queue.pop().map(|Reverse((at, _, ev))| (at, ev))
    }

    /// Whether something is due by `at`.
    pub fn due_by(&self, at: Duration) -> bool {
        (self.queue.peek()).is_some_and(|Reverse((t, _, _))| *t <= at)
    }

    /// Drops everything still queued: the run is over.
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// Moves everything queued `by` later (a run from a standing cluster starts there).
    pub fn shift(&mut self, by: Duration) {
        let queued = std::mem::take(&mut self.queue).into_vec();
        for Reverse((at, seq, ev)) in queued {
            self.queue.push(Reverse((at + by, seq, ev)));
        }
    }
}

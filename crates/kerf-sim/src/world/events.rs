//! The Events the simulated API server keeps for `kubectl describe`: one object per thing
//! said about an object (its type, reason and message), counted each time it is said again
//! (as client-go's event recorder counts a repeat into the stored Event), and dropped an
//! hour after it was last said (kube-apiserver's default `--event-ttl`).

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_core::controllers::{Event, EventObject};

/// How long an Event is kept after it was last said (kube-apiserver's `--event-ttl`).
pub const EVENT_TTL: Duration = Duration::from_secs(60 * 60);

/// How often the Events past their time are looked for: a sweep reads them all.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// One Event as stored: what was said about an object, how often and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptEvent {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Its reason (`Nominated`, `DisruptionBlocked`, …).
    pub reason: String,
    /// Its message.
    pub message: String,
    /// How many times it was said.
    pub count: u32,
    /// When it was first said (simulated time).
    pub first: Duration,
    /// When it was last said.
    pub last: Duration,
}

/// What one Event says: whether it is a warning, its reason and its message.
type Said = (bool, String, String);

/// The Events kept, by the object they are about.
#[derive(Debug, Default)]
pub struct Events {
    /// By object kind and name, then by what was said.
    by_object: BTreeMap<(EventObject, String), BTreeMap<Said, KeptEvent>>,
    /// When the Events past their time were last dropped.
    swept: Duration,
}

impl Events {
    /// Stores an Event the controllers sent at `now`: a new one, or one more count of the
    /// same thing said about the same object.
    pub(crate) fn record(&mut self, event: &Event, now: Duration) {
        if now >= self.swept + SWEEP_EVERY {
            self.swept = now;
            self.by_object.retain(|_, said| {
                said.retain(|_, e| e.last + EVENT_TTL > now);
                !said.is_empty()
            });
        }
        let said = (self.by_object)
            .entry((event.kind, event.name.clone()))
            .or_default();
        let key = (
            event.warning,
            event.reason.to_string(),
            event.message.clone(),
        );
        let kept = said.entry(key).or_insert_with(|| KeptEvent {
            warning: event.warning,
            reason: event.reason.to_string(),
            message: event.message.clone(),
            count: 0,
            first: now,
            last: now,
        });
        kept.count += 1;
        kept.last = now;
    }

    /// The Events about one object still kept at `now`, oldest last said first, as
    /// `kubectl describe` lists them.
    pub fn about(&self, kind: EventObject, name: &str, now: Duration) -> Vec<&KeptEvent> {
        let mut out: Vec<&KeptEvent> = (self.by_object.get(&(kind, name.to_string())))
            .into_iter()
            .flat_map(BTreeMap::values)
            .filter(|e| e.last + EVENT_TTL > now)
            .collect();
        out.sort_by_key(|e| (e.last, e.first));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(reason: &'static str, message: &str) -> Event {
        Event {
            kind: EventObject::Node,
            name: "node-a".into(),
            warning: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_same_thing_said_again_is_counted_and_an_hour_later_it_is_gone() {
        let mut events = Events::default();
        let minute = Duration::from_secs(60);
        events.record(&said("DisruptionBlocked", "Node is nominated"), minute);
        events.record(&said("DisruptionBlocked", "Node is nominated"), 3 * minute);
        events.record(&said("Unconsolidatable", "cheaper"), 2 * minute);
        let kept = events.about(EventObject::Node, "node-a", 3 * minute);
        let seen: Vec<(&str, u32, Duration, Duration)> = (kept.iter())
            .map(|e| (e.reason.as_str(), e.count, e.first, e.last))
            .collect();
        assert_eq!(
            seen,
            [
                ("Unconsolidatable", 1, 2 * minute, 2 * minute),
                ("DisruptionBlocked", 2, minute, 3 * minute)
            ]
        );
        assert!(
            events
                .about(EventObject::NodeClaim, "node-a", 3 * minute)
                .is_empty()
        );
        // an hour after it was last said, an Event is no longer kept
        let later = 2 * minute + EVENT_TTL;
        let left: Vec<&str> = (events.about(EventObject::Node, "node-a", later).iter())
            .map(|e| e.reason.as_str())
            .collect();
        assert_eq!(left, ["DisruptionBlocked"]);
        events.record(&said("Other", "x"), 3 * minute + EVENT_TTL);
        assert_eq!(
            events.by_object.values().map(BTreeMap::len).sum::<usize>(),
            1
        );
    }
}

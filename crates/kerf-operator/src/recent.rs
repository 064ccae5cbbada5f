//! What the API server answered to Kerf's own last write of an object, kept for a minute so
//! that the next write of it starts from that answer instead of reading the object again: a
//! new NodeClaim's status is written four or five times in its first seconds, and a new
//! Node's taint edit follows its labels' write at once. Such a write carries a precondition
//! (the answer's resourceVersion, or a JSON Patch `test` of what it changes), so the server
//! turns it away when anyone wrote in between, and the caller then reads the object as
//! before. Under a burst this halves the calls each new node costs, and the action client's
//! request budget is what a burst waits on.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer is kept: a NodeClaim's first writes come seconds apart; after a
/// minute a write reads again, and a burst's answers are let go.
const KEEP: Duration = Duration::from_secs(60);

/// The last answers, by object name, each taken by the next write of its object.
pub(crate) struct Recent<T> {
    answers: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T> Recent<T> {
    /// None kept yet.
    pub(crate) fn new() -> Recent<T> {
        Recent {
            answers: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps `answer` as `name`'s last, letting go of every answer older than [`KEEP`].
    pub(crate) fn put(&self, name: &str, answer: T) {
        self.put_at(name, answer, Instant::now());
    }

    fn put_at(&self, name: &str, answer: T, now: Instant) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers.retain(|_, (at, _)| now.saturating_duration_since(*at) < KEEP);
        answers.insert(name.to_string(), (now, answer));
    }

    /// `name`'s last answer if one younger than [`KEEP`] is kept; it is no longer kept
    /// (a write that fails leaves nothing behind that could be stale).
    pub(crate) fn take(&self, name: &str) -> Option<T> {
        self.take_at(name, Instant::now())
    }

    fn take_at(&self, name: &str, now: Instant) -> Option<T> {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        let (at, answer) = answers.remove(name)?;
        (now.saturating_duration_since(at) < KEEP).then_some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_taken_once_and_only_while_young() {
        let recent = Recent::new();
        let start = Instant::now();
        recent.put_at("a", 1, start);
        assert_eq!(recent.take_at("a", start + Duration::from_secs(5)), Some(1));
        assert_eq!(recent.take_at("a", start + Duration::from_secs(5)), None);
        recent.put_at("b", 2, start);
        assert_eq!(recent.take_at("b", start + KEEP), None);
    }

    #[test]
    fn old_answers_are_let_go_as_new_ones_come() {
        let recent = Recent::new();
        let start = Instant::now();
        recent.put_at("old", 1, start);
        recent.put_at("young", 2, start + Duration::from_secs(30));
        recent.put_at("new", 3, start + KEEP);
        let kept = recent.answers.lock().unwrap().len();
        assert_eq!(kept, 2, "the answer older than a minute stays kept");
    }
}

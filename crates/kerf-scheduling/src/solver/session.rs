//! Many "what if these nodes were gone?" questions against one compiled cluster.
//!
//! Consolidation asks, for candidate after candidate, whether a node's pods fit elsewhere.
//! Compiling the cluster (labels, instance types, topology counts) for each question would
//! cost as much as the question; a session compiles it once and answers each question by
//! changing the compiled state and, unless the answer is kept, changing it back. A question
//! costs the placement of the pods that move, not the size of the cluster.

use k8s_openapi::api::core::v1::Pod;
use rustc_hash::FxHashMap;

use super::{Bin, Catalog, Decision, State};
use crate::amounts::Amounts;
use crate::input::Problem;

/// A compiled cluster that answers removal questions.
pub struct Session<'p> {
    state: State<'p>,
    open: Option<Tentative>,
}

/// What a tried removal changed, to take it back.
struct Tentative {
    bins: usize,
    remaining: Vec<Amounts>,
    excluded: Vec<usize>,
}

impl<'p> Session<'p> {
    /// Compiles the cluster. `movable` are the pods that may move (pod indices in answers
    /// refer to it), each also listed in `problem.bound_pods` on the node it runs on;
    /// `problem.pods` is not read.
    pub fn new(problem: &'p Problem<'p>, movable: &[&Pod]) -> Session<'p> {
        Session::with_catalog(problem, movable, &mut Catalog::default())
    }

    /// [`Session::new`] with the instance types `catalog` compiled for earlier solves.
    pub fn with_catalog(
        problem: &'p Problem<'p>,
        movable: &[&Pod],
        catalog: &mut Catalog,
    ) -> Session<'p> {
        let mut state = State::new(problem, movable.iter().copied(), catalog);
        state.excluded = vec![false; state.bins.len()];
        state.topology.start_journal();
        state.full = Some(state.full_bins());
        Session { state, open: None }
    }

    /// Takes existing `nodes` away and places their pods elsewhere: `pods` (problem pod
    /// indices, the pods the caller knows on those nodes) and any pod a kept removal moved
    /// onto them. New NodeClaims may open only when `new_nodes`. The change is tentative:
    /// [`Session::keep`] makes it part of the cluster; the next question, or
    /// [`Session::undo`], takes it back.
    pub fn try_remove(&mut self, nodes: &[usize], pods: &[usize], new_nodes: bool) -> Decision {
        self.undo();
        let s = &mut self.state;
        s.cursors.clear();
        s.saved = Some(FxHashMap::default());
        let mut moving = pods.to_vec();
        let mut excluded = Vec::with_capacity(nodes.len());
        for &n in nodes {
            let Some(&b) = s.bin_of_node.get(n) else {
                continue;
            };
            if b == usize::MAX || s.excluded[b] {
                continue;
            }
            for k in s.bound_at[n].clone() {
                s.tally_bound(k, false);
            }
            for p in s.bins[b].pods.clone() {
                s.tally_placed(p, b, false);
                moving.push(p);
            }
            s.excluded[b] = true;
            excluded.push(b);
        }
        moving.sort_unstable();
        moving.dedup();
        self.open = Some(Tentative {
            bins: s.bins.len(),
            remaining: s.pools.iter().map(|p| p.remaining).collect(),
            excluded,
        });
        s.pools_enabled = new_nodes && s.problem.options.new_nodeclaims;
        let reasons = s.run(moving);
        s.pools_enabled = s.problem.options.new_nodeclaims;
        self.outcome(reasons)
    }

    fn outcome(&self, reasons: FxHashMap<usize, Vec<crate::Reason>>) -> Decision {
        let s = &self.state;
        let start = self.open.as_ref().map_or(s.bins.len(), |t| t.bins);
        let saved = s.saved.as_ref();
        let mut touched: Vec<(usize, usize)> = saved
            .into_iter()
            .flatten()
            .filter(|(b, _)| **b < start)
            .map(|(b, old)| (*b, old.pods.len()))
            .collect();
        touched.sort_unstable();
        let placed = touched
            .into_iter()
            .map(|(b, from)| (&s.bins[b], s.bins[b].pods[from..].to_vec()))
            .chain(s.bins[start..].iter().map(|bin| (bin, bin.pods.clone())));
        s.decision(placed, reasons)
    }

    /// Makes the last tried removal part of the cluster.
    pub fn keep(&mut self) {
        self.open = None;
        self.state.saved = None;
        self.state.topology.start_journal();
        // a kept removal only fills the other nodes: those full before still are
        self.state.full = Some(self.state.full_bins());
    }

    /// Takes the last tried removal back (nothing when none is open).
    pub fn undo(&mut self) {
        let Some(t) = self.open.take() else { return };
        let s = &mut self.state;
        for (b, bin) in s.saved.take().unwrap_or_default() {
            if b < t.bins {
                s.bins[b] = bin;
            }
        }
        s.bins.truncate(t.bins);
        for (p, r) in s.pools.iter_mut().zip(t.remaining) {
            p.remaining = r;
        }
        for b in t.excluded {
            s.excluded[b] = false;
        }
        s.topology.undo_journal();
        s.cursors.clear();
    }
}

impl State<'_> {
    /// Saves a bin before a session's tentative change touches it.
    pub(super) fn save(&mut self, b: usize) {
        if let Some(saved) = &mut self.saved
            && !saved.contains_key(&b)
        {
            saved.insert(b, self.bins[b].clone());
        }
    }
}

/// Bins saved before a tentative change, by index.
pub(super) type Saved = FxHashMap<usize, Bin>;

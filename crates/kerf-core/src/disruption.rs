//! Disruption's pure parts, apart from the controller that keeps its state between passes
//! ([`crate::controllers::disruption`]): Karpenter's rules (budgets, `do-not-disrupt`,
//! PodDisruptionBudgets, consolidateAfter) and the search that picks one command from a
//! described cluster.

pub mod rules;
pub mod search;

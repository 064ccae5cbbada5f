//! Fitting a pod: whether a bin can take it (check), placing it (commit), the order bins
//! and NodePools are tried in (place), and the cursors that skip bins a group of alike pods
//! can never use again.

use std::rc::Rc;

use kerf_api::Taint;

use super::*;
use crate::amounts::Amounts;
use crate::bitset::BitSet;
use crate::input::MinValues;
use crate::interned::{Req, Reqs};
use crate::launch::OfferingFilter;
use crate::pods::Relaxation;
use crate::reasons::{self, Reason, Why};
use crate::symbols::Sym;
use crate::taints::first_untolerated;
use crate::topology::SpreadFloor;
use crate::topology::{Domain, GroupId, Kind};

impl<'p> State<'p> {
    /// A bin's domain for a group's key, under requirements `reqs` (the bin's own if None).
    pub(super) fn domain_of<'a>(
        &'a self,
        bin: &'a Bin,
        reqs: Option<&'a Reqs>,
        id: GroupId,
    ) -> Domain<'a> {
        let key = self.topology.groups()[id].def.key;
        if key == self.hostname {
            return Domain::Host(bin.hostname);
        }
        let reqs = reqs.unwrap_or(&bin.reqs);
        match (reqs.get(key), bin.node()) {
            (Some(r), _) => Domain::Req(Some(r)),
            // an existing node without the label is in no domain of the key
            (None, Some(_)) => Domain::Req(Some(&self.nothing)),
            (None, None) => Domain::Req(None),
        }
    }

    pub(super) fn taints_of(&self, bin: &Bin) -> &'p [Taint] {
        match bin.host {
            Host::Node(n) => &self.problem.nodes[n].taints,
            Host::Planned { pool, .. } => &self.problem.node_pools[self.pools[pool].input].taints,
        }
    }

    pub(super) fn attempt(&self, pod: usize, relax: &Relaxation) -> Attempt {
        let info = &self.pods[pod];
        let (own, host) = relax.node_reqs(info, self.hostname, &self.symbols);
        let groups = relax.groups(info);
        let reqs = match &info.volume_reqs {
            Some(v) => own.intersection(v, &self.symbols),
            None => own.clone(),
        };
        Attempt {
            reqs,
            own,
            host,
            groups,
            tolerations: self.toleration_ids[pod],
            tolerate_pns: relax.tolerate_prefer_no_schedule,
            host_ports: info.host_ports.clone(),
        }
    }

    /// Instance types of a pool compatible with requirements (labels, and an available
    /// offering in an allowed zone and capacity type), cached per requirement shape.
    pub(super) fn compatible_types(&self, pool: usize, reqs: &Reqs) -> Rc<BitSet> {
        if let Some(hit) = self.pools[pool].compat.borrow().get(reqs) {
            return hit.clone();
        }
        let p = &self.pools[pool];
        let mut set = BitSet::empty(p.types.len());
        let filter = OfferingFilter::new(reqs, &self.offering_keys);
        for (i, t) in p.types.iter().enumerate() {
            if t.reqs.intersects(reqs, &self.symbols).is_ok()
                && t.offerings.iter().any(|o| o.passes(&filter, &self.symbols))
            {
                set.insert(i);
            }
        }
        let set = Rc::new(set);
        self.pools[pool]
            .compat
            .borrow_mut()
            .insert(reqs.clone(), set.clone());
        set
    }

    /// Checks a pod against a bin without changing anything (except the compatibility
    /// cache); `limit` filters a new NodeClaim's types by the NodePool's remaining limits.
    pub(super) fn check(
        &self,
        pod: usize,
        a: &Attempt,
        bin: &Bin,
        limit: Option<&Amounts>,
        mut floors: Option<&mut Floors>,
    ) -> Result<Fit, Reject> {
        let info = &self.pods[pod];
        let permanent = |cause| Reject {
            permanent: true,
            cause,
        };
        let transient = |cause| Reject {
            permanent: false,
            cause,
        };
        if let Some(h) = &a.host
            && !h.has(bin.hostname, &self.symbols)
        {
            return Err(permanent(Cause::Hostname));
        }
        if !info.requests.fits(&bin.headroom) {
            let full = !self.min_request.fits(&bin.headroom);
            return Err(Reject {
                permanent: full,
                cause: Cause::Resources,
            });
        }
        let taints = self.taints_of(bin);
        if let Some(t) = first_untolerated(&info.tolerations, taints, a.tolerate_pns) {
            let i = taints.iter().position(|x| std::ptr::eq(x, t)).unwrap_or(0);
            return Err(permanent(Cause::Taint(i)));
        }
        if info
            .host_ports
            .iter()
            .any(|p| bin.ports.iter().any(|q| p.conflicts(q)))
        {
            return Err(permanent(Cause::Ports));
        }
        let wk = self.well_known;
        let compat = if bin.node().is_some() {
            bin.reqs.compatible(&a.reqs, |_| false, &self.symbols)
        } else {
            bin.reqs
                .compatible(&a.reqs, |k| k.index() < wk, &self.symbols)
        };
        compat.map_err(|c| permanent(Cause::Requirements(c)))?;
        let mut reqs: Option<Reqs> =
            (!a.reqs.is_empty()).then(|| bin.reqs.intersection(&a.reqs, &self.symbols));
        for &id in &a.groups {
            let g = &self.topology.groups()[id];
            let key = g.def.key;
            let honors = !matches!(g.def.kind, Kind::Spread { .. }) || g.def.node_terms.is_some();
            let pod_domains = if honors { a.own.get(key) } else { None };
            let selects_self = g.def.kind != Kind::InverseAnti && info.counted_by.contains(&id);
            let domain = self.domain_of(bin, reqs.as_ref(), id);
            let floor = match (&g.def.kind, &domain, floors.as_deref_mut()) {
                (Kind::Spread { .. }, Domain::Req(_), Some(kept)) => {
                    Some(&*kept.entry(id).or_insert_with(|| {
                        (self.topology).spread_floor(id, pod_domains, &self.symbols)
                    }))
                }
                _ => None,
            };
            match (self.topology).check(id, pod_domains, selects_self, domain, floor, &self.symbols)
            {
                Ok(Some(narrow)) => {
                    let r = reqs.get_or_insert_with(|| Reqs::clone(&bin.reqs));
                    r.add(key, narrow, &self.symbols);
                }
                Ok(None) => {}
                Err(rej) => {
                    return Err(Reject {
                        permanent: rej.permanent,
                        cause: Cause::Topology(id),
                    });
                }
            }
        }
        let Host::Planned {
            pool,
            types: current,
            span,
        } = &bin.host
        else {
            return Ok(Fit { reqs, types: None });
        };
        let pool = *pool;
        let mut types = current.clone();
        if let Some(r) = &reqs
            && *r != *bin.reqs
        {
            let compat = self.compatible_types(pool, r);
            types.intersect_with(&compat);
        }
        if types.is_empty() {
            return Err(permanent(Cause::NoTypes));
        }
        let total = bin.requests.plus(&self.pods[pod].requests);
        let p = &self.pools[pool];
        // what fits the narrowest of the types fits each of them (and of those left)
        let mut fits_any = limit.is_none() && total.fits(&span.narrowest);
        if !fits_any {
            let candidates: Vec<usize> = types.iter().collect();
            for i in candidates {
                let t = &p.types[i];
                if !total.fits(&t.allocatable) {
                    types.remove(i);
                    continue;
                }
                fits_any = true;
                if limit.is_some_and(|l| !t.capacity.fits(l)) {
                    types.remove(i);
                }
            }
        }
        if types.is_empty() {
            return Err(transient(if fits_any { Cause::Limit } else { Cause::Fit }));
        }
        let final_reqs = reqs.as_ref().unwrap_or(&bin.reqs);
        // as Karpenter provisions (strict reserved-offering mode): a NodeClaim that took pods
        // and can launch into a reservation with room keeps that choice; a pod that would
        // take it away goes to another NodeClaim
        if !self.reservations.is_empty()
            && !bin.pods.is_empty()
            && self.can_reserve(pool, current, &bin.reqs)
            && !self.can_reserve(pool, &types, final_reqs)
        {
            return Err(transient(Cause::Reserved));
        }
        let mut short: Vec<(Sym, u32)> = Vec::new();
        for (key, r) in final_reqs.iter() {
            if let Some(min) = r.min_values {
                let mut seen: Vec<Sym> = types
                    .iter()
                    .filter_map(|i| {
                        p.types[i]
                            .reqs
                            .get(key)
                            .and_then(|t| t.values())
                            .map(|v| v.to_vec())
                    })
                    .flatten()
                    .filter(|v| r.has(*v, &self.symbols))
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                if (seen.len() as u32) < min {
                    short.push((key, seen.len() as u32));
                }
            }
        }
        // BestEffort relaxes a NodeClaim as it is made, never one that already took pods
        let relax = self.problem.options.min_values == MinValues::BestEffort && bin.pods.is_empty();
        if let Some(&(key, _)) = short.first() {
            if !relax {
                let min = final_reqs.get(key).and_then(|r| r.min_values).unwrap_or(0);
                return Err(transient(Cause::MinValues(key, min)));
            }
            let r = reqs.get_or_insert_with(|| Reqs::clone(&bin.reqs));
            for (key, seen) in short {
                r.lower_min_values(key, seen);
            }
        }
        Ok(Fit {
            reqs,
            types: Some(types),
        })
    }

    /// Whether a NodeClaim of `pool` open to `types` under `reqs` could launch into a
    /// capacity reservation that has room.
    fn can_reserve(&self, pool: usize, types: &BitSet, reqs: &Reqs) -> bool {
        let p = &self.pools[pool];
        types.iter().any(|i| {
            p.types[i].offerings.iter().any(|o| {
                o.reservation
                    .is_some_and(|r| self.reservations.get(&r).is_some_and(|n| *n > 0))
                    && o.allowed(reqs, &self.offering_keys, &self.symbols)
            })
        })
    }

    /// The existing nodes that have no room for even the least any pod here requests: a
    /// scan would turn them away for good (see [`State::full`]).
    pub(super) fn full_bins(&self) -> Cursor {
        let mut full = Cursor::default();
        for (b, bin) in self.bins.iter().enumerate() {
            if bin.node().is_some() && !self.min_request.fits(&bin.headroom) {
                full.kill(b);
            }
        }
        full
    }

    pub(super) fn headroom(&self, bin: &Bin) -> Amounts {
        match &bin.host {
            Host::Planned { span, .. } => span.widest.minus(&bin.requests),
            Host::Node(_) => bin.headroom,
        }
    }

    /// What a pool's `types` can hold.
    fn span(&self, pool: usize, types: &BitSet) -> Span {
        let p = &self.pools[pool];
        let mut all = types.iter().map(|i| p.types[i].allocatable);
        let first = all.next().unwrap_or_default();
        let (widest, narrowest) = all.fold((first, first), |(w, n), a| (w.max(&a), n.min(&a)));
        Span { widest, narrowest }
    }

    pub(super) fn commit(&mut self, pod: usize, b: usize, fit: Fit) {
        let info = &self.pods[pod];
        let requests = info.requests;
        let ports = info.host_ports.clone();
        self.save(b);
        // what a planned NodeClaim's types hold, read again only when they narrowed
        let narrowed = match (&self.bins[b].host, fit.types) {
            (Host::Planned { pool, types, .. }, Some(kept)) if *types != kept => {
                Some((*pool, self.span(*pool, &kept), kept))
            }
            _ => None,
        };
        let bin = &mut self.bins[b];
        if let Some(r) = fit.reqs {
            bin.reqs = Arc::new(r);
        }
        if let Some((pool, span, types)) = narrowed {
            bin.host = Host::Planned { pool, types, span };
        }
        if let Host::Node(_) = bin.host {
            bin.headroom = bin.headroom.minus(&requests);
        }
        bin.requests = bin.requests.plus(&requests);
        bin.pods.push(pod);
        bin.ports.extend(ports);
        let headroom = self.headroom(&self.bins[b]);
        self.bins[b].headroom = headroom;
        self.tally_placed(pod, b, true);
    }

    /// Counts (or takes back) a placed pod in the groups that count it.
    pub(super) fn tally_placed(&mut self, pod: usize, b: usize, add: bool) {
        let info = &self.pods[pod];
        let counted: Vec<GroupId> = info
            .counted_by
            .iter()
            .chain(&info.owns_inverse)
            .copied()
            .collect();
        let taints = self.taints_of(&self.bins[b]);
        for id in counted {
            let bin = &self.bins[b];
            if self
                .topology
                .node_counts(id, &bin.reqs, taints, &self.symbols)
            {
                let owned = domain_owned(self.domain_of(bin, None, id));
                if add {
                    self.topology.record(id, owned.as_domain(), &self.symbols);
                } else {
                    self.topology.forget(id, owned.as_domain(), &self.symbols);
                }
            }
        }
    }

    /// Tries every bin, then a new NodeClaim per NodePool. Returns the reasons per NodePool
    /// on failure.
    pub(super) fn place(&mut self, pod: usize, relax: &Relaxation) -> Result<(), Vec<Reason>> {
        let a = self.attempt(pod, relax);
        let mut cursor = self
            .cursors
            .get_mut(&a)
            .map(std::mem::take)
            .unwrap_or_else(|| self.full.clone().unwrap_or_default());
        let mut placed = None;
        // nothing is counted while the bins are scanned: each spread's floor holds for all
        let mut floors = Floors::default();
        let mut b = cursor.start;
        while b < self.bins.len() {
            if cursor.is_dead(b) || self.excluded.get(b).copied().unwrap_or(false) {
                b += 1;
                continue;
            }
            match self.check(pod, &a, &self.bins[b], None, Some(&mut floors)) {
                Ok(fit) => {
                    placed = Some((b, fit));
                    break;
                }
                Err(r) if r.permanent => cursor.kill(b),
                Err(_) => {}
            }
            b += 1;
        }
        match self.cursors.get_mut(&a) {
            Some(slot) => *slot = cursor,
            None => {
                self.cursors.insert(a.clone(), cursor);
            }
        }
        if let Some((b, fit)) = placed {
            self.commit(pod, b, fit);
            return Ok(());
        }
        if self.pools.is_empty() || !self.pools_enabled {
            return Err(vec![Reason {
                node_pool: None,
                why: Why::NoNodePools,
            }]);
        }
        let mut reasons = Vec::new();
        for oi in 0..self.pool_order.len() {
            let pool = self.pool_order[oi];
            let mut opened = self.new_bin(pod, &a, pool);
            if matches!(opened, Err(Why::LimitReached { .. })) && self.tighten_limits(pool) {
                opened = self.new_bin(pod, &a, pool);
            }
            match opened {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(Reason {
                    node_pool: Some(self.problem.node_pools[self.pools[pool].input].name.clone()),
                    why,
                }),
            }
        }
        Err(reasons::fold(reasons))
    }

    /// A NodePool's limits ran out: each planned NodeClaim of it has reserved the largest
    /// of its candidate types, though it can only launch one of the `max_instance_types`
    /// cheapest. Caps every such NodeClaim's types at the largest of its cheapest ones and
    /// reserves only that; `true` when room came back. The types a NodeClaim keeps can
    /// only shrink as pods join it, so no launch can exceed its reservation.
    pub(super) fn tighten_limits(&mut self, pool: usize) -> bool {
        // nothing new to tighten since the last time: no room can come back
        if self.pools[pool].tightened == Some(self.bins.len()) {
            return false;
        }
        self.pools[pool].tightened = Some(self.bins.len());
        let cap_len = self.problem.options.max_instance_types.max(1);
        let mut reserved = Amounts::default();
        for b in 0..self.bins.len() {
            let bin = &self.bins[b];
            let Host::Planned {
                pool: of, types, ..
            } = &bin.host
            else {
                continue;
            };
            if *of != pool {
                continue;
            }
            let p = &self.pools[pool];
            if bin.reqs.iter().any(|(_, r)| r.min_values.is_some()) {
                // minValues may keep types beyond the cheapest: leave its reservation whole
                let max = types
                    .iter()
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                reserved = reserved.plus(&max);
                continue;
            }
            let filter = OfferingFilter::new(&bin.reqs, &self.offering_keys);
            let mut priced: Vec<(f64, usize)> = types
                .iter()
                .filter_map(|i| {
                    p.types[i]
                        .offerings
                        .iter()
                        .filter(|o| o.passes(&filter, &self.symbols))
                        .map(|o| o.price_per_hour)
                        .min_by(f64::total_cmp)
                        .map(|price| (price, i))
                })
                .collect();
            priced.sort_by(|a, b| a.0.total_cmp(&b.0));
            let cap = priced
                .iter()
                .take(cap_len)
                .map(|(_, i)| p.types[*i].capacity)
                .reduce(|x, y| x.max(&y))
                .unwrap_or_default();
            let mut kept = types.clone();
            for i in types.iter() {
                if !p.types[i].capacity.fits(&cap) {
                    kept.remove(i);
                }
            }
            reserved = reserved.plus(&cap);
            let span = self.span(pool, &kept);
            if let Host::Planned { types, span: s, .. } = &mut self.bins[b].host {
                *types = kept;
                *s = span;
            }
        }
        let p = &mut self.pools[pool];
        let remaining = p.budget.minus(&reserved);
        let grew = remaining != p.remaining;
        p.remaining = remaining;
        grew
    }

    pub(super) fn new_bin(&mut self, pod: usize, a: &Attempt, pool: usize) -> Result<(), Why> {
        let base = self.pools[pool].reqs.clone();
        let types = BitSet::clone(&self.compatible_types(pool, &base));
        let span = self.span(pool, &types);
        let fresh = Bin {
            host: Host::Planned { pool, types, span },
            hostname: self.hostname, // never a domain of any count
            reqs: Arc::new(base),
            requests: self.pools[pool].overhead,
            headroom: Amounts::UNBOUNDED,
            pods: Vec::new(),
            ports: Vec::new(),
        };
        let p = &self.pools[pool];
        let remaining = p.remaining;
        match self.check(pod, a, &fresh, Some(&remaining), None) {
            Ok(fit) => {
                let name = format!(
                    "{}#{}",
                    self.problem.node_pools[self.pools[pool].input].name,
                    self.bins.len()
                );
                let hostname = self.symbols.intern(&name);
                let b = self.bins.len();
                self.bins.push(Bin { hostname, ..fresh });
                self.commit(pod, b, fit);
                let p = &self.pools[pool];
                let max_capacity = self.bins[b]
                    .types()
                    .into_iter()
                    .flat_map(BitSet::iter)
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                self.pools[pool].remaining = remaining.minus(&max_capacity);
                Ok(())
            }
            Err(r) => Err(self.explain(pod, a, pool, &fresh, r.cause)),
        }
    }
}

/// Spread groups' floors for one pod, kept across a scan of the bins (see
/// [`Topology::spread_floor`]).
type Floors = FxHashMap<GroupId, SpreadFloor>;

/// The bins a group of pods with one constraint signature can never use again: a leading
/// run skipped outright, then one bit per bin.
#[derive(Clone, Default)]
pub(super) struct Cursor {
    start: usize,
    dead: Vec<u64>,
}

impl Cursor {
    fn is_dead(&self, b: usize) -> bool {
        self.dead
            .get(b / 64)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    fn kill(&mut self, b: usize) {
        if self.dead.len() <= b / 64 {
            self.dead.resize(b / 64 + 1, 0);
        }
        self.dead[b / 64] |= 1 << (b % 64);
        while self.is_dead(self.start) {
            self.start += 1;
        }
    }
}

/// A domain detached from the bin it was read from, so counts can be updated.
pub(super) enum OwnedDomain {
    Host(Sym),
    Req(Option<Req>),
}

impl OwnedDomain {
    pub(super) fn as_domain(&self) -> Domain<'_> {
        match self {
            OwnedDomain::Host(h) => Domain::Host(*h),
            OwnedDomain::Req(r) => Domain::Req(r.as_ref()),
        }
    }
}

pub(super) fn domain_owned(d: Domain<'_>) -> OwnedDomain {
    match d {
        Domain::Host(h) => OwnedDomain::Host(h),
        Domain::Req(r) => OwnedDomain::Req(r.cloned()),
    }
}

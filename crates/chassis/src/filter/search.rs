//! Filtered search: per query, scan the slots that pass or search the graph with the filter.
//!
//! The choice follows the estimated count P of slots that pass ([`Compiled::estimate`]). A
//! graph search that may return only slots that pass must visit about `W / σ` nodes to find
//! its beam (W: what an unfiltered search at the same ef visits, about [`VISITS_PER_EF`] × ef;
//! σ = P / N), while a scan scores P vectors. The graph wins when `W·N / P < P`, so when
//! `P > sqrt(W·N)`: [`scan_cutoff`]. As Weaviate's flat-search cutoff and Qdrant's
//! cardinality threshold, but from the file's own size; Lucene's fallback covers a wrong
//! estimate: a graph search that has made more distance computations than
//! [`GIVE_UP_FACTOR`] × P stops and the slots that pass are scanned instead.
//!
//! Between [`TWO_HOP_FROM`] and [`TWO_HOP_BELOW`] of the live slots passing (3% to 30%), the
//! graph search is a different one ([`graph::search_within_two_hop`], ACORN-1's expansion):
//! the slots that pass are collected into a bitmap, and the beam scores only those, reaching
//! them through the lists of neighbors that fail; its cost is about an unfiltered search's
//! whatever σ, measured at [`TWO_HOP_COST_PER_EF`] × ef scanned vectors, which is the scan
//! cutoff in that band ([`two_hop_cutoff`]). Below 3% two hops no longer connect the slots
//! that pass (recall 0.80 at 1% on pypi-minilm), above 30% the plain beam costs less.
//!
//! The plain graph search routes through slots that fail (their lists are still the way to
//! the ones that pass) and keeps going until its beam holds `ef` slots that pass, as hnswlib
//! does since its filter support; if it still returns fewer than k, it widens the beam as the
//! unfiltered search does for deletes, and finally scans. A two-hop search that returns fewer
//! than k scans. Either way every returned distance is exact and the result holds min(k,
//! live slots that pass) slots.

use super::index::Compiled;
use crate::graph::{self, Distance, GraphStore, Scored, Scratch};

/// Distance computations of an unfiltered layer-0 search per unit of ef (measured on
/// pypi-minilm at ef 32 to 256 when this was set: 14 to 17; on the default file of
/// decision 0001's graph, counting the descent and the exact ranking too, 25 at ef 32 down to
/// 16 at ef 256: docs/performance/filtered.md, "The scan cutoff's constant").
pub const VISITS_PER_EF: f64 = 16.0;

/// A graph search gives up and scans once it has made this many times the estimated count's
/// distance computations (Lucene's cap is near 2× an exact scan).
pub const GIVE_UP_FACTOR: f64 = 2.0;

/// Below this fraction of live slots passing, the graph search scores only slots that pass
/// ([`graph::search_within_two_hop`]).
pub const TWO_HOP_BELOW: f64 = 0.3;

/// At or above this fraction passing, and below [`TWO_HOP_BELOW`], the graph search is the
/// two-hop one; below it the admitted slots are too sparse for two hops to connect them.
pub const TWO_HOP_FROM: f64 = 0.03;

/// A two-hop search's cost per unit of ef, in vectors a scan could score in the same time.
pub const TWO_HOP_COST_PER_EF: u64 = 70;

/// The estimated count at or below which a filtered search in the two-hop band scans.
pub fn two_hop_cutoff(ef: usize) -> u64 {
    TWO_HOP_COST_PER_EF.saturating_mul(ef as u64)
}

/// How a filtered search found its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Few slots pass: every one was scored.
    Scan,
    /// The graph search with the filter.
    Graph,
    /// The graph search gave up (it visited more than a scan costs); then the scan.
    GraphThenScan,
    /// The graph search scoring only slots that pass, reached through two hops.
    TwoHop,
}

/// The estimated count at or below which a filtered search scans, for a beam of `ef` over
/// `live` vectors: `sqrt(VISITS_PER_EF · ef · live)`.
pub fn scan_cutoff(ef: usize, live: u64) -> u64 {
    (VISITS_PER_EF * ef as f64 * live as f64).sqrt() as u64
}

/// The view a filtered search runs on.
pub struct Target<'a, S: GraphStore, L: Fn(u32) -> bool> {
    /// The graph.
    pub store: &'a S,
    /// Its distance.
    pub dist: &'a Distance,
    /// Entry point and its top layer (`None`: empty graph).
    pub entry: Option<(u32, usize)>,
    /// Whether a slot is live in this view (readers: below N and not deleted at E).
    pub live: L,
    /// Slots that may be returned are below this (N for readers, all written for the writer).
    pub upto: u32,
    /// Live vectors in the view.
    pub live_count: u64,
}

/// The exact `k` nearest live slots that pass `filter`, nearest first, and how they were
/// found. `q` is the prepared query.
pub fn search<S: GraphStore, L: Fn(u32) -> bool>(
    t: &Target<'_, S, L>,
    q: &[f32],
    k: usize,
    ef: usize,
    filter: &Compiled<'_>,
    scratch: &mut Scratch,
) -> (Vec<Scored>, Strategy) {
    let Some((entry, top)) = t.entry else {
        return (Vec::new(), Strategy::Scan);
    };
    let scan = |scratch: &mut Scratch| {
        let pass = filter.collect();
        let upto = t.upto;
        graph::scan(
            t.store,
            t.dist,
            q,
            pass.iter()
                .take_while(|&s| s < upto)
                .filter(|&s| (t.live)(s)),
            k,
            scratch,
        )
    };
    let estimate = filter.estimate();
    if estimate == 0 {
        // Exact for a single field; combined estimates round to 0 only when something is
        // empty. Scanning nothing costs nothing, and a wrong 0 is caught by the scan itself.
        return (scan(scratch), Strategy::Scan);
    }
    let ef = ef.max(k);
    let sigma = estimate as f64 / t.live_count.max(1) as f64;
    let two_hop = (TWO_HOP_FROM..TWO_HOP_BELOW).contains(&sigma);
    let cutoff = if two_hop {
        two_hop_cutoff(ef)
    } else {
        scan_cutoff(ef, t.live_count)
    };
    if estimate <= cutoff {
        return (scan(scratch), Strategy::Scan);
    }
    // One budget for every round of widening: past it, the scan is cheaper.
    let budget = (GIVE_UP_FACTOR * estimate as f64) as u64;
    let start = scratch.distance_count;
    if two_hop {
        // The slots that pass as one bit each: tested for every neighbor and every neighbor's
        // neighbor, so it must take nanoseconds (a column test reads the documents' values).
        let pass = filter.collect();
        let mut bits = vec![0u64; (t.upto as usize).div_ceil(64)];
        for s in pass.iter().take_while(|&s| s < t.upto) {
            bits[s as usize / 64] |= 1 << (s % 64);
        }
        let admitted = |s: u32| {
            bits.get(s as usize / 64)
                .is_some_and(|w| (w >> (s % 64)) & 1 == 1)
                && (t.live)(s)
        };
        let found = graph::search_within_two_hop(
            t.store, t.dist, q, entry, top, k, ef, admitted, budget, scratch,
        );
        if let Some(hits) = found.filter(|h| h.len() >= k) {
            return (hits, Strategy::TwoHop);
        }
        let hits = graph::scan(
            t.store,
            t.dist,
            q,
            pass.iter()
                .take_while(|&s| s < t.upto)
                .filter(|&s| (t.live)(s)),
            k,
            scratch,
        );
        return (hits, Strategy::GraphThenScan);
    }
    let mut ef = ef;
    loop {
        let left = budget.saturating_sub(scratch.distance_count - start);
        let found = graph::search_within(
            t.store,
            t.dist,
            q,
            entry,
            top,
            k,
            ef,
            |s| s < t.upto && filter.test(s) && (t.live)(s),
            left,
            scratch,
        );
        match found {
            None => return (scan(scratch), Strategy::GraphThenScan),
            Some(hits) if hits.len() >= k => return (hits, Strategy::Graph),
            Some(_) if (ef as u64) < u64::from(t.upto) => ef = ef.saturating_mul(4),
            Some(_) => return (scan(scratch), Strategy::GraphThenScan),
        }
    }
}

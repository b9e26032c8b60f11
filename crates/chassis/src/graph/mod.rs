//! HNSW (Malkov & Yashunin, 2018) over any [`GraphStore`]: insert, search, neighbor selection.
//!
//! This module knows nothing about files. The writer's segments and a reader's snapshot both
//! implement [`GraphStore`]; neighbor words are [`AtomicU32`]s, loaded and stored relaxed, so a
//! reader in another process always sees whole ids (ADR-0008 decision 5).
//!
//! Symbols as in the paper: M (upper-layer list capacity and the number of neighbors a new
//! node selects on every layer, as hnswlib does), M0 = 2M (layer-0 capacity),
//! mL = 1/ln(M) (level normalisation), ef (search breadth), ef_construction. Neighbor
//! selection is the heuristic of algorithm 4 over all ef_construction candidates, with no cap
//! on how many are considered (ADR-0004 amendment).
//!
//! Invariants kept: a neighbor word is a slot below the routing count or [`EMPTY`]; anything
//! else read from a store (a stale or corrupt word) is skipped, never followed out of bounds.
//! When a full list is pruned, surviving entries keep their words and dropped words are
//! emptied last ([`rewrite_preserving`]), so a concurrent reader never misses an edge that is
//! in both the old and the new list.
//!
//! Parallel insertion (the writer's batch add): several threads may run [`insert`] at once
//! over slots whose vectors and empty lists are already written, given [`NodeLocks`]. A
//! thread changes a neighbor list only while holding that node's lock, and holds one lock at a
//! time (no lock order, no deadlock); lists are read without locks, as readers read them, so a
//! search may see a list mid-rewrite and only ever sees whole slot ids.

pub mod distance;
mod filtered;
mod insert;
mod memo;
pub mod order;
mod prefetch;
mod rank;
pub mod support;
pub mod visited;

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use distance::{AlignedVector, CodedQuery, Distance, Metric, SimdLevel, VectorRef};
use filtered::gather_two_hop;
pub use filtered::{scan, search_within_two_hop};
#[cfg(test)]
use insert::link;
pub use insert::{insert, reconnect, rewrite_preserving, select_neighbors, PAIR_MIN_DIMS};
pub use memo::PruneMemo;
pub(crate) use prefetch::prefetch;
use prefetch::{prefetch_list, prefetch_scan, prefetch_walk};
use rank::{approximate, rank_exactly};
pub use visited::VisitedSet;

/// The empty neighbor word.
pub const EMPTY: u32 = u32::MAX;

/// Reads of exact vectors started together ([`GraphStore::start_exact_batch`]) and not
/// waited for yet: a batch search walks the next query meanwhile ([`search_pipelined`]).
pub trait ExactBatch {
    /// Waits for the reads and puts the vectors into `out` (cleared first; f32, dims each, in
    /// the order the slots were named). `false`, with `out` unspecified, where any read
    /// failed: the caller reads each by [`GraphStore::exact_vector`].
    fn finish(self: Box<Self>, out: &mut Vec<f32>) -> bool;
}

/// What HNSW needs from storage.
pub trait GraphStore {
    /// Slots below this may be traversed (R for readers, all written slots for the writer).
    fn routing_count(&self) -> u32;
    /// What a search walks by for `slot`: its stored vector in its file's layout, or its code
    /// ([`VectorRef::Code`]) in a file with trained codes; `None` if it can't be read
    /// (treated as absent).
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>>;
    /// The stored vector of `slot` itself, never a code: what exact distances are taken from.
    fn exact_vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        self.vector(slot)
    }
    /// The aux record of `slot`'s code (ε ≥ ‖v − v̂‖, ‖v‖), when [`GraphStore::vector`] gives
    /// codes.
    fn code_aux(&self, _slot: u32) -> Option<(f32, f32)> {
        None
    }
    /// Starts loading the aux record [`GraphStore::code_aux`] of `slot` will read: a hint (a
    /// CPU prefetch), so that ranking's bounds, one aux record per found slot, overlap their
    /// misses. Does nothing by default.
    fn prefetch_code_aux(&self, _slot: u32) {}
    /// Told before [`GraphStore::exact_vector`] of `slot` is read to rank it: a store whose
    /// vectors may be on disk starts reading it now, so the misses of every vector a search
    /// ranks overlap. Does nothing by default.
    fn will_need_exact(&self, _slot: u32) {}
    /// Told after a search has ranked `slot` (or named it to [`GraphStore::will_need_exact`]
    /// and then not needed it) when the walk read codes, so the vector is bytes no walk reads:
    /// a store whose file is larger than memory gives its pages back, so they don't crowd
    /// the codes and neighbor lists every search walks out of the page cache. Does nothing by
    /// default.
    fn done_with_exact(&self, _slot: u32) {}
    /// Starts reading the exact vectors of `slots` all at once, for a store whose vectors are
    /// on disk and far cheaper read together than one by one (a file larger than memory: one
    /// submission, no page-cache pages); [`ExactBatch::finish`] waits for them. `None` where
    /// it doesn't (the default): the caller reads each by [`GraphStore::exact_vector`].
    fn start_exact_batch(&self, _slots: &[u32]) -> Option<Box<dyn ExactBatch + '_>> {
        None
    }
    /// The level-0 neighbor words of `slot` (M0 of them).
    fn level0(&self, slot: u32) -> Option<&[AtomicU32]>;
    /// The neighbor words of `slot` on `layer` ≥ 1 (M of them), `None` if the node has no such
    /// layer.
    fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]>;
    /// How many layers above 0 `slot` has (its level).
    fn level(&self, slot: u32) -> usize {
        let mut level = 0;
        while self.upper(slot, level + 1).is_some() {
            level += 1;
        }
        level
    }
    /// Told by every insert into a graph of split vectors the gap between the nearest and
    /// the tenth nearest node it found, by high halves and exactly: the writer counts how
    /// often they disagree to decide whether its data is too fine to be walked by high halves.
    /// Readers ignore it.
    fn note_walk(&self, _walked_gap: f32, _exact_gap: f32) {}
}

/// Graph parameters.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// M.
    pub m: usize,
    /// M0 = 2M.
    pub m0: usize,
    /// ef_construction.
    pub ef_construction: usize,
    /// Most layers a node may have, layer 0 included.
    pub max_layers: usize,
}

impl Params {
    /// Neighbor list capacity on `layer`.
    pub fn capacity(&self, layer: usize) -> usize {
        if layer == 0 {
            self.m0
        } else {
            self.m
        }
    }
}

/// Striped per-node locks for parallel insertion: slot `s` is guarded by stripe `s % stripes`.
/// Two nodes may share a stripe; since a thread holds one stripe at a time, that costs only
/// contention, never a deadlock.
#[derive(Debug)]
pub struct NodeLocks {
    stripes: Vec<Mutex<()>>,
}

impl NodeLocks {
    /// Stripes enough that two threads rarely meet on one.
    pub fn new(stripes: usize) -> NodeLocks {
        NodeLocks {
            stripes: (0..stripes.max(1)).map(|_| Mutex::new(())).collect(),
        }
    }

    fn lock(&self, slot: u32) -> MutexGuard<'_, ()> {
        let m = &self.stripes[slot as usize % self.stripes.len()];
        // The guarded data is `()`: a panic elsewhere leaves nothing half-updated behind it.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A slot with its distance to the query; ordered by distance, then slot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// Distance to the query.
    pub distance: f32,
    /// Slot.
    pub slot: u32,
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.slot.cmp(&other.slot))
    }
}

/// A [`Scored`] packed in one u64 whose integer order is the order of `Scored` (distance by
/// `total_cmp`, then slot): the distance's bits made order-preserving in the high word, the
/// slot in the low one. The beam's two heaps hold these, so each comparison is one integer
/// compare instead of a float compare and a tie-break.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u64);

impl Key {
    #[inline(always)]
    fn new(distance: f32, slot: u32) -> Key {
        let b = distance.to_bits();
        // total_cmp's order: negative values reversed below the positive ones.
        let ordered = if b & 0x8000_0000 != 0 {
            !b
        } else {
            b | 0x8000_0000
        };
        Key((u64::from(ordered) << 32) | u64::from(slot))
    }

    #[inline(always)]
    fn distance(self) -> f32 {
        let ordered = (self.0 >> 32) as u32;
        let b = if ordered & 0x8000_0000 != 0 {
            ordered & 0x7FFF_FFFF
        } else {
            !ordered
        };
        f32::from_bits(b)
    }

    #[inline(always)]
    fn slot(self) -> u32 {
        self.0 as u32
    }

    #[inline(always)]
    fn scored(self) -> Scored {
        Scored {
            distance: self.distance(),
            slot: self.slot(),
        }
    }
}

/// Reusable per-search memory: visited set and the heaps.
#[derive(Debug, Default)]
pub struct Scratch {
    visited: VisitedSet,
    /// The beam's candidates (a min-heap by key) and results (a max-heap): packed keys.
    candidates: BinaryHeap<Reverse<Key>>,
    beam: BinaryHeap<Key>,
    /// The nearest k so far while ranking exactly ([`rank`]).
    results: BinaryHeap<Scored>,
    /// A split vector joined for an exact distance.
    exact: Vec<f32>,
    /// The vectors a ranking read together ([`GraphStore::read_exact_batch`]) and their slots.
    batch: Vec<f32>,
    batch_slots: Vec<u32>,
    /// The query prepared for the integer code kernels ([`Distance::walk_batch`]); forgotten
    /// at the start of every walk or scan.
    coded: CodedQuery,
    /// Distance computations made since this scratch was created (for benchmarks).
    pub distance_count: u64,
    /// Nodes a prune dropped although they needed the edge (no room to keep them): given a
    /// supporter after the insert ([`support::after_insert`]).
    pub orphans: Vec<u32>,
    /// Nodes dropped from a list on the strength of another supporter: re-checked after a
    /// parallel chunk, where that supporter may have dropped them at the same time.
    pub rechecks: Vec<u32>,
    /// What the last [`insert`] found on layer 0 (candidates for the new node's supporter).
    pub near: Vec<Scored>,
    /// The slots a two-hop expansion gathered ([`search_within_two_hop`]).
    hop: Vec<u32>,
}

/// The level of a node: ⌊−ln(U)·mL⌋ with mL = 1/ln(M), capped below `max_layers`. U is drawn
/// from `(seed, slot)` by SplitMix64, so a slot's level is the same on every run and reopen.
pub fn random_level(seed: u64, slot: u32, m: usize, max_layers: usize) -> usize {
    let mut z = seed ^ u64::from(slot).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // U in (0, 1]: never ln(0).
    let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let ml = 1.0 / (m as f64).ln();
    let level = (-u.ln() * ml).floor();
    (level as usize).min(max_layers.saturating_sub(1))
}

/// Scores the slots of `words` that `keep` admits (in list order), gathering them and
/// prefetching their vectors before any is scored, so the loads overlap instead of each
/// waiting on memory in turn. Leaves the slots and their distances in `chunk` and returns how
/// many there are; adds that count to `count`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn score_chunk<'s, S: GraphStore>(
    store: &'s S,
    dist: &Distance,
    q: &[f32],
    words: impl Iterator<Item = u32>,
    mut keep: impl FnMut(u32) -> bool,
    count: &mut u64,
    coded: &mut CodedQuery,
    chunk: &mut Chunk<'s>,
) -> usize {
    let mut kept = 0;
    for n in words.take(BATCH) {
        if keep(n) {
            chunk.slots[kept] = n;
            kept += 1;
        }
    }
    score_slots(store, dist, q, kept, count, coded, chunk)
}

/// Scores the first `fresh` slots of `chunk.slots` (those without a vector are dropped),
/// prefetching every vector before scoring any, as [`score_chunk`] does once it has them.
#[inline(always)]
fn score_slots<'s, S: GraphStore>(
    store: &'s S,
    dist: &Distance,
    q: &[f32],
    fresh: usize,
    count: &mut u64,
    coded: &mut CodedQuery,
    chunk: &mut Chunk<'s>,
) -> usize {
    let mut len = 0;
    for i in 0..fresh.min(BATCH) {
        let n = chunk.slots[i];
        if let Some(v) = store.vector(n) {
            prefetch_walk(v);
            chunk.slots[len] = n;
            chunk.vectors[len] = v;
            len += 1;
        }
    }
    dist.walk_batch(q, coded, &chunk.vectors[..len], &mut chunk.distances[..len]);
    *count += len as u64;
    len
}

/// The buffers of [`score_chunk`], made once per layer searched rather than once per chunk
/// (initializing and returning them by value was 9% of a 128-d search loop's own time).
struct Chunk<'s> {
    slots: [u32; BATCH],
    vectors: [VectorRef<'s>; BATCH],
    distances: [f32; BATCH],
}

impl Chunk<'_> {
    fn new() -> Self {
        Chunk {
            slots: [0; BATCH],
            vectors: [VectorRef::F32(&[]); BATCH],
            distances: [0.0; BATCH],
        }
    }
}

/// Neighbor words filtered and prefetched together before any of them is scored.
const BATCH: usize = 32;

/// Vectors a scan scores together ([`scan`]), and how many such groups ahead it prefetches.
const SCAN_GROUP: usize = 8;
const SCAN_AHEAD: usize = 2;

fn neighbors<S: GraphStore>(store: &S, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
    if layer == 0 {
        store.level0(slot)
    } else {
        store.upper(slot, layer)
    }
}

/// Greedy descent (ef = 1) from `layer_from` down to `layer_to + 1`; returns the closest node
/// found and its distance.
pub fn greedy_descent<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    cur: Scored,
    layer_from: usize,
    layer_to: usize,
    scratch: &mut Scratch,
) -> Scored {
    scratch.coded.forget();
    descend(store, dist, q, cur, layer_from, layer_to, scratch)
}

/// [`greedy_descent`] for a query `scratch.coded` was already forgotten for.
fn descend<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    mut cur: Scored,
    layer_from: usize,
    layer_to: usize,
    scratch: &mut Scratch,
) -> Scored {
    let r = store.routing_count();
    let mut chunk = Chunk::new();
    for layer in (layer_to + 1..=layer_from).rev() {
        loop {
            let mut changed = false;
            if let Some(list) = store.upper(cur.slot, layer) {
                // As in search_layer: prefetch the whole list's vectors, then score them
                // together; the scan order (and so the tie-breaking) is the list's.
                for words in list.chunks(BATCH) {
                    let len = score_chunk(
                        store,
                        dist,
                        q,
                        words.iter().map(|w| w.load(Ordering::Relaxed)),
                        |n| n < r,
                        &mut scratch.distance_count,
                        &mut scratch.coded,
                        &mut chunk,
                    );
                    for (&n, &d) in chunk.slots[..len].iter().zip(&chunk.distances) {
                        if d < cur.distance {
                            cur = Scored {
                                distance: d,
                                slot: n,
                            };
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
    cur
}

/// Beam search on one layer (algorithm 2) from `entry`. Every reachable slot below the routing
/// count may be expanded; only slots `accept` admits enter the results (deleted or uncommitted
/// slots are routed through, never returned). Returns up to `ef` results, nearest first.
///
/// Memory, not arithmetic, bounds this loop on large files: the next candidate's neighbor list
/// is prefetched while the current one is expanded, and again whenever a neighbor just scored
/// becomes the nearest candidate (it, not the one peeked, is expanded next); each list's
/// unvisited neighbors are filtered and their vectors prefetched before any of them is
/// scored, and they are scored together ([`Distance::walk_batch`]: eight vectors' lines
/// streaming side by side).
/// docs/performance/experiments.md ("Techniques measured") measures each.
#[allow(clippy::too_many_arguments)]
pub fn search_layer<S: GraphStore, F: Fn(u32) -> bool>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    entry: Scored,
    ef: usize,
    layer: usize,
    accept: F,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    scratch.coded.forget();
    search_layer_within::<S, F, false>(store, dist, q, entry, ef, layer, accept, u64::MAX, scratch)
        .0
}

/// [`search_layer`] that gives up once it has made more than `budget` distance computations
/// (checked once per expanded node); returns what it found and whether it gave up.
///
/// `TWO_HOP` (layer 0 only; [`search_within_two_hop`]): only slots `accept` admits are scored
/// and become candidates; a neighbor it refuses is not scored but its own list is read, and
/// the admitted slots there join the expansion (ACORN-1's neighbor expansion, Patel et al.,
/// SIGMOD 2024), up to the list's capacity. When few slots pass, the admitted ones are each
/// other's neighbors only through the refused: a plain beam would score every refused
/// neighbor on its way.
#[allow(clippy::too_many_arguments)]
fn search_layer_within<S: GraphStore, F: Fn(u32) -> bool, const TWO_HOP: bool>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    entry: Scored,
    ef: usize,
    layer: usize,
    accept: F,
    budget: u64,
    scratch: &mut Scratch,
) -> (Vec<Scored>, bool) {
    let limit = scratch.distance_count.saturating_add(budget);
    let mut gave_up = false;
    let r = store.routing_count();
    scratch.visited.reset(r as usize);
    scratch.candidates.clear();
    scratch.beam.clear();
    scratch.visited.insert(entry.slot);
    let entry_key = Key::new(entry.distance, entry.slot);
    scratch.candidates.push(Reverse(entry_key));
    if accept(entry.slot) {
        scratch.beam.push(entry_key);
    }
    let mut bound = scratch.beam.peek().map_or(f32::INFINITY, |s| s.distance());
    let mut chunk = Chunk::new();
    while let Some(Reverse(c)) = scratch.candidates.pop() {
        let c = c.scored();
        if c.distance > bound && scratch.beam.len() >= ef {
            break;
        }
        if scratch.distance_count > limit {
            gave_up = true;
            break;
        }
        let Some(list) = neighbors(store, c.slot, layer) else {
            continue;
        };
        // The next candidate's list is likely needed next: start loading it now.
        let next = scratch.candidates.peek().map(|n| n.0.scored());
        if let Some(list) = next.and_then(|n| neighbors(store, n.slot, layer)) {
            prefetch_list(list);
        }
        // The distance a scored neighbor must beat to be expanded before that candidate.
        let mut next_best = next.map_or(f32::INFINITY, |n| n.distance);
        let hop = std::mem::take(&mut scratch.hop);
        let hop = if TWO_HOP {
            gather_two_hop(store, list, r, &accept, &mut scratch.visited, hop)
        } else {
            hop
        };
        let gathered = if TWO_HOP { hop.len() } else { list.len() };
        // Filter visited slots first and prefetch the survivors' vectors, then score them
        // (the loads overlap instead of each waiting on memory in turn). A list is taken in
        // chunks of BATCH words so the buffer lives on the stack.
        for at in (0..gathered).step_by(BATCH) {
            let len = if TWO_HOP {
                score_chunk(
                    store,
                    dist,
                    q,
                    hop[at..].iter().copied(),
                    |_| true,
                    &mut scratch.distance_count,
                    &mut scratch.coded,
                    &mut chunk,
                )
            } else {
                // The visited set's reset size is r: slots at or past it are skipped there.
                let fresh = scratch.visited.insert_new(
                    list[at..].iter().map(|w| w.load(Ordering::Relaxed)),
                    &mut chunk.slots,
                );
                score_slots(
                    store,
                    dist,
                    q,
                    fresh,
                    &mut scratch.distance_count,
                    &mut scratch.coded,
                    &mut chunk,
                )
            };
            for (&n, &d) in chunk.slots[..len].iter().zip(&chunk.distances) {
                if scratch.beam.len() < ef || d < bound {
                    let s = Key::new(d, n);
                    if d < next_best {
                        // The new best candidate: expanded next unless a nearer one follows.
                        next_best = d;
                        if let Some(l) = neighbors(store, n, layer) {
                            prefetch_list(l);
                        }
                    }
                    scratch.candidates.push(Reverse(s));
                    if accept(n) {
                        scratch.beam.push(s);
                        if scratch.beam.len() > ef {
                            scratch.beam.pop();
                        }
                    }
                    if let Some(top) = scratch.beam.peek() {
                        if scratch.beam.len() >= ef {
                            bound = top.distance();
                        }
                    }
                }
            }
        }
        scratch.hop = hop;
    }
    let mut keys: Vec<Key> = scratch.beam.drain().collect();
    keys.sort_unstable();
    (keys.into_iter().map(Key::scored).collect(), gave_up)
}

/// k-NN search (algorithm 5): greedy descent through the upper layers, then a beam of
/// `max(ef, k)` on layer 0. Returns up to `k` accepted slots, nearest first.
#[allow(clippy::too_many_arguments)]
pub fn search<S: GraphStore, F: Fn(u32) -> bool>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    entry_point: u32,
    max_layer: usize,
    k: usize,
    ef: usize,
    accept: F,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    search_within(
        store,
        dist,
        q,
        entry_point,
        max_layer,
        k,
        ef,
        accept,
        u64::MAX,
        scratch,
    )
    .unwrap_or_default()
}

/// A query walked and its exact ranking planned, its reads started or not yet: what
/// [`search_pipelined`] holds for one query while it walks the next.
enum Walked<'s> {
    /// Walked by exact distances: nothing to rank.
    Done(Vec<Scored>),
    Ranking(rank::Ranking<'s>),
}

/// [`search`]'s walk, and the plan of its exact ranking (no vector read yet); `None` once
/// the layer-0 beam has made more than `budget` distance computations.
#[allow(clippy::too_many_arguments)]
fn walk<'s, S: GraphStore, F: Fn(u32) -> bool, const TWO_HOP: bool>(
    store: &'s S,
    dist: &Distance,
    q: &[f32],
    entry_point: u32,
    max_layer: usize,
    k: usize,
    ef: usize,
    accept: F,
    budget: u64,
    scratch: &mut Scratch,
) -> Option<Walked<'s>> {
    let Some(v) = store.vector(entry_point) else {
        return Some(Walked::Done(Vec::new()));
    };
    scratch.coded.forget();
    scratch.distance_count += 1;
    let start = Scored {
        distance: dist.walk(q, v),
        slot: entry_point,
    };
    let cur = descend(store, dist, q, start, max_layer, 0, scratch);
    let (mut out, gave_up) = search_layer_within::<S, F, TWO_HOP>(
        store,
        dist,
        q,
        cur,
        ef.max(k),
        0,
        accept,
        budget,
        scratch,
    );
    if gave_up {
        return None;
    }
    // Walked by high halves or codes: the ef found are ranked by exact distance (reading low
    // halves or whole vectors) before keeping k, so every returned distance is exact.
    if out.iter().any(|s| approximate(store, s.slot)) {
        return Some(Walked::Ranking(rank::plan(
            store, dist, q, &out, k, false, scratch,
        )));
    }
    out.truncate(k);
    Some(Walked::Done(out))
}

impl<'s> Walked<'s> {
    /// Starts the reads of the vectors its ranking will most likely read.
    fn start_reads<S: GraphStore>(&mut self, store: &'s S, scratch: &mut Scratch) {
        if let Walked::Ranking(ranking) = self {
            ranking.start_reads(store, scratch);
        }
    }

    /// The `k` nearest by exact distance: starts the reads if they aren't yet, waits for
    /// them, ranks.
    fn finish<S: GraphStore>(
        self,
        store: &'s S,
        dist: &Distance,
        q: &[f32],
        k: usize,
        scratch: &mut Scratch,
    ) -> Vec<Scored> {
        match self {
            Walked::Done(hits) => hits,
            Walked::Ranking(mut ranking) => {
                if !ranking.started() {
                    ranking.start_reads(store, scratch);
                }
                let mut hits = ranking.finish(store, dist, q, scratch);
                hits.truncate(k);
                hits
            }
        }
    }
}

/// Searches each of `queries` on one thread as [`search`] would, with the same answers, but
/// overlaps the reads of the vectors one query ranks exactly with the walk of the next: in a
/// file larger than memory those reads go to disk ([`GraphStore::start_exact_batch`]), and a
/// query would otherwise wait for them with nothing to do. Hands `each(i, hits)` each
/// query's hits, in order. In a file that fits, "reads" are CPU prefetches, and ranking a
/// query after the next one's walk instead of right after its own measured no different.
#[allow(clippy::too_many_arguments)]
pub fn search_pipelined<S: GraphStore, F: Fn(u32) -> bool, Q: AsRef<[f32]>>(
    store: &S,
    dist: &Distance,
    queries: &[Q],
    entry_point: u32,
    max_layer: usize,
    k: usize,
    ef: usize,
    accept: F,
    scratch: &mut Scratch,
    mut each: impl FnMut(usize, Vec<Scored>),
) {
    // The previous query, its reads in flight while this one walks. One batch of reads is in
    // flight at a time: the previous query's are waited for before this one's start.
    let mut previous: Option<(usize, Walked<'_>)> = None;
    for (i, q) in queries.iter().enumerate() {
        let mut walked = walk::<S, _, false>(
            store,
            dist,
            q.as_ref(),
            entry_point,
            max_layer,
            k,
            ef,
            &accept,
            u64::MAX,
            scratch,
        )
        .unwrap_or(Walked::Done(Vec::new()));
        if let Some((j, before)) = previous.take() {
            each(
                j,
                before.finish(store, dist, queries[j].as_ref(), k, scratch),
            );
        }
        walked.start_reads(store, scratch);
        previous = Some((i, walked));
    }
    if let Some((j, before)) = previous {
        each(
            j,
            before.finish(store, dist, queries[j].as_ref(), k, scratch),
        );
    }
}

/// [`search`] that gives up (`None`) once its layer-0 beam has made more than `budget`
/// distance computations: a filtered search's signal that scanning the slots that pass is
/// cheaper (Lucene's exact-search fallback).
#[allow(clippy::too_many_arguments)]
pub fn search_within<S: GraphStore, F: Fn(u32) -> bool>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    entry_point: u32,
    max_layer: usize,
    k: usize,
    ef: usize,
    accept: F,
    budget: u64,
    scratch: &mut Scratch,
) -> Option<Vec<Scored>> {
    let walked = walk::<S, F, false>(
        store,
        dist,
        q,
        entry_point,
        max_layer,
        k,
        ef,
        accept,
        budget,
        scratch,
    )?;
    Some(walked.finish(store, dist, q, k, scratch))
}

/// Appends each of `slots` with its walking distance to `q` (a slot without a vector is
/// skipped), counting the distances.
pub(crate) fn score_into<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    slots: impl IntoIterator<Item = u32>,
    out: &mut Vec<Scored>,
    scratch: &mut Scratch,
) {
    // Every vector asked for before any is scored: their misses overlap instead of each
    // waiting on memory in turn (a prune scores a whole list of them).
    let slots: Vec<u32> = slots.into_iter().collect();
    for v in slots.iter().filter_map(|&s| store.vector(s)) {
        prefetch_walk(v);
    }
    for slot in slots {
        if let Some(v) = store.vector(slot) {
            scratch.distance_count += 1;
            out.push(Scored {
                distance: dist.walk(q, v),
                slot,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_geometric_distribution() {
        let m = 16;
        let n = 200_000u32;
        let mut counts = [0u32; 16];
        for s in 0..n {
            counts[random_level(7, s, m, 16)] += 1;
        }
        // P(level >= 1) = 1/M.
        let upper = n - counts[0];
        let expected = n as f64 / m as f64;
        assert!(
            (upper as f64 - expected).abs() < expected * 0.05,
            "{upper} vs {expected}"
        );
        assert_eq!(random_level(7, 5, m, 16), random_level(7, 5, m, 16));
        assert!((0..n).all(|s| random_level(1, s, 2, 4) < 4));
    }

    /// A store of `n` one-dimensional points whose level-0 lists hold `m0` words.
    struct Points {
        vectors: Vec<[f32; 1]>,
        lists: Vec<Vec<AtomicU32>>,
    }

    impl GraphStore for Points {
        fn routing_count(&self) -> u32 {
            self.vectors.len() as u32
        }
        fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
            self.vectors
                .get(slot as usize)
                .map(|v| VectorRef::F32(&v[..]))
        }
        fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
            self.lists.get(slot as usize).map(|l| &l[..])
        }
        fn upper(&self, _: u32, _: usize) -> Option<&[AtomicU32]> {
            None
        }
    }

    /// Two-dimensional points for neighbor selection (no lists).
    struct Plane(Vec<[f32; 2]>);

    impl GraphStore for Plane {
        fn routing_count(&self) -> u32 {
            self.0.len() as u32
        }
        fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
            self.0.get(slot as usize).map(|v| VectorRef::F32(&v[..]))
        }
        fn level0(&self, _: u32) -> Option<&[AtomicU32]> {
            None
        }
        fn upper(&self, _: u32, _: usize) -> Option<&[AtomicU32]> {
            None
        }
    }

    /// Fails if the heuristic keeps a candidate nearer to a kept neighbor than to the base
    /// (or drops one that isn't): the path without pair kernels, which compares candidates
    /// against the kept neighbors' decoded values.
    #[test]
    fn neighbor_selection_drops_what_a_kept_neighbor_covers() {
        // The base at the origin; b lies behind a, d behind c, e opposite a.
        let (a, b, c, d, e) = ([1.0, 0.0], [2.0, 0.0], [0.0, 1.5], [0.0, 3.0], [-2.0, 0.0]);
        let store = Plane(vec![[0.0, 0.0], a, b, c, d, e]);
        let dist = Distance::new(Metric::L2Squared);
        let mut candidates: Vec<Scored> = (1..6u32)
            .map(|slot| {
                let v = store.0[slot as usize];
                Scored {
                    distance: v[0] * v[0] + v[1] * v[1],
                    slot,
                }
            })
            .collect();
        candidates.sort_by(|x, y| x.distance.total_cmp(&y.distance).then(x.slot.cmp(&y.slot)));
        let mut scratch = Scratch::default();
        let kept = |m| -> Vec<u32> {
            let mut scratch = Scratch::default();
            select_neighbors(&store, &dist, 0, &candidates, m, &mut scratch)
                .iter()
                .map(|s| s.slot)
                .collect()
        };
        assert_eq!(kept(4), vec![1, 3, 5]);
        assert_eq!(kept(2), vec![1, 3]);
        // Fewer candidates than m: all kept, unpruned.
        assert_eq!(
            select_neighbors(&store, &dist, 0, &candidates[..2], 4, &mut scratch).len(),
            2
        );
    }

    /// Fails if concurrent links into one list can lose an edge (no per-node lock around the
    /// read-modify-write): four threads race to fill one list, round after round.
    #[test]
    fn concurrent_links_into_one_list_lose_nothing() {
        let (threads, each) = (4u32, 16u32);
        let m0 = (threads * each) as usize;
        let n = m0 as u32 + 1;
        let store = Points {
            vectors: (0..n).map(|i| [i as f32]).collect(),
            lists: (0..n)
                .map(|_| (0..m0).map(|_| AtomicU32::new(EMPTY)).collect())
                .collect(),
        };
        let params = Params {
            m: m0 / 2,
            m0,
            ef_construction: 8,
            max_layers: 1,
        };
        let dist = Distance::new(Metric::L2Squared);
        let locks = NodeLocks::new(64);
        for round in 0..300 {
            for w in &store.lists[0] {
                w.store(EMPTY, Ordering::Relaxed);
            }
            let start = std::sync::Barrier::new(threads as usize);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (store, dist, params, locks, start) =
                        (&store, &dist, &params, &locks, &start);
                    s.spawn(move || {
                        let mut scratch = Scratch::default();
                        start.wait();
                        for i in 0..each {
                            let to = 1 + t * each + i;
                            let d = to as f32 * to as f32;
                            link(
                                store,
                                dist,
                                params,
                                0,
                                to,
                                d,
                                0,
                                0,
                                Some(locks),
                                None,
                                &mut scratch,
                            );
                        }
                    });
                }
            });
            let mut got: Vec<u32> = store.lists[0]
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect();
            got.sort_unstable();
            assert_eq!(got, (1..n).collect::<Vec<u32>>(), "round {round}");
        }
    }

    #[test]
    fn rewrite_keeps_survivors_in_their_words() {
        let words: Vec<AtomicU32> = [1, 2, 3, EMPTY].into_iter().map(AtomicU32::new).collect();
        rewrite_preserving(&words, &[3, 1, 9, 8]);
        let now: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(now[0], 1);
        assert_eq!(now[2], 3);
        // 9 takes the empty word first, 8 the dropped one.
        assert_eq!(now[3], 9);
        assert_eq!(now[1], 8);
        rewrite_preserving(&words, &[3]);
        let now: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(now, vec![EMPTY, EMPTY, 3, EMPTY]);
    }

    /// A one-layer graph of split vectors (format 4's layout), linked by [`insert`].
    pub(super) struct SplitPoints {
        pub(super) halves: Vec<Vec<u16>>,
        pub(super) lists: Vec<Vec<AtomicU32>>,
    }

    impl GraphStore for SplitPoints {
        fn routing_count(&self) -> u32 {
            self.halves.len() as u32
        }
        fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
            self.halves
                .get(slot as usize)
                .map(|h| VectorRef::Split(crate::format::vector::Halves::side_by_side(&h[..])))
        }
        fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
            self.lists.get(slot as usize).map(|l| &l[..])
        }
        fn upper(&self, _: u32, _: usize) -> Option<&[AtomicU32]> {
            None
        }
    }

    pub(super) fn split_points(metric: Metric, n: usize, dims: usize, seed: u64) -> SplitPoints {
        build_split_points(metric, n, dims, seed, None).0
    }

    /// [`split_points`] built with `memo` or without, and the distances its build computed.
    fn build_split_points(
        metric: Metric,
        n: usize,
        dims: usize,
        seed: u64,
        memo: Option<&PruneMemo>,
    ) -> (SplitPoints, u64) {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let params = Params {
            m: 8,
            m0: 16,
            ef_construction: 64,
            max_layers: 1,
        };
        let mut store = SplitPoints {
            halves: Vec::new(),
            lists: Vec::new(),
        };
        let dist = Distance::new(metric);
        let mut scratch = Scratch::default();
        for slot in 0..n as u32 {
            let mut v: Vec<f32> = (0..dims).map(|_| next()).collect();
            if metric == Metric::Cosine {
                let norm = distance::reference::dot(&v, &v).sqrt();
                v.iter_mut().for_each(|x| *x /= norm);
            }
            let mut bytes = vec![0u8; 4 * dims];
            crate::format::vector::encode(
                crate::format::vector::VectorLayout::SplitHalves,
                &v,
                &mut bytes,
            );
            store.halves.push(
                bytes
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            );
            store
                .lists
                .push((0..params.m0).map(|_| AtomicU32::new(EMPTY)).collect());
            let entry = (slot > 0).then_some((0, 0));
            insert(
                &store,
                None::<&SplitPoints>,
                &dist,
                &params,
                slot,
                0,
                entry,
                None,
                memo,
                &mut scratch,
            );
        }
        (store, scratch.distance_count)
    }

    /// The same graph's slots read by other vectors: each one rounded to a tenth, as a coarse
    /// code would estimate it, counting the reads (an insert's walker).
    struct Coarse<'a> {
        graph: &'a SplitPoints,
        vectors: Vec<Vec<f32>>,
        reads: std::cell::Cell<u64>,
    }

    impl GraphStore for Coarse<'_> {
        fn routing_count(&self) -> u32 {
            self.graph.routing_count()
        }
        fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
            self.reads.set(self.reads.get() + 1);
            self.vectors
                .get(slot as usize)
                .map(|v| VectorRef::F32(&v[..]))
        }
        fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
            self.graph.level0(slot)
        }
        fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
            self.graph.upper(slot, layer)
        }
    }

    /// Fails if an insert with a walker stops walking through it, or hands selection the
    /// walker's distances instead of the store's: what it found must come out scored by the
    /// store's vectors, nearest first, and still hold the new node's true nearest neighbor.
    #[test]
    fn an_insert_walks_by_its_walker_and_selects_by_the_store() {
        let (n, dims) = (600usize, 24);
        let store = split_points(Metric::L2Squared, n + 1, dims, 11);
        // Slot n again, unlinked: its list emptied and every word naming it removed.
        for list in &store.lists {
            for w in list {
                if w.load(Ordering::Relaxed) == n as u32 {
                    w.store(EMPTY, Ordering::Relaxed);
                }
            }
        }
        for w in &store.lists[n] {
            w.store(EMPTY, Ordering::Relaxed);
        }
        let exact: Vec<Vec<f32>> = (0..=n as u32)
            .map(|s| store.vector(s).map(|v| v.to_vec()).unwrap_or_default())
            .collect();
        let walker = Coarse {
            graph: &store,
            vectors: exact
                .iter()
                .map(|v| v.iter().map(|x| (x * 10.0).round() / 10.0).collect())
                .collect(),
            reads: std::cell::Cell::new(0),
        };
        let params = Params {
            m: 8,
            m0: 16,
            ef_construction: 64,
            max_layers: 1,
        };
        let dist = Distance::new(Metric::L2Squared);
        let mut scratch = Scratch::default();
        insert(
            &store,
            Some(&walker),
            &dist,
            &params,
            n as u32,
            0,
            Some((0, 0)),
            None,
            None,
            &mut scratch,
        );
        assert!(
            walker.reads.get() > 64,
            "the walk did not go through the walker"
        );
        let q = AlignedVector::new(&exact[n]);
        let near = std::mem::take(&mut scratch.near);
        assert!(near.len() >= params.m0);
        let mut differs = false;
        for pair in near.windows(2) {
            assert!(pair[0].distance <= pair[1].distance, "not nearest first");
        }
        for s in &near {
            let by_store = dist.walk(&q, store.vector(s.slot).expect("a vector"));
            assert_eq!(
                s.distance, by_store,
                "slot {} kept the walker's distance",
                s.slot
            );
            let by_walker = dist.walk(&q, walker.vector(s.slot).expect("a vector"));
            differs |= by_walker != by_store;
        }
        assert!(differs, "the walker's vectors should estimate, not copy");
        let nearest = (0..n as u32)
            .min_by(|&a, &b| {
                let da = distance::reference::l2sq(&exact[n], &exact[a as usize]);
                let db = distance::reference::l2sq(&exact[n], &exact[b as usize]);
                da.total_cmp(&db)
            })
            .expect("points");
        let list: Vec<u32> = store.lists[n]
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        assert!(list.contains(&nearest), "{nearest} not in {list:?}");
    }

    /// Fails if the prune memo changes a single edge of the graph (it may only skip
    /// comparisons whose outcome is known), or if it stops saving comparisons. Below and above
    /// `PAIR_MIN_DIMS`: the heuristic's two ways of comparing.
    #[test]
    fn the_prune_memo_changes_what_a_prune_computes_never_what_it_keeps() {
        let n = 1200;
        for (metric, dims) in [
            (Metric::L2Squared, 24),
            (Metric::Cosine, 24),
            (Metric::L2Squared, PAIR_MIN_DIMS + 16),
            (Metric::Cosine, PAIR_MIN_DIMS + 16),
        ] {
            let mut memo = PruneMemo::default();
            memo.ensure(n);
            let (plain, plain_count) = build_split_points(metric, n, dims, 5, None);
            let (remembered, memo_count) = build_split_points(metric, n, dims, 5, Some(&memo));
            for (slot, (a, b)) in plain.lists.iter().zip(&remembered.lists).enumerate() {
                let a: Vec<u32> = a.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                let b: Vec<u32> = b.iter().map(|w| w.load(Ordering::Relaxed)).collect();
                assert_eq!(a, b, "{metric:?} {dims}-d: slot {slot}'s list");
            }
            assert!(
                memo_count * 10 < plain_count * 9,
                "{metric:?} {dims}-d: {memo_count} distances with the memo, {plain_count} without"
            );
        }
    }

    /// Fails if ranking the ef found by exact distance skips a vector that belongs among the
    /// nearest k (the answer must equal ranking all of them), or if it no longer skips any.
    #[test]
    fn ranking_by_the_error_bound_equals_ranking_everything_found() {
        let (k, ef) = (10, 64);
        for metric in [Metric::L2Squared, Metric::Cosine] {
            let store = split_points(metric, 1500, 24, 11);
            let dist = Distance::new(metric);
            let mut ranked_total = 0;
            let queries = 60;
            for qi in 0..queries {
                let mut q: Vec<f32> = (0..24)
                    .map(|j| ((qi * 31 + j * 7) % 17) as f32 / 8.5 - 1.0)
                    .collect();
                if metric == Metric::Cosine {
                    let norm = distance::reference::dot(&q, &q).sqrt();
                    q.iter_mut().for_each(|x| *x /= norm);
                }
                let mut scratch = Scratch::default();
                let got = search(&store, &dist, &q, 0, 0, k, ef, |_| true, &mut scratch);
                // The same walk, then every vector found ranked exactly.
                let mut walk = Scratch::default();
                let start = Scored {
                    distance: dist.walk(&q, store.vector(0).unwrap()),
                    slot: 0,
                };
                let found = search_layer(&store, &dist, &q, start, ef, 0, |_| true, &mut walk);
                assert_eq!(found.len(), ef);
                let mut want: Vec<Scored> = found
                    .iter()
                    .map(|s| Scored {
                        distance: dist.exact(&q, store.vector(s.slot).unwrap(), &mut Vec::new()),
                        slot: s.slot,
                    })
                    .collect();
                want.sort_unstable();
                want.truncate(k);
                assert_eq!(got, want, "{metric:?} query {qi}");
                let ranked = scratch.distance_count - (walk.distance_count + 1);
                assert!(ranked >= k as u64, "{ranked}");
                ranked_total += ranked;
            }
            // Ranking stops well short of the ef found (about 2k here).
            assert!(
                ranked_total < (queries * ef / 2) as u64,
                "{metric:?}: ranked {ranked_total} of {}",
                queries * ef
            );
        }
    }
}

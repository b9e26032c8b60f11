//! Insertion (algorithm 1) and neighbor selection (algorithm 4): the new node's search and
//! selection, the backlinks, and the prune of a full list, which keeps the support invariant
//! ([`super::support`]) and consults the writer's [`PruneMemo`]. The new node's searches may
//! walk another reading of the graph (a walker: a file's codes).
//!
//! Invariants kept: a list is changed only under its node's lock when [`NodeLocks`] are
//! given, one lock held at a time; a pruned list keeps its survivors in their words and
//! empties dropped words last ([`rewrite_preserving`]); the heuristic keeps the same
//! neighbors with or without the memo (it only skips comparisons whose outcome is known);
//! whatever walked, selection and everything after it see distances computed from `store`.

use std::sync::atomic::{AtomicU32, Ordering};

use super::distance::{self, AlignedVector, Distance, Metric, VectorRef};
use super::{
    greedy_descent, neighbors, prefetch, score_into, search_layer, support, GraphStore, NodeLocks,
    Params, PruneMemo, Scored, Scratch, EMPTY,
};

/// The shortest vectors whose neighbor selection compares stored vectors by pair kernels
/// ([`select_neighbors`]): below it decoding a kept neighbor costs little (once its low halves
/// are asked for ahead), and a 16-d golden file's graph rebuilt with pair distances (bfloat16
/// on both sides, where a short vector's few values average out no rounding) trapped one of
/// its queries at ef 128.
pub const PAIR_MIN_DIMS: usize = 256;

/// How many candidates ahead [`select_neighbors`] asks for the low halves it will decode.
const SELECT_LOW_AHEAD: usize = 4;

/// The neighbor-selection heuristic (algorithm 4, without extending or keeping pruned
/// candidates): walk `candidates` (of the slot `base`, nearest first) and keep one only if it
/// is nearer to the base than to every neighbor kept so far, until `m` are kept. Fewer than
/// `m` candidates are all kept, as in hnswlib.
///
/// Where the CPU has a pair kernel for the stored vectors ([`Distance::between`]), both sides
/// of each comparison are distances between two stored vectors, the candidate's to the base
/// included (recomputed so): no candidate is decoded, and the comparison stays like with
/// like. Against a candidate's distance from the search (the base's exact values to the
/// candidate's high halves), pair distances carry a bias of their own (both sides' halves
/// truncated): cosine ones about 0.003 too far at distance 0.04, which kept candidates that
/// should have been pruned. Below [`PAIR_MIN_DIMS`] (or without pair kernels) each kept
/// neighbor is decoded once, when kept, and a candidate is compared as stored against those
/// exact values, as its distance to the base compares the base's exact values to it: like
/// with like again, and at most `m` decodes where decoding every candidate looked at took up
/// to one per candidate (10% of a 128-d build's time).
pub fn select_neighbors<S: GraphStore>(
    store: &S,
    dist: &Distance,
    base: u32,
    candidates: &[Scored],
    m: usize,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    select_neighbors_knowing(store, dist, base, candidates, &[], m, scratch)
}

/// [`select_neighbors`] where `known[i]` says candidate `i` was kept by the last run of the
/// heuristic over the same base together with every other known candidate ([`PruneMemo`]):
/// two known candidates are not compared again (the test would pass as it did then). Only
/// what is computed changes, never what is kept. An empty `known` knows nothing.
fn select_neighbors_knowing<S: GraphStore>(
    store: &S,
    dist: &Distance,
    base: u32,
    candidates: &[Scored],
    known: &[bool],
    m: usize,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    if candidates.len() <= m {
        return candidates.to_vec();
    }
    let base = store
        .vector(base)
        .filter(|&b| b.dims() >= PAIR_MIN_DIMS && dist.pairs_directly(b));
    let is_known = |i: usize| known.get(i).copied().unwrap_or(false);
    let mut kept: Vec<Scored> = Vec::with_capacity(m);
    let mut kept_known: Vec<bool> = Vec::with_capacity(m);
    // Without pair kernels: the kept neighbors' values, decoded once each, when first
    // compared (at most m decodes, where decoding each candidate took one per candidate
    // looked at; a kept neighbor only ever compared with known ones is never decoded).
    let mut kept_values: Vec<f32> = Vec::new();
    let mut decoded: Vec<bool> = Vec::with_capacity(m);
    let mut cv = Vec::new();
    // Without pair kernels a kept candidate is decoded, and a split vector's low halves are
    // read for that alone (the walk read only its high halves): a cache miss each, 13% of a
    // 128-d build's time, unless asked for ahead.
    let prefetch_low = |i: usize| {
        if let Some(v) = candidates.get(i).and_then(|c| store.vector(c.slot)) {
            let [_, (at, bytes)] = v.stored_parts();
            prefetch::prefetch_exact(at, bytes.div_ceil(64));
        }
    };
    if base.is_none() {
        (0..SELECT_LOW_AHEAD).for_each(prefetch_low);
    }
    for (i, &c) in candidates.iter().enumerate() {
        if kept.len() >= m {
            break;
        }
        if base.is_none() {
            prefetch_low(i + SELECT_LOW_AHEAD);
        }
        let Some(v) = store.vector(c.slot) else {
            continue;
        };
        let c_known = is_known(i);
        // The kept neighbors this candidate must still be compared with.
        let mut unsettled = kept
            .iter()
            .zip(&kept_known)
            .enumerate()
            .filter(move |(_, (_, &k_known))| !(c_known && k_known))
            .map(|(j, (k, _))| (j, k.slot));
        let good = match base {
            Some(b) if dist.pairs_directly(v) => {
                let mut to_base = None;
                unsettled.all(|(_, k)| match store.vector(k) {
                    Some(kv) => {
                        let to_base = *to_base.get_or_insert_with(|| {
                            scratch.distance_count += 1;
                            dist.between(b, v)
                        });
                        scratch.distance_count += 1;
                        dist.between(v, kv) >= to_base
                    }
                    None => true,
                })
            }
            Some(_) => {
                let mut ready = false;
                unsettled.all(|(_, k)| match store.vector(k) {
                    Some(kv) => {
                        if !ready {
                            v.decode_into(&mut cv);
                            ready = true;
                        }
                        scratch.distance_count += 1;
                        dist.walk(&cv, kv) >= c.distance
                    }
                    None => true,
                })
            }
            // Each side of the comparison a kept neighbor's exact values against the
            // candidate as stored, as the candidate's distance to the base is: like with like.
            None => {
                let dims = v.dims().max(1);
                unsettled.all(|(j, k)| {
                    let at = j * dims;
                    if !decoded[j] {
                        match store.vector(k) {
                            Some(kv) if kv.dims() == dims => {
                                kv.decode_into(&mut cv);
                                kept_values[at..at + dims].copy_from_slice(&cv);
                            }
                            _ => return true,
                        }
                        decoded[j] = true;
                    }
                    scratch.distance_count += 1;
                    dist.walk(&kept_values[at..at + dims], v) >= c.distance
                })
            }
        };
        if good {
            kept.push(c);
            kept_known.push(c_known);
            if base.is_none() {
                kept_values.resize(kept.len() * v.dims().max(1), 0.0);
                decoded.push(false);
            }
        }
    }
    kept
}

/// Tells `store` how far the distances a walk by high halves gave agree with exact ones,
/// where the graph's vectors are split: the gap between the nearest and the tenth nearest of
/// `found` (sorted by the walk's distances), by both. A gap is what ranking depends on;
/// distances themselves may share an offset (1 − ⟨a, b⟩ on long vectors) that doesn't matter.
fn note_walk<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    found: &[Scored],
    scratch: &mut Scratch,
) {
    let (Some(first), Some(tenth)) = (
        found.first(),
        found.get(9.min(found.len().saturating_sub(1))),
    ) else {
        return;
    };
    if first.slot == tenth.slot {
        return;
    }
    let mut walked = [0f32; 2];
    let mut exact = [0f32; 2];
    for (i, s) in [first, tenth].into_iter().enumerate() {
        let (half, whole) = match store.vector(s.slot) {
            Some(v @ VectorRef::Split(h)) | Some(v @ VectorRef::SplitExact(h)) => {
                (VectorRef::Split(h), v)
            }
            _ => return,
        };
        scratch.distance_count += 2;
        walked[i] = dist.walk(q, half);
        exact[i] = dist.exact(q, whole, &mut scratch.exact);
    }
    store.note_walk(walked[1] - walked[0], exact[1] - exact[0]);
}

/// Rewrites `words` to hold exactly `keep` (at most `words.len()` slots), keeping every
/// surviving entry in its word, writing new entries into free or dropped words, and emptying
/// the remaining dropped words last (ADR-0008 decision 5).
pub fn rewrite_preserving(words: &[AtomicU32], keep: &[u32]) {
    let old: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    let mut free: Vec<usize> = Vec::new();
    for (i, &o) in old.iter().enumerate() {
        if o == EMPTY || !keep.contains(&o) {
            free.push(i);
        }
    }
    // Empty words first, so dropped entries stay visible as long as possible.
    free.sort_by_key(|&i| old[i] != EMPTY);
    let mut free = free.into_iter();
    for &k in keep {
        if !old.contains(&k) {
            if let Some(i) = free.next() {
                words[i].store(k, Ordering::Relaxed);
            }
        }
    }
    for i in free {
        if old[i] != EMPTY {
            words[i].store(EMPTY, Ordering::Relaxed);
        }
    }
}

/// Adds the edge `from → to` on `layer`, pruning `from`'s list with the heuristic when full.
/// With `locks`, the whole read-modify-write of the list happens under `from`'s lock.
///
/// On layer 0 a prune keeps the support invariant ([`support`]): see [`keep_supporting`].
#[allow(clippy::too_many_arguments)]
pub(super) fn link<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    from: u32,
    to: u32,
    to_distance: f32,
    layer: usize,
    entry: u32,
    locks: Option<&NodeLocks>,
    memo: Option<&PruneMemo>,
    scratch: &mut Scratch,
) {
    let Some(words) = neighbors(store, from, layer) else {
        return;
    };
    let _guard = locks.map(|l| l.lock(from));
    let mut empty = None;
    for (i, w) in words.iter().enumerate() {
        let n = w.load(Ordering::Relaxed);
        if n == to {
            return;
        }
        if n == EMPTY && empty.is_none() {
            empty = Some(i);
        }
    }
    if let Some(i) = empty {
        words[i].store(to, Ordering::Relaxed);
        return;
    }
    // Full: every word holds a slot. Prune over the old list plus `to`.
    let r = store.routing_count();
    let Some(v) = store.vector(from) else { return };
    let fv = v.to_vec();
    let current: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    let memo = memo.filter(|_| layer == 0);
    let known = memo.map_or(0, |m| m.known(from, &current));
    // A word at or past the routing count is a stale hint: drop it.
    let old = current.iter().copied().filter(|&n| n < r && n != from);
    let mut cands: Vec<Scored> = Vec::with_capacity(words.len() + 1);
    cands.push(Scored {
        distance: to_distance,
        slot: to,
    });
    score_into(store, dist, &fv, old, &mut cands, scratch);
    cands.sort_unstable();
    // Which candidates the memo names (`to` never: it was not in the list).
    let known: Vec<bool> = cands
        .iter()
        .map(|c| {
            c.slot != to
                && current
                    .iter()
                    .position(|&w| w == c.slot)
                    .is_some_and(|i| known >> i & 1 == 1)
        })
        .collect();
    let capacity = params.capacity(layer);
    let kept = select_neighbors_knowing(store, dist, from, &cands, &known, capacity, scratch);
    let mut keep: Vec<u32> = kept.iter().map(|s| s.slot).collect();
    if layer == 0 {
        keep_supporting(
            store, from, to, &cands, &mut keep, params.m0, entry, scratch,
        );
    }
    rewrite_preserving(words, &keep);
    if let Some(memo) = memo {
        // What the heuristic kept was compared pair by pair, but `to` against the others with
        // its distance from the insert's walk (from `to`'s side), which a later prune doesn't
        // use: it, and what `keep_supporting` kept back, are compared again next time.
        if cands.len() > capacity {
            let together: Vec<u32> = kept.iter().map(|s| s.slot).filter(|&s| s != to).collect();
            memo.remember(from, words, &together);
        } else {
            memo.forget(from);
        }
    }
}

/// The support part of a layer-0 prune (see [`link`]): `cands` is the old list and `to`,
/// `keep` what the heuristic kept (nearest first). A dropped neighbor that needs `from` stays
/// while the list has room; past that it goes to `scratch.orphans`, to be given a supporter
/// elsewhere ([`support::after_insert`]): the heuristic's choices are never displaced.
#[allow(clippy::too_many_arguments)]
fn keep_supporting<S: GraphStore>(
    store: &S,
    from: u32,
    to: u32,
    cands: &[Scored],
    keep: &mut Vec<u32>,
    capacity: usize,
    entry: u32,
    scratch: &mut Scratch,
) {
    for c in cands {
        let z = c.slot;
        if z == to || keep.contains(&z) || !support::outranks(store, from, z) {
            continue;
        }
        if z == entry {
            // The entry point needs no supporter; in a parallel batch `entry` may be one that
            // has just been replaced, so the caller checks it again.
            scratch.rechecks.push(z);
            continue;
        }
        if support::has_supporter(store, z, from, entry) {
            scratch.rechecks.push(z);
        } else if keep.len() < capacity {
            keep.push(z);
        } else {
            scratch.orphans.push(z);
        }
    }
}

/// Inserts `slot` (algorithm 1), whose vector and empty neighbor lists for `level` layers are
/// already written, given the current entry point and its top layer (`None` when the graph is
/// empty). Returns true if `slot` becomes the new entry point.
///
/// With `locks`, other threads may be inserting other slots at the same time (see the module
/// doc); one of them may already have linked into `slot`'s lists, so its own selection is
/// merged into what is there rather than written over it.
///
/// With a `walker` (the same graph read by other vectors: a file's codes), the descent and
/// each layer's search walk through it, and what a layer's search found is scored again
/// through `store` before anything is selected, so selection, links and prunes see the
/// distances they see without one (docs/decisions/0013).
#[allow(clippy::too_many_arguments)]
pub fn insert<S: GraphStore, W: GraphStore>(
    store: &S,
    walker: Option<&W>,
    dist: &Distance,
    params: &Params,
    slot: u32,
    level: usize,
    entry: Option<(u32, usize)>,
    locks: Option<&NodeLocks>,
    memo: Option<&PruneMemo>,
    scratch: &mut Scratch,
) -> bool {
    let Some((ep, max_layer)) = entry else {
        return true;
    };
    let Some(q) = store.vector(slot) else {
        return false;
    };
    let q = AlignedVector::new(&q.to_vec());
    let q = &q[..];
    let Some(ev) = walker.map_or_else(|| store.vector(ep), |w| w.vector(ep)) else {
        return false;
    };
    scratch.distance_count += 1;
    let mut cur = Scored {
        distance: dist.walk(q, ev),
        slot: ep,
    };
    if max_layer > level {
        cur = match walker {
            Some(w) => greedy_descent(w, dist, q, cur, max_layer, level, scratch),
            None => greedy_descent(store, dist, q, cur, max_layer, level, scratch),
        };
    }
    for layer in (0..=level.min(max_layer)).rev() {
        let found = match walker {
            None => search_layer(
                store,
                dist,
                q,
                cur,
                params.ef_construction,
                layer,
                |s| s != slot,
                scratch,
            ),
            Some(w) => {
                let walked = search_layer(
                    w,
                    dist,
                    q,
                    cur,
                    params.ef_construction,
                    layer,
                    |s| s != slot,
                    scratch,
                );
                let mut found = Vec::with_capacity(walked.len());
                super::score_into(
                    store,
                    dist,
                    q,
                    walked.iter().map(|s| s.slot),
                    &mut found,
                    scratch,
                );
                found.sort_unstable();
                found
            }
        };
        // Up to the layer's capacity: M0 = 2M on layer 0 (as FAISS does; hnswlib takes M).
        // A new node with twice the out-edges lifts recall at equal ef: at 300k x 128 from
        // 0.942 to 0.959 at ef 64, +16% QPS at recall 0.95. Not under inner product, where
        // it cost recall (0.95 to 0.93 at ef 256 on the Python tests' data): docs/decisions/0001.
        let want = if dist.metric() == Metric::InnerProduct {
            params.m
        } else {
            params.capacity(layer)
        };
        let selected = select_neighbors(store, dist, slot, &found, want, scratch);
        // The new node's own list first (on an empty list this fills its words in order),
        // then the backlinks.
        for s in &selected {
            link(
                store, dist, params, slot, s.slot, s.distance, layer, ep, locks, memo, scratch,
            );
        }
        // The heuristic compared every pair it kept, in the order of the walk's distances: a
        // prune of this list orders them by the same distances (this node's exact values
        // against each one's stored halves, one at a time), unless the walk scored them in
        // batches, whose sums may differ in the last bit and so order a near tie the other
        // way.
        let walked_one_at_a_time = q.len() < distance::BATCH_MIN_DIMS;
        if let (Some(memo), 0, true) = (memo, layer, found.len() > want && walked_one_at_a_time) {
            if let Some(words) = store.level0(slot) {
                let _guard = locks.map(|l| l.lock(slot));
                let together: Vec<u32> = selected.iter().map(|s| s.slot).collect();
                memo.remember(slot, words, &together);
            }
        }
        for s in &selected {
            link(
                store, dist, params, s.slot, slot, s.distance, layer, ep, locks, memo, scratch,
            );
        }
        if let Some(best) = found.first() {
            cur = *best;
            // The next layer's walk starts from it by the walker's own distance.
            if let Some(v) = walker.and_then(|w| w.vector(cur.slot)) {
                cur.distance = dist.walk(q, v);
            }
            if layer == 0 {
                note_walk(store, dist, q, &found, scratch);
            }
        }
        if layer == 0 {
            scratch.near = found;
        }
    }
    level > max_layer
}

/// Reconnects an existing node that no path from the entry point reaches (edges toward it
/// were pruned by a writer whose inserts never committed): finds its nearest reachable nodes
/// on layer 0 as an insert would, and links it to them in both directions.
pub fn reconnect<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    slot: u32,
    entry: (u32, usize),
    scratch: &mut Scratch,
) {
    let (ep, max_layer) = entry;
    let (Some(q), Some(ev)) = (store.vector(slot), store.vector(ep)) else {
        return;
    };
    let q = AlignedVector::new(&q.to_vec());
    let q = &q[..];
    scratch.distance_count += 1;
    let start = Scored {
        distance: dist.walk(q, ev),
        slot: ep,
    };
    let cur = greedy_descent(store, dist, q, start, max_layer, 0, scratch);
    let found = search_layer(
        store,
        dist,
        q,
        cur,
        params.ef_construction,
        0,
        |s| s != slot,
        scratch,
    );
    let selected = select_neighbors(store, dist, slot, &found, params.m, scratch);
    for s in &selected {
        link(
            store, dist, params, s.slot, slot, s.distance, 0, ep, None, None, scratch,
        );
        link(
            store, dist, params, slot, s.slot, s.distance, 0, ep, None, None, scratch,
        );
    }
}

//! Every node findable: the support invariant, and the local work that keeps it (hardening
//! issue, item 1).
//!
//! HNSW's pruning can leave a node with no layer-0 in-edge from anywhere a search comes from:
//! each neighbor that once listed it dropped it for nearer ones. Such a node is lost to every
//! search (layer 0 is where every search ends), although nothing is wrong with it.
//!
//! **Rank.** Node a ranks below node b when a has more layers, or as many and a smaller slot:
//! rank(a) = (−level(a), a). The writer keeps the entry point at the lowest rank: the first
//! node to reach a new top layer becomes it (as in the paper), and in a parallel batch a node
//! of the entry point's level with a smaller slot takes over (`index/add.rs`).
//!
//! **Invariant (support).** Every node but the entry point has a *supporter*: a node of lower
//! rank whose layer-0 list holds it. Following supporters from any node strictly lowers rank,
//! so the chain ends at the node of lowest rank, the entry point; read backwards, it is a
//! layer-0 path from the entry point to the node. So the invariant makes every node, live or
//! deleted, reachable, and it is local: it can be kept by looking at the lists a change
//! touches, never at the whole graph.
//!
//! **Keeping it.** Adding an edge never breaks it. A prune that drops x from the list of a
//! node that outranks x first looks for another supporter of x ([`has_supporter`]: among x's
//! own layer-0 neighbors, since HNSW's edges are mostly mutual, and the entry point); if there
//! is none, x stays in the list (in place of a neighbor that doesn't need it). A new node,
//! and every node a prune could not keep, is then given a supporter if it has none
//! ([`ensure_supported`]): the nearest of its neighbors that outranks it (its own layer-0
//! list, then its upper-layer lists, whose members all have at least its level), then the
//! entry point, takes it into its list ([`force_edge`]). When a new node becomes the entry
//! point, the old one gets it as supporter the same way. Each step reads at most 2·M0 lists
//! of M0 words: work in proportion to what changed, not to the graph. A false "no supporter"
//! from [`has_supporter`] (the supporter is not among x's neighbors) costs one edge that was
//! not needed, never a lost node.
//!
//! The expensive steps are bounded, so that a repair of a damaged file stays near linear:
//! displacing a neighbor is tried at the `DISPLACE_TRIES` nearest candidates, and the last
//! resort looks through the first `LAST_RESORT_SCAN` slots; a node still without a
//! supporter is returned as a failure for the caller to count (never seen on real data).
//!
//! Parallel inserts check supporters without a lock on the lists they read, so two threads
//! can each drop x trusting the other's edge; the writer re-checks every node that a chunk
//! inserted or dropped on such trust, on one thread, before it publishes R
//! (`index/add.rs`). A graph that came from elsewhere (an older release, hnswlib, a writer
//! that stopped without closing) is brought to the invariant by [`establish`], one pass over
//! the lists.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{Distance, GraphStore, NodeLocks, Params, Scored, Scratch, EMPTY};

/// Candidates [`ensure_supported`] tries to displace a neighbor from, nearest first.
const DISPLACE_TRIES: usize = 2;

/// Slots the last resort of [`ensure_supported`] looks through for a free word.
const LAST_RESORT_SCAN: u32 = 1024;

/// Whether `a` ranks below `b`, so that `a` may support `b`.
#[inline]
pub fn outranks<S: GraphStore>(store: &S, a: u32, b: u32) -> bool {
    let (la, lb) = (store.level(a), store.level(b));
    la > lb || (la == lb && a < b)
}

#[inline]
fn lists(words: &[AtomicU32], x: u32) -> bool {
    words.iter().any(|w| w.load(Ordering::Relaxed) == x)
}

/// Whether a node other than `except` that outranks `x` holds `x` in its layer-0 list, looking
/// among `x`'s own layer-0 neighbors and at `entry`.
pub fn has_supporter<S: GraphStore>(store: &S, x: u32, except: u32, entry: u32) -> bool {
    let r = store.routing_count();
    let supports = |y: u32| {
        y != except
            && y != x
            && y < r
            && outranks(store, y, x)
            && store.level0(y).is_some_and(|w| lists(w, x))
    };
    if let Some(words) = store.level0(x) {
        for w in words {
            let y = w.load(Ordering::Relaxed);
            if y != EMPTY && supports(y) {
                return true;
            }
        }
    }
    supports(entry)
}

/// Puts `x` into a free word of `u`'s layer-0 list (an empty one, or one naming a slot past
/// R or `u` itself). Never displaces a neighbor: a support edge costs the graph no edge the
/// heuristic chose. False when the list is full.
pub fn force_edge<S: GraphStore>(store: &S, u: u32, x: u32, locks: Option<&NodeLocks>) -> bool {
    let Some(words) = store.level0(u) else {
        return false;
    };
    let _guard = locks.map(|l| l.lock(u));
    if lists(words, x) {
        return true;
    }
    let r = store.routing_count();
    for w in words {
        let z = w.load(Ordering::Relaxed);
        if z == EMPTY || z >= r || z == u {
            w.store(x, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// Whether `u`'s layer-0 list has a free word (see [`force_edge`]).
fn has_room<S: GraphStore>(store: &S, u: u32) -> bool {
    let r = store.routing_count();
    store.level0(u).is_some_and(|words| {
        words.iter().any(|w| {
            let z = w.load(Ordering::Relaxed);
            z == EMPTY || z >= r || z == u
        })
    })
}

/// Gives `x` a supporter if [`has_supporter`] finds none: the nearest node that outranks `x`
/// and has a free word takes it, looked for among `x`'s layer-0 neighbors, then `near` (what
/// the insert of `x` found), then its upper-layer neighbors, then its neighbors' neighbors,
/// then the entry point, and last by a search of layer 0 for `x` (ef_construction). False only
/// when none of them has room (never seen; the caller counts it).
#[allow(clippy::too_many_arguments)]
pub fn ensure_supported<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    x: u32,
    entry: u32,
    near: &[Scored],
    locks: Option<&NodeLocks>,
    scratch: &mut Scratch,
) -> bool {
    if locks.is_some() {
        // Other threads may drop the supporter found here: the caller checks again.
        scratch.rechecks.push(x);
    }
    if x == entry || x >= store.routing_count() || has_supporter(store, x, EMPTY, entry) {
        return true;
    }
    let Some(xv) = store.vector(x).map(|v| v.to_vec()) else {
        return false;
    };
    let r = store.routing_count();
    let mut tried: Vec<u32> = Vec::new();
    // Tries the candidates of one tier, nearest first; true once one took `x`.
    let mut tier = |slots: &mut dyn Iterator<Item = u32>, scratch: &mut Scratch| -> bool {
        let mut fresh: Vec<u32> = Vec::new();
        for y in slots {
            if y == EMPTY || y >= r || y == x || tried.contains(&y) {
                continue;
            }
            tried.push(y);
            if outranks(store, y, x) && has_room(store, y) {
                fresh.push(y);
            }
        }
        let mut scored = Vec::with_capacity(fresh.len());
        super::score_into(store, dist, &xv, fresh, &mut scored, scratch);
        scored.sort_unstable();
        scored.iter().any(|s| force_edge(store, s.slot, x, locks))
    };
    let words = |slot: u32, layer: usize| -> Vec<u32> {
        let list = if layer == 0 {
            store.level0(slot)
        } else {
            store.upper(slot, layer)
        };
        list.into_iter()
            .flatten()
            .map(|w| w.load(Ordering::Relaxed))
            .collect()
    };
    let own = words(x, 0);
    if tier(&mut own.iter().copied(), scratch) || tier(&mut near.iter().map(|s| s.slot), scratch) {
        return true;
    }
    let level = store.level(x).min(params.max_layers);
    let upper: Vec<u32> = (1..=level).flat_map(|l| words(x, l)).collect();
    if tier(&mut upper.iter().copied(), scratch) {
        return true;
    }
    let two_hop: Vec<u32> = own
        .iter()
        .filter(|&&y| y != EMPTY && y < r)
        .flat_map(|&y| words(y, 0))
        .collect();
    if tier(&mut two_hop.into_iter(), scratch) {
        return true;
    }
    // Last: search for x on its own top layer, whose nodes all have at least its level (a
    // node of an upper layer has few nodes of lower rank, and they are there).
    let Some(ev) = store.vector(entry) else {
        return false;
    };
    scratch.distance_count += 1;
    let start = Scored {
        distance: dist.walk(&xv, ev),
        slot: entry,
    };
    let top = store.level(entry);
    let layer = level.min(top);
    let cur = super::greedy_descent(store, dist, &xv, start, top, layer, scratch);
    let found = super::search_layer(
        store,
        dist,
        &xv,
        cur,
        params.ef_construction,
        layer,
        |s| s != x,
        scratch,
    );
    // The entry point last: its list is all that nodes of the top layers can use.
    if tier(&mut found.iter().map(|s| s.slot), scratch)
        || tier(&mut std::iter::once(entry), scratch)
    {
        return true;
    }
    // Every candidate's list is full (a node of a high layer, whose supporters are few):
    // displace, nearest candidate first, a neighbor that has another supporter.
    let mut candidates: Vec<u32> = Vec::new();
    for y in found
        .iter()
        .map(|s| s.slot)
        .chain(upper)
        .chain(own)
        .chain(std::iter::once(entry))
    {
        if y != EMPTY && y < r && y != x && !candidates.contains(&y) && outranks(store, y, x) {
            candidates.push(y);
        }
    }
    let mut outranking = Vec::with_capacity(candidates.len());
    super::score_into(store, dist, &xv, candidates, &mut outranking, scratch);
    outranking.sort_unstable();
    // Bounded: each try reads up to M0 lists per neighbor it weighs, and a damaged graph
    // (the repair of a file) can have many nodes down here.
    outranking.truncate(DISPLACE_TRIES);
    let ok = outranking
        .iter()
        .any(|u| displace(store, dist, u.slot, x, entry, false, locks, scratch))
        || outranking
            .iter()
            .any(|u| displace(store, dist, u.slot, x, entry, true, locks, scratch));
    if ok {
        return true;
    }
    // Never seen outside tests built to provoke it (inner product, tiny M): any node of
    // lower rank with a free word, in slot order, among the first LAST_RESORT_SCAN slots
    // (bounded, so that a damaged graph can't make a repair quadratic; a node still without
    // a supporter is counted by the caller and reported).
    (0..r.min(LAST_RESORT_SCAN))
        .any(|u| u != x && outranks(store, u, x) && force_edge(store, u, x, locks))
}

/// Puts `x` into `u`'s full layer-0 list in place of the farthest neighbor that has another
/// supporter (or needs none from `u`); with `evict`, failing that, in place of the farthest
/// neighbor of a lower layer than `x` (which has more nodes to turn to), sent to
/// `scratch.orphans` to be given a supporter elsewhere. False when neither is there.
#[allow(clippy::too_many_arguments)]
fn displace<S: GraphStore>(
    store: &S,
    dist: &Distance,
    u: u32,
    x: u32,
    entry: u32,
    evict: bool,
    locks: Option<&NodeLocks>,
    scratch: &mut Scratch,
) -> bool {
    let (Some(words), Some(uv)) = (store.level0(u), store.vector(u).map(|v| v.to_vec())) else {
        return false;
    };
    let _guard = locks.map(|l| l.lock(u));
    if lists(words, x) {
        return true;
    }
    let mut by_distance: Vec<(Scored, usize)> = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let z = w.load(Ordering::Relaxed);
        match store.vector(z) {
            Some(v) if z < store.routing_count() && z != u => {
                scratch.distance_count += 1;
                by_distance.push((
                    Scored {
                        distance: dist.walk(&uv, v),
                        slot: z,
                    },
                    i,
                ));
            }
            // A free or stale word after all (another thread emptied it).
            _ => {
                w.store(x, Ordering::Relaxed);
                return true;
            }
        }
    }
    by_distance.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
    if evict {
        let level = store.level(x);
        for (s, i) in by_distance {
            if store.level(s.slot) < level {
                words[i].store(x, Ordering::Relaxed);
                scratch.orphans.push(s.slot);
                return true;
            }
        }
        return false;
    }
    for (s, i) in by_distance {
        let z = s.slot;
        let needed = z != entry && outranks(store, u, z) && !has_supporter(store, z, u, entry);
        if !needed {
            words[i].store(x, Ordering::Relaxed);
            scratch.rechecks.push(z);
            return true;
        }
    }
    false
}

/// Gives a supporter to every node in `scratch.orphans` (and to those their supporters
/// displace). Returns how many could not be given one (normally 0).
pub fn settle<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    entry: u32,
    locks: Option<&NodeLocks>,
    scratch: &mut Scratch,
) -> u64 {
    let mut failed = 0;
    // Each eviction moves a node of a lower layer out; the bound only guards the loop.
    let mut budget = 64 * (scratch.orphans.len() as u64 + 16);
    while let Some(x) = scratch.orphans.pop() {
        if budget == 0 {
            failed += 1 + scratch.orphans.len() as u64;
            scratch.orphans.clear();
            break;
        }
        budget -= 1;
        failed += u64::from(!ensure_supported(
            store,
            dist,
            params,
            x,
            entry,
            &[],
            locks,
            scratch,
        ));
    }
    failed
}

/// After one insert: gives the new node (or, if it became the entry point, the old entry
/// point) a supporter, then every node a prune had to drop although it needed the edge.
/// `near` is what the insert found on layer 0. Returns how many nodes could not be given one
/// (normally 0).
#[allow(clippy::too_many_arguments)]
pub fn after_insert<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    slot: u32,
    entry_before: Option<u32>,
    entry_after: u32,
    near: &[Scored],
    locks: Option<&NodeLocks>,
    scratch: &mut Scratch,
) -> u64 {
    let mut failed = 0;
    let (first, near) = if entry_after == slot {
        (entry_before, &[][..])
    } else {
        (Some(slot), near)
    };
    if let Some(x) = first {
        failed += u64::from(!ensure_supported(
            store,
            dist,
            params,
            x,
            entry_after,
            near,
            locks,
            scratch,
        ));
    }
    failed + settle(store, dist, params, entry_after, locks, scratch)
}

/// Brings a whole graph of `n` nodes to the invariant: one pass over the layer-0 lists marks
/// every node some node of lower rank lists, then each node left unmarked is given a
/// supporter. Returns (nodes that had none, nodes that still have none).
pub fn establish<S: GraphStore>(
    store: &S,
    dist: &Distance,
    params: &Params,
    n: u32,
    entry: u32,
    scratch: &mut Scratch,
) -> (u64, u64) {
    let mut supported = vec![false; n as usize];
    let levels: Vec<u32> = (0..n).map(|s| store.level(s) as u32).collect();
    for u in 0..n {
        for w in store.level0(u).into_iter().flatten() {
            let x = w.load(Ordering::Relaxed);
            if x < n && x != u {
                let (lu, lx) = (levels[u as usize], levels[x as usize]);
                if lu > lx || (lu == lx && u < x) {
                    supported[x as usize] = true;
                }
            }
        }
    }
    let (mut lacking, mut failed) = (0, 0);
    for x in 0..n {
        if x == entry || supported[x as usize] {
            continue;
        }
        lacking += 1;
        failed += u64::from(!ensure_supported(
            store,
            dist,
            params,
            x,
            entry,
            &[],
            None,
            scratch,
        ));
        failed += settle(store, dist, params, entry, None, scratch);
    }
    (lacking, failed)
}

/// Every node of `0..n` but `entry` that has no supporter at all (an exact check over every
/// list, for tests and `chassis check`).
pub fn unsupported<S: GraphStore>(store: &S, n: u32, entry: u32) -> Vec<u32> {
    let mut supported = vec![false; n as usize];
    for u in 0..n {
        for w in store.level0(u).into_iter().flatten() {
            let x = w.load(Ordering::Relaxed);
            if x < n && x != u && outranks(store, u, x) {
                supported[x as usize] = true;
            }
        }
    }
    (0..n)
        .filter(|&x| x != entry && !supported[x as usize])
        .collect()
}

//! What a filtered search needs of the graph beside the plain beam: the exact scan of a set of
//! slots ([`scan`]), and the two-hop beam that scores only admitted slots
//! ([`search_within_two_hop`], its expansion [`gather_two_hop`]; the beam itself is
//! [`super::search_layer_within`] with `TWO_HOP`). `filter::search` chooses between them.
//!
//! Invariants: both return exact distances (split vectors and codes ranked exactly as a walk's
//! beam is); a two-hop expansion only ever scores slots below the routing count that `accept`
//! admits, each at most once per search (the visited set), and reads each refused neighbor's
//! list at most once per search.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{
    prefetch_list, prefetch_scan, rank_exactly, Distance, GraphStore, Scored, Scratch, VectorRef,
    VisitedSet, SCAN_AHEAD, SCAN_GROUP,
};

/// [`super::search_within`] whose layer-0 beam scores only slots `accept` admits, reaching them
/// through refused neighbors' lists too (two hops; `search_layer_within`). For a filter
/// that few slots pass, tested in nanoseconds (a bitmap): the beam's distance computations
/// are then about an unfiltered search's, where a plain filtered beam makes them over every
/// refused slot it routes through. Returns up to `k` admitted slots, nearest first, each
/// distance exact; `None` past `budget` distance computations. Fewer than `k` when the
/// admitted slots are poorly connected even through two hops: the caller then searches
/// otherwise.
#[allow(clippy::too_many_arguments)]
pub fn search_within_two_hop<S: GraphStore, F: Fn(u32) -> bool>(
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
    let walked = super::walk::<S, F, true>(
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

/// The slots one two-hop expansion of `list` scores ([`search_layer_within`]): its unvisited
/// neighbors `accept` admits, then, through each unvisited neighbor it refuses (marked
/// visited, so its list is read once a search), that neighbor's unvisited admitted
/// neighbors, until as many as the list's capacity are gathered.
#[inline]
pub(super) fn gather_two_hop<S: GraphStore>(
    store: &S,
    list: &[AtomicU32],
    r: u32,
    accept: &impl Fn(u32) -> bool,
    visited: &mut VisitedSet,
    mut hop: Vec<u32>,
) -> Vec<u32> {
    hop.clear();
    // The list's capacity (M0 on layer 0): half of it lost 0.04 of recall at 10% passing
    // for 20% more speed, twice it gained 0.009 for 16% less (pypi-minilm, ef 64).
    let cap = list.len();
    // The admitted neighbors; the refused ones' lists start loading (read below).
    for w in list {
        let n = w.load(Ordering::Relaxed);
        if n >= r {
            continue;
        }
        if accept(n) {
            if visited.insert(n) {
                hop.push(n);
            }
        } else if !visited.contains(n) {
            if let Some(l) = store.level0(n) {
                prefetch_list(l);
            }
        }
    }
    for w in list {
        if hop.len() >= cap {
            break;
        }
        let n = w.load(Ordering::Relaxed);
        if n >= r || accept(n) || !visited.insert(n) {
            continue;
        }
        let Some(l) = store.level0(n) else {
            continue;
        };
        for w2 in l {
            let m = w2.load(Ordering::Relaxed);
            if m < r && accept(m) && visited.insert(m) {
                hop.push(m);
                if hop.len() >= cap {
                    break;
                }
            }
        }
    }
    hop
}

/// How many past `k` of a scan's nearest walk distances are ranked exactly first ([`scan`]).
const SCAN_RANK_EXTRA: usize = 8;

/// The exact `k` nearest of `slots` (each scored once; slots without a vector are skipped),
/// nearest first: what a search returns, by scanning instead of walking. Split vectors are
/// scored by high halves, then ranked exactly as far as their error bound leaves in doubt
/// (`rank::rank_exactly`), so the answer is exact while most vectors are read half.
pub fn scan<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    slots: impl IntoIterator<Item = u32>,
    k: usize,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    if k == 0 {
        return Vec::new();
    }
    // Gather first, then score in groups of SCAN_GROUP with the vectors SCAN_AHEAD groups
    // ahead prefetched, so loads overlap without flooding the line-fill buffers.
    let mut refs: Vec<(u32, VectorRef<'_>)> = Vec::new();
    let mut split = false;
    let mut coded = false;
    // Whether a slot was scored by its vector although the walk reads its code.
    let mut by_vectors = false;
    for slot in slots {
        let v = match store.vector(slot) {
            // Codes without a proved bound would make the scan approximate: it reads vectors.
            Some(VectorRef::Code(_, book)) if !book.kind().proves() => {
                by_vectors = true;
                store.exact_vector(slot)
            }
            v => v,
        };
        if let Some(v) = v {
            split |= matches!(v, VectorRef::Split(_));
            coded |= v.is_code();
            refs.push((slot, v));
        }
    }
    let mut all: Vec<Scored> = Vec::with_capacity(refs.len());
    scratch.coded.forget();
    for v in refs.iter().take(SCAN_GROUP * SCAN_AHEAD) {
        prefetch_scan(v.1);
    }
    let mut vectors = [VectorRef::F32(&[]); SCAN_GROUP];
    let mut distances = [0f32; SCAN_GROUP];
    for (g, group) in refs.chunks(SCAN_GROUP).enumerate() {
        let ahead = (g + SCAN_AHEAD) * SCAN_GROUP;
        for v in refs.iter().skip(ahead).take(SCAN_GROUP) {
            prefetch_scan(v.1);
        }
        for (dst, (_, v)) in vectors.iter_mut().zip(group) {
            *dst = *v;
        }
        dist.walk_batch(
            q,
            &mut scratch.coded,
            &vectors[..group.len()],
            &mut distances,
        );
        all.extend(
            group
                .iter()
                .zip(&distances)
                .map(|(&(slot, _), &distance)| Scored { distance, slot }),
        );
    }
    scratch.distance_count += all.len() as u64;
    if coded {
        // Each code has its own error bound: rank in the order of the bounds, which stops
        // as soon as the rest can't come nearer.
        return rank_exactly(store, dist, q, &all, k, false, scratch);
    }
    if !split {
        // Walk distances are exact distances.
        if all.len() > k {
            all.select_nth_unstable(k - 1);
            all.truncate(k);
        }
        all.sort_unstable();
        return all;
    }
    // Rank exactly in walk order: first among the nearest few by walk distance, which nearly
    // always settles it; if the bound can't rule out the rest, among all. A few past k is
    // enough for high halves' small error: on pypi-minilm's filtered queries (k 10, the
    // `filtered` bench) k + 8 first gave bucket_eq's 100-vector scans 57,900 to 60,000 QPS
    // against 50,400 to 50,800 with 4k + 16, tag_rare's 34,800 to 36,500 against 32,000 to
    // 32,900 (three alternated pairs; the other kinds unchanged); k + 2 fell back to all too
    // often, k + 6 and k + 10 were as fast.
    let m = (k + SCAN_RANK_EXTRA).min(all.len());
    if m < all.len() {
        all.select_nth_unstable(m - 1);
    }
    all[..m].sort_unstable();
    let ranked = rank_exactly(store, dist, q, &all[..m], k, by_vectors, scratch);
    let settled = m == all.len()
        || (ranked.len() >= k
            && ranked.last().is_some_and(|kth| {
                let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                dist.exact_lower_bound(q_norm, all[m - 1].distance, q.len()) > kth.distance
            }));
    if settled {
        return ranked;
    }
    all.sort_unstable();
    rank_exactly(store, dist, q, &all, k, by_vectors, scratch)
}

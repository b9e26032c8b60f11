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

#[cfg(test)]
mod tests {
    use super::super::tests::{split_points, SplitPoints};
    use super::super::{Distance, GraphStore, Metric, Scored, Scratch};
    use super::{scan, SCAN_RANK_EXTRA};

    /// Fails if a scan of split vectors returns anything but the exact k nearest when the
    /// first few by walk distance can't settle it: every high half here is the same, so the
    /// walk distances tie and the nearest by exact distance are the last slots, which the
    /// first `k + SCAN_RANK_EXTRA` in walk order (ties by slot) never include; the scan must
    /// fall back to ranking all of them. Also checks random vectors against brute force.
    #[test]
    fn scans_of_split_vectors_are_exact_even_when_high_halves_tie() {
        let (n, dims, k) = (200usize, 8usize, 10usize);
        // The nearest k lie past the first k + SCAN_RANK_EXTRA slots: only the fallback finds them.
        assert!(n >= 2 * (k + SCAN_RANK_EXTRA));
        let dist = Distance::new(Metric::L2Squared);
        let store = SplitPoints {
            halves: (0..n)
                .map(|i| {
                    // 1.0 plus a few units in the last place: bits 0x3F80_xxxx, one high half.
                    let mut v = [1.0f32; 8];
                    v[0] = f32::from_bits(0x3F80_0000 + 100 * (n - i) as u32);
                    let mut bytes = vec![0u8; 4 * dims];
                    crate::format::vector::encode(
                        crate::format::vector::VectorLayout::SplitHalves,
                        &v,
                        &mut bytes,
                    );
                    bytes
                        .chunks_exact(2)
                        .map(|b| u16::from_le_bytes([b[0], b[1]]))
                        .collect()
                })
                .collect(),
            lists: Vec::new(),
        };
        let q = [0.0f32; 8];
        let exact_top = |store: &SplitPoints, q: &[f32]| {
            let mut all: Vec<Scored> = (0..store.halves.len() as u32)
                .map(|slot| Scored {
                    distance: dist.exact(q, store.vector(slot).unwrap(), &mut Vec::new()),
                    slot,
                })
                .collect();
            all.sort_unstable();
            all.truncate(k);
            all
        };
        let mut scratch = Scratch::default();
        let got = scan(&store, &dist, &q, 0..n as u32, k, &mut scratch);
        let want = exact_top(&store, &q);
        assert_eq!(
            want.iter().map(|s| s.slot).collect::<Vec<_>>(),
            (n as u32 - k as u32..n as u32).rev().collect::<Vec<_>>(),
            "the construction: the last slots are the nearest"
        );
        assert_eq!(got, want);
        // Random vectors: the first few settle it, and the answer is still exact.
        let store = split_points(Metric::L2Squared, 600, 24, 5);
        for qi in 0..20 {
            let q: Vec<f32> = (0..24)
                .map(|j| ((qi * 13 + j * 5) % 11) as f32 / 5.5 - 1.0)
                .collect();
            let slots = (qi as u32 % 3..600).step_by(3);
            let got = scan(&store, &dist, &q, slots.clone(), k, &mut scratch);
            let mut want: Vec<Scored> = slots
                .map(|slot| Scored {
                    distance: dist.exact(&q, store.vector(slot).unwrap(), &mut Vec::new()),
                    slot,
                })
                .collect();
            want.sort_unstable();
            want.truncate(k);
            assert_eq!(got, want, "query {qi}");
        }
    }
}

//! Exact ranking of what a walk found: every returned distance is exact, and only as many
//! exact distances are taken as the walk's approximations (high halves, codes, the integer
//! kernels' rounding) leave in doubt.
//!
//! Invariants: found vectors are ranked in the order of a lower bound on their exact distance
//! ([`lower_bound`]), and ranking stops at the first bound above the k-th exact distance so
//! far, so the answer is what ranking all of them gives (for int4 codes, unless a code's error
//! is several times its expected size: a likely bound, not a proof); every vector named to the
//! store before it is read is given back after a walk by codes.

use super::{prefetch, Distance, GraphStore, Metric, Scored, Scratch, VectorRef};

/// How many found vectors ahead of the one being ranked have their exact bytes prefetched
/// into the CPU's caches.
const RANK_PREFETCH_AHEAD: usize = 8;

/// The walk distance ranked `k + RANK_LIKELY_EXTRA` (from 1) estimates the k-th exact
/// distance with room to spare: the vectors whose lower bounds fall below it are named to the
/// store together before ranking starts ([`name_likely`]).
const RANK_LIKELY_EXTRA: usize = 2;

/// Ranking past the vectors named together, how many further ahead are named to the store.
const RANK_NAME_AHEAD: usize = 4;

/// A lower bound on the exact distance from `q` to `slot`, whose walk distance is `walked`
/// (within `q_error` of the f32 kernels' where it read a code:
/// [`CodedQuery::error_for`](super::CodedQuery::error_for)):
/// by its code's error ([`Distance::code_lower_bound`]) when the walk read an int8 code, a
/// likely one ([`Distance::code_likely_bound`], `q_spread` the query's) for an int4 code, by
/// the high halves' error ([`Distance::exact_lower_bound`]) when it read high halves, and the
/// walk distance itself when that was exact.
#[allow(clippy::too_many_arguments)]
fn lower_bound<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q_norm: f32,
    q_spread: f32,
    q_error: f32,
    walked: f32,
    slot: u32,
    dims: usize,
    by_vectors: bool,
) -> f32 {
    let walked_by = if by_vectors {
        store.exact_vector(slot)
    } else {
        store.vector(slot)
    };
    match walked_by {
        Some(VectorRef::Code(_, book)) => {
            // What the f32 code kernels would have given, at its lowest.
            let walked = walked - q_error;
            match store.code_aux(slot) {
                Some((eps, _)) if !book.kind().proves() => {
                    dist.code_likely_bound(walked, eps, q_spread, dims)
                }
                Some((eps, norm)) => {
                    dist.code_lower_bound(q_norm, walked, eps, norm, book.lo_norm(), dims)
                }
                None => f32::NEG_INFINITY,
            }
        }
        Some(VectorRef::Split(_)) => dist.exact_lower_bound(q_norm, walked, dims),
        _ => walked,
    }
}

/// Whether walk distances to `slot` are approximations (codes or high halves) to be ranked
/// exactly before a search returns.
pub(super) fn approximate<S: GraphStore>(store: &S, slot: u32) -> bool {
    matches!(
        store.vector(slot),
        Some(VectorRef::Split(_) | VectorRef::Code(..))
    )
}

/// The nearest `k` of `found` (scored by walk distance) by exact distance, nearest first.
/// Ranks `found` in the order of a lower bound on each one's exact distance
/// ([`lower_bound`]: by codes' or high halves' error) and stops at the first whose bound is
/// above the k-th exact distance so far; since every later bound is higher still, the result
/// is the same as ranking all of `found`, minus exact distances that could not change it.
///
/// Int4 codes have no useful proved bound; they are ranked the same way by a *likely* one
/// ([`Distance::code_likely_bound`]): the result is what ranking all of `found` gives unless a
/// code's error is several times its expected size. Either way every returned distance is
/// exact, and the vectors about to be read are named to the store first
/// ([`GraphStore::will_need_exact`]), so in a file larger than memory their misses overlap.
///
/// `by_vectors`: `found` was scored by the slots' exact vectors (a scan of an int4 file), not
/// by what [`GraphStore::vector`] gives.
pub(super) fn rank_exactly<S: GraphStore>(
    store: &S,
    dist: &Distance,
    q: &[f32],
    found: &[Scored],
    k: usize,
    by_vectors: bool,
    scratch: &mut Scratch,
) -> Vec<Scored> {
    if k == 0 {
        return Vec::new();
    }
    let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
    // The codebook the walk read (a file has one), for the query's spread over its steps and
    // the integer kernels' error, which each code's bound subtracts first.
    let book = if by_vectors {
        None
    } else {
        found.iter().find_map(|s| match store.vector(s.slot) {
            Some(VectorRef::Code(_, book)) => Some(book),
            _ => None,
        })
    };
    let q_spread = match book {
        Some(book) if !book.kind().proves() => Distance::code_spread(q, book.step()),
        _ => 0.0,
    };
    // Prepared already by the walk unless it never met a code; preparing is deterministic.
    let q_error = match book {
        Some(book) if dist.has_integer_kernels() => {
            scratch
                .coded
                .prepare(q, book, dist.metric() == Metric::L2Squared);
            scratch.coded.error_for(book)
        }
        _ => 0.0,
    };
    let mut order: Vec<Scored> = found
        .iter()
        .map(|s| Scored {
            distance: lower_bound(
                store,
                dist,
                q_norm,
                q_spread,
                q_error,
                s.distance,
                s.slot,
                q.len(),
                by_vectors,
            ),
            slot: s.slot,
        })
        .collect();
    order.sort_unstable();
    // The vectors ranking will most likely read (a prefix of `order`): read together where the
    // store can (a file larger than memory: one submission, past the page cache), else named
    // to it together so their misses overlap. `named`: how many of `order` are read or named
    // so far; `batched`: how many of them came in the batch (in `scratch.batch`).
    let mut named = likely_count(&order, found, k);
    let coded_walk = !by_vectors && order.first().is_some_and(|s| is_coded(store, s.slot));
    let dims = q.len();
    let mut batched = 0;
    if coded_walk && named > 0 {
        scratch.batch_slots.clear();
        scratch
            .batch_slots
            .extend(order[..named].iter().map(|s| s.slot));
        if store.read_exact_batch(&scratch.batch_slots, &mut scratch.batch)
            && scratch.batch.len() == named * dims
        {
            batched = named;
        }
    }
    order[batched..named]
        .iter()
        .for_each(|s| store.will_need_exact(s.slot));
    // Cache lines: the bytes an exact distance reads beyond the walk's (the low halves of a
    // split vector, the whole vector when the walk read a code), a fixed distance ahead.
    let prefetch_lines = |s: &Scored| {
        if let Some(v) = store.exact_vector(s.slot) {
            if coded_walk {
                prefetch(v.as_ptr(), (4 * v.dims()).div_ceil(64));
            } else {
                let low = v.as_ptr().wrapping_add(v.walk_bytes());
                prefetch(low, v.walk_bytes().div_ceil(64));
            }
        }
    };
    order
        .iter()
        .skip(batched)
        .take(k + RANK_PREFETCH_AHEAD)
        .for_each(prefetch_lines);
    // A max-heap of the nearest k so far: its top is the k-th exact distance.
    let nearest = &mut scratch.results;
    nearest.clear();
    for (i, s) in order.iter().enumerate() {
        let kth = if nearest.len() >= k {
            nearest.peek().map(|kth| kth.distance)
        } else {
            None
        };
        if kth.is_some_and(|kth| s.distance > kth) {
            break;
        }
        let ahead = i + k + RANK_PREFETCH_AHEAD;
        if let Some(ahead) = order.get(ahead).filter(|_| ahead >= batched) {
            prefetch_lines(ahead);
        }
        // Ranking past the likely ones: name the next few that the k-th exact distance so
        // far can't rule out (it only falls, so a vector it rules out is never read).
        while named < order.len()
            && named <= i + RANK_NAME_AHEAD
            && kth.is_none_or(|kth| order[named].distance <= kth)
        {
            store.will_need_exact(order[named].slot);
            named += 1;
        }
        let v = if i < batched {
            VectorRef::F32(&scratch.batch[i * dims..(i + 1) * dims])
        } else {
            match store.exact_vector(s.slot) {
                Some(v) => v,
                None => continue,
            }
        };
        scratch.distance_count += 1;
        nearest.push(Scored {
            distance: dist.exact(q, v, &mut scratch.exact),
            slot: s.slot,
        });
        if nearest.len() > k {
            nearest.pop();
        }
    }
    // Vectors ranked after a walk by codes are bytes no walk reads: a file larger than memory
    // gives back those it named (ranked or not), once every distance is taken. A batch read
    // took no page-cache pages.
    if coded_walk {
        order[batched..named]
            .iter()
            .for_each(|s| store.done_with_exact(s.slot));
    }
    let mut out: Vec<Scored> = nearest.drain().collect();
    out.sort_unstable();
    out
}

/// How many of `order` (sorted by lower bound) ranking will most likely read: those whose
/// bound is at most the walk distance ranked `k + RANK_LIKELY_EXTRA` in `found`, and at least
/// the first `k` (a prefix of `order`).
///
/// They are read (or named to the store) together, so in a file larger than memory their
/// reads overlap; reading more than ranking needs costs a read each. The walk distance a few
/// places past the k-th estimates the k-th exact distance with room to spare: measured on
/// 2M x 384 int4 (ef 208), 29 a query against 26 ranked, and 12% of queries ranking a few
/// past them (named [`RANK_NAME_AHEAD`] at a time as ranking reaches them), where naming a
/// fixed 18 ahead of the one being ranked named 44.
fn likely_count(order: &[Scored], found: &[Scored], k: usize) -> usize {
    let at = (k + RANK_LIKELY_EXTRA).min(found.len()).saturating_sub(1);
    let estimate = if found.is_sorted() {
        found.get(at).map(|s| s.distance)
    } else {
        let mut walked: Vec<f32> = found.iter().map(|s| s.distance).collect();
        (at < walked.len()).then(|| *walked.select_nth_unstable_by(at, f32::total_cmp).1)
    };
    let Some(estimate) = estimate else {
        return 0;
    };
    order
        .iter()
        .take_while(|s| s.distance <= estimate)
        .count()
        .max(k.min(order.len()))
}

/// Whether a search walks by `slot`'s code rather than its vector.
fn is_coded<S: GraphStore>(store: &S, slot: u32) -> bool {
    store.vector(slot).is_some_and(|v| v.is_code())
}

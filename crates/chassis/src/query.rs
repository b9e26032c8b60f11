//! What the writer and the readers share about a query: checking a vector against the index
//! ([`prepare_vector`]) and what a search returns ([`Neighbor`]).

use crate::error::{Error, Result};
use crate::graph::Metric;

/// One search hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbor {
    /// The stored id.
    pub id: u64,
    /// Distance to the query (smaller is nearer; see [`Metric`]).
    pub distance: f32,
}

/// Checks a vector or query against the index (dimensions, finite components) and returns
/// what is stored or searched: the unit vector under cosine, the vector itself otherwise.
pub(crate) fn prepare_vector(metric: Metric, dims: usize, v: &[f32]) -> Result<Vec<f32>> {
    if v.len() != dims {
        return Err(Error::DimensionMismatch {
            expected: dims,
            got: v.len(),
        });
    }
    // One pass without an early exit (the compiler vectorizes it); the position only on error.
    if !v.iter().fold(true, |all, x| all & x.is_finite()) {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::InvalidVector {
                reason: format!("component {i} is {} (must be finite)", v[i]),
            });
        }
    }
    if metric == Metric::Cosine {
        let norm = (norm_squared(v) as f32).sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            return Err(Error::InvalidVector {
                reason: "a zero vector has no direction under the cosine metric".into(),
            });
        }
        return Ok(v.iter().map(|x| x / norm).collect());
    }
    Ok(v.to_vec())
}

/// Σ xᵢ², accumulated in f64 as [`crate::graph::distance::reference::dot`] does, but in eight
/// lanes, each its own chain of adds, which the compiler keeps in vector registers: one chain
/// made a 384-dimensional query's normalization a few percent of a filtered search that scans
/// 100 vectors (the `filtered` bench's bucket_eq, perf). Rounded to f32, the sum is the
/// single chain's but where the two f64 sums straddle an f32 rounding boundary.
fn norm_squared(v: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += f64::from(*x) * f64::from(*x);
        }
    }
    lanes.iter().sum::<f64>()
        + rest
            .iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
}

/// `k` and `ef` bounded by what a search of `live` vectors routing through `slots` slots can
/// use: `k` at most the live count (at least 1), `ef` at least that `k` and at most the slot
/// count. Every search applies this before anything is sized or summed by them, so an absurd
/// argument (`k = 10^11`, `usize::MAX`) answers like `k = live` instead of aborting.
pub fn bound_k_ef(k: usize, ef: usize, live: u64, slots: u64) -> (usize, usize) {
    let cap = |n: u64| usize::try_from(n).unwrap_or(usize::MAX).max(1);
    let k = k.min(cap(live));
    let ef = ef.max(k).min(cap(slots).max(k));
    (k, ef)
}

/// Rounds every value of `v` to the nearest IEEE binary16 (ties to even), as a half precision
/// file stores it; [`Error::InvalidVector`] for a value half precision can't hold (a
/// magnitude of 65,520 or more rounds to infinity; the largest half is 65,504).
pub fn round_to_f16(v: &mut [f32]) -> Result<()> {
    use crate::format::vector::{from_f16, to_f16, F16_LIMIT};
    if let Some((j, x)) = v.iter().enumerate().find(|(_, x)| x.abs() >= F16_LIMIT) {
        return Err(Error::InvalidVector {
            reason: format!(
                "component {j} is {x}: beyond half precision's range (magnitudes below 65,520; \
                 the file stores f16)"
            ),
        });
    }
    for x in v.iter_mut() {
        *x = from_f16(to_f16(*x));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{norm_squared, prepare_vector};
    use crate::graph::{distance::reference, Metric};
    use crate::Error;

    /// Fails if the eight-lane sum drops a remainder component or a lane, or strays from the
    /// one-chain f64 sum by more than f64 rounding: lengths 0 to 40 cover every remainder.
    #[test]
    fn the_lane_sum_is_the_single_chain_sum() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for n in 0..=40usize {
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            let one: f64 = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum();
            let lanes = norm_squared(&v);
            assert!(
                (lanes - one).abs() <= 1e-12 * one.max(1e-300),
                "n {n}: {lanes} vs {one}"
            );
            assert_eq!(lanes as f32, reference::dot(&v, &v), "n {n}");
        }
    }

    /// Fails if a query is no longer a unit vector under cosine, or the check of finite
    /// components stops naming the first bad one.
    #[test]
    fn queries_are_unit_vectors_and_bad_components_are_named() {
        let v: Vec<f32> = (0..384).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
        let u = prepare_vector(Metric::Cosine, 384, &v).expect("finite");
        let norm = reference::dot(&u, &u).sqrt();
        assert!((norm - 1.0).abs() < 1e-6, "{norm}");
        let mut bad = v.clone();
        bad[200] = f32::NAN;
        bad[300] = f32::INFINITY;
        match prepare_vector(Metric::L2Squared, 384, &bad) {
            Err(Error::InvalidVector { reason }) => {
                assert!(reason.contains("component 200"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            prepare_vector(Metric::Cosine, 384, &vec![0.0; 384]),
            Err(Error::InvalidVector { .. })
        ));
    }
}

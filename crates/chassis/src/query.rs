//! What the writer and the readers share about a query: checking a vector against the index
//! ([`prepare_vector`]) and what a search returns ([`Neighbor`]).

use crate::error::{Error, Result};
use crate::graph::{self, Metric};

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
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::InvalidVector {
            reason: format!("component {i} is {} (must be finite)", v[i]),
        });
    }
    if metric == Metric::Cosine {
        let norm = graph::distance::reference::dot(v, v).sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            return Err(Error::InvalidVector {
                reason: "a zero vector has no direction under the cosine metric".into(),
            });
        }
        return Ok(v.iter().map(|x| x / norm).collect());
    }
    Ok(v.to_vec())
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

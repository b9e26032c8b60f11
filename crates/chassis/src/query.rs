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

//! Searches on the writer's own view (read-your-writes, ADR-0007): the graph search with its
//! widening fallback, and the exact scan behind it.
//!
//! Invariant: a search returns min(k, live vectors) hits, live in this writer's view, nearest
//! first, each with its exact distance.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::filter::index::DocSource;
use crate::filter::search::{Strategy, Target};
use crate::filter::Filter;
use crate::format::metadata::DocRef;
use crate::graph::{self, AlignedVector, Scored};
use crate::query::Neighbor;

use super::{Index, View};

impl Index {
    /// Distance computations made by every [`Index::search`] on this handle so far (graph
    /// searches only; a final scan over all slots is not counted). For benchmarks: the count
    /// per query measures graph quality independently of the machine.
    pub fn search_distance_count(&self) -> u64 {
        self.search_distances.load(AtomicOrdering::Relaxed)
    }

    /// The `k` nearest live vectors to `query`, nearest first, searching with beam width
    /// `max(ef, k)`. Returns min(k, len()) hits: if the graph search finds fewer (many deletes,
    /// unreachable nodes), it widens the beam and finally scans every live slot.
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Neighbor>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let q = AlignedVector::new(&self.check_vector(query)?);
        let want = k.min(self.len());
        let Some((ep, max_layer)) = self.entry else {
            return Ok(Vec::new());
        };
        if want == 0 {
            return Ok(Vec::new());
        }
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        let no_deletes = self.store.header().deleted_count == 0 && self.pending_deletes.is_empty();
        let mut scratch = self.take_scratch();
        let distances_before = scratch.distance_count;
        let mut ef = ef.max(k);
        let hits = loop {
            // Two calls, not one with a runtime branch in the predicate: with no deletes the
            // filter compiles away from the hot loop.
            let hits = if no_deletes {
                graph::search(
                    &view,
                    &self.dist,
                    &q,
                    ep,
                    max_layer,
                    k,
                    ef,
                    |_| true,
                    &mut scratch,
                )
            } else {
                graph::search(
                    &view,
                    &self.dist,
                    &q,
                    ep,
                    max_layer,
                    k,
                    ef,
                    |s| self.slot_live(s),
                    &mut scratch,
                )
            };
            if hits.len() >= want {
                break hits;
            }
            if ef >= self.count as usize {
                break self.brute_force(&q, k);
            }
            ef = ef.saturating_mul(4);
        };
        self.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.put_scratch(scratch);
        hits.into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: self.id_of(s.slot)?,
                    distance: s.distance,
                })
            })
            .collect()
    }

    pub(super) fn brute_force(&self, q: &[f32], k: usize) -> Vec<Scored> {
        let mut buf = Vec::new();
        let mut all: Vec<Scored> = (0..self.count)
            .filter(|&s| self.slot_live(s))
            .filter_map(|s| {
                self.store.vector(s).map(|v| Scored {
                    distance: self.dist.exact(q, v, &mut buf),
                    slot: s,
                })
            })
            .collect();
        all.sort_unstable();
        all.truncate(k);
        all
    }

    /// Every live id, in slot order.
    pub fn ids(&self) -> Result<Vec<u64>> {
        (0..self.count)
            .filter(|&s| self.slot_live(s))
            .map(|s| self.id_of(s))
            .collect()
    }
}

/// The writer's documents, for the filter index.
struct Docs<'a>(&'a crate::storage::Store);

impl DocSource for Docs<'_> {
    fn doc(&self, slot: u32) -> Result<DocRef<'_>> {
        self.0.metadata(slot)
    }
}

impl Index {
    /// The `k` nearest live vectors whose metadata passes `filter`, nearest first: exact
    /// distances, and min(k, live vectors that pass) of them (see [`crate::filter`] for the
    /// language and how each query chooses between scanning what passes and searching the
    /// graph with the filter). A malformed filter is [`Error::InvalidArgument`] before any
    /// search work; the first filter naming a field builds that field's index.
    pub fn search_filtered(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: &Filter,
    ) -> Result<Vec<Neighbor>> {
        Ok(self.search_filtered_with(query, k, ef, filter)?.0)
    }

    /// [`Index::search_filtered`], also saying how the answer was found (for tests and
    /// benchmarks).
    pub fn search_filtered_with(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: &Filter,
    ) -> Result<(Vec<Neighbor>, Strategy)> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        filter.validate()?;
        let q = AlignedVector::new(&self.check_vector(query)?);
        let fields = filter.fields();
        if !read(&self.filters).ready(&fields, self.count) {
            write(&self.filters).prepare(&fields, self.count, &Docs(&self.store))?;
        }
        let index = read(&self.filters);
        let compiled = index.compile(filter);
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        let target = Target {
            store: &view,
            dist: &self.dist,
            entry: self.entry,
            live: |s| self.slot_live(s),
            upto: self.count,
            live_count: self.len() as u64,
        };
        let mut scratch = self.take_scratch();
        let distances_before = scratch.distance_count;
        let (hits, strategy) =
            crate::filter::search::search(&target, &q, k, ef, &compiled, &mut scratch);
        self.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.put_scratch(scratch);
        let hits = hits
            .into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: self.id_of(s.slot)?,
                    distance: s.distance,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((hits, strategy))
    }

    /// Names of the metadata fields this handle has indexed (those filters named so far).
    pub fn indexed_fields(&self) -> Vec<String> {
        read(&self.filters)
            .fields()
            .map(|(k, _)| k.to_string())
            .collect()
    }
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

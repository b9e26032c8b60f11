//! Searches on the writer's own view (read-your-writes, ADR-0007): the graph search with its
//! widening fallback, and the exact scan behind it.
//!
//! Every search runs on one publication of the writer's state ([`Published`]) and takes no
//! lock a write holds (module `published`).
//!
//! Invariant: a search returns min(k, live vectors) hits, live in the publication it read,
//! nearest first, each with its exact distance.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::filter::index::DocSource;
use crate::filter::search::{Strategy, Target};
use crate::filter::Filter;
use crate::format::metadata::DocRef;
use crate::graph::{self, AlignedVector, Scored};
use crate::query::Neighbor;

use super::published::Published;
use super::Index;

impl Index {
    /// Distance computations made by every [`Index::search`] on this handle so far (graph
    /// searches only; a final scan over all slots is not counted). For benchmarks: the count
    /// per query measures graph quality independently of the machine.
    pub fn search_distance_count(&self) -> u64 {
        self.current()
            .shared
            .search_distances
            .load(AtomicOrdering::Relaxed)
    }

    /// The `k` nearest live vectors to `query`, nearest first, searching with beam width
    /// `max(ef, k)`. Returns min(k, len()) hits: if the graph search finds fewer (many deletes,
    /// unreachable nodes), it widens the beam and finally scans every live slot. Never waits
    /// for a write on another thread (it reads the writer's last publication).
    pub fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Neighbor>> {
        self.current().search(query, k, ef)
    }

    /// The `k` nearest live vectors to each of `queries`, one after another on the calling
    /// thread, on one publication: the answers [`Index::search`] gives, faster where the file
    /// is larger than memory, since each query's reads of the vectors it ranks overlap the
    /// next query's walk ([`graph::search_pipelined`]).
    pub fn search_many<Q: AsRef<[f32]>>(
        &self,
        queries: &[Q],
        k: usize,
        ef: usize,
    ) -> Result<Vec<Vec<Neighbor>>> {
        // The batch itself is not generic, so it is compiled here with the rest of the
        // search, whatever crate calls this (generic, it was compiled in the caller's crate,
        // where the store's small functions were calls instead of inlined: 8% slower).
        let rows: Vec<&[f32]> = queries.iter().map(|q| q.as_ref()).collect();
        self.current().search_many(&rows, k, ef)
    }

    /// Every live id, in slot order.
    pub fn ids(&self) -> Result<Vec<u64>> {
        self.current().ids()
    }

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
        self.current().search_filtered_with(query, k, ef, filter)
    }

    /// Names of the metadata fields this handle has indexed (those filters named so far).
    pub fn indexed_fields(&self) -> Vec<String> {
        self.current().indexed_fields()
    }
}

impl Published {
    pub(super) fn id_of(&self, slot: u32) -> Result<u64> {
        self.regions
            .slot_header(slot)
            .map(|(id, _, _)| id)
            .ok_or_else(|| Error::corrupt(format!("slot {slot} has no segment"), 0))
    }

    pub(super) fn prepare(&self, query: &[f32]) -> Result<AlignedVector> {
        let v =
            crate::query::prepare_vector(self.shared.dist.metric(), self.regions.dims(), query)?;
        Ok(AlignedVector::new(&v))
    }

    pub(super) fn search(&self, query: &[f32], k: usize, ef: usize) -> Result<Vec<Neighbor>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let q = self.prepare(query)?;
        let routing = self.routing();
        let want = k.min(self.len_at(routing));
        let (k, ef) =
            crate::query::bound_k_ef(k, ef, self.len_at(routing) as u64, u64::from(routing));
        let Some((ep, max_layer)) = self.entry else {
            return Ok(Vec::new());
        };
        if want == 0 {
            return Ok(Vec::new());
        }
        let view = self.view(routing);
        let no_deletes = self.no_deletes();
        let dist = &self.shared.dist;
        let mut scratch = self.shared.take_scratch();
        let distances_before = scratch.distance_count;
        let mut ef = ef.max(k);
        let hits = loop {
            // Two calls, not one with a runtime branch in the predicate: with no deletes the
            // filter compiles away from the hot loop.
            let hits = if no_deletes {
                graph::search(
                    &view,
                    dist,
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
                    dist,
                    &q,
                    ep,
                    max_layer,
                    k,
                    ef,
                    |s| self.slot_live(s, routing),
                    &mut scratch,
                )
            };
            if hits.len() >= want {
                break hits;
            }
            if ef >= routing as usize {
                break self.brute_force(&q, k, routing);
            }
            ef = ef.saturating_mul(4);
        };
        self.shared.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.shared.put_scratch(scratch);
        hits.into_iter()
            .map(|s| {
                Ok(Neighbor {
                    id: self.id_of(s.slot)?,
                    distance: s.distance,
                })
            })
            .collect()
    }

    fn search_many(&self, queries: &[&[f32]], k: usize, ef: usize) -> Result<Vec<Vec<Neighbor>>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let prepared = queries
            .iter()
            .map(|q| self.prepare(q))
            .collect::<Result<Vec<_>>>()?;
        let routing = self.routing();
        let want = k.min(self.len_at(routing));
        let (k, ef) =
            crate::query::bound_k_ef(k, ef, self.len_at(routing) as u64, u64::from(routing));
        let Some((ep, max_layer)) = self.entry else {
            return Ok(vec![Vec::new(); queries.len()]);
        };
        if want == 0 {
            return Ok(vec![Vec::new(); queries.len()]);
        }
        let view = self.view(routing);
        let dist = &self.shared.dist;
        let mut scratch = self.shared.take_scratch();
        let distances_before = scratch.distance_count;
        let mut found = vec![Vec::new(); queries.len()];
        let keep = |i: usize, hits: Vec<Scored>| found[i] = hits;
        let ef = ef.max(k);
        // Two calls, as in `search`: with no deletes the filter compiles away.
        if self.no_deletes() {
            graph::search_pipelined(
                &view,
                dist,
                &prepared,
                ep,
                max_layer,
                k,
                ef,
                |_| true,
                &mut scratch,
                keep,
            );
        } else {
            graph::search_pipelined(
                &view,
                dist,
                &prepared,
                ep,
                max_layer,
                k,
                ef,
                |s| self.slot_live(s, routing),
                &mut scratch,
                keep,
            );
        }
        self.shared.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.shared.put_scratch(scratch);
        found
            .into_iter()
            .zip(queries)
            .map(|(hits, query)| {
                if hits.len() < want {
                    // Short (many deletes, unreachable nodes): widen as one search would.
                    return self.search(query, k, ef);
                }
                hits.into_iter()
                    .map(|s| {
                        Ok(Neighbor {
                            id: self.id_of(s.slot)?,
                            distance: s.distance,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    pub(super) fn brute_force(&self, q: &[f32], k: usize, routing: u32) -> Vec<Scored> {
        let mut buf = Vec::new();
        let mut all: Vec<Scored> = (0..routing)
            .filter(|&s| self.slot_live(s, routing))
            .filter_map(|s| {
                self.regions.vector(s).map(|v| Scored {
                    distance: self.shared.dist.exact(q, v, &mut buf),
                    slot: s,
                })
            })
            .collect();
        all.sort_unstable();
        all.truncate(k);
        all
    }

    pub(super) fn ids(&self) -> Result<Vec<u64>> {
        let routing = self.routing();
        (0..routing)
            .filter(|&s| self.slot_live(s, routing))
            .map(|s| self.id_of(s))
            .collect()
    }
}

/// The documents of a publication's regions, for the filter index.
struct Docs<'a>(&'a crate::storage::Regions);

impl DocSource for Docs<'_> {
    fn doc(&self, slot: u32) -> Result<DocRef<'_>> {
        self.0.metadata(slot)
    }
}

impl Published {
    pub(super) fn search_filtered_with(
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
        let q = self.prepare(query)?;
        let routing = self.routing();
        let (k, ef) =
            crate::query::bound_k_ef(k, ef, self.len_at(routing) as u64, u64::from(routing));
        self.with_filter(filter, routing, |compiled| {
            self.filtered_on(&q, k, ef, compiled, routing)
        })?
    }

    /// Runs `f` with `filter` compiled against the field indexes of the slots below
    /// `routing` (building the indexes of the fields it names first, when needed).
    pub(super) fn with_filter<T>(
        &self,
        filter: &Filter,
        routing: u32,
        f: impl FnOnce(&crate::filter::index::Compiled<'_>) -> T,
    ) -> Result<T> {
        filter.validate()?;
        let fields = filter.fields();
        let filters = &self.shared.filters;
        if !read(filters).ready(&fields, routing) {
            write(filters).prepare(&fields, routing, &Docs(&self.regions))?;
        }
        let index = read(filters);
        let compiled = index.compile(filter);
        Ok(f(&compiled))
    }

    fn filtered_on(
        &self,
        q: &AlignedVector,
        k: usize,
        ef: usize,
        compiled: &crate::filter::index::Compiled<'_>,
        routing: u32,
    ) -> Result<(Vec<Neighbor>, Strategy)> {
        let view = self.view(routing);
        let target = Target {
            store: &view,
            dist: &self.shared.dist,
            entry: self.entry,
            live: |s| self.slot_live(s, routing),
            upto: routing,
            live_count: self.len_at(routing) as u64,
        };
        let mut scratch = self.shared.take_scratch();
        let distances_before = scratch.distance_count;
        let (hits, strategy) =
            crate::filter::search::search(&target, q, k, ef, compiled, &mut scratch);
        self.shared.search_distances.fetch_add(
            scratch.distance_count - distances_before,
            AtomicOrdering::Relaxed,
        );
        self.shared.put_scratch(scratch);
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

    pub(super) fn indexed_fields(&self) -> Vec<String> {
        read(&self.shared.filters)
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

//! Full-text and hybrid search for readers: the index a snapshot's header names, opened once
//! per root (its segments' heads and document lengths read, nothing rebuilt) and searched in
//! place, with the writer's scoring ([`crate::text`]).
//!
//! Invariant: a search reads the index of the snapshot it runs on: its root, its committed
//! slots, its deletes. Segments are shared between roots of one file (committed blobs never
//! change), never between files.

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::graph::{AlignedVector, GraphStore};
use crate::query::prepare_vector;
use crate::storage::HeapBlobs;
use crate::text::{HybridHit, HybridOptions, TextFieldSpec, TextHit, TextView};

use super::{lock, IndexReader, Snapshot, View};

impl IndexReader {
    /// The full-text index `snap` names (empty when none).
    pub(super) fn text_view(&self, snap: &Snapshot) -> Result<TextView> {
        let generation = snap.file.generation;
        let root = snap.header.text_root;
        let reuse = {
            let cached = lock(&self.text);
            match cached.as_ref() {
                Some((g, r, v)) if *g == generation && *r == root => return Ok(v.clone()),
                Some((g, _, v)) if *g == generation => Some(v.clone()),
                _ => None,
            }
        };
        let blobs = HeapBlobs::new(&snap.regions.metadata_chunks, snap.file.geometry);
        let view = TextView::load(&blobs, root, snap.header.committed_count, reuse.as_ref())?;
        *lock(&self.text) = Some((generation, root, view.clone()));
        Ok(view)
    }

    /// The fields the file indexes for full-text search, as of a fresh snapshot.
    pub fn text_fields(&self) -> Result<Vec<TextFieldSpec>> {
        let snap = self.snapshot()?;
        Ok(self
            .text_view(&snap)?
            .fields
            .iter()
            .map(TextFieldSpec::of)
            .collect())
    }

    /// The `k` best live documents for `query` by BM25, on a fresh snapshot (as
    /// [`crate::Index::search_text`]).
    pub fn search_text(
        &self,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<TextHit>> {
        let snap = self.snapshot()?;
        self.search_text_in(&snap, query, k, filter)
    }

    /// [`IndexReader::search_text`] on `snap`.
    pub fn search_text_in(
        &self,
        snap: &Snapshot,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<TextHit>> {
        Ok(self
            .text_hits_in(snap, query, k, filter)?
            .iter()
            .map(crate::text::Scored::hit)
            .collect())
    }

    /// [`IndexReader::search_text_in`]'s hits with their slots.
    fn text_hits_in(
        &self,
        snap: &Snapshot,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<crate::text::Scored>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        let text = self.text_view(snap)?;
        if !text.is_enabled() {
            return Err(Error::InvalidArgument(
                "this index has no full-text fields (create it with text fields, or \
                 set_text_fields)"
                    .into(),
            ));
        }
        let k = k.min(snap.len().max(1) as usize);
        let view = View::new(self, snap);
        let blobs = HeapBlobs::new(&snap.regions.metadata_chunks, snap.file.geometry);
        // With no committed delete every slot the index covers (the committed ones) is live.
        let all_live = snap.header.deleted_count == 0;
        let mut scratch = lock(&self.text_scratch).pop().unwrap_or_default();
        let hits = match filter {
            None => text.search(
                &blobs,
                query,
                k,
                all_live,
                |s| view.live(s),
                |_| true,
                |s| {
                    view.id(s)
                        .ok_or_else(|| Error::corrupt("slot header unreadable", 0))
                },
                &mut scratch,
            ),
            Some(filter) => self
                .with_filter(snap, &view, filter, |compiled| {
                    text.search(
                        &blobs,
                        query,
                        k,
                        all_live,
                        |s| view.live(s),
                        |s| compiled.test(s),
                        |s| {
                            view.id(s)
                                .ok_or_else(|| Error::corrupt("slot header unreadable", 0))
                        },
                        &mut scratch,
                    )
                })
                .and_then(|r| r),
        };
        lock(&self.text_scratch).push(scratch);
        hits
    }

    /// Hybrid search on a fresh snapshot (as [`crate::Index::search_hybrid`]).
    pub fn search_hybrid(
        &self,
        vector: &[f32],
        query: &str,
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        opts: &HybridOptions,
    ) -> Result<Vec<HybridHit>> {
        let snap = self.snapshot()?;
        self.search_hybrid_in(&snap, vector, query, k, ef, filter, opts)
    }

    /// [`IndexReader::search_hybrid`] on `snap`: both legs read the same snapshot.
    #[allow(clippy::too_many_arguments)]
    pub fn search_hybrid_in(
        &self,
        snap: &Snapshot,
        vector: &[f32],
        query: &str,
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        opts: &HybridOptions,
    ) -> Result<Vec<HybridHit>> {
        let q = AlignedVector::new(&prepare_vector(self.metric, self.dims as usize, vector)?);
        let view = View::new(self, snap);
        let mut buf = Vec::new();
        crate::text::search_hybrid(
            k,
            ef,
            opts,
            |depth, ef| match filter {
                None => self.search_in(snap, vector, depth, ef),
                Some(f) => Ok(self.search_in_filtered(snap, vector, depth, ef, f)?.0),
            },
            |depth| self.text_hits_in(snap, query, depth, filter),
            |slot| {
                let v = view.exact_vector(slot)?;
                Some(self.dist.exact(&q, v, &mut buf))
            },
        )
    }
}

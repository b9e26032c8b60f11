//! The writer's full-text index: keeping it in step with the documents, committing it with
//! them, and the text and hybrid searches on the writer's own view.
//!
//! The index lives in two parts ([`crate::text`]): stored segments, written by flushes into
//! the metadata heap and named by the header's `text_root`, and in-memory segments holding
//! what this writer added since its last flush. Every add indexes its rows' documents into a
//! new in-memory segment (consecutive small ones are merged as they pile up, so a long run of
//! single adds keeps O(log n) of them); every delete (a replacement's too) takes its slot's
//! lengths out of the live statistics. A flush writes the in-memory segments as one stored
//! segment, merges the newest stored segments while the older of the last two is at most
//! twice the newer (bounded: no merge makes a segment of more than [`MERGE_MAX_SLOTS`]), writes
//! a new root with the statistics, and commits it in the same header as the data.
//!
//! Invariants: the segments (stored, then in memory) tile slots `0..count` in order, one
//! document per slot (an empty one where a slot has no text); the statistics are those of the
//! live slots; a savepoint holds the whole state (shared lists), so a rollback restores it
//! exactly; nothing the committed root reaches is ever rewritten.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::format::metadata::DocRef;
use crate::format::text::{FieldStats, Root, KIND_ROOT};
use crate::graph::GraphStore;
use crate::text::segment::{Built, DocTerms, MemSegment, StoredSegment};
use crate::text::{doc_terms, HybridHit, HybridOptions, TextFieldSpec, TextHit, TextView};

use super::published::Published;
use super::{lock, Index, Writer};

/// The most slots a flush's merge makes one stored segment cover (larger ones are merged
/// only by a compaction, which rebuilds the index).
pub const MERGE_MAX_SLOTS: u64 = 1 << 20;

/// The writer's full-text state: what searches read, and the root it was committed under.
#[derive(Clone, Debug, Default)]
pub(crate) struct TextState {
    pub(super) view: TextView,
    /// The root blob the last commit names (0: none).
    pub(super) root: u64,
    /// Whether `view` says anything `root` doesn't (a flush writes a new root).
    pub(super) changed: bool,
}

impl TextState {
    fn enabled(&self) -> bool {
        self.view.is_enabled()
    }

    /// Appends a segment of `docs` (slots `first..`) and merges the newest in-memory ones
    /// while the older of the last two is at most twice the newer.
    fn push(&mut self, first: u32, docs: &[DocTerms]) {
        let n = self.view.fields.len();
        let seg = MemSegment::build(first, n, docs);
        for (f, st) in self.view.stats.iter_mut().enumerate() {
            if let Some(ls) = seg.lengths.get(f) {
                st.docs += ls.iter().filter(|&&l| l > 0).count() as u64;
                st.tokens += ls.iter().map(|&l| u64::from(l)).sum::<u64>();
            }
        }
        let memory = Arc::make_mut(&mut self.view.memory);
        memory.push(Arc::new(seg));
        while memory.len() >= 2 {
            let (a, b) = (&memory[memory.len() - 2], &memory[memory.len() - 1]);
            if a.slots() > 2 * b.slots() {
                break;
            }
            let merged = a.merged(b);
            memory.truncate(memory.len() - 2);
            memory.push(Arc::new(merged));
        }
        self.changed = true;
    }

    /// Takes `slot`'s document out of the live statistics (a delete).
    fn forget(&mut self, slot: u32) {
        if !self.enabled() {
            return;
        }
        for f in 0..self.view.stats.len() {
            let l = u64::from(self.view.length(f, slot));
            let st = &mut self.view.stats[f];
            if l > 0 {
                st.docs = st.docs.saturating_sub(1);
                st.tokens = st.tokens.saturating_sub(l);
            }
        }
        self.changed = true;
    }
}

impl Writer {
    /// The full-text state of the committed header (at open, and what a rollback goes back
    /// to): its root loaded, reusing segments already open in `reuse`.
    pub(super) fn load_text(&self, reuse: Option<&TextView>) -> Result<TextState> {
        let h = self.store.header();
        let view = TextView::load(
            &self.store.heap_blobs(),
            h.text_root,
            h.committed_count,
            reuse,
        )?;
        Ok(TextState {
            view,
            root: h.text_root,
            changed: false,
        })
    }

    /// Indexes the documents of slots `first..first + n` (`docs` their encoded metadata, or
    /// empty when the rows have none).
    pub(super) fn index_text(&mut self, first: u32, n: usize, docs: &[Vec<u8>]) -> Result<()> {
        if !self.text.enabled() {
            return Ok(());
        }
        let fields = Arc::clone(&self.text.view.fields);
        let terms = (0..n)
            .map(|i| match docs.get(i) {
                Some(d) => Ok(doc_terms(&fields, &DocRef::new(d, 0)?)),
                None => Ok(DocTerms {
                    fields: vec![Default::default(); fields.len()],
                    lengths: vec![0; fields.len()],
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        self.text.push(first, &terms);
        Ok(())
    }

    /// Takes a deleted slot out of the text statistics.
    pub(super) fn unindex_text(&mut self, slot: u32) {
        self.text.forget(slot);
    }

    /// Indexes `fields` from now on, every document already stored included (an empty list
    /// drops the index). Committed by the next flush; until then searches of this handle see
    /// it. The same fields with the same analysis change nothing.
    pub(super) fn set_text_fields(&mut self, specs: &[TextFieldSpec]) -> Result<()> {
        self.writable()?;
        let fields = crate::text::fields_of(specs)?;
        if *self.text.view.fields == fields {
            return Ok(());
        }
        let mut next = TextState {
            view: TextView {
                fields: Arc::new(fields),
                stats: vec![FieldStats::default(); specs.len()],
                ..TextView::default()
            },
            root: self.text.root,
            changed: true,
        };
        if next.enabled() && self.count > 0 {
            let regions = self.store.regions();
            let mut terms = Vec::with_capacity(self.count as usize);
            for slot in 0..self.count {
                terms.push(doc_terms(&next.view.fields, &regions.metadata(slot)?));
            }
            next.push(0, &terms);
            // Statistics over the live documents only.
            for slot in 0..self.count {
                if !self.slot_live(slot) {
                    next.forget(slot);
                }
            }
        }
        self.text = next;
        self.dirty = true;
        Ok(())
    }

    /// Writes what the flush commits: the in-memory segments as one stored segment, the
    /// merges due, and a root. Returns the root to commit and the state to adopt once the
    /// commit succeeds (the writer's own state is untouched until then).
    pub(super) fn write_text(&mut self) -> Result<(u64, Option<TextState>)> {
        if !self.text.changed {
            return Ok((self.text.root, None));
        }
        if !self.text.enabled() {
            return Ok((0, Some(TextState::default())));
        }
        let nf = self.text.view.fields.len();
        let mut stored: Vec<StoredSegment> = self.text.view.stored.as_ref().clone();
        if !self.text.view.memory.is_empty() {
            let built = Built::from_memory(nf, &self.text.view.memory);
            let at = built.write(|kind, p| self.store.alloc_text_blob(kind, p))?;
            stored.push(StoredSegment::open(&self.store.heap_blobs(), at)?);
        }
        while stored.len() >= 2 {
            let (a, b) = (&stored[stored.len() - 2], &stored[stored.len() - 1]);
            let total = u64::from(a.head.slots) + u64::from(b.head.slots);
            if u64::from(a.head.slots) > 2 * u64::from(b.head.slots) || total > MERGE_MAX_SLOTS {
                break;
            }
            let built =
                Built::from_stored(&self.store.heap_blobs(), nf, &stored[stored.len() - 2..])?;
            let at = built.write(|kind, p| self.store.alloc_text_blob(kind, p))?;
            let merged = StoredSegment::open(&self.store.heap_blobs(), at)?;
            stored.truncate(stored.len() - 2);
            stored.push(merged);
        }
        let root = Root {
            fields: self.text.view.fields.as_ref().clone(),
            stats: self.text.view.stats.clone(),
            segments: stored.iter().map(|s| s.at).collect(),
        };
        let payload = root.encode();
        if payload.len() > crate::format::text::MAX_PAYLOAD {
            return Err(Error::InvalidArgument(
                "the full-text index has too many segments for its root; compact the index".into(),
            ));
        }
        let at = self.store.alloc_text_blob(KIND_ROOT, &payload)?;
        Ok((
            at,
            Some(TextState {
                view: TextView {
                    fields: Arc::clone(&self.text.view.fields),
                    stats: self.text.view.stats.clone(),
                    stored: Arc::new(stored),
                    memory: Arc::default(),
                },
                root: at,
                changed: false,
            }),
        ))
    }

    /// Checks the committed full-text index against the committed documents (for
    /// [`Index::check`]): every slot's lengths, every key's postings, and the statistics over
    /// the live documents. Reports through `problem`; returns the postings checked.
    pub(super) fn check_text(&self, problem: &mut impl FnMut(String)) -> u64 {
        let h = self.store.header();
        let blobs = self.store.heap_blobs();
        let view = match TextView::load(&blobs, h.text_root, h.committed_count, None) {
            Ok(v) => v,
            Err(e) => {
                problem(format!("full-text index: {e}"));
                return 0;
            }
        };
        if !view.is_enabled() {
            return 0;
        }
        let n = h.committed_count as u32;
        let nf = view.fields.len();
        let mut want: std::collections::BTreeMap<Vec<u8>, Vec<(u32, u32)>> = Default::default();
        let mut stats = vec![FieldStats::default(); nf];
        for slot in 0..n {
            let doc = match self.store.metadata(slot) {
                Ok(d) => d,
                Err(_) => continue, // reported by the slot checks
            };
            let terms = doc_terms(&view.fields, &doc);
            let live =
                matches!(self.store.deleted_epoch(slot), Some(d) if d == 0 || d > h.delete_epoch);
            for (f, st) in stats.iter_mut().enumerate() {
                let len = terms.lengths[f].min(u32::from(u16::MAX));
                if view.length(f, slot) != len {
                    problem(format!(
                        "full-text index: slot {slot}: field {:?} has {} terms in the index, {len} in its document",
                        view.fields[f].name,
                        view.length(f, slot)
                    ));
                }
                if live && len > 0 {
                    st.docs += 1;
                    st.tokens += u64::from(len);
                }
                for (t, &tf) in &terms.fields[f] {
                    want.entry(crate::text::segment::key(f, t))
                        .or_default()
                        .push((slot, tf));
                }
            }
        }
        if stats != view.stats {
            problem(format!(
                "full-text index: statistics {:?} in the root, the live documents give {stats:?}",
                view.stats
            ));
        }
        let mut checked = 0u64;
        let mut got = Vec::new();
        let mut keys = std::collections::BTreeSet::new();
        for s in view.stored.iter() {
            match s.keys(&blobs) {
                Ok(k) => keys.extend(k.into_iter().map(|(k, _, _)| k)),
                Err(e) => problem(format!("full-text index: {e}")),
            }
        }
        for k in want.keys() {
            keys.insert(k.clone());
        }
        for k in &keys {
            if let Err(e) = view.postings(&blobs, k, &mut got) {
                problem(format!("full-text index: {e}"));
                continue;
            }
            checked += got.len() as u64;
            let expected = want.get(k).map_or(&[][..], |v| v.as_slice());
            if got != expected {
                let term = String::from_utf8_lossy(k.get(1..).unwrap_or_default());
                problem(format!(
                    "full-text index: term {term:?} has {} postings in the index, its documents give {} (first differing: {:?} vs {:?})",
                    got.len(),
                    expected.len(),
                    got.iter().zip(expected).find(|(a, b)| a != b).map(|(a, _)| a),
                    got.iter().zip(expected).find(|(a, b)| a != b).map(|(_, b)| b),
                ));
            }
        }
        checked
    }

    /// The text fields, as specs.
    pub(super) fn text_fields(&self) -> Vec<TextFieldSpec> {
        self.text
            .view
            .fields
            .iter()
            .map(TextFieldSpec::of)
            .collect()
    }
}

impl Published {
    /// BM25's top `k` for `query` among the live documents that pass `filter`.
    pub(super) fn search_text(
        &self,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<TextHit>> {
        Ok(self
            .text_hits(query, k, filter)?
            .iter()
            .map(crate::text::Scored::hit)
            .collect())
    }

    /// [`Published::search_text`]'s hits with their slots.
    fn text_hits(
        &self,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<crate::text::Scored>> {
        if k == 0 {
            return Err(Error::InvalidArgument("k must be at least 1".into()));
        }
        if !self.text.is_enabled() {
            return Err(Error::InvalidArgument(
                "this index has no full-text fields (create it with text fields, or \
                 set_text_fields)"
                    .into(),
            ));
        }
        let routing = self.routing();
        let k = k.min(self.len_at(routing).max(1));
        let blobs = self.regions.heap_blobs();
        // Every slot the index covers is routed through; with no delete each is live.
        let all_live = self.no_deletes() && self.text.slots() <= u64::from(routing);
        let mut scratch = lock(&self.shared.text_scratch).pop().unwrap_or_default();
        let hits = match filter {
            None => self.text.search(
                &blobs,
                query,
                k,
                all_live,
                |s| self.slot_live(s, routing),
                |_| true,
                |s| self.id_of(s),
                &mut scratch,
            ),
            Some(filter) => self
                .with_filter(filter, routing, |compiled| {
                    self.text.search(
                        &blobs,
                        query,
                        k,
                        all_live,
                        |s| self.slot_live(s, routing),
                        |s| compiled.test(s),
                        |s| self.id_of(s),
                        &mut scratch,
                    )
                })
                .and_then(|r| r),
        };
        lock(&self.shared.text_scratch).push(scratch);
        hits
    }

    /// The hybrid search: the vector leg (filtered when a filter is given) and the text leg,
    /// each to the options' depth, fused.
    pub(super) fn search_hybrid(
        &self,
        vector: &[f32],
        query: &str,
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        opts: &HybridOptions,
    ) -> Result<Vec<HybridHit>> {
        let q = self.prepare(vector)?;
        let view = self.view(self.routing());
        let mut buf = Vec::new();
        crate::text::search_hybrid(
            k,
            ef,
            opts,
            |depth, ef| match filter {
                None => self.search(vector, depth, ef),
                Some(f) => Ok(self.search_filtered_with(vector, depth, ef, f)?.0),
            },
            |depth| self.text_hits(query, depth, filter),
            |slot| {
                let v = view.exact_vector(slot)?;
                Some(self.shared.dist.exact(&q, v, &mut buf))
            },
        )
    }
}

impl Index {
    /// The `k` live documents that best match `query` by BM25 over the index's text fields
    /// (summed over the fields), best first, with their scores: exact (every live document
    /// holding a query term is scored), N, n and the average length over the live documents
    /// of this handle's state. With a filter, only documents that pass are returned (the
    /// statistics stay those of every live document). Fewer than `k` when fewer documents
    /// hold a query term. [`crate::Error::InvalidArgument`] when the index has no text
    /// fields.
    pub fn search_text(
        &self,
        query: &str,
        k: usize,
        filter: Option<&Filter>,
    ) -> Result<Vec<TextHit>> {
        self.current().search_text(query, k, filter)
    }

    /// Hybrid search: the `k` best live vectors by fusing a vector search for `vector` and a
    /// full-text search for `query` ([`HybridOptions`]: reciprocal rank fusion with k = 60 by
    /// default, a weight per leg, relative-score fusion as the other choice, each leg's
    /// depth). With a filter, both legs return only what passes (the vector leg with
    /// filtered search's guarantees). Each hit says where each leg ranked it.
    pub fn search_hybrid(
        &self,
        vector: &[f32],
        query: &str,
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        opts: &HybridOptions,
    ) -> Result<Vec<HybridHit>> {
        self.current()
            .search_hybrid(vector, query, k, ef, filter, opts)
    }

    /// Indexes the string values of these metadata fields for full-text search from now on,
    /// every document already stored included (an empty list drops the index); committed by
    /// the next flush, seen by this handle's searches at once. A file with a full-text index
    /// has write version 9 (docs/FORMAT.md, "Full-text index").
    pub fn set_text_fields(&self, fields: &[TextFieldSpec]) -> Result<()> {
        self.write_atomic(|w| w.set_text_fields(fields))
    }

    /// The fields indexed for full-text search (empty: none).
    pub fn text_fields(&self) -> Vec<TextFieldSpec> {
        self.current()
            .text
            .fields
            .iter()
            .map(TextFieldSpec::of)
            .collect()
    }
}

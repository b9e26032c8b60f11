//! What searches read while the writer works: the ADR's deferred "in-process lock-free search
//! beside writes", done as read-copy-update.
//!
//! After every write (and once a batch's rows are written, before they are linked) the writer
//! publishes a [`Published`]: an immutable record of its counts, entry point, committed header
//! and pending-delete count, with a clone of its [`Regions`] (shared `Arc`s of the mapped
//! segments and heap chunks). A search loads the newest one without a lock (`arc_swap`) and
//! reads only it, the file's mapped bytes, and what [`Shared`] holds. How the ADR's four
//! obstacles are met:
//!
//! 1. *A list mid-rewrite*: neighbor words are atomics rewritten slot-preserving, so a search
//!    sees whole slot ids, as a reader in another process does (docs/ARCHITECTURE.md); words
//!    at or past its routing count are skipped.
//! 2. *A vector being written*: a search routes through slots below
//!    `min(count, routed)` only. `count` is published after the batch's slots (header, vector,
//!    empty lists) are fully written; `routed` ([`Shared::routed`], the in-process twin of the
//!    live page's R) is stored with release ordering after a slot's insert and backlinks, as R
//!    is for readers (decision 5), and loaded with acquire. Committed and written slots below
//!    it are never rewritten except their neighbor words and delete marks (atomics).
//! 3. *The routing count and the entry point* move together: the entry point is in the
//!    publication, and every slot it names is below the publication's `count` and `routed`
//!    (a new top node is published only when its write ends).
//! 4. *Memory reclaimed*: a region is unmapped when the last `Regions` clone naming it is
//!    dropped, so a search's regions stay mapped until it ends (reference counts are the grace
//!    period); the store appends regions copy-on-write and never removes one. A compaction
//!    publishes the new file's state; searches that began on the old file finish on it.
//!
//! Deletes: a delete marks the slot in [`DeleteMarks`] with the number of the next
//! publication, which the delete stores before it returns; older publications don't see the
//! mark, newer ones all do (after the flush the slot's delete epoch says the same), so no
//! search that begins after `delete` returns can return the id, and none sees half of a
//! write's deletes.
//!
//! Invariants: a publication never changes once stored; its `count`, entry point and header
//! describe one state the writer was in; every region a slot below its `count` lies in is in
//! its `regions`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::Result;
use crate::filter::index::FilterIndex;
use crate::format::header::{Header, FLAG_CUSTOM_IDS};
use crate::format::record;
use crate::format::vector::VectorRef;
use crate::graph::{Distance, GraphStore, Params, Scratch};
use crate::os::Storage;
use crate::storage::Regions;

use super::{lock, IdMap, Info, OpenReport, View, WalkCheck, Writer};

/// What one file's writer shares with every search of it (replaced with the file at a
/// compaction).
pub(crate) struct Shared {
    pub(super) dist: Distance,
    pub(super) params: Params,
    pub(super) read_only: Option<&'static str>,
    pub(super) storage: Arc<dyn Storage>,
    /// The id → slot table (custom ids), built by whichever side needs it first.
    pub(super) ids: Mutex<Option<IdMap>>,
    pub(super) scratch: Mutex<Vec<Scratch>>,
    /// Field indexes of the metadata, built as filters name fields (never stored).
    pub(super) filters: RwLock<FilterIndex>,
    /// Distance computations made by searches (for benchmarks).
    pub(super) search_distances: AtomicU64,
    /// Whether this file's split vectors are walked exactly, and the inserts deciding it.
    pub(super) walk: WalkCheck,
    /// Slots searches may route through (release after a slot is linked; see the module).
    pub(super) routed: AtomicU32,
    /// Reusable memory of text searches.
    pub(super) text_scratch: Mutex<Vec<crate::text::TextScratch>>,
}

impl Shared {
    /// A fresh Shared for the state a rollback goes back to, routing through `routed` slots:
    /// the same file and parameters, no id table or field indexes yet (each is built from
    /// the new state when first needed), the walk decision carried over.
    pub(super) fn successor(&self, routed: u32) -> Shared {
        Shared {
            dist: self.dist,
            params: self.params,
            read_only: self.read_only,
            storage: Arc::clone(&self.storage),
            ids: Mutex::new(None),
            scratch: Mutex::new(Vec::new()),
            filters: RwLock::new(FilterIndex::new()),
            search_distances: AtomicU64::new(self.search_distances.load(Ordering::Relaxed)),
            walk: self.walk.carry(),
            routed: AtomicU32::new(routed),
            text_scratch: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn take_scratch(&self) -> Scratch {
        lock(&self.scratch).pop().unwrap_or_default()
    }

    pub(super) fn put_scratch(&self, s: Scratch) {
        lock(&self.scratch).push(s);
    }
}

/// Slots per chunk of [`DeleteMarks`].
const MARKS_CHUNK: u32 = 1 << 12;

/// This handle's deletes as one word per slot: the number of the first publication that
/// shows the slot deleted (0: not deleted by this handle). A publication numbered g sees
/// exactly the deletes marked g or lower, so an older publication keeps its own consistent
/// view while the writer deletes. Chunks of 4,096 slots are allocated as deletes reach them;
/// the chunk list is copy-on-write (a publication keeps the list it was given), the words are
/// shared atomics, each written once.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteMarks {
    chunks: Arc<Vec<Arc<[AtomicU64]>>>,
}

impl DeleteMarks {
    /// Marks `slot` deleted from publication `generation` on.
    pub(super) fn set(&mut self, slot: u32, generation: u64) {
        let c = (slot / MARKS_CHUNK) as usize;
        while self.chunks.len() <= c {
            let chunk: Arc<[AtomicU64]> = (0..MARKS_CHUNK).map(|_| AtomicU64::new(0)).collect();
            Arc::make_mut(&mut self.chunks).push(chunk);
        }
        if let Some(chunk) = self.chunks.get(c) {
            let w = &chunk[(slot % MARKS_CHUNK) as usize];
            if w.load(Ordering::Relaxed) == 0 {
                w.store(generation, Ordering::Release);
            }
        }
    }

    /// Whether publication `generation` sees `slot` deleted by this handle.
    #[inline]
    pub(super) fn deleted(&self, slot: u32, generation: u64) -> bool {
        let c = (slot / MARKS_CHUNK) as usize;
        self.chunks.get(c).is_some_and(|chunk| {
            let g = chunk[(slot % MARKS_CHUNK) as usize].load(Ordering::Acquire);
            g != 0 && g <= generation
        })
    }
}

/// One state of the writer, as searches read it. Never changes once published.
pub(crate) struct Published {
    pub(super) shared: Arc<Shared>,
    pub(super) regions: Regions,
    /// Slots written when this was published.
    pub(super) count: u32,
    pub(super) entry: Option<(u32, usize)>,
    /// The newest committed header when this was published.
    pub(super) header: Arc<Header>,
    pub(super) header_copy: usize,
    /// Deletes pending when this was published.
    pub(super) pending: u64,
    pub(super) dirty: bool,
    pub(super) flags: u32,
    /// This publication's number (it sees the deletes marked with it or lower).
    pub(super) generation: u64,
    pub(super) deleted: DeleteMarks,
    pub(super) table_pages: u64,
    pub(super) metadata_bytes: u64,
    pub(super) path: Option<PathBuf>,
    pub(super) report: OpenReport,
    /// The user version the writer's next flush commits (the committed one until set).
    pub(super) user_version: u64,
    /// The full-text index in this state.
    pub(super) text: crate::text::TextView,
}

impl Writer {
    /// Publishes this writer's state to searches (see the module).
    pub(super) fn publish(&self) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let p = Published {
            generation,
            pending: self.pending_deletes.len() as u64,
            dirty: self.dirty,
            flags: self.flags,
            deleted: self.deleted.clone(),
            report: self.report.clone(),
            user_version: self.user_version,
            text: self.text.view.clone(),
            ..Published::initial(
                &self.shared,
                &self.store,
                self.count,
                self.entry,
                &self.path,
            )
        };
        self.view.store(Arc::new(p));
    }
}

impl Published {
    /// What a writer publishes before its first change: the file as it opened it (and the
    /// store's part of every later publication).
    pub(super) fn initial(
        shared: &Arc<Shared>,
        store: &crate::storage::Store,
        count: u32,
        entry: Option<(u32, usize)>,
        path: &Option<PathBuf>,
    ) -> Published {
        Published {
            shared: Arc::clone(shared),
            regions: store.regions(),
            count,
            entry,
            header: store.header_arc(),
            header_copy: store.header_copy(),
            pending: 0,
            dirty: false,
            flags: store.header().flags,
            generation: 0,
            deleted: DeleteMarks::default(),
            table_pages: store.table_page_count(),
            metadata_bytes: store.metadata_bytes(),
            path: path.clone(),
            report: OpenReport::default(),
            user_version: store.header().user_version,
            text: crate::text::TextView::default(),
        }
    }

    /// Slots a search of this publication routes through and may return.
    #[inline]
    pub(super) fn routing(&self) -> u32 {
        self.count.min(self.shared.routed.load(Ordering::Acquire))
    }

    /// The graph below `routing`.
    pub(super) fn view(&self, routing: u32) -> View<'_> {
        View {
            store: &self.regions,
            count: routing,
            walk: &self.shared.walk,
            codes: true,
        }
    }

    /// Whether `slot` is live for a search routing through `routing` slots.
    #[inline]
    pub(super) fn slot_live(&self, slot: u32, routing: u32) -> bool {
        if slot >= routing {
            return false;
        }
        match self.regions.deleted_epoch(slot) {
            Some(d) if d != 0 && d <= self.header.delete_epoch => return false,
            None => return false,
            _ => {}
        }
        !self.deleted.deleted(slot, self.generation)
    }

    /// Whether no delete, committed or pending, can hide a slot.
    pub(super) fn no_deletes(&self) -> bool {
        self.header.deleted_count == 0 && self.pending == 0
    }

    /// Live vectors among the slots searches route through.
    pub(super) fn len_at(&self, routing: u32) -> usize {
        let deleted = self.header.deleted_count + self.pending;
        (u64::from(routing).saturating_sub(deleted)) as usize
    }

    pub(super) fn len(&self) -> usize {
        self.len_at(self.routing())
    }

    pub(super) fn custom_ids(&self) -> bool {
        self.flags & FLAG_CUSTOM_IDS != 0
    }

    pub(super) fn level0_neighbors(&self, slot: u32) -> Vec<u32> {
        self.regions.level0(slot).map_or_else(Vec::new, |w| {
            w.iter()
                .map(|x| x.load(Ordering::Relaxed))
                .filter(|&n| n != record::EMPTY)
                .collect()
        })
    }

    pub(super) fn info(&self) -> Result<Info> {
        let h = &self.header;
        let routing = self.routing();
        Ok(Info {
            dims: self.regions.dims(),
            metric: self.shared.dist.metric(),
            m: self.shared.params.m,
            m0: self.shared.params.m0,
            ef_construction: self.shared.params.ef_construction,
            count: self.len_at(routing) as u64,
            deleted: h.deleted_count + self.pending,
            committed_count: h.committed_count,
            committed_deleted: h.deleted_count,
            slots: u64::from(routing),
            delete_epoch: h.delete_epoch,
            pending_delete_epoch: h.pending_delete_epoch,
            sequence: h.sequence,
            next_id: h.next_id,
            header_copy: if self.header_copy == 0 { 'A' } else { 'B' },
            max_layer: self.entry.map_or(0, |e| e.1),
            geometry: self.regions.geometry(),
            segments: self.regions.segment_count(),
            upper_heap_chunks: self.regions.upper_chunk_count(),
            table_pages: self.table_pages,
            custom_ids: self.custom_ids(),
            read_only: self.shared.read_only,
            file_bytes: self.shared.storage.len()?,
            versions: (h.read_version, h.write_version),
            vector_layout: h.layout(),
            codes: self.regions.code_kind(),
            codes_trained: self.regions.codebook().is_some(),
            exact_walk: h.layout().is_split() && self.shared.walk.exact(),
            metadata_bytes: self.metadata_bytes,
            metadata_chunks: self.regions.metadata_chunk_count(),
            indexed_fields: self.indexed_fields(),
            file_id: super::options::file_id_hex(&h.file_id),
            user_version: h.user_version,
            text_fields: self
                .text
                .fields
                .iter()
                .map(crate::text::TextFieldSpec::of)
                .collect(),
            text_segments: (self.text.stored.len() as u64, self.text.memory.len() as u64),
        })
    }
}

/// A publication's graph, owned ([`super::Index::graph`]).
pub(super) struct Graph {
    p: Arc<Published>,
    routing: u32,
}

impl Graph {
    pub(super) fn new(p: Arc<Published>) -> Graph {
        let routing = p.routing();
        Graph { p, routing }
    }
}

impl GraphStore for Graph {
    fn routing_count(&self) -> u32 {
        self.routing
    }
    #[inline(always)]
    fn vector(&self, slot: u32) -> Option<VectorRef<'_>> {
        match self.p.regions.vector(slot)? {
            VectorRef::Split(h) if self.p.shared.walk.exact() => Some(VectorRef::SplitExact(h)),
            v => Some(v),
        }
    }
    fn level0(&self, slot: u32) -> Option<&[AtomicU32]> {
        self.p.regions.level0(slot)
    }
    fn upper(&self, slot: u32, layer: usize) -> Option<&[AtomicU32]> {
        self.p.regions.upper(slot, layer)
    }
    fn level(&self, slot: u32) -> usize {
        self.p.regions.upper_layers(slot)
    }
}

#[cfg(test)]
mod tests {
    use crate::format::metadata::parse_json;
    use crate::graph::Metric;
    use crate::index::{Index, Options};

    fn vector(i: u64) -> Vec<f32> {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..8)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect()
    }

    /// A replacement moves its id to a new slot and deletes the old one: searches must see
    /// both changes in one publication, never the id twice or not at all (fails if a single
    /// row is published, and routed, before the write's own publication).
    #[test]
    fn a_replacement_flips_in_one_publication() {
        let index = Index::in_memory(Options::new(8, Metric::L2Squared).m(8), 64 << 20).unwrap();
        for i in 0..300u64 {
            index.add_with_id(1000 + i, &vector(i)).unwrap();
        }
        index.flush().unwrap();
        let (id, v) = (1000 + 42, vector(42));
        let count = |p: &super::Published| {
            p.search(&v, 10, 64)
                .unwrap()
                .iter()
                .filter(|h| h.id == id)
                .count()
        };
        let doc = parse_json(r#"{"moved": true}"#).unwrap();
        let mut w = index.writer.lock().unwrap();
        w.set_metadata(id, &doc).unwrap();
        // The write is done inside, not yet published by the handle: searches see the id
        // once, in its old slot, with its old document.
        let before = index.view.load_full();
        assert_eq!(count(&before), 1);
        w.publish();
        let after = index.view.load_full();
        assert_eq!(count(&after), 1);
        drop(w);
        assert_eq!(index.get_metadata(id).unwrap(), doc);
    }

    /// A delete is seen by every publication from the one its write stores on, and by none
    /// before it.
    #[test]
    fn a_delete_is_seen_from_its_publication_on() {
        let index = Index::in_memory(Options::new(8, Metric::L2Squared).m(8), 64 << 20).unwrap();
        for i in 0..200u64 {
            index.add(&vector(i)).unwrap();
        }
        let old = index.view.load_full();
        index.delete(7).unwrap();
        let new = index.view.load_full();
        let has = |p: &super::Published| {
            p.search(&vector(7), 5, 64)
                .unwrap()
                .iter()
                .any(|h| h.id == 7)
        };
        assert!(
            has(&old),
            "a publication older than the delete keeps its view"
        );
        assert!(!has(&new));
        assert!(!index.contains(7).unwrap());
        index.flush().unwrap();
        assert!(has(&old) && !has(&index.view.load_full()));
    }

    /// Several deletes, replacements or upserts made as one write appear in one publication:
    /// a search sees all of them or none (fails if each delete were published on its own).
    #[test]
    fn a_multi_id_write_appears_at_once() {
        let index = Index::in_memory(Options::new(8, Metric::L2Squared).m(8), 64 << 20).unwrap();
        for i in 0..100u64 {
            index.add(&vector(i)).unwrap();
        }
        let before = index.view.load_full();
        let ids = [3u64, 50, 77];
        {
            let mut w = index.writer.lock().unwrap();
            // What `delete_many` does inside the writer mutex, before the handle's own
            // publication: one publication of its own, showing all three.
            w.delete_many(&ids).unwrap();
            let mid = index.view.load_full();
            let gone = |p: &super::Published, id: u64| {
                !p.search(&vector(id), 3, 64)
                    .unwrap()
                    .iter()
                    .any(|h| h.id == id)
            };
            assert!(ids.iter().all(|&id| gone(&mid, id)));
            assert!(ids.iter().all(|&id| !gone(&before, id)));
        }
        assert!(matches!(
            index.delete_many(&[1, 3]),
            Err(crate::Error::NotFound { id: 3 })
        ));
        assert!(
            index.contains(1).unwrap(),
            "nothing deleted when one id is not live"
        );
        let docs = vec![parse_json(r#"{"a": 1}"#).unwrap(); 2];
        index.set_metadata_many(&[10, 11], &docs).unwrap();
        assert_eq!(index.get_metadata(11).unwrap(), docs[1]);
        assert!(index.set_metadata_many(&[12, 3], &docs).is_err());
        assert_eq!(index.get_metadata(12).unwrap(), Default::default());
    }

    /// `upsert_many` adds the ids not live as one batch and replaces the live ones; an id given
    /// twice ends with its later row.
    #[test]
    fn upsert_many_adds_new_ids_in_one_batch_and_replaces_live_ones() {
        let index = Index::in_memory(Options::new(8, Metric::L2Squared).m(8), 64 << 20).unwrap();
        index.add_with_id(5, &vector(5)).unwrap();
        let rows: Vec<f32> = [50u64, 6, 7].iter().flat_map(|&i| vector(i)).collect();
        let docs = vec![parse_json(r#"{"v": 2}"#).unwrap(); 3];
        index.upsert_many(&[5, 6, 7], &rows, &docs).unwrap();
        assert_eq!(index.len(), 3);
        assert_eq!(index.get(5).unwrap(), vector(50), "replaced");
        assert_eq!(index.get(7).unwrap(), vector(7), "added");
        assert_eq!(index.get_metadata(6).unwrap(), docs[1]);
        let twice: Vec<f32> = [8u64, 9].iter().flat_map(|&i| vector(i)).collect();
        index.upsert_many(&[8, 8], &twice, &docs[..2]).unwrap();
        assert_eq!(index.get(8).unwrap(), vector(9), "the later row wins");
        assert_eq!(index.len(), 4);
        assert!(
            index.upsert_many(&[1], &rows, &docs[..1]).is_err(),
            "rows and ids must match"
        );
    }
}

//! Creating and opening an index as the writer (ADR-0008 decisions 6 and 7): the lock and the
//! inode re-check, the version rules, recovery through [`Store::open`], and the repair of what
//! an interrupted writer left in the graph (the ADR-0005 amendment), reported in
//! [`OpenReport`].
//!
//! Invariants: a writer holds the file's exclusive lock for its whole life, on the inode at the
//! path; a file this release must not modify ([`not_ours_to_write`]) is opened without the
//! lock, read-only; R is reset to N before any slot past N is reused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;

use crate::filter::index::FilterIndex;

use crate::error::{Error, Result};
use crate::format::header::{self, Header};
use crate::format::{self, record};
use crate::graph::{self, support, Distance, Metric, Params};
use crate::os::{FileStorage, MemStorage, Storage};
use crate::storage::Store;

use super::published::{DeleteMarks, Published, Shared};
use super::walk::WalkCheck;
use super::{lock, Index, Options, View, Writer};

/// What opening an index as its writer found and did.
///
/// A writer that finds the clean-close marker of the last writer (docs/FORMAT.md, "Live
/// page") for the current header does nothing more than a reader does: `clean` is true and
/// every other field says nothing was looked at. Otherwise (the last writer stopped without
/// closing cleanly, or was a release without the marker) it makes one pass over the committed
/// neighbor lists: edges toward slots that never committed are removed and their nodes
/// relinked, and every node is given a supporter that lacks one (`graph::support`), so every
/// committed vector is reachable again. The repairs reach the file with the next flush.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The file was closed cleanly by the last writer: no repair pass ran.
    pub clean: bool,
    /// Whether recovery ran: the newest header was the intent of an interrupted delete flush.
    pub recovered: bool,
    /// Delete marks recovery reset to 0 (marks of the delete flush that never committed).
    pub marks_reset: u64,
    /// Committed nodes whose neighbor lists named slots past N: edges toward inserts that
    /// never committed, whose pruning may have dropped committed edges (ADR-0005 amendment).
    /// Each such list is emptied of those edges and relinked as an insert would link it.
    /// `None` when no repair pass ran (a clean file, or read-only).
    pub repaired_lists: Option<u64>,
    /// Committed live vectors that no layer-0 path from the entry point reached before the
    /// repair pass. `None` when no repair pass ran.
    pub unreachable: Option<u64>,
    /// Nodes (live or deleted) that had no supporter and were given one by the repair pass.
    /// `None` when no repair pass ran.
    pub unsupported: Option<u64>,
    /// Live vectors still unreachable after the repair pass (normally 0). `None` when no
    /// repair pass ran.
    pub still_unreachable: Option<u64>,
}

/// Why this release must not modify a file with this header, if it must not: a newer write
/// version, or flag bits it doesn't know (decision 7; docs/FORMAT.md, "Compatibility").
pub(super) fn not_ours_to_write(h: &Header) -> Option<&'static str> {
    if h.write_version > format::WRITE_VERSION {
        Some("the file's write version is newer than this release")
    } else if h.flags & !header::KNOWN_FLAGS != 0 {
        Some("the file has flag bits this release does not know")
    } else {
        None
    }
}

impl Writer {
    pub(super) fn create(path: impl AsRef<Path>, options: Options) -> Result<Writer> {
        let path = path.as_ref();
        // Bad options are refused before any file is made.
        options.validate()?;
        let storage = FileStorage::create(path)?;
        storage.try_lock_exclusive()?;
        Writer::create_at(storage, path, options)
    }

    /// Creates the index in `storage`, an empty file the caller opened at `path` and locked.
    pub(super) fn create_at(storage: FileStorage, path: &Path, options: Options) -> Result<Writer> {
        let new = options.validate()?;
        let store = Store::create(Arc::new(storage), &new)?;
        Writer::from_store(store, Some(path.to_path_buf()), None)?.with_text_fields(&options)
    }

    /// A new file's text fields, committed at once (readers see them from the start).
    fn with_text_fields(mut self, options: &Options) -> Result<Writer> {
        if !options.text_fields.is_empty() {
            self.set_text_fields(&options.text_fields)?;
            self.flush()?;
        }
        Ok(self)
    }

    pub(super) fn open(path: impl AsRef<Path>) -> Result<Writer> {
        let path = path.as_ref();
        let storage = Writer::open_locked(path)?;
        let (current, _) = crate::storage::read_current_header(&storage)?;
        if not_ours_to_write(&current).is_some() {
            // Without the lock: the newer release's writer must still be able to open it.
            drop(storage);
            let storage = FileStorage::open(path, false)?;
            return Writer::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true);
        }
        Writer::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true)
    }

    /// Opens `path` for writing and takes its lock, then re-checks that the path still names
    /// the file locked: a compaction may have renamed a new file over it meanwhile, and locks
    /// follow the inode, not the path (decision 8). Reopens until they agree.
    pub(super) fn open_locked(path: &Path) -> Result<FileStorage> {
        for _ in 0..100 {
            let storage = FileStorage::open(path, true)?;
            storage.try_lock_exclusive()?;
            if storage.still_at_path()? {
                return Ok(storage);
            }
        }
        Err(Error::Io(std::io::Error::other(format!(
            "{} keeps being replaced while opening it",
            path.display()
        ))))
    }

    pub(super) fn open_read_only(path: impl AsRef<Path>) -> Result<Writer> {
        let path = path.as_ref();
        let storage = FileStorage::open(path, false)?;
        Writer::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), false)
    }

    pub(super) fn create_in(storage: Arc<dyn Storage>, options: Options) -> Result<Writer> {
        let new = options.validate()?;
        storage.try_lock_exclusive()?;
        let store = Store::create(storage, &new)?;
        Writer::from_store(store, None, None)?.with_text_fields(&options)
    }

    pub(super) fn open_in(storage: Arc<dyn Storage>) -> Result<Writer> {
        storage.try_lock_exclusive()?;
        Writer::open_storage_inner(storage, None, true)
    }

    pub(super) fn open_in_read_only(storage: Arc<dyn Storage>) -> Result<Writer> {
        Writer::open_storage_inner(storage, None, false)
    }

    pub(super) fn in_memory(options: Options, capacity_bytes: usize) -> Result<Writer> {
        Writer::create_in(Arc::new(MemStorage::new(capacity_bytes)?), options)
    }

    pub(super) fn open_storage_inner(
        storage: Arc<dyn Storage>,
        path: Option<PathBuf>,
        write: bool,
    ) -> Result<Writer> {
        // Headers first: a file with a newer write version must not be mapped for writing.
        let (current, _) = crate::storage::read_current_header(&*storage)?;
        let read_only = match (write, not_ours_to_write(&current)) {
            (false, _) => Some("opened read-only"),
            (true, Some(why)) => Some(why),
            (true, None) => None,
        };
        let store = Store::open(storage, read_only.is_none())?;
        Writer::from_store(store, path, read_only)
    }

    pub(super) fn from_store(
        store: Store,
        path: Option<PathBuf>,
        read_only: Option<&'static str>,
    ) -> Result<Writer> {
        let h = store.header().clone();
        let metric = Metric::from_code(h.metric)?;
        let count = h.committed_count as u32;
        let entry = if count == 0 {
            None
        } else {
            Some((h.entry_point, h.max_layer as usize))
        };
        let params = Params {
            m: h.m as usize,
            m0: h.m0 as usize,
            ef_construction: (h.ef_construction as usize).max(1),
            max_layers: h.max_layers as usize,
        };
        let shared = Arc::new(Shared {
            dist: Distance::new(metric),
            params,
            read_only,
            storage: Arc::clone(store.storage()),
            ids: Mutex::new(None),
            scratch: Mutex::new(Vec::new()),
            filters: RwLock::new(FilterIndex::new()),
            search_distances: AtomicU64::new(0),
            walk: WalkCheck::new(h.flags, h.committed_count, metric),
            routed: AtomicU32::new(count),
            text_scratch: Mutex::new(Vec::new()),
        });
        let index = Writer {
            path: path.clone(),
            dist: Distance::new(metric),
            params,
            seed: h.seed,
            read_only,
            count,
            entry,
            next_id: h.next_id,
            // A writer that finds "superseded" on the file at its path is looking at a file a
            // compaction marked but never renamed over (it stopped between the two): the file
            // is complete and current, and the writer's next commit clears the flag.
            // Exact walk means nothing on a format 3 file (earlier releases set it there on
            // inner-product files); the writer's next commit drops it.
            flags: if read_only.is_none() {
                let mut f = h.flags & !header::FLAG_SUPERSEDED;
                if !h.layout().is_split() {
                    f &= !header::FLAG_EXACT_WALK;
                }
                f
            } else {
                h.flags
            },
            pending_deletes: HashSet::new(),
            dirty: false,
            user_version: h.user_version,
            text: Default::default(),
            discarded: Vec::new(),
            shared: Arc::clone(&shared),
            deleted: DeleteMarks::default(),
            generation: AtomicU64::new(0),
            view: Arc::new(ArcSwap::from_pointee(Published::initial(
                &shared, &store, count, entry, &path,
            ))),
            report: OpenReport::default(),
            prune_memo: graph::PruneMemo::default(),
            store,
        };
        let mut index = index;
        if let Some((ep, _)) = index.entry {
            if index.store.vector(ep).is_none() {
                return Err(Error::corrupt("entry point has no segment", 0));
            }
        }
        index.text = index.load_text(None)?;
        if index.read_only.is_none() {
            // Codes that went missing (a writer trained them and stopped before its flush)
            // are trained again: no committed header names a codebook yet, so no reader reads
            // the codes this rewrites.
            index.train_codes_when_due()?;
            let recovery = index.store.recovery();
            let clean = recovery.is_none()
                && index.store.clean_close_sequence() == Some(index.store.header().sequence);
            if clean {
                // The lists are what the header committed: nothing to repair, and nothing to
                // publish until the first change (which replaces the marker durably).
                index.store.keep_clean_marker();
                index.report = OpenReport {
                    clean: true,
                    ..OpenReport::default()
                };
                return Ok(index);
            }
            // R is not durable: the writer resets it to N before any ghost slot is reused.
            index.publish_routing(count)?;
            index.store.publish_regions()?;
            let repair = index.repair_graph()?;
            index.report = OpenReport {
                clean: false,
                recovered: recovery.is_some(),
                marks_reset: recovery.unwrap_or(0),
                repaired_lists: Some(repair.lists),
                unreachable: Some(repair.unreachable),
                unsupported: Some(repair.unsupported),
                still_unreachable: Some(index.unreachable_count()),
            };
        }
        Ok(index)
    }

    pub(super) fn unreachable_count(&self) -> u64 {
        self.unreachable_slots().len() as u64
    }

    pub(super) fn unreachable_slots(&self) -> Vec<u32> {
        let Some((ep, _)) = self.entry else {
            return Vec::new();
        };
        let mut seen = vec![false; self.count as usize];
        let mut stack = vec![ep];
        seen[ep as usize] = true;
        while let Some(s) = stack.pop() {
            if let Some(words) = self.store.level0(s) {
                for w in words {
                    let n = w.load(std::sync::atomic::Ordering::Relaxed);
                    if n < self.count && !seen[n as usize] {
                        seen[n as usize] = true;
                        stack.push(n);
                    }
                }
            }
        }
        (0..self.count)
            .filter(|&s| !seen[s as usize] && self.slot_live(s))
            .collect()
    }

    /// Repairs what a writer that stopped without closing cleanly may have left in the
    /// committed graph (see [`OpenReport`]): neighbor words naming slots at or past N (edges
    /// toward inserts that never committed) are emptied and each such node is relinked as an
    /// insert would link it; then every node without a supporter is given one
    /// ([`support::establish`]), which makes every committed vector reachable. The new edges
    /// reach the file with the next flush.
    pub(super) fn repair_graph(&mut self) -> Result<Repair> {
        let Some(entry) = self.entry else {
            return Ok(Repair::default());
        };
        let n = self.count;
        let mut damaged = Vec::new();
        for slot in 0..n {
            let mut hit = false;
            let layers = self.store.upper_layers(slot);
            for layer in 0..=layers {
                let words = if layer == 0 {
                    self.store.level0(slot)
                } else {
                    self.store.upper(slot, layer)
                };
                for w in words.into_iter().flatten() {
                    let v = w.load(std::sync::atomic::Ordering::Relaxed);
                    if v != record::EMPTY && v >= n {
                        w.store(record::EMPTY, std::sync::atomic::Ordering::Relaxed);
                        hit = true;
                    }
                }
            }
            if hit {
                damaged.push(slot);
            }
        }
        let unreachable = self.unreachable_slots().len() as u64;
        let mut scratch = self.take_scratch();
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.shared.walk,
            codes: false,
        };
        for &slot in &damaged {
            graph::reconnect(&view, &self.dist, &self.params, slot, entry, &mut scratch);
        }
        let (unsupported, _) =
            support::establish(&view, &self.dist, &self.params, n, entry.0, &mut scratch);
        scratch.orphans.clear();
        self.put_scratch(scratch);
        if !damaged.is_empty() || unsupported > 0 {
            self.dirty = true;
        }
        Ok(Repair {
            lists: damaged.len() as u64,
            unreachable,
            unsupported,
        })
    }
}

/// What [`Index::repair_graph`] found.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Repair {
    pub(super) lists: u64,
    pub(super) unreachable: u64,
    pub(super) unsupported: u64,
}

impl Index {
    /// Creates a new index file at `path` (which must not exist, or be empty) and opens it as
    /// the writer. The file is durable, directory entry included, when this returns.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Index> {
        Writer::create(path, options).map(Index::from_writer)
    }

    /// Opens an existing index file as its writer, holding an exclusive lock for the life of
    /// the `Index`. A second writer gets [`Error::Locked`] at once. A file whose write version
    /// is newer than this release opens read-only, as SQLite does, and without the lock (the
    /// newer release's writer must still be able to open it).
    ///
    /// A file with flag bits this release doesn't know opens read-only the same way: rewriting
    /// its header would drop a bit whose meaning this release can't keep (docs/FORMAT.md,
    /// "Compatibility").
    pub fn open(path: impl AsRef<Path>) -> Result<Index> {
        Writer::open(path).map(Index::from_writer)
    }

    /// Opens an existing index file read-only, without a lock and without recovery: searches
    /// see the state committed when it was opened. To follow a writer that keeps working, with
    /// a fresh snapshot per search, use [`crate::IndexReader`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Index> {
        Writer::open_read_only(path).map(Index::from_writer)
    }

    /// Creates an index in any [`Storage`] (for example [`MemStorage`]), taking its lock.
    pub fn create_in(storage: Arc<dyn Storage>, options: Options) -> Result<Index> {
        Writer::create_in(storage, options).map(Index::from_writer)
    }

    /// Opens an index in any [`Storage`] as its writer, taking its lock.
    pub fn open_in(storage: Arc<dyn Storage>) -> Result<Index> {
        Writer::open_in(storage).map(Index::from_writer)
    }

    /// Opens an index in any [`Storage`] read-only: no lock, no recovery.
    pub fn open_in_read_only(storage: Arc<dyn Storage>) -> Result<Index> {
        Writer::open_in_read_only(storage).map(Index::from_writer)
    }

    /// A new in-memory index (nothing reaches a disk); handy for tests and scratch work.
    pub fn in_memory(options: Options, capacity_bytes: usize) -> Result<Index> {
        Writer::in_memory(options, capacity_bytes).map(Index::from_writer)
    }

    /// What opening this index found (recovery, unreachable vectors).
    pub fn open_report(&self) -> OpenReport {
        self.current().report.clone()
    }

    /// Live vectors that no layer-0 path from the entry point reaches. Layer 0 is where every
    /// search ends (upper layers only choose where it starts), so a vector linked only from
    /// upper layers is as lost to searches as one with no links at all.
    pub fn unreachable_count(&self) -> u64 {
        lock(&self.writer).unreachable_count()
    }
}

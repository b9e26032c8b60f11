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
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use crate::filter::index::FilterIndex;

use crate::error::{Error, Result};
use crate::format::header::{self, Header};
use crate::format::vector::VectorLayout;
use crate::format::{self, record};
use crate::graph::{self, Distance, Metric, Params};
use crate::os::{FileStorage, MemStorage, Storage};
use crate::storage::Store;

use super::walk::WalkCheck;
use super::{Index, Options, View};

/// What opening an index as its writer found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Whether recovery ran: the newest header was the intent of an interrupted delete flush.
    pub recovered: bool,
    /// Delete marks recovery reset to 0 (marks of the delete flush that never committed).
    pub marks_reset: u64,
    /// Committed nodes whose neighbor lists named slots past N: edges toward inserts that
    /// never committed, whose pruning may have dropped committed edges (ADR-0005 amendment).
    /// Every writer open looks (one pass over the committed neighbor lists); each such list is
    /// emptied of those edges and relinked as an insert would link it. `None` for read-only.
    pub repaired_lists: Option<u64>,
    /// Committed live vectors that no layer-0 path from the entry point reached when the file
    /// was opened, counted when lists were repaired, recovery ran, or the live page shows (or
    /// can't rule out) an earlier writer that inserted without flushing. Each is linked back
    /// at open; the new edges are committed by the next flush (until then a reader may still
    /// miss them). `None` when not counted.
    pub unreachable: Option<u64>,
    /// Live vectors still unreachable after reconnecting (normally 0). `None` when not checked.
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

impl Index {
    /// Creates a new index file at `path` (which must not exist, or be empty) and opens it as
    /// the writer. The file is durable, directory entry included, when this returns.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Index> {
        let path = path.as_ref();
        let new = options.validate()?;
        let storage = FileStorage::create(path)?;
        storage.try_lock_exclusive()?;
        let store = Store::create(Arc::new(storage), &new)?;
        Index::from_store(store, Some(path.to_path_buf()), None)
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
        let path = path.as_ref();
        let storage = Index::open_locked(path)?;
        let (current, _) = crate::storage::read_current_header(&storage)?;
        if not_ours_to_write(&current).is_some() {
            // Without the lock: the newer release's writer must still be able to open it.
            drop(storage);
            let storage = FileStorage::open(path, false)?;
            return Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true);
        }
        Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), true)
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

    /// Opens an existing index file read-only, without a lock and without recovery: searches
    /// see the state committed when it was opened. To follow a writer that keeps working, with
    /// a fresh snapshot per search, use [`crate::IndexReader`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Index> {
        let path = path.as_ref();
        let storage = FileStorage::open(path, false)?;
        Index::open_storage_inner(Arc::new(storage), Some(path.to_path_buf()), false)
    }

    /// Creates an index in any [`Storage`] (for example [`MemStorage`]), taking its lock.
    pub fn create_in(storage: Arc<dyn Storage>, options: Options) -> Result<Index> {
        let new = options.validate()?;
        storage.try_lock_exclusive()?;
        let store = Store::create(storage, &new)?;
        Index::from_store(store, None, None)
    }

    /// Opens an index in any [`Storage`] as its writer, taking its lock.
    pub fn open_in(storage: Arc<dyn Storage>) -> Result<Index> {
        storage.try_lock_exclusive()?;
        Index::open_storage_inner(storage, None, true)
    }

    /// Opens an index in any [`Storage`] read-only: no lock, no recovery.
    pub fn open_in_read_only(storage: Arc<dyn Storage>) -> Result<Index> {
        Index::open_storage_inner(storage, None, false)
    }

    /// A new in-memory index (nothing reaches a disk); handy for tests and scratch work.
    pub fn in_memory(options: Options, capacity_bytes: usize) -> Result<Index> {
        Index::create_in(Arc::new(MemStorage::new(capacity_bytes)?), options)
    }

    pub(super) fn open_storage_inner(
        storage: Arc<dyn Storage>,
        path: Option<PathBuf>,
        write: bool,
    ) -> Result<Index> {
        // Headers first: a file with a newer write version must not be mapped for writing.
        let (current, _) = crate::storage::read_current_header(&*storage)?;
        let read_only = match (write, not_ours_to_write(&current)) {
            (false, _) => Some("opened read-only"),
            (true, Some(why)) => Some(why),
            (true, None) => None,
        };
        let store = Store::open(storage, read_only.is_none())?;
        Index::from_store(store, path, read_only)
    }

    pub(super) fn from_store(
        store: Store,
        path: Option<PathBuf>,
        read_only: Option<&'static str>,
    ) -> Result<Index> {
        let h = store.header().clone();
        let metric = Metric::from_code(h.metric)?;
        let count = h.committed_count as u32;
        let entry = if count == 0 {
            None
        } else {
            Some((h.entry_point, h.max_layer as usize))
        };
        let index = Index {
            path,
            dist: Distance::new(metric),
            params: Params {
                m: h.m as usize,
                m0: h.m0 as usize,
                ef_construction: (h.ef_construction as usize).max(1),
                max_layers: h.max_layers as usize,
            },
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
                if h.layout() == VectorLayout::F32 {
                    f &= !header::FLAG_EXACT_WALK;
                }
                f
            } else {
                h.flags
            },
            pending_deletes: HashSet::new(),
            dirty: false,
            ids: Mutex::new(None),
            scratch: Mutex::new(Vec::new()),
            filters: RwLock::new(FilterIndex::new()),
            search_distances: AtomicU64::new(0),
            report: OpenReport::default(),
            walk: WalkCheck::new(h.flags, h.committed_count, metric),
            store,
        };
        let mut index = index;
        if let Some((ep, _)) = index.entry {
            if index.store.vector(ep).is_none() {
                return Err(Error::corrupt("entry point has no segment", 0));
            }
        }
        if index.read_only.is_none() {
            let recovery = index.store.recovery();
            // An earlier writer inserted past N without committing (R > N), or no writer ever
            // published (a live page lost to a power loss looks like that too).
            let unflushed = index
                .store
                .live_routing_count()
                .is_none_or(|r| r > u64::from(count))
                && count > 0;
            // R is not durable: the writer resets it to N before any ghost slot is reused.
            index.store.publish_routing_count(u64::from(count))?;
            index.store.publish_regions()?;
            // Every writer open scans the committed neighbor lists for edges toward slots past
            // N: after a power loss they can be on disk even when the live page is not.
            let suspect = recovery.is_some() || unflushed;
            let (repaired, unreachable) = index.repair_graph(suspect)?;
            let still_unreachable = unreachable.map(|_| index.unreachable_count());
            index.report = OpenReport {
                recovered: recovery.is_some(),
                marks_reset: recovery.unwrap_or(0),
                repaired_lists: Some(repaired),
                unreachable,
                still_unreachable,
            };
        }
        Ok(index)
    }

    /// What opening this index found (recovery, unreachable vectors).
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Live vectors that no layer-0 path from the entry point reaches. Layer 0 is where every
    /// search ends (upper layers only choose where it starts), so a vector linked only from
    /// upper layers is as lost to searches as one with no links at all.
    pub fn unreachable_count(&self) -> u64 {
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

    /// Repairs what an interrupted writer left in the committed graph (see [`OpenReport`]):
    /// neighbor words naming slots at or past N (edges toward inserts that never committed)
    /// are emptied and each such node is relinked as an insert would link it, then every live
    /// vector still unreachable on layer 0 is linked back. Returns (lists repaired, vectors
    /// unreachable before). The new edges reach the file with the next flush.
    pub(super) fn repair_graph(&mut self, suspect: bool) -> Result<(u64, Option<u64>)> {
        let Some(entry) = self.entry else {
            return Ok((0, None));
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
        if damaged.is_empty() && !suspect {
            return Ok((0, None));
        }
        let lost_before = self.unreachable_slots().len() as u64;
        let mut scratch = self.take_scratch();
        let view = View {
            store: &self.store,
            count: self.count,
            walk: &self.walk,
        };
        for &slot in &damaged {
            graph::reconnect(&view, &self.dist, &self.params, slot, entry, &mut scratch);
        }
        for slot in self.unreachable_slots() {
            graph::reconnect(&view, &self.dist, &self.params, slot, entry, &mut scratch);
        }
        self.put_scratch(scratch);
        if !damaged.is_empty() || lost_before > 0 {
            self.dirty = true;
        }
        Ok((damaged.len() as u64, Some(lost_before)))
    }
}

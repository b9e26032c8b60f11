//! Going back: [`Index::rollback`] (every change since the last flush) and the savepoints a
//! failed write goes back to, so that a batch, an upsert or a collection's call is all or
//! nothing even when a write fails after its checks (an I/O error, a full disk).
//!
//! A savepoint is the writer's in-memory state at one moment: the slot count, the entry point,
//! the pending deletes, the flags, the user version and the heaps' free positions. Going back
//! to one:
//!
//! 1. discards the slots written since (the next adds reuse them, as a writer that reopens
//!    after a crash reuses ghost slots past N) and the heap entries allocated since;
//! 2. takes back the deletes marked since (a fresh set of delete marks for the publications
//!    from now on; older publications keep theirs);
//! 3. repairs the lists those slots were linked into, as a writer's open repairs a file a
//!    crashed writer left (`Writer::repair_graph` with the savepoint's count as N): every word
//!    naming a discarded slot is emptied, each list that lost one is relinked, every node
//!    without a supporter gets one. The vectors, ids, metadata and deletes searches see are
//!    exactly the savepoint's; the graph is an equally valid one, not necessarily the same
//!    edges;
//! 4. publishes that state under a new [`Shared`]: the id table and the field indexes derived
//!    for the discarded state stay with the searches still running on it.
//!
//! The automatic id counter goes back too: ids equal slots in a file whose ids were never the
//! caller's (decision 3), and nothing of a call that failed or was discarded stays behind to
//! hold its ids, so the next add gets them again, as SQLite's next insert after a ROLLBACK
//! gets the same rowid.
//!
//! Invariants: nothing below the committed
//! count N changes but neighbor words; a discarded slot is rewritten only once no search that
//! could route through it is running (the writer waits for the discarded [`Shared`] to be
//! dropped, [`Writer::fence_discarded`]), so a vector lent to a search never changes under it.
//! Readers in other processes route through R, which goes back with the count; they copy
//! slots past N before reading them (decision 5), as they do after a writer's crash.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::HeapMark;

use super::published::{DeleteMarks, Shared};
use super::{Index, Writer};

/// How long a write waits for searches of a discarded state to finish before it gives up
/// (they are searches under way: milliseconds; only a caller holding [`Index::graph`] across
/// a rollback holds one longer).
const FENCE_WAIT: Duration = Duration::from_secs(30);

/// The writer's state at one moment (see the module doc).
#[derive(Clone, Debug)]
pub(crate) struct Savepoint {
    sequence: u64,
    count: u32,
    entry: Option<(u32, usize)>,
    pending_deletes: std::collections::HashSet<u32>,
    flags: u32,
    dirty: bool,
    user_version: u64,
    next_id: u64,
    heaps: HeapMark,
    /// The full-text state (`None` for the committed one: loaded again from the root).
    text: Option<super::text::TextState>,
}

impl Writer {
    pub(super) fn savepoint(&self) -> Savepoint {
        Savepoint {
            sequence: self.store.header().sequence,
            count: self.count,
            entry: self.entry,
            pending_deletes: self.pending_deletes.clone(),
            flags: self.flags,
            dirty: self.dirty,
            user_version: self.user_version,
            next_id: self.next_id,
            heaps: self.store.heap_mark(),
            text: Some(self.text.clone()),
        }
    }

    /// The savepoint of the last flush: what [`Index::rollback`] goes back to.
    fn committed_savepoint(&self) -> Savepoint {
        let h = self.store.header();
        let entry = (h.committed_count > 0).then_some((h.entry_point, h.max_layer as usize));
        Savepoint {
            sequence: h.sequence,
            count: h.committed_count as u32,
            entry,
            pending_deletes: Default::default(),
            // Flags the file committed, with the ones this writer keeps whatever happens (it
            // cleared "superseded" at open; exact walk is decided for good once set).
            flags: (h.flags & !crate::format::header::FLAG_SUPERSEDED)
                | (self.flags & crate::format::header::FLAG_EXACT_WALK),
            dirty: false,
            user_version: h.user_version,
            next_id: h.next_id,
            heaps: HeapMark::committed(h),
            text: None,
        }
    }

    /// Goes back to `sp` (see the module doc). Refused if a flush committed since `sp` was
    /// taken (its changes are durable: nothing can take them back).
    pub(super) fn rollback_to(&mut self, sp: Savepoint) -> Result<()> {
        self.writable()?;
        if sp.sequence != self.store.header().sequence {
            return Err(Error::InvalidArgument(
                "a flush committed since the savepoint; its changes can't be taken back".into(),
            ));
        }
        let slots_discarded = self.count > sp.count || self.entry != sp.entry;
        let deletes_taken_back = self.pending_deletes.len() != sp.pending_deletes.len()
            || !self.pending_deletes.is_subset(&sp.pending_deletes);
        if slots_discarded {
            // Searches of the discarded state keep its Shared (id table, field indexes);
            // the state from here on gets a fresh one.
            let next = Arc::new(self.shared.successor(sp.count));
            let old = std::mem::replace(&mut self.shared, next);
            self.discarded.push(Arc::downgrade(&old));
            drop(old);
            self.count = sp.count;
            self.entry = sp.entry;
            // Discarded slots will be rewritten with other vectors.
            self.prune_memo.clear();
            self.pending_deletes = sp.pending_deletes.clone();
            // R goes back with the count, for readers in other processes and for searches.
            self.publish_routing(sp.count)?;
            self.repair_graph()?;
        } else if deletes_taken_back {
            // The id table names the slots the discarded deletes removed from it: rebuild.
            *super::lock(&self.shared.ids) = None;
        }
        if deletes_taken_back || slots_discarded {
            let next = self.generation.load(AtomicOrdering::Relaxed) + 1;
            let mut marks = DeleteMarks::default();
            for &slot in &sp.pending_deletes {
                marks.set(slot, next);
            }
            self.deleted = marks;
        }
        self.store.rewind(sp.heaps);
        self.text = match sp.text {
            Some(t) => t,
            None => {
                let stored = self.text.view.clone();
                self.load_text(Some(&stored))?
            }
        };
        self.pending_deletes = sp.pending_deletes;
        self.flags = sp.flags;
        self.user_version = sp.user_version;
        self.next_id = sp.next_id;
        self.dirty = sp.dirty;
        if !self.dirty && slots_discarded {
            // Nothing left to flush, but the repair edited committed lists in place: make
            // them durable now, so a clean close's marker (which vouches for the lists) is
            // true even after a power loss.
            self.store.sync()?;
        }
        Ok(())
    }

    /// Every change since the last flush, discarded.
    pub(super) fn rollback(&mut self) -> Result<()> {
        let sp = self.committed_savepoint();
        self.rollback_to(sp)
    }

    /// Runs `f`; if it fails, goes back to the state before it, so the write is all or
    /// nothing. The error returned is `f`'s (a failure to go back is added to its message).
    pub(super) fn all_or_nothing<T>(
        &mut self,
        f: impl FnOnce(&mut Writer) -> Result<T>,
    ) -> Result<T> {
        if self.read_only.is_some() {
            return f(self);
        }
        let sp = self.savepoint();
        match f(self) {
            Ok(v) => Ok(v),
            Err(e) => match self.rollback_to(sp) {
                Ok(()) => Err(e),
                Err(back) => Err(match e {
                    Error::Io(io) => Error::Io(std::io::Error::new(
                        io.kind(),
                        format!(
                            "{io}; going back to the state before the write also failed: {back}"
                        ),
                    )),
                    e => e,
                }),
            },
        }
    }

    /// Waits until no search can still route through a slot a rollback discarded, before
    /// anything rewrites one (see the module doc).
    pub(super) fn fence_discarded(&mut self) -> Result<()> {
        if self.discarded.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            self.discarded
                .retain(|w: &Weak<Shared>| w.strong_count() > 0);
            if self.discarded.is_empty() {
                return Ok(());
            }
            if start.elapsed() > FENCE_WAIT {
                return Err(Error::InvalidArgument(
                    "a search (or an Index::graph()) of a state rollback() discarded is still \
                     running; finish it before adding"
                        .into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Index {
    /// Runs a write all or nothing ([`Writer::all_or_nothing`]), then publishes.
    pub(super) fn write_atomic<T>(&self, f: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        self.write(|w| w.all_or_nothing(f))
    }

    /// Discards every add, delete, metadata change and user version set since the last flush
    /// (or since the file was opened), keeping the writer's lock: this index's searches see the
    /// flushed state again at once, as other processes always did. Like SQLite's ROLLBACK for
    /// an application that pairs a flush with its own transaction (docs/RELIABILITY.md).
    ///
    /// Ids the discarded adds got automatically are handed out again by the next adds (as
    /// SQLite reuses rowids after a ROLLBACK). The graph
    /// lists the discarded vectors were linked into are repaired as an open after a crash
    /// repairs them (O(N·M): about a second per million vectors), and made durable.
    pub fn rollback(&self) -> Result<()> {
        self.write(|w| w.rollback())
    }

    /// Sets the user version the next flush commits with the data: a u64 of the
    /// application's (a transaction id, a log position) that every reader sees together with
    /// exactly the state it was flushed with, after any crash. Setting it counts as a change
    /// (a flush with nothing else pending commits it); a file whose user version is not 0
    /// has write version 8 (docs/FORMAT.md).
    pub fn set_user_version(&self, version: u64) -> Result<()> {
        self.write(|w| {
            w.writable()?;
            if version != w.user_version {
                w.user_version = version;
                w.dirty = true;
            }
            Ok(())
        })
    }

    /// The user version the next flush commits: the last one set, else the committed one
    /// (which [`crate::Info::user_version`] and readers report).
    pub fn user_version(&self) -> u64 {
        self.current().user_version
    }

    /// The writer's state now, for [`Index::rollback_to`] (collections make each call all or
    /// nothing across shards with it).
    pub(crate) fn savepoint(&self) -> Savepoint {
        super::lock(&self.writer).savepoint()
    }

    /// Goes back to `sp` (see [`Writer::rollback_to`]).
    pub(crate) fn rollback_to(&self, sp: Savepoint) -> Result<()> {
        self.write(|w| w.rollback_to(sp))
    }
}

//! Online backup and incremental sync at the byte level: bringing a destination file to one
//! committed state of a source file that a writer may still be changing.
//!
//! What may differ between a destination at sequence `d` and the source's state at `s > d`
//! (FORMAT.md, "What a writer may rewrite"): bytes appended since (slots at or past the
//! destination's N, heap bytes past its `*_heap_next`, new regions and table entries), and
//! three kinds of in-place edits: neighbor words of committed level-0 records and upper
//! entries, the deleted epochs of committed slots, and the header. Committed vectors, ids,
//! metadata references and metadata entries never change, so a sync never reads them twice:
//! it ships the appended bytes and compares only the slot headers, level-0 records, upper heap
//! and table pages of the destination's committed part, shipping the 4 KiB blocks that
//! differ. With nothing new (same sequence) it compares the slot headers only.
//!
//! The destination is written at the source's offsets, so its tables stay valid byte for byte.
//!
//! Invariants (the order of writes, which a crash at any point must survive):
//! 1. Before any byte of the destination's committed part changes, its live page's magic is
//!    zeroed and made durable: from then on its next writer repairs the lists (it no longer
//!    says "closed cleanly"), and readers route through its N only. When the new state has
//!    a later delete epoch, the destination's header is first rewritten as an intent
//!    (decision 6: its state, sequence + 1, pending epoch set) in the same step, so that
//!    delete marks written above its epoch are reset by the recovery of a writer that opens
//!    it after a crash, never committed by that writer's next delete flush; the new header
//!    then goes into the other copy, never over the intent.
//! 2. Every data byte is written and made durable before the header that counts it: the new
//!    header goes into the copy not holding the destination's current one, then an fsync. A
//!    crash before that fsync leaves the previous sequence (whose committed bytes changed only
//!    in neighbor words, which its readers skip past N and its writer repairs, and in delete
//!    marks above its epoch, which read as live); after it, the new one.
//! 3. The copy is the state at `s` exactly in everything but neighbor lists: deleted epochs
//!    above the state's E (a delete flush in progress at the source) are written as 0 and
//!    table entries past the state's counts as 0. Neighbor lists are the source's as read,
//!    which a writer may have edited since `s` (edges toward slots past N): the caller repairs
//!    them as a writer's open does ([`crate::Index::backup`] does).
//! 4. Only a file whose current header carries the backup stamp for its own sequence
//!    (FORMAT.md: a backup wrote that header, and every commit since would have cleared it)
//!    is synced incrementally, and only when it is also an earlier state of the same file
//!    (same geometry and parameters, the same slot at every place it holds, the same region
//!    offsets, no newer sequence). Anything else is left untouched:
//!    [`SyncOutcome::Mismatch`], and the caller makes a full copy.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::format::codes;
use crate::format::geometry::SegmentLayout;
use crate::format::header::{self, Header};
use crate::format::patch::{Op, Patch};
use crate::format::{self, align_region, live, record, table, DATA_START};
use crate::os::{Region, Storage};

/// The unit of comparison: a block whose bytes differ is shipped whole.
pub const BLOCK: u64 = 4096;

/// Bytes read at a time: a multiple of [`BLOCK`] and of the 24-byte slot header.
const CHUNK: u64 = 24 * BLOCK * 16;

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// The sequence the destination now holds.
    pub sequence: u64,
    /// Its committed slot count N.
    pub committed_count: u64,
    /// Live vectors in that state.
    pub live: u64,
    /// The destination's sequence before, `None` when it held no file.
    pub previous_sequence: Option<u64>,
    /// Which header copy (0 = A, 1 = B) held that sequence.
    pub previous_copy: Option<usize>,
    /// Bytes written to the destination (fixed area included).
    pub bytes_shipped: u64,
    /// Bytes of the destination's committed part read to find what changed.
    pub bytes_compared: u64,
    /// Bytes of the source's committed regions (what a full copy ships).
    pub committed_bytes: u64,
    /// True when the destination already held this sequence: nothing was written.
    pub unchanged: bool,
}

/// How a sync ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The destination holds the state.
    Synced(SyncReport),
    /// The destination is not an earlier state of the source (why); it was not touched.
    Mismatch(String),
}

/// Region offsets of one committed state, per table, in table order, cut to its counts.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tables {
    segments: Vec<u64>,
    upper: Vec<u64>,
    metadata: Vec<u64>,
}

fn read_tables(s: &dyn Storage, h: &Header) -> Result<Tables> {
    let len = s.len()?;
    let entries = h.geometry.table_page_entries;
    let page = table::page_bytes(entries);
    let mut all: [Vec<u64>; 3] = Default::default();
    let mut buf = vec![0u8; page as usize];
    for &off in &h.table_pages {
        table::check_region(off, page, len, 0)?;
        s.read_at(off, &mut buf)?;
        let kind = table::decode_head(&buf, off, entries)?;
        let list = &mut all[(kind - table::KIND_SEGMENTS) as usize];
        for i in 0..u64::from(entries) {
            list.push(u64_at(&buf, table::entry_at(i)));
        }
    }
    let [mut segments, mut upper, mut metadata] = all;
    let g = &h.geometry;
    let cut = |list: &mut Vec<u64>, count: u64, size: &dyn Fn(u64) -> u64| -> Result<()> {
        if (list.len() as u64) < count {
            return Err(Error::corrupt(
                "table pages hold fewer regions than counted",
                0,
            ));
        }
        list.truncate(count as usize);
        for (k, &off) in list.iter().enumerate() {
            table::check_region(off, size(k as u64), len, 0)?;
        }
        Ok(())
    };
    cut(&mut segments, h.segment_count, &|k| {
        h.segment_layout(k).bytes
    })?;
    cut(&mut upper, h.upper_heap_chunk_count, &|k| {
        g.heap_chunk_bytes(k)
    })?;
    cut(&mut metadata, h.metadata_heap_chunk_count, &|k| {
        g.metadata_chunk_bytes(k)
    })?;
    Ok(Tables {
        segments,
        upper,
        metadata,
    })
}

fn u64_at(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// Bytes of heap chunk `k` in use when the heap's first free byte is at reference `next`
/// (at least the chunk head, which readers check).
fn heap_used(next: u64, k: u64, chunk_bytes: u64) -> u64 {
    let (chunk, off) = record::split_heap_ref(next);
    let head = record::HEAP_CHUNK_HEAD_BYTES;
    if next == 0 {
        return head;
    }
    match k.cmp(&u64::from(chunk)) {
        std::cmp::Ordering::Less => chunk_bytes,
        std::cmp::Ordering::Equal => u64::from(off).max(head),
        std::cmp::Ordering::Greater => head,
    }
}

/// Slots of segment `k` below `count`.
fn committed_in(h: &Header, k: u64, count: u64) -> u64 {
    let first = h.geometry.segment_first_slot(k);
    count.saturating_sub(first).min(h.geometry.segment_slots(k))
}

/// Why `d` (the destination's header and tables) is not an earlier state of `s`, if it isn't.
/// First of all the file identity: only a copy of this very file (the same random identity,
/// made when the file was created) is an earlier state of it. A file rebuilt at the same
/// path with the same options shares everything else below; a file written before
/// identities has none, and is never synced incrementally.
fn lineage(s: &Header, st: &Tables, d: &Header, dt: &Tables) -> Option<String> {
    if !crate::mutants::active(crate::mutants::Mutant::SyncIgnoresIdentity) {
        if !s.has_identity() {
            return Some(
                "the source has no file identity yet (written before identities; its next \
                 flush gives it one)"
                    .into(),
            );
        }
        if d.file_id != s.file_id {
            return Some(if d.has_identity() {
                "it is a copy of another file (its file identity differs: a file rebuilt or \
                 compacted at the source's path is a new file)"
                    .into()
            } else {
                "it has no file identity (written before identities)".into()
            });
        }
    }
    let same = s.dims == d.dims
        && s.metric == d.metric
        && s.m == d.m
        && s.m0 == d.m0
        && s.max_layers == d.max_layers
        && s.geometry == d.geometry
        && s.seed == d.seed
        && s.vector_layout == d.vector_layout
        && s.read_version == d.read_version;
    if !same {
        return Some("its dimensions, metric, graph parameters or geometry differ".into());
    }
    if d.sequence > s.sequence {
        return Some(format!(
            "it holds sequence {}, newer than the source's {}",
            d.sequence, s.sequence
        ));
    }
    if d.committed_count > s.committed_count
        || d.delete_epoch > s.delete_epoch
        || d.next_id > s.next_id
    {
        return Some("it holds more than the source".into());
    }
    let prefix = |a: &[u64], b: &[u64]| a.len() <= b.len() && b[..a.len()] == *a;
    if !prefix(&d.table_pages, &s.table_pages)
        || !prefix(&dt.segments, &st.segments)
        || !prefix(&dt.upper, &st.upper)
        || !prefix(&dt.metadata, &st.metadata)
    {
        return Some("its regions are not where the source's are (a compacted source?)".into());
    }
    None
}

/// Reads `len` bytes at `off` from `s`.
fn read(s: &dyn Storage, off: u64, len: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; len as usize];
    s.read_at(off, &mut b)?;
    Ok(b)
}

struct Copier<'a> {
    src: &'a dyn Storage,
    dst: &'a dyn Storage,
    shipped: u64,
    compared: u64,
}

impl Copier<'_> {
    /// Brings `off..off + len` of the destination to the source's bytes, passed through
    /// `fix`: the first `compare` bytes block by block (only differing blocks are written),
    /// the rest written whole.
    fn copy(
        &mut self,
        off: u64,
        len: u64,
        compare: u64,
        fix: &dyn Fn(u64, &mut [u8]),
    ) -> Result<()> {
        let mut at = 0;
        while at < len {
            let n = CHUNK.min(len - at);
            let mut s = read(self.src, off + at, n)?;
            fix(at, &mut s);
            let cmp = compare.saturating_sub(at).min(n);
            if cmp > 0 {
                let d = read(self.dst, off + at, cmp)?;
                self.compared += cmp;
                let mut b = 0;
                while b < cmp {
                    let e = (b + BLOCK).min(cmp);
                    if s[b as usize..e as usize] != d[b as usize..e as usize] {
                        // Extend over the following differing blocks: one write.
                        let mut end = e;
                        while end < cmp {
                            let next = (end + BLOCK).min(cmp);
                            if s[end as usize..next as usize] == d[end as usize..next as usize] {
                                break;
                            }
                            end = next;
                        }
                        self.write(off + at + b, &s[b as usize..end as usize])?;
                        b = end;
                    } else {
                        b = e;
                    }
                }
            }
            if cmp < n {
                self.write(off + at + cmp, &s[cmp as usize..])?;
            }
            at += n;
        }
        Ok(())
    }

    fn write(&mut self, off: u64, b: &[u8]) -> Result<()> {
        self.dst.write_at(off, b)?;
        self.shipped += b.len() as u64;
        Ok(())
    }
}

fn no_fix(_: u64, _: &mut [u8]) {}

/// The state a destination is given: the committed state `h` describes, as a file at rest.
fn state_header(h: &Header) -> Header {
    let mut state = h.clone();
    // An intent header carries the previous commit's state; the marks of the flush in
    // progress are written as 0 below, so the copy holds no flush to recover.
    state.pending_delete_epoch = 0;
    // The copy is not superseded by anything.
    state.flags &= !header::FLAG_SUPERSEDED;
    state
}

/// Brings `dst` to the committed state `h` of `src` (see the module doc). `dst` may be empty
/// (a full copy) or hold an earlier state of the same file (an incremental sync). The caller
/// holds `dst`'s writer lock. Afterwards the destination's lists still need a writer's
/// repair pass (its live page says it was not closed cleanly), unless the report says
/// `unchanged`.
pub fn sync_state(src: &dyn Storage, h: &Header, dst: &dyn Storage) -> Result<SyncOutcome> {
    if h.write_version > format::WRITE_VERSION {
        return Err(Error::ReadOnly {
            reason: "the file was written by a newer release; back it up with that release",
        });
    }
    let state = state_header(h);
    let st = read_tables(src, &state)?;
    let fresh = dst.len()? == 0;
    let (old, old_copy, dt) = if fresh {
        (None, 0, Tables::default())
    } else {
        let (d, copy) = match crate::storage::read_current_header(dst) {
            Ok(x) => x,
            Err(e @ (Error::Io(_) | Error::TooNew { .. })) => return Err(e),
            Err(e) => return Ok(SyncOutcome::Mismatch(format!("it does not open: {e}"))),
        };
        let dt = match read_tables(dst, &d) {
            Ok(t) => t,
            Err(Error::Corrupt { what, .. }) => {
                return Ok(SyncOutcome::Mismatch(format!("it does not open: {what}")))
            }
            Err(e) => return Err(e),
        };
        if stamp_of(dst, copy)? != Some(d.sequence) {
            return Ok(SyncOutcome::Mismatch(
                "it is not a backup's copy, or something committed to it since".into(),
            ));
        }
        if let Some(why) = lineage(&state, &st, &d, &dt) {
            return Ok(SyncOutcome::Mismatch(why));
        }
        (Some(d), copy, dt)
    };
    let old_n = old.as_ref().map_or(0, |d| d.committed_count);
    let e = state.delete_epoch;
    let hb = record::SLOT_HEADER_BYTES;
    // Every committed slot the destination holds must hold the same id and document.
    let mut compared = 0;
    for (k, &off) in dt.segments.iter().enumerate() {
        let c = committed_in(&state, k as u64, old_n);
        if c == 0 {
            continue;
        }
        let a = read(src, off, hb * c)?;
        let b = read(dst, off, hb * c)?;
        compared += hb * c;
        let same = a
            .chunks(hb as usize)
            .zip(b.chunks(hb as usize))
            .all(|(x, y)| x[..8] == y[..8] && x[16..24] == y[16..24]);
        if !same {
            return Ok(SyncOutcome::Mismatch(format!(
                "segment {k} holds other vectors than the source's"
            )));
        }
    }
    let committed_bytes = committed_extent(&state, &st);
    let mut report = SyncReport {
        sequence: state.sequence,
        committed_count: state.committed_count,
        live: state.committed_count.saturating_sub(state.deleted_count),
        previous_sequence: old.as_ref().map(|d| d.sequence),
        previous_copy: old.as_ref().map(|_| old_copy),
        bytes_shipped: 0,
        bytes_compared: compared,
        committed_bytes,
        unchanged: false,
    };
    if let Some(d) = &old {
        if d.sequence == state.sequence {
            let same = d.committed_count == state.committed_count
                && d.delete_epoch == state.delete_epoch
                && d.deleted_count == state.deleted_count
                && d.next_id == state.next_id
                && d.table_pages == state.table_pages;
            if !same {
                return Ok(SyncOutcome::Mismatch(
                    "it holds another state at the same sequence".into(),
                ));
            }
            report.unchanged = true;
            return Ok(SyncOutcome::Synced(report));
        }
    }
    let mut c = Copier {
        src,
        dst,
        shipped: 0,
        compared: 0,
    };
    // (1) Before anything committed moves, the destination stops saying it was closed
    // cleanly; and when delete marks above its epoch are coming, its header becomes an intent
    // (decision 6), so that a writer opening it after a crash resets them.
    let mut copy = 0;
    if let Some(d) = &old {
        if state.delete_epoch > d.delete_epoch
            && d.pending_delete_epoch == 0
            && d.sequence + 1 >= state.sequence
        {
            // The destination holds the state an intent header of the source showed (the
            // commit before it, at the intent's sequence), and the source's next sequence
            // already carries the deletes: no sequence is left between them for this sync's
            // own intent header. Replaced whole, as any state it can't be brought from.
            return Ok(SyncOutcome::Mismatch(
                "its sequence leaves no room for a delete intent".into(),
            ));
        }
        c.write(format::LIVE_PAGE_OFFSET, &[0u8; 8])?;
        copy = 1 - old_copy;
        if state.delete_epoch > d.delete_epoch && d.pending_delete_epoch == 0 {
            let mut intent = d.clone();
            intent.pending_delete_epoch = state.delete_epoch;
            intent.sequence = d.sequence + 1;
            c.write(format::header_offset(copy), &stamped(&intent))?;
            copy = old_copy;
        }
        dst.sync()?;
    }
    let end = region_end(&state, &st).max(DATA_START);
    dst.grow(end)?;
    // (2) Table pages, with entries past the state's counts cleared.
    let page = table::page_bytes(state.geometry.table_page_entries);
    let counts = [
        state.segment_count,
        state.upper_heap_chunk_count,
        state.metadata_heap_chunk_count,
    ];
    let mut seen = [0u64; 3];
    for &off in &state.table_pages {
        let head = read(src, off, table::HEAD_BYTES)?;
        let kind = table::decode_head(&head, off, state.geometry.table_page_entries)?;
        let t = (kind - table::KIND_SEGMENTS) as usize;
        let first = seen[t];
        seen[t] += u64::from(state.geometry.table_page_entries);
        let keep = counts[t].saturating_sub(first);
        let fix = move |_: u64, b: &mut [u8]| {
            let from = table::entry_at(keep) as usize;
            if let Some(rest) = b.get_mut(from..) {
                rest.fill(0);
            }
        };
        let compare = if dt_has_page(old.as_ref(), off) {
            page
        } else {
            0
        };
        c.copy(off, page, compare, &fix)?;
    }
    // (3) Segments: slot headers and level-0 records compared below the old N; everything
    // from the old N to the new one shipped.
    let codebook_shipped = old
        .as_ref()
        .is_some_and(|d| d.codebook != 0 && d.codebook == state.codebook);
    let rb = record::level0_record_bytes(state.m);
    for (k, &off) in st.segments.iter().enumerate() {
        let k = k as u64;
        let layout = state.segment_layout(k);
        let new = committed_in(&state, k, state.committed_count);
        let was = committed_in(&state, k, old_n);
        let clear_marks = move |_: u64, b: &mut [u8]| {
            for slot in b.chunks_mut(hb as usize) {
                let at = record::SLOT_DELETED_EPOCH_AT as usize;
                if u64_at(slot, at as u64) > e {
                    slot[at..at + 8].fill(0);
                }
            }
        };
        c.copy(off + layout.headers_at, hb * new, hb * was, &clear_marks)?;
        for (at, vb) in layout.vector_planes.into_iter().filter(|p| p.1 > 0) {
            c.copy(off + at + vb * was, vb * (new - was), 0, &no_fix)?;
        }
        c.copy(off + layout.records_at, rb * new, rb * was, &no_fix)?;
        // Codes: written with their slots and never changed once a committed header names
        // the codebook; before that (a destination without it) every slot's are shipped.
        if layout.code_bytes > 0 && state.codebook != 0 {
            let from = if codebook_shipped { was } else { 0 };
            c.copy(
                off + layout.aux_at + codes::AUX_BYTES * from,
                codes::AUX_BYTES * (new - from),
                0,
                &no_fix,
            )?;
            c.copy(
                off + layout.codes_at + layout.code_bytes * from,
                layout.code_bytes * (new - from),
                0,
                &no_fix,
            )?;
        }
    }
    // The codebook region, once, when the destination doesn't have it.
    if state.codebook != 0 && !codebook_shipped {
        c.copy(
            state.codebook,
            codes::codebook_bytes(state.dims),
            0,
            &no_fix,
        )?;
    }
    // (4) Heaps: upper entries compared below the old first free byte (their neighbor words
    // change), metadata entries never (they don't); both shipped past it.
    let g = state.geometry;
    let old_upper = old.as_ref().map_or(0, |d| d.upper_heap_next);
    let old_meta = old.as_ref().map_or(0, |d| d.metadata_heap_next);
    // Bytes of chunk k in use in the new state, and of those the destination already had.
    let extent = |k: usize, bytes: u64, next: u64, old_next: u64, had: usize| {
        let used = heap_used(next, k as u64, bytes);
        let was = if k < had {
            heap_used(old_next, k as u64, bytes).min(used)
        } else {
            0
        };
        (used, was)
    };
    for (k, &off) in st.upper.iter().enumerate() {
        let bytes = g.heap_chunk_bytes(k as u64);
        let (used, was) = extent(k, bytes, state.upper_heap_next, old_upper, dt.upper.len());
        c.copy(off, used, was, &no_fix)?;
    }
    for (k, &off) in st.metadata.iter().enumerate() {
        let bytes = g.metadata_chunk_bytes(k as u64);
        let (used, was) = extent(
            k,
            bytes,
            state.metadata_heap_next,
            old_meta,
            dt.metadata.len(),
        );
        c.copy(off + was, used - was, 0, &no_fix)?;
    }
    // (5) Data durable, then the header that counts it, then durable.
    dst.sync()?;
    if old.is_none() {
        // A new file gets both copies, as a created file does: the other one holds the same
        // state one sequence lower, so it is valid and never chosen over this one.
        let mut older = state.clone();
        older.sequence = state.sequence.saturating_sub(1);
        c.write(format::header_offset(1 - copy), &stamped(&older))?;
    }
    c.write(format::header_offset(copy), &stamped(&state))?;
    dst.sync()?;
    report.bytes_shipped = c.shipped;
    report.bytes_compared += c.compared;
    Ok(SyncOutcome::Synced(report))
}

/// The stamp of a backup's header: its sequence XOR `CHBACKUP` (FORMAT.md).
const STAMP_KEY: u64 = u64::from_le_bytes(*b"CHBACKUP");

/// `h` encoded with the backup stamp set.
fn stamped(h: &Header) -> Vec<u8> {
    let mut b = h.encode();
    let at = header::at::BACKUP_STAMP;
    b[at..at + 8].copy_from_slice(&(h.sequence ^ STAMP_KEY).to_le_bytes());
    let sum = header::checksum(&b);
    let at = header::at::CHECKSUM;
    b[at..at + 8].copy_from_slice(&sum.to_le_bytes());
    b
}

/// The sequence the backup stamp of header copy `copy` names, if it has one.
fn stamp_of(s: &dyn Storage, copy: usize) -> Result<Option<u64>> {
    let b = read(
        s,
        format::header_offset(copy) + header::at::BACKUP_STAMP as u64,
        8,
    )?;
    let w = u64_at(&b, 0);
    Ok((w != 0).then_some(w ^ STAMP_KEY))
}

fn dt_has_page(old: Option<&Header>, off: u64) -> bool {
    old.is_some_and(|d| d.table_pages.contains(&off))
}

/// One past the last byte of the state's regions, each taken at its 64 KiB-aligned size (as
/// a reader maps it).
fn region_end(h: &Header, t: &Tables) -> u64 {
    let g = h.geometry;
    let page = align_region(table::page_bytes(g.table_page_entries));
    let segs = t
        .segments
        .iter()
        .enumerate()
        .map(|(k, &o)| o + align_region(h.segment_layout(k as u64).bytes));
    let codebook = (h.codebook != 0)
        .then(|| h.codebook + align_region(codes::codebook_bytes(h.dims)))
        .into_iter();
    let upper = t
        .upper
        .iter()
        .enumerate()
        .map(|(k, &o)| o + align_region(g.heap_chunk_bytes(k as u64)));
    let meta = t
        .metadata
        .iter()
        .enumerate()
        .map(|(k, &o)| o + align_region(g.metadata_chunk_bytes(k as u64)));
    let pages = h.table_pages.iter().map(|&o| o + page);
    segs.chain(upper)
        .chain(meta)
        .chain(pages)
        .chain(codebook)
        .max()
        .unwrap_or(0)
}

/// Bytes a full copy of the state ships: its committed slots and heap bytes, its table
/// pages, and the fixed area.
fn committed_extent(h: &Header, t: &Tables) -> u64 {
    let g = h.geometry;
    let slots =
        h.committed_count * SegmentLayout::slot_bytes_for(h.dims, h.m, h.layout(), h.code_kind());
    let upper: u64 = (0..t.upper.len() as u64)
        .map(|k| heap_used(h.upper_heap_next, k, g.heap_chunk_bytes(k)))
        .sum();
    let meta: u64 = (0..t.metadata.len() as u64)
        .map(|k| heap_used(h.metadata_heap_next, k, g.metadata_chunk_bytes(k)))
        .sum();
    let pages = h.table_pages.len() as u64 * table::page_bytes(g.table_page_entries);
    slots + upper + meta + pages + DATA_START
}

/// A [`Storage`] that passes everything to another and records the writes, growths and
/// fsyncs made through it, in order: a sync into it yields the [`Patch`] that replays the
/// same sync on another copy of the destination ([`replay`]).
pub struct Recorder {
    inner: Arc<dyn Storage>,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// Records what is done to `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Recorder {
        Recorder {
            inner,
            ops: Mutex::new(Vec::new()),
        }
    }

    /// The steps recorded so far.
    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn push(&self, op: Op) {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
    }
}

impl Storage for Recorder {
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn grow(&self, len: u64) -> Result<()> {
        self.inner.grow(len)?;
        self.push(Op::Grow(len));
        Ok(())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.inner.write_at(offset, buf)?;
        self.push(Op::Write {
            offset,
            bytes: buf.to_vec(),
        });
        Ok(())
    }
    fn map(&self, _offset: u64, _len: u64, _writable: bool) -> Result<Region> {
        // A mapping's stores could not be recorded; sync_state never maps.
        Err(Error::InvalidArgument(
            "a recording storage cannot be mapped".into(),
        ))
    }
    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.allocate(offset, len)?;
        self.push(Op::Grow(offset + len));
        Ok(())
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()?;
        self.push(Op::Sync);
        Ok(())
    }
    fn sync_dir(&self) -> Result<()> {
        self.inner.sync_dir()
    }
    fn try_lock_exclusive(&self) -> Result<()> {
        self.inner.try_lock_exclusive()
    }
}

/// Replays a patch's steps on `dst`, in order. The caller checked that `dst` holds the
/// patch's base sequence (or is a new file, for a full copy) and holds its writer lock.
pub fn replay(dst: &dyn Storage, patch: &Patch) -> Result<()> {
    for op in &patch.ops {
        match op {
            Op::Write { offset, bytes } => dst.write_at(*offset, bytes)?,
            Op::Grow(len) => dst.grow(*len)?,
            Op::Sync => dst.sync()?,
        }
    }
    Ok(())
}

/// What a patch checks of its destination before it is replayed ([`base_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseState {
    /// The current header's sequence.
    pub sequence: u64,
    /// Which copy holds it (0 = A).
    pub copy: usize,
    /// Whether its backup stamp names that sequence (nothing committed since a backup).
    pub stamped: bool,
    /// The current header copy's checksum field.
    pub checksum: u64,
    /// The file's identity.
    pub file_id: [u8; 16],
}

/// The state a patch would be applied to at `s` (or recorded against).
pub fn base_state(s: &dyn Storage) -> Result<BaseState> {
    let (h, copy) = crate::storage::read_current_header(s)?;
    let sum = read(
        s,
        format::header_offset(copy) + header::at::CHECKSUM as u64,
        8,
    )?;
    Ok(BaseState {
        sequence: h.sequence,
        copy,
        stamped: stamp_of(s, copy)? == Some(h.sequence),
        checksum: u64_at(&sum, 0),
        file_id: h.file_id,
    })
}

/// Whether the live page of `s` holds the clean-close marker for `sequence`.
pub fn closed_cleanly_at(s: &dyn Storage, sequence: u64) -> Result<bool> {
    let b = read(s, format::LIVE_PAGE_OFFSET, 16)?;
    Ok(b[..8] == live::CLEAN_MAGIC && u64_at(&b, live::CLEAN_SEQUENCE_AT) == sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_use_counts_whole_earlier_chunks_and_the_head_of_later_ones() {
        let next = record::heap_ref(2, 100);
        assert_eq!(heap_used(next, 0, 4096), 4096);
        assert_eq!(heap_used(next, 2, 8192), 100);
        assert_eq!(heap_used(next, 3, 8192), record::HEAP_CHUNK_HEAD_BYTES);
        assert_eq!(heap_used(0, 0, 4096), record::HEAP_CHUNK_HEAD_BYTES);
    }
}

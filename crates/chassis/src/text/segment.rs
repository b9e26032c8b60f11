//! Segments of the full-text index: the in-memory ones a writer builds as it adds documents,
//! and the stored ones a flush writes (`format::text` gives their bytes) and every search
//! reads in place.
//!
//! A segment covers a run of slots. For each slot it knows each field's token count, and for
//! each key (the field's index as one byte, then the term) the slots holding it, ascending,
//! with the term's frequency in each. Segments never change once made; a flush writes the
//! writer's in-memory segments as one stored segment, and may merge the newest stored ones
//! (both are append-only: merged segments' bytes stay in the heap until a compaction).
//!
//! Invariants: a stored segment's postings name only slots inside its run; its dictionary is
//! sorted by key; every blob it reaches is checked (checksum, kind, bounds) before use.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::text::{
    self, check_payload, decode_head, put_varint, Cursor, FieldStats, SegmentHead, HEAD_BYTES,
    KIND_DICT, KIND_LENGTHS, KIND_POSTINGS, KIND_SEGMENT, LENGTHS_PER_BLOB, MAX_PAYLOAD,
};

/// Where blobs are read from: the metadata heap's mapped chunks (the writer's or a
/// snapshot's).
pub trait BlobSource {
    /// The `n` bytes from heap reference `r` on, or `None` when they are not all inside one
    /// mapped chunk. Only committed blobs (or the writer's own) are asked for: bytes nothing
    /// writes while they are borrowed.
    fn bytes(&self, r: u64, n: usize) -> Option<&[u8]>;
}

/// The payload of the blob at `r`, checked to be of `kind`.
pub fn blob<B: BlobSource + ?Sized>(src: &B, r: u64, kind: u32) -> Result<&[u8]> {
    blob_checked(src, r, kind, None)
}

/// Blobs larger than this have their checksum verified once per segment and remembered
/// (committed blobs never change); smaller ones are verified on every read.
const REMEMBER_ABOVE: usize = 2048;

/// Refs of the large blobs of one segment whose checksum was verified.
#[derive(Debug, Default)]
pub struct Verified(std::sync::RwLock<std::collections::HashSet<u64>>);

/// [`blob`], remembering a large blob's verified checksum in `verified`.
fn blob_checked<'a, B: BlobSource + ?Sized>(
    src: &'a B,
    r: u64,
    kind: u32,
    verified: Option<&Verified>,
) -> Result<&'a [u8]> {
    let outside = || Error::corrupt("full-text index: a blob outside the metadata heap", r);
    let head = src.bytes(r, HEAD_BYTES).ok_or_else(outside)?;
    let (k, len, sum) = decode_head(head, r)?;
    let payload = src.bytes(r + HEAD_BYTES as u64, len).ok_or_else(outside)?;
    match verified {
        Some(v) if len > REMEMBER_ABOVE => {
            let known = v.0.read().map(|set| set.contains(&r)).unwrap_or(false);
            if known && k == kind {
                return Ok(payload);
            }
            check_payload(k, kind, sum, payload, r)?;
            if let Ok(mut set) = v.0.write() {
                set.insert(r);
            }
        }
        _ => check_payload(k, kind, sum, payload, r)?,
    }
    Ok(payload)
}

/// One document's terms, per field: each term with its frequency, and the field's length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DocTerms {
    /// Per field (the index's field order): term → frequency.
    pub fields: Vec<BTreeMap<String, u32>>,
    /// Per field: tokens.
    pub lengths: Vec<u32>,
}

impl DocTerms {
    /// Whether the document holds no token in any field.
    pub fn is_empty(&self) -> bool {
        self.lengths.iter().all(|&l| l == 0)
    }
}

/// A key: the field's index, then the term's bytes.
pub fn key(field: usize, term: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + term.len());
    k.push(field as u8);
    k.extend_from_slice(term.as_bytes());
    k
}

/// Postings: a key's (slot, term frequency) pairs, slots ascending.
pub type Postings = Vec<(u32, u32)>;

/// An in-memory segment: documents of slots `first..first + slots`, as added.
#[derive(Clone, Debug, Default)]
pub struct MemSegment {
    /// First slot.
    pub first: u32,
    /// Per field, per slot: token counts (saturated at u16 as stored).
    pub lengths: Vec<Vec<u16>>,
    /// Key → postings.
    pub postings: BTreeMap<Vec<u8>, Postings>,
}

impl MemSegment {
    /// A segment of `docs`, the documents of slots `first, first + 1, ...`.
    pub fn build(first: u32, fields: usize, docs: &[DocTerms]) -> MemSegment {
        let mut postings: BTreeMap<Vec<u8>, Postings> = BTreeMap::new();
        let mut lengths = vec![Vec::with_capacity(docs.len()); fields];
        for (i, d) in docs.iter().enumerate() {
            let slot = first + i as u32;
            for (f, out) in lengths.iter_mut().enumerate() {
                let len = d.lengths.get(f).copied().unwrap_or(0);
                out.push(len.min(u32::from(u16::MAX)) as u16);
                if let Some(terms) = d.fields.get(f) {
                    for (t, &tf) in terms {
                        postings.entry(key(f, t)).or_default().push((slot, tf));
                    }
                }
            }
        }
        MemSegment {
            first,
            lengths,
            postings,
        }
    }

    /// Slots covered.
    pub fn slots(&self) -> u32 {
        self.lengths.first().map_or(0, |l| l.len() as u32)
    }

    /// Field `f`'s length in `slot` (0 outside the segment).
    #[inline]
    pub fn length(&self, f: usize, slot: u32) -> u32 {
        slot.checked_sub(self.first)
            .and_then(|i| self.lengths.get(f)?.get(i as usize))
            .map_or(0, |&l| u32::from(l))
    }

    /// `self` followed by `next` (which starts where `self` ends) as one segment.
    pub fn merged(&self, next: &MemSegment) -> MemSegment {
        let mut out = self.clone();
        for (a, b) in out.lengths.iter_mut().zip(&next.lengths) {
            a.extend_from_slice(b);
        }
        for (k, p) in &next.postings {
            out.postings
                .entry(k.clone())
                .or_default()
                .extend_from_slice(p);
        }
        out
    }
}

/// A stored segment, its head read and its document lengths loaded (2 bytes per slot and
/// field, read once when the segment is opened): what a search needs besides the postings.
#[derive(Clone, Debug)]
pub struct StoredSegment {
    /// Where its head is.
    pub at: u64,
    /// Its head.
    pub head: SegmentHead,
    /// Per field, per slot: token counts.
    pub lengths: Arc<Vec<Vec<u16>>>,
    /// Large blobs of this segment already verified (shared by its clones).
    verified: Arc<Verified>,
}

impl StoredSegment {
    /// Reads the head at `r` and the lengths it names; each checked against the head (the
    /// count per blob, and each field's document and token totals).
    pub fn open<B: BlobSource + ?Sized>(src: &B, r: u64) -> Result<StoredSegment> {
        let head = SegmentHead::decode(blob(src, r, KIND_SEGMENT)?, r)?;
        let slots = head.slots as usize;
        let mut lengths = Vec::with_capacity(head.fields.len());
        for (stats, refs) in &head.fields {
            let mut ls = Vec::with_capacity(slots);
            for (j, &lr) in refs.iter().enumerate() {
                let p = blob(src, lr, KIND_LENGTHS)?;
                let mut c = Cursor::new(p, lr);
                let n = c.u32()? as usize;
                let want = (slots - j * LENGTHS_PER_BLOB).min(LENGTHS_PER_BLOB);
                let body = c.take(2 * n)?;
                if n != want || !c.done() {
                    return Err(Error::corrupt(
                        "full-text index: a lengths blob of the wrong size",
                        lr,
                    ));
                }
                ls.extend(
                    body.chunks_exact(2)
                        .map(|b| u16::from_le_bytes([b[0], b[1]])),
                );
            }
            let docs = ls.iter().filter(|&&l| l > 0).count() as u64;
            let tokens = ls.iter().map(|&l| u64::from(l)).sum::<u64>();
            if docs != stats.docs || tokens != stats.tokens {
                return Err(Error::corrupt(
                    "full-text index: a segment's lengths disagree with its totals",
                    r,
                ));
            }
            lengths.push(ls);
        }
        Ok(StoredSegment {
            at: r,
            head,
            lengths: Arc::new(lengths),
            verified: Arc::default(),
        })
    }

    /// Field `f`'s length in `slot` (0 outside the segment).
    #[inline]
    pub fn length(&self, f: usize, slot: u32) -> u32 {
        slot.checked_sub(self.head.first_slot)
            .and_then(|i| self.lengths.get(f)?.get(i as usize))
            .map_or(0, |&l| u32::from(l))
    }

    /// The dictionary entry of `k`: (df, pieces, first piece), if the segment holds it.
    pub fn find<B: BlobSource + ?Sized>(&self, src: &B, k: &[u8]) -> Result<Option<(u32, u64)>> {
        // The block whose first key is the last at or below k.
        let i = self
            .head
            .dict
            .partition_point(|(first, _)| first.as_slice() <= k);
        let Some((_, r)) = i.checked_sub(1).and_then(|i| self.head.dict.get(i)) else {
            return Ok(None);
        };
        let p = blob_checked(src, *r, KIND_DICT, Some(&self.verified))?;
        let mut c = Cursor::new(p, *r);
        let n = c.u32()? as usize;
        let offsets = c.take(2 * n)?;
        let entries = &p[4 + 2 * n..];
        let entry_at = |j: usize| -> Result<(&[u8], u32, u32, u64)> {
            let o = u16::from_le_bytes([offsets[2 * j], offsets[2 * j + 1]]) as usize;
            let mut e = Cursor::new(entries.get(o..).unwrap_or(&[]), *r);
            let key = e.short_bytes()?;
            Ok((key, e.u32()?, e.u32()?, e.u64()?))
        };
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (key, df, pieces, first) = entry_at(mid)?;
            match key.cmp(k) {
                std::cmp::Ordering::Equal => {
                    if df == 0 || pieces == 0 || first == 0 {
                        return Err(Error::corrupt("full-text index: an empty term", *r));
                    }
                    return Ok(Some((df, first)));
                }
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        Ok(None)
    }

    /// Appends the postings of the term whose first piece is `first` (`df` of them) to `out`,
    /// each checked to lie in the segment, ascending.
    pub fn postings<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        first: u64,
        df: u32,
        out: &mut Vec<(u32, u32)>,
    ) -> Result<()> {
        self.for_each_posting(src, first, df, |slot, tf| out.push((slot, tf)))
    }

    /// Calls `g(slot, tf)` for each posting of the term whose first piece is `first` (`df`
    /// of them), ascending, each checked to lie in the segment. On an error some postings
    /// may have been passed to `g` already: the caller drops what it gathered.
    #[inline]
    pub fn for_each_posting<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        first: u64,
        df: u32,
        mut g: impl FnMut(u32, u32),
    ) -> Result<()> {
        let (lo, end) = (
            u64::from(self.head.first_slot),
            u64::from(self.head.first_slot) + u64::from(self.head.slots),
        );
        let mut slot = lo;
        let mut seen = 0u64;
        let mut r = first;
        let mut pieces = 0u32;
        while r != 0 {
            pieces += 1;
            if pieces > df {
                return Err(Error::corrupt("full-text index: a postings chain loops", r));
            }
            let p = blob_checked(src, r, KIND_POSTINGS, Some(&self.verified))?;
            let mut c = Cursor::new(p, r);
            let next = c.u64()?;
            let n = c.u32()?;
            for _ in 0..n {
                let delta = c.varint_fast()?;
                let tf = c.varint_fast()?;
                slot = if seen == 0 { lo + delta } else { slot + delta };
                if (seen != 0 && delta == 0) || slot >= end || tf == 0 || tf > u64::from(u32::MAX) {
                    return Err(Error::corrupt("full-text index: a posting out of range", r));
                }
                seen += 1;
                g(slot as u32, tf as u32);
            }
            if !c.done() {
                return Err(Error::corrupt(
                    "full-text index: bytes after the postings",
                    r,
                ));
            }
            r = next;
        }
        if seen != u64::from(df) {
            return Err(Error::corrupt(
                "full-text index: a term's postings disagree with its frequency",
                first,
            ));
        }
        Ok(())
    }

    /// Every key of the segment with its dictionary entry, in key order (merging, checking).
    pub fn keys<B: BlobSource + ?Sized>(&self, src: &B) -> Result<Vec<(Vec<u8>, u32, u64)>> {
        let mut out: Vec<(Vec<u8>, u32, u64)> = Vec::new();
        for (i, (first_key, r)) in self.head.dict.iter().enumerate() {
            let entries = text::decode_dict(blob(src, *r, KIND_DICT)?, *r)?;
            let in_place = entries
                .first()
                .is_some_and(|e| e.term == first_key.as_slice())
                && self.head.dict.get(i + 1).is_none_or(|(next, _)| {
                    entries.last().is_some_and(|e| e.term < next.as_slice())
                });
            if !in_place
                || out
                    .last()
                    .zip(entries.first())
                    .is_some_and(|(p, e)| p.0.as_slice() >= e.term)
            {
                return Err(Error::corrupt(
                    "full-text index: dictionary blocks out of order",
                    *r,
                ));
            }
            out.extend(
                entries
                    .into_iter()
                    .map(|e| (e.term.to_vec(), e.df, e.first)),
            );
        }
        Ok(out)
    }
}

/// What a flush writes: key → postings and per slot lengths, over slots `first..first + n`.
pub struct Built {
    /// First slot.
    pub first: u32,
    /// Per field, per slot: lengths.
    pub lengths: Vec<Vec<u16>>,
    /// Key → postings, keys ascending.
    pub postings: Vec<(Vec<u8>, Postings)>,
}

impl Built {
    /// The union of consecutive in-memory segments (each starting where the last ended).
    pub fn from_memory(fields: usize, segs: &[Arc<MemSegment>]) -> Built {
        let first = segs.first().map_or(0, |s| s.first);
        let mut lengths = vec![Vec::new(); fields];
        let mut postings: BTreeMap<Vec<u8>, Postings> = BTreeMap::new();
        for s in segs {
            for (f, out) in lengths.iter_mut().enumerate() {
                match s.lengths.get(f) {
                    Some(l) => out.extend_from_slice(l),
                    None => out.resize(out.len() + s.slots() as usize, 0),
                }
            }
            for (k, p) in &s.postings {
                postings.entry(k.clone()).or_default().extend_from_slice(p);
            }
        }
        Built {
            first,
            lengths,
            postings: postings.into_iter().collect(),
        }
    }

    /// The union of consecutive stored segments (a merge), read back from `src`.
    pub fn from_stored<B: BlobSource + ?Sized>(
        src: &B,
        fields: usize,
        segs: &[StoredSegment],
    ) -> Result<Built> {
        let first = segs.first().map_or(0, |s| s.head.first_slot);
        let mut lengths = vec![Vec::new(); fields];
        let mut postings: BTreeMap<Vec<u8>, Postings> = BTreeMap::new();
        for s in segs {
            for (f, out) in lengths.iter_mut().enumerate() {
                match s.lengths.get(f) {
                    Some(l) => out.extend_from_slice(l),
                    None => out.resize(out.len() + s.head.slots as usize, 0),
                }
            }
            for (k, df, firstp) in s.keys(src)? {
                let p = postings.entry(k).or_default();
                s.postings(src, firstp, df, p)?;
            }
        }
        Ok(Built {
            first,
            lengths,
            postings: postings.into_iter().collect(),
        })
    }

    /// Slots covered.
    pub fn slots(&self) -> u32 {
        self.lengths.first().map_or(0, |l| l.len() as u32)
    }

    /// Writes the segment's blobs through `alloc` (which stores a blob and returns its
    /// heap reference) and returns its head's reference.
    pub fn write(&self, mut alloc: impl FnMut(u32, &[u8]) -> Result<u64>) -> Result<u64> {
        let slots = self.slots();
        // Postings: each term's pieces written last first, so each knows the next's ref.
        let mut dict: Vec<(&[u8], u32, u32, u64)> = Vec::with_capacity(self.postings.len());
        for (k, list) in &self.postings {
            let mut pieces: Vec<Vec<u8>> = Vec::new();
            let mut body = Vec::new();
            let mut count = 0u32;
            let mut prev = u64::from(self.first);
            for (i, &(slot, tf)) in list.iter().enumerate() {
                let mut one = Vec::with_capacity(10);
                let delta = if i == 0 {
                    u64::from(slot) - u64::from(self.first)
                } else {
                    u64::from(slot) - prev
                };
                put_varint(&mut one, delta);
                put_varint(&mut one, u64::from(tf));
                if 12 + body.len() + one.len() > MAX_PAYLOAD {
                    pieces.push(std::mem::take(&mut body));
                    let n = count;
                    count = 0;
                    let last = pieces.len() - 1;
                    pieces[last].splice(0..0, n.to_le_bytes());
                }
                body.extend_from_slice(&one);
                count += 1;
                prev = u64::from(slot);
            }
            body.splice(0..0, count.to_le_bytes());
            pieces.push(body);
            let mut next = 0u64;
            for piece in pieces.iter().rev() {
                let mut p = Vec::with_capacity(8 + piece.len());
                p.extend_from_slice(&next.to_le_bytes());
                p.extend_from_slice(piece);
                next = alloc(KIND_POSTINGS, &p)?;
            }
            dict.push((k, list.len() as u32, pieces.len() as u32, next));
        }
        // The dictionary, in blocks of at most MAX_PAYLOAD bytes (an offset table first).
        let fixed = SegmentHead::fixed_bytes(self.lengths.len(), slots);
        let mut blocks: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut i = 0;
        while i < dict.len() {
            let mut j = i;
            let mut bytes = 4;
            while j < dict.len() && bytes + 2 + text::dict_entry_bytes(dict[j].0) <= MAX_PAYLOAD {
                bytes += 2 + text::dict_entry_bytes(dict[j].0);
                j += 1;
            }
            let entries: Vec<text::DictEntry<'_>> = dict[i..j]
                .iter()
                .map(|e| text::DictEntry {
                    term: e.0,
                    df: e.1,
                    pieces: e.2,
                    first: e.3,
                })
                .collect();
            let p = text::encode_dict(&entries);
            blocks.push((dict[i].0.to_vec(), alloc(KIND_DICT, &p)?));
            i = j;
        }
        let head_bytes = fixed + blocks.iter().map(|(k, _)| 10 + k.len()).sum::<usize>();
        if head_bytes > MAX_PAYLOAD {
            return Err(Error::InvalidArgument(
                "a full-text segment too large for one head (more than about 3 billion \
                 distinct terms or slots); compact the index"
                    .into(),
            ));
        }
        // Lengths, per field.
        let mut fields = Vec::with_capacity(self.lengths.len());
        for ls in &self.lengths {
            let mut refs = Vec::new();
            let mut stats = FieldStats::default();
            for chunk in ls.chunks(LENGTHS_PER_BLOB) {
                let mut p = Vec::with_capacity(4 + 2 * chunk.len());
                p.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
                for &l in chunk {
                    p.extend_from_slice(&l.to_le_bytes());
                    stats.docs += u64::from(l > 0);
                    stats.tokens += u64::from(l);
                }
                refs.push(alloc(KIND_LENGTHS, &p)?);
            }
            fields.push((stats, refs));
        }
        let head = SegmentHead {
            first_slot: self.first,
            slots,
            terms: dict.len() as u32,
            fields,
            dict: blocks,
        };
        alloc(KIND_SEGMENT, &head.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::text::{FieldStats, TextField};
    use crate::text::{doc_terms, TextScratch, TextView};

    /// Blobs in one growing buffer; a reference is an offset (never 0).
    #[derive(Default)]
    struct Heap(std::cell::RefCell<Vec<u8>>);

    impl Heap {
        fn alloc(&self, kind: u32, payload: &[u8]) -> Result<u64> {
            let mut b = self.0.borrow_mut();
            if b.is_empty() {
                b.resize(8, 0);
            }
            let at = b.len() as u64;
            b.extend_from_slice(&text::encode_blob(kind, payload));
            Ok(at)
        }
    }

    struct Frozen(Vec<u8>);
    impl BlobSource for Frozen {
        fn bytes(&self, r: u64, n: usize) -> Option<&[u8]> {
            self.0.get(r as usize..(r as usize).checked_add(n)?)
        }
    }

    fn docs(n: usize, seed: u64) -> Vec<DocTerms> {
        let fields = vec![
            TextField {
                name: "text".into(),
                analyzer: Default::default(),
            },
            TextField {
                name: "title".into(),
                analyzer: Default::default(),
            },
        ];
        let mut x = seed | 1;
        (0..n)
            .map(|i| {
                let mut m = crate::format::metadata::Metadata::new();
                let words: Vec<String> = (0..(i % 9))
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        format!("t{}", x % (1 + (x >> 40) % 20_000))
                    })
                    .collect();
                m.insert(
                    "text".into(),
                    crate::format::metadata::Value::Str(words.join(" ")),
                );
                if i % 3 == 0 {
                    m.insert(
                        "title".into(),
                        crate::format::metadata::Value::Str(format!("t{} x", i % 7)),
                    );
                }
                let bytes = crate::format::metadata::encode(&m).unwrap();
                doc_terms(
                    &fields,
                    &crate::format::metadata::DocRef::new(&bytes, 0).unwrap(),
                )
            })
            .collect()
    }

    /// A stored segment answers as the in-memory segments it was written from: the same
    /// postings, lengths and searches; a big one spans many postings pieces, dictionary
    /// blocks and length blobs; merged segments answer as their union; damage is corrupt.
    #[test]
    fn stored_segments_answer_as_their_memory_and_merge() {
        let heap = Heap::default();
        let d = docs(40_000, 7);
        let mems = vec![
            Arc::new(MemSegment::build(0, 2, &d[..25_000])),
            Arc::new(MemSegment::build(25_000, 2, &d[25_000..])),
        ];
        let built = Built::from_memory(2, &mems);
        let head = built.write(|k, p| heap.alloc(k, p)).unwrap();
        let small = Built::from_memory(2, &[Arc::new(MemSegment::build(40_000, 2, &docs(500, 9)))]);
        let head2 = small.write(|k, p| heap.alloc(k, p)).unwrap();
        let src = Frozen(heap.0.take());
        let stored = StoredSegment::open(&src, head).unwrap();
        assert!(stored.head.dict.len() > 1, "several dictionary blocks");
        assert!(stored.head.fields[0].1.len() > 1, "several length blobs");
        let stored2 = StoredSegment::open(&src, head2).unwrap();
        let fields = vec![
            TextField {
                name: "text".into(),
                analyzer: Default::default(),
            },
            TextField {
                name: "title".into(),
                analyzer: Default::default(),
            },
        ];
        let stats: Vec<FieldStats> = (0..2).map(|f| stored.head.fields[f].0).collect();
        let mem_view = TextView {
            fields: Arc::new(fields.clone()),
            stats: stats.clone(),
            stored: Arc::default(),
            memory: Arc::new(mems.clone()),
        };
        let disk_view = TextView {
            fields: Arc::new(fields.clone()),
            stats,
            stored: Arc::new(vec![stored.clone()]),
            memory: Arc::default(),
        };
        let mut s = TextScratch::default();
        for q in [
            "t1",
            "t3 t7",
            "t0 t1 t2 t3",
            "x t5",
            "t499",
            "t19999 t12345",
            "nothing",
        ] {
            let a = mem_view
                .search(
                    &src,
                    q,
                    20,
                    true,
                    |_| true,
                    |_| true,
                    |x| Ok(u64::from(x)),
                    &mut s,
                )
                .unwrap();
            let b = disk_view
                .search(
                    &src,
                    q,
                    20,
                    true,
                    |_| true,
                    |_| true,
                    |x| Ok(u64::from(x)),
                    &mut s,
                )
                .unwrap();
            assert_eq!(a, b, "{q}");
        }
        for slot in [0u32, 1, 24_999, 25_000, 39_999] {
            for f in 0..2 {
                assert_eq!(
                    stored.length(f, slot),
                    mems.iter().map(|m| m.length(f, slot)).sum::<u32>()
                );
            }
        }
        // The frequent term's postings span pieces.
        let (df, first) = stored.find(&src, &key(0, "t0")).unwrap().unwrap();
        let mut out = Vec::new();
        stored.postings(&src, first, df, &mut out).unwrap();
        assert_eq!(
            out,
            mems.iter()
                .flat_map(|m| m.postings[&key(0, "t0")].clone())
                .collect::<Vec<_>>()
        );
        // A merge of both stored segments answers as both.
        let merged = Built::from_stored(&src, 2, &[stored, stored2]).unwrap();
        assert_eq!(merged.slots(), 40_500);
        // Damage: a flipped byte in the dictionary is corrupt, never a panic (for a reader
        // opening the damaged file: a segment remembers the large blobs it verified).
        let mut bytes = src.0.clone();
        let at = disk_view.stored[0].head.dict[0].1 as usize + 40;
        bytes[at] ^= 0x10;
        let damaged = Frozen(bytes);
        let disk_view = TextView {
            stored: Arc::new(vec![StoredSegment::open(&damaged, head).unwrap()]),
            ..disk_view
        };
        assert!(matches!(
            disk_view.search(
                &damaged,
                "t1 t2 t3 t4",
                10,
                true,
                |_| true,
                |_| true,
                |x| Ok(u64::from(x)),
                &mut s
            ),
            Err(Error::Corrupt { .. })
        ));
    }
}

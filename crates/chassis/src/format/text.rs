//! The full-text index's bytes (write version 9): blobs in the metadata heap, reached only
//! from the header's `text_root` (docs/FORMAT.md, "Full-text index").
//!
//! Every piece of the index is a **blob**: a 16-byte head (magic `CHTX` as a u32, kind u32,
//! payload length u32, low 32 bits of the xxh3-64 of the payload) and at most
//! [`MAX_PAYLOAD`] bytes of payload, 8-byte aligned in the metadata heap like a metadata
//! entry. Releases without full-text search never reach a blob (they follow only slots'
//! metadata references), so the index is derived data they can ignore.
//!
//! Kinds and payloads (little-endian; "ref" is a metadata-heap reference, u64):
//!
//! - [`KIND_ROOT`]: the index as one commit left it. `version` u32 (1), `field_count` u32,
//!   each field: `name_len` u16, name (UTF-8), the analyzer ([`Analyzer::encode`]), then the
//!   field's statistics over the live documents of that commit: `docs` u64 (live slots whose
//!   document has at least one token in the field), `tokens` u64 (their tokens); then
//!   `segment_count` u32 and one segment head ref per segment, oldest first.
//! - [`KIND_SEGMENT`]: `first_slot` u32, `slots` u32 (the segment covers slots
//!   `first_slot..first_slot + slots`), `field_count` u32, `terms` u32, `dict_blocks` u32;
//!   per field: `docs` u32, `tokens` u64 (over every covered slot), then its length blobs'
//!   refs (⌈slots / [`LENGTHS_PER_BLOB`]⌉ of them); then `dict_blocks` × (first key: `len`
//!   u16 + bytes; ref).
//! - [`KIND_DICT`]: `count` u32, then `count` u16 offsets (each entry's, from the first
//!   entry's start: a search bisects the block without reading it all), then `count` entries
//!   sorted by key bytes, each: `len` u16, the key (the field's index as one byte, then the
//!   term's bytes), `df` u32 (slots of the segment holding it), `pieces` u32, ref of the
//!   first postings piece.
//! - [`KIND_POSTINGS`]: `next` ref (0 for the last piece), `count` u32, then `count`
//!   postings, each: slot as a varint delta from the previous (from `first_slot` for the
//!   first of the term; deltas continue across pieces), term frequency as a varint.
//! - [`KIND_LENGTHS`]: `count` u32, then `count` u16 token counts (a document of more than
//!   65,535 tokens counts 65,535), for consecutive slots of the segment.
//!
//! Decoding checks every bound and the checksum and never panics on any input: anything
//! wrong is [`Error::Corrupt`].

use crate::error::{Error, Result};

/// `CHTX` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CHTX");
/// Offset of a blob's kind.
pub const KIND_AT: usize = 4;
/// Offset of a blob's payload length.
pub const LENGTH_AT: usize = 8;
/// Offset of a blob's checksum.
pub const CHECKSUM_AT: usize = 12;
/// Bytes before a blob's payload.
pub const HEAD_BYTES: usize = 16;
/// The most payload one blob holds (so every blob fits the smallest metadata-heap chunk).
pub const MAX_PAYLOAD: usize = 64 * 1024 - HEAD_BYTES;
/// Blob kind: the root.
pub const KIND_ROOT: u32 = 1;
/// Blob kind: a segment's head.
pub const KIND_SEGMENT: u32 = 2;
/// Blob kind: a block of the term dictionary.
pub const KIND_DICT: u32 = 3;
/// Blob kind: a piece of one term's postings.
pub const KIND_POSTINGS: u32 = 4;
/// Blob kind: document lengths.
pub const KIND_LENGTHS: u32 = 5;
/// Document lengths one [`KIND_LENGTHS`] blob holds.
pub const LENGTHS_PER_BLOB: usize = (MAX_PAYLOAD - 4) / 2;
/// The root's layout version this release writes and reads.
pub const ROOT_VERSION: u32 = 1;
/// The longest term kept (longer tokens are cut to this many bytes, on a char boundary).
pub const MAX_TERM_BYTES: usize = 255;

/// A blob as bytes: head and payload, padded with zeros to a multiple of 8.
pub fn encode_blob(kind: u32, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= MAX_PAYLOAD);
    let mut b = Vec::with_capacity((HEAD_BYTES + payload.len()).next_multiple_of(8));
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(&(xxhash_rust::xxh3::xxh3_64(payload) as u32).to_le_bytes());
    b.extend_from_slice(payload);
    b.resize(b.len().next_multiple_of(8), 0);
    b
}

/// Reads a blob's head from its first [`HEAD_BYTES`]: (kind, payload length, checksum).
pub fn decode_head(b: &[u8], at: u64) -> Result<(u32, usize, u32)> {
    let bad = |what: &str| Err(Error::corrupt(format!("full-text index: {what}"), at));
    if b.len() < HEAD_BYTES {
        return bad("blob head truncated");
    }
    if super::u32_at(b, 0) != MAGIC {
        return bad("no CHTX magic where a blob should start");
    }
    let kind = super::u32_at(b, KIND_AT);
    let len = super::u32_at(b, LENGTH_AT) as usize;
    if len > MAX_PAYLOAD {
        return bad("blob longer than the largest");
    }
    Ok((kind, len, super::u32_at(b, CHECKSUM_AT)))
}

/// Checks a blob's payload against its head's checksum and kind.
pub fn check_payload(
    kind: u32,
    want_kind: u32,
    checksum: u32,
    payload: &[u8],
    at: u64,
) -> Result<()> {
    if kind != want_kind {
        return Err(Error::corrupt(
            format!("full-text index: a blob of kind {kind} where kind {want_kind} belongs"),
            at,
        ));
    }
    if xxhash_rust::xxh3::xxh3_64(payload) as u32 != checksum {
        return Err(Error::corrupt(
            "full-text index: blob checksum mismatch",
            at,
        ));
    }
    Ok(())
}

/// Appends `v` as a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A bounds-checked reader over a payload.
pub struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    /// The blob's file position, for error reports.
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `b` (the payload of the blob at `base`).
    pub fn new(b: &'a [u8], base: u64) -> Cursor<'a> {
        Cursor { b, at: 0, base }
    }

    fn bad<T>(&self, what: &str) -> Result<T> {
        Err(Error::corrupt(
            format!("full-text index: {what}"),
            self.base + self.at as u64,
        ))
    }

    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.at == self.b.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.at.checked_add(n).filter(|&e| e <= self.b.len()) {
            Some(end) => {
                let s = &self.b[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => self.bad("truncated"),
        }
    }

    /// A u16.
    pub fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// A u32.
    pub fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A u64.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(super::u64_at(self.take(8)?, 0))
    }

    /// A LEB128 varint of at most 10 bytes.
    #[inline]
    pub fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(&byte) = self.b.get(self.at) else {
                return self.bad("varint truncated");
            };
            self.at += 1;
            if shift == 63 && byte > 1 {
                return self.bad("varint too long");
            }
            v |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.bad("varint too long")
    }

    /// A varint, with a fast path for the one-byte ones (most deltas and frequencies).
    #[inline(always)]
    pub fn varint_fast(&mut self) -> Result<u64> {
        match self.b.get(self.at) {
            Some(&byte) if byte < 0x80 => {
                self.at += 1;
                Ok(u64::from(byte))
            }
            _ => self.varint(),
        }
    }

    /// A `len` u16 then that many bytes.
    pub fn short_bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

/// How a field's text is cut into terms (recorded in the root, so every release tokenizes a
/// file's text as the release that indexed it did).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analyzer {
    /// The tokenizer: 1 = Unicode word boundaries (UAX #29, the words `unicode-segmentation`
    /// 1.x yields: runs containing a letter or digit), the only one so far.
    pub tokenizer: u32,
    /// Lowercase every term (Unicode lowercase mapping).
    pub lowercase: bool,
    /// Snowball stemmer: 0 none, 1 English (Porter 2).
    pub stemmer: u32,
    /// Leave out the English stop words ([`crate::text::ENGLISH_STOP_WORDS`]).
    pub stop_words: bool,
}

impl Default for Analyzer {
    fn default() -> Analyzer {
        Analyzer {
            tokenizer: 1,
            lowercase: true,
            stemmer: 0,
            stop_words: false,
        }
    }
}

impl Analyzer {
    /// Appends the analyzer's bytes: tokenizer u32, flags u32 (bit 0 lowercase, bit 1 stop
    /// words), stemmer u32.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.tokenizer.to_le_bytes());
        let flags = u32::from(self.lowercase) | (u32::from(self.stop_words) << 1);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.stemmer.to_le_bytes());
    }

    /// Reads one; an analyzer this release doesn't know is corrupt (it could not tokenize
    /// queries as the index was built).
    pub fn decode(c: &mut Cursor<'_>) -> Result<Analyzer> {
        let tokenizer = c.u32()?;
        let flags = c.u32()?;
        let stemmer = c.u32()?;
        if tokenizer != 1 || flags & !3 != 0 || stemmer > 1 {
            return c.bad(&format!(
                "an analyzer this release doesn't know (tokenizer {tokenizer}, flags {flags}, \
                 stemmer {stemmer})"
            ));
        }
        Ok(Analyzer {
            tokenizer,
            lowercase: flags & 1 != 0,
            stemmer,
            stop_words: flags & 2 != 0,
        })
    }
}

/// One indexed field: its metadata key and analyzer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextField {
    /// The metadata key whose string values are indexed.
    pub name: String,
    /// How they are cut into terms.
    pub analyzer: Analyzer,
}

/// A field's statistics over a set of documents: how many have at least one token in the
/// field, and their tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldStats {
    /// Documents with at least one token in the field.
    pub docs: u64,
    /// Tokens of the field over those documents.
    pub tokens: u64,
}

/// The root blob's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Root {
    /// The indexed fields; a document's terms are kept per field (each term's key names its
    /// field), and a query is scored in every field and summed.
    pub fields: Vec<TextField>,
    /// Each field's statistics over the live documents of the commit that wrote this root.
    pub stats: Vec<FieldStats>,
    /// Segment head refs, oldest first.
    pub segments: Vec<u64>,
}

/// The most fields one index holds.
pub const MAX_FIELDS: usize = 64;

impl Root {
    /// The root's payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&ROOT_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.fields.len() as u32).to_le_bytes());
        for (f, s) in self.fields.iter().zip(&self.stats) {
            b.extend_from_slice(&(f.name.len() as u16).to_le_bytes());
            b.extend_from_slice(f.name.as_bytes());
            f.analyzer.encode(&mut b);
            b.extend_from_slice(&s.docs.to_le_bytes());
            b.extend_from_slice(&s.tokens.to_le_bytes());
        }
        b.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for r in &self.segments {
            b.extend_from_slice(&r.to_le_bytes());
        }
        b
    }

    /// Decodes a root payload.
    pub fn decode(payload: &[u8], at: u64) -> Result<Root> {
        let mut c = Cursor::new(payload, at);
        let version = c.u32()?;
        if version != ROOT_VERSION {
            return c.bad(&format!("root version {version}"));
        }
        let nf = c.u32()? as usize;
        if nf == 0 || nf > MAX_FIELDS {
            return c.bad("field count out of range");
        }
        let mut fields = Vec::with_capacity(nf);
        let mut stats = Vec::with_capacity(nf);
        for _ in 0..nf {
            let name = std::str::from_utf8(c.short_bytes()?)
                .map_err(|_| Error::corrupt("full-text index: a field name not UTF-8", at))?
                .to_string();
            fields.push(TextField {
                name,
                analyzer: Analyzer::decode(&mut c)?,
            });
            stats.push(FieldStats {
                docs: c.u64()?,
                tokens: c.u64()?,
            });
        }
        let ns = c.u32()? as usize;
        if ns > payload.len() / 8 {
            return c.bad("segment count out of range");
        }
        let segments = (0..ns).map(|_| c.u64()).collect::<Result<Vec<_>>>()?;
        if !c.done() {
            return c.bad("bytes after the root");
        }
        Ok(Root {
            fields,
            stats,
            segments,
        })
    }
}

/// A segment head's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentHead {
    /// First slot covered.
    pub first_slot: u32,
    /// Slots covered.
    pub slots: u32,
    /// Distinct keys (field, term).
    pub terms: u32,
    /// Per field: its statistics over every covered slot and its length blobs' refs.
    pub fields: Vec<(FieldStats, Vec<u64>)>,
    /// The dictionary's blocks: each one's first key and ref.
    pub dict: Vec<(Vec<u8>, u64)>,
}

impl SegmentHead {
    /// The head's payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.first_slot.to_le_bytes());
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&(self.fields.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.terms.to_le_bytes());
        b.extend_from_slice(&(self.dict.len() as u32).to_le_bytes());
        for (s, lengths) in &self.fields {
            b.extend_from_slice(&(s.docs as u32).to_le_bytes());
            b.extend_from_slice(&s.tokens.to_le_bytes());
            for r in lengths {
                b.extend_from_slice(&r.to_le_bytes());
            }
        }
        for (t, r) in &self.dict {
            b.extend_from_slice(&(t.len() as u16).to_le_bytes());
            b.extend_from_slice(t);
            b.extend_from_slice(&r.to_le_bytes());
        }
        b
    }

    /// Bytes a head of `fields` fields over `slots` slots takes before its dictionary.
    pub fn fixed_bytes(fields: usize, slots: u32) -> usize {
        20 + fields * (12 + 8 * (slots as usize).div_ceil(LENGTHS_PER_BLOB))
    }

    /// Decodes a segment head payload.
    pub fn decode(payload: &[u8], at: u64) -> Result<SegmentHead> {
        let mut c = Cursor::new(payload, at);
        let first_slot = c.u32()?;
        let slots = c.u32()?;
        let nf = c.u32()? as usize;
        let terms = c.u32()?;
        let nd = c.u32()? as usize;
        if u64::from(first_slot) + u64::from(slots) > u64::from(u32::MAX)
            || nf == 0
            || nf > MAX_FIELDS
            || nd > payload.len() / 10
        {
            return c.bad("segment head out of range");
        }
        let nl = (slots as usize).div_ceil(LENGTHS_PER_BLOB);
        let mut fields = Vec::with_capacity(nf);
        for _ in 0..nf {
            let docs = c.u32()?;
            let tokens = c.u64()?;
            if docs > slots {
                return c.bad("more documents than slots");
            }
            let lengths = (0..nl).map(|_| c.u64()).collect::<Result<Vec<_>>>()?;
            fields.push((
                FieldStats {
                    docs: u64::from(docs),
                    tokens,
                },
                lengths,
            ));
        }
        let mut dict = Vec::with_capacity(nd);
        for _ in 0..nd {
            let t = c.short_bytes()?.to_vec();
            dict.push((t, c.u64()?));
        }
        if !dict.windows(2).all(|w| w[0].0 < w[1].0) {
            return c.bad("dictionary blocks out of order");
        }
        if !c.done() {
            return c.bad("bytes after the segment head");
        }
        Ok(SegmentHead {
            first_slot,
            slots,
            terms,
            fields,
            dict,
        })
    }
}

/// One dictionary entry: a term, its document frequency in the segment, the number of
/// postings pieces and the first one's ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DictEntry<'a> {
    /// The term's bytes.
    pub term: &'a [u8],
    /// Slots of the segment whose document holds the term.
    pub df: u32,
    /// Postings pieces.
    pub pieces: u32,
    /// The first piece's ref.
    pub first: u64,
}

/// Appends one dictionary entry's bytes.
pub fn encode_dict_entry(out: &mut Vec<u8>, term: &[u8], df: u32, pieces: u32, first: u64) {
    out.extend_from_slice(&(term.len() as u16).to_le_bytes());
    out.extend_from_slice(term);
    out.extend_from_slice(&df.to_le_bytes());
    out.extend_from_slice(&pieces.to_le_bytes());
    out.extend_from_slice(&first.to_le_bytes());
}

/// Bytes one dictionary entry takes.
pub fn dict_entry_bytes(term: &[u8]) -> usize {
    2 + term.len() + 4 + 4 + 8
}

/// Decodes a dictionary block's entries (sorted, each key once, every offset pointing at its
/// entry, checked).
pub fn decode_dict(payload: &[u8], at: u64) -> Result<Vec<DictEntry<'_>>> {
    let mut c = Cursor::new(payload, at);
    let n = c.u32()? as usize;
    if n > payload.len() / 20 + 1 {
        return c.bad("dictionary block count out of range");
    }
    let offsets = c.take(2 * n)?;
    let base = 4 + 2 * n;
    let mut out: Vec<DictEntry<'_>> = Vec::with_capacity(n);
    for i in 0..n {
        let o = u16::from_le_bytes([offsets[2 * i], offsets[2 * i + 1]]) as usize;
        if base + o != c.at {
            return c.bad("dictionary offset table disagrees with its entries");
        }
        let term = c.short_bytes()?;
        let df = c.u32()?;
        let pieces = c.u32()?;
        let first = c.u64()?;
        if out.last().is_some_and(|p| p.term >= term) || df == 0 || pieces == 0 || first == 0 {
            return c.bad("dictionary block out of order or empty");
        }
        out.push(DictEntry {
            term,
            df,
            pieces,
            first,
        });
    }
    if !c.done() {
        return c.bad("bytes after the dictionary block");
    }
    Ok(out)
}

/// A dictionary block's payload: the count, the offset table, the entries (sorted by key).
pub fn encode_dict(entries: &[DictEntry<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut p = Vec::with_capacity(4 + 2 * entries.len());
    p.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        p.extend_from_slice(&(body.len() as u16).to_le_bytes());
        encode_dict_entry(&mut body, e.term, e.df, e.pieces, e.first);
    }
    p.extend_from_slice(&body);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_roots_heads_and_varints_round_trip_and_damage_is_corrupt() {
        let root = Root {
            fields: vec![
                TextField {
                    name: "text".into(),
                    analyzer: Analyzer::default(),
                },
                TextField {
                    name: "title".into(),
                    analyzer: Analyzer {
                        stemmer: 1,
                        stop_words: true,
                        ..Analyzer::default()
                    },
                },
            ],
            stats: vec![
                FieldStats {
                    docs: 10,
                    tokens: 55,
                },
                FieldStats { docs: 3, tokens: 4 },
            ],
            segments: vec![8 << 32 | 16, 9 << 32 | 24],
        };
        let p = root.encode();
        assert_eq!(Root::decode(&p, 0).unwrap(), root);
        let blob = encode_blob(KIND_ROOT, &p);
        assert_eq!(blob.len() % 8, 0);
        let (kind, len, sum) = decode_head(&blob, 0).unwrap();
        check_payload(kind, KIND_ROOT, sum, &blob[HEAD_BYTES..HEAD_BYTES + len], 0).unwrap();
        let mut bad = blob.clone();
        bad[HEAD_BYTES + 3] ^= 1;
        assert!(
            check_payload(kind, KIND_ROOT, sum, &bad[HEAD_BYTES..HEAD_BYTES + len], 0).is_err()
        );
        assert!(
            check_payload(kind, KIND_DICT, sum, &blob[HEAD_BYTES..HEAD_BYTES + len], 0).is_err()
        );
        let head = SegmentHead {
            first_slot: 100,
            slots: 50_000,
            terms: 12,
            fields: vec![(
                FieldStats {
                    docs: 49_000,
                    tokens: 9_999_999,
                },
                vec![32, 40],
            )],
            dict: vec![(b"\0a".to_vec(), 16), (b"\0m".to_vec(), 24)],
        };
        assert_eq!(SegmentHead::decode(&head.encode(), 0).unwrap(), head);
        let mut v = Vec::new();
        for x in [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            put_varint(&mut v, x);
        }
        let mut c = Cursor::new(&v, 0);
        for x in [0u64, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(c.varint().unwrap(), x);
        }
        assert!(c.done());
        let e = |term: &'static [u8], df, first| DictEntry {
            term,
            df,
            pieces: 1,
            first,
        };
        let d = encode_dict(&[e(b"\0alpha", 3, 64), e(b"\0beta", 1, 72)]);
        assert_eq!(
            decode_dict(&d, 0).unwrap(),
            [e(b"\0alpha", 3, 64), e(b"\0beta", 1, 72)]
        );
        let out_of_order = encode_dict(&[e(b"beta", 1, 72), e(b"alpha", 3, 64)]);
        assert!(decode_dict(&out_of_order, 0).is_err());
        let mut bad_offset = d.clone();
        bad_offset[6] ^= 1;
        assert!(decode_dict(&bad_offset, 0).is_err());
    }

    #[test]
    fn decoders_never_panic_on_garbage() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for n in 0..400usize {
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) as u8
                })
                .collect();
            let _ = Root::decode(&bytes, 0);
            let _ = SegmentHead::decode(&bytes, 0);
            let _ = decode_dict(&bytes, 0);
            let _ = decode_head(&bytes, 0);
            let mut c = Cursor::new(&bytes, 0);
            while c.varint().is_ok() {}
        }
    }
}

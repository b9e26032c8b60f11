//! Metadata documents and metadata-heap entries, byte for byte (write version 5).
//!
//! A vector may carry one **document**: an object of string keys to null, bool, integer (i64),
//! float (f64, finite), string, or a list of those scalars (lists do not nest; objects do not
//! nest). It is stored once, when its slot is written, in the metadata heap (heap kind 2), and
//! the slot header's `metadata_ref` names it; it never changes afterwards (a new document for
//! an id is a new slot, docs/FORMAT.md).
//!
//! Document encoding (little-endian; keys sorted by their bytes, each once):
//!
//! ```text
//! document := field_count u16, field × field_count
//! field    := key_len u8 (1..=255), key (UTF-8), value
//! value    := tag u8, payload:  0 null | 1 false | 2 true | 3 int i64 | 4 float f64 (finite)
//!                               | 5 string: len u32, UTF-8 | 6 list: count u32, scalar × count
//! ```
//!
//! A heap entry is `length u32` (bytes of the document), `checksum u32` (the low 32 bits of
//! xxh3-64 over the id and the document), `id u64` (the vector's id, so a reference that
//! damage redirects to another entry is caught), the document, then zeros up to a multiple
//! of 8. Entries never straddle two chunks.
//!
//! Invariants: [`encode`] accepts only documents within [`MAX_DOCUMENT_BYTES`] and the rules
//! above, and [`decode`] accepts exactly what [`encode`] produces; decoding never panics on
//! any input, it returns [`Error::Corrupt`].

use std::collections::BTreeMap;

use super::{put_u32, u32_at};
use crate::error::{Error, Result};

/// Largest encoded document of one vector, in bytes (a document's text fits).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Longest key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 255;
/// Bytes before the document in a heap entry.
pub const ENTRY_HEAD_BYTES: u64 = 16;
/// Offset of the document's length in a heap entry.
pub const ENTRY_LENGTH_AT: u64 = 0;
/// Offset of the checksum (of the id and the document) in a heap entry.
pub const ENTRY_CHECKSUM_AT: u64 = 4;
/// Offset of the owning vector's id in a heap entry.
pub const ENTRY_ID_AT: u64 = 8;
/// Offset of the document in a heap entry.
pub const ENTRY_DOCUMENT_AT: u64 = ENTRY_HEAD_BYTES;
/// The smallest metadata-heap chunk: room for the chunk head and the largest entry.
pub const MIN_CHUNK_BYTES: u64 = 128 * 1024;

const TAG_NULL: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 2;
const TAG_INT: u8 = 3;
const TAG_FLOAT: u8 = 4;
const TAG_STRING: u8 = 5;
const TAG_LIST: u8 = 6;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// JSON null.
    Null,
    /// true or false.
    Bool(bool),
    /// A whole number that fits an i64.
    Int(i64),
    /// A finite f64.
    Float(f64),
    /// UTF-8 text.
    Str(String),
    /// A list of scalars (no nested lists).
    List(Vec<Value>),
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Value {
        Value::Int(i64::from(i))
    }
}
impl From<f64> for Value {
    fn from(f: f64) -> Value {
        Value::Float(f)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

/// A vector's metadata: keys to values (empty: no metadata).
pub type Metadata = BTreeMap<String, Value>;

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

/// Checks a key: 1..=255 bytes, not starting with `$` (filters use `$` for operators).
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(invalid(format!(
            "metadata key {:?} must be 1..={MAX_KEY_BYTES} bytes",
            truncate(key)
        )));
    }
    if key.starts_with('$') {
        return Err(invalid(format!(
            "metadata key {key:?} starts with '$', which filters reserve for operators"
        )));
    }
    Ok(())
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn encode_scalar(key: &str, v: &Value, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Null => out.push(TAG_NULL),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Int(i) => {
            out.push(TAG_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(invalid(format!(
                    "metadata {key:?}: {f} is not a finite number"
                )));
            }
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Value::Str(s) => {
            out.push(TAG_STRING);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Value::List(_) => {
            return Err(invalid(format!(
                "metadata {key:?}: lists hold scalars (null, bool, number, string), not lists"
            )))
        }
    }
    Ok(())
}

/// Encodes a document, checking every rule: keys, finite floats, flat lists, and the size
/// limit. An empty document encodes to two zero bytes (callers store no entry for it).
pub fn encode(doc: &Metadata) -> Result<Vec<u8>> {
    if doc.len() > usize::from(u16::MAX) {
        return Err(invalid(format!(
            "metadata has {} keys; at most {}",
            doc.len(),
            u16::MAX
        )));
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&(doc.len() as u16).to_le_bytes());
    for (key, v) in doc {
        check_key(key)?;
        out.push(key.len() as u8);
        out.extend_from_slice(key.as_bytes());
        match v {
            Value::List(items) => {
                out.push(TAG_LIST);
                out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for item in items {
                    encode_scalar(key, item, &mut out)?;
                }
            }
            v => encode_scalar(key, v, &mut out)?,
        }
        if out.len() > MAX_DOCUMENT_BYTES {
            break;
        }
    }
    if out.len() > MAX_DOCUMENT_BYTES {
        return Err(invalid(format!(
            "metadata of one vector encodes to more than {MAX_DOCUMENT_BYTES} bytes (the limit)"
        )));
    }
    Ok(out)
}

/// A value inside an encoded document, borrowed (no allocation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    /// null.
    Null,
    /// A bool.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A finite float.
    Float(f64),
    /// A string.
    Str(&'a str),
    /// A list: its element count and encoded elements.
    List(ListRef<'a>),
}

/// The elements of an encoded list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListRef<'a> {
    count: u32,
    bytes: &'a [u8],
}

impl<'a> ListRef<'a> {
    /// Element count.
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The elements (already validated when the document was read, so none is skipped).
    pub fn iter(&self) -> impl Iterator<Item = ValueRef<'a>> + 'a {
        let mut r = Cursor {
            b: self.bytes,
            at: 0,
            base: 0,
            checked: true,
        };
        (0..self.count).map_while(move |_| r.scalar().ok())
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    /// File offset of `b[0]`, for error reports.
    base: u64,
    /// Whether `b` is a whole document [`DocRef::new`] already checked (its strings are then
    /// known to be UTF-8 and are not checked again).
    checked: bool,
}

impl<'a> Cursor<'a> {
    fn bad(&self, what: &str) -> Error {
        Error::corrupt(
            format!("metadata document: {what}"),
            self.base + self.at as u64,
        )
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| self.bad("ends early"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
    fn str(&mut self, n: usize) -> Result<&'a str> {
        let at = self.at;
        let bytes = self.take(n)?;
        if self.checked {
            // SAFETY: `checked` is set only for the bytes of a `DocRef`, whose constructor
            // walked the same fields in the same order and checked this very range with
            // `from_utf8`; the bytes are borrowed immutably for 'a, so they are still UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        std::str::from_utf8(bytes).map_err(|_| {
            Error::corrupt(
                "metadata document: text is not UTF-8",
                self.base + at as u64,
            )
        })
    }
    fn scalar(&mut self) -> Result<ValueRef<'a>> {
        match self.u8()? {
            TAG_NULL => Ok(ValueRef::Null),
            TAG_FALSE => Ok(ValueRef::Bool(false)),
            TAG_TRUE => Ok(ValueRef::Bool(true)),
            TAG_INT => Ok(ValueRef::Int(self.u64()? as i64)),
            TAG_FLOAT => {
                let f = f64::from_bits(self.u64()?);
                if f.is_finite() {
                    Ok(ValueRef::Float(f))
                } else {
                    Err(self.bad("a float is not finite"))
                }
            }
            TAG_STRING => {
                let n = self.u32()? as usize;
                Ok(ValueRef::Str(self.str(n)?))
            }
            t => Err(self.bad(&format!("unknown value tag {t}"))),
        }
    }
    fn value(&mut self) -> Result<ValueRef<'a>> {
        if self.b.get(self.at) == Some(&TAG_LIST) {
            self.at += 1;
            let count = self.u32()?;
            let start = self.at;
            for _ in 0..count {
                self.scalar()?;
            }
            return Ok(ValueRef::List(ListRef {
                count,
                bytes: &self.b[start..self.at],
            }));
        }
        self.scalar()
    }
}

/// An encoded document, checked whole when made: its fields can then be read without
/// further checks or allocation.
#[derive(Clone, Copy, Debug)]
pub struct DocRef<'a> {
    bytes: &'a [u8],
    fields: u16,
}

impl<'a> DocRef<'a> {
    /// Checks `bytes` as a whole document (every field, every value, key order, no bytes
    /// left over). `base` is its file offset, for error reports.
    pub fn new(bytes: &'a [u8], base: u64) -> Result<DocRef<'a>> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(Error::corrupt(
                format!("metadata document of {} bytes", bytes.len()),
                base,
            ));
        }
        let mut c = Cursor {
            b: bytes,
            at: 0,
            base,
            checked: false,
        };
        let mut w = [0u8; 2];
        w.copy_from_slice(c.take(2)?);
        let fields = u16::from_le_bytes(w);
        let mut last: Option<&str> = None;
        for _ in 0..fields {
            let n = c.u8()? as usize;
            if n == 0 {
                return Err(c.bad("an empty key"));
            }
            let key = c.str(n)?;
            if key.starts_with('$') {
                return Err(c.bad("a key starts with '$'"));
            }
            if last.is_some_and(|l| l.as_bytes() >= key.as_bytes()) {
                return Err(c.bad("keys out of order or repeated"));
            }
            last = Some(key);
            c.value()?;
        }
        if c.at != bytes.len() {
            return Err(c.bad("bytes after the last field"));
        }
        Ok(DocRef { bytes, fields })
    }

    /// The empty document (no metadata).
    pub fn empty() -> DocRef<'static> {
        DocRef {
            bytes: &[0, 0],
            fields: 0,
        }
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        usize::from(self.fields)
    }

    /// Whether the document has no field.
    pub fn is_empty(&self) -> bool {
        self.fields == 0
    }

    /// The encoded bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Every (key, value), in key order.
    pub fn fields(&self) -> impl Iterator<Item = (&'a str, ValueRef<'a>)> + 'a {
        let mut c = Cursor {
            b: self.bytes,
            at: 2,
            base: 0,
            checked: true,
        };
        (0..self.fields).map_while(move |_| {
            let n = c.u8().ok()? as usize;
            let key = c.str(n).ok()?;
            Some((key, c.value().ok()?))
        })
    }

    /// The value of `key`, if the document has it.
    pub fn get(&self, key: &str) -> Option<ValueRef<'a>> {
        // Keys are sorted: stop at the first one past `key`.
        for (k, v) in self.fields() {
            match k.as_bytes().cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Some(v),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }

    /// The document as owned values.
    pub fn to_metadata(&self) -> Metadata {
        self.fields()
            .map(|(k, v)| (k.to_string(), owned(v)))
            .collect()
    }
}

fn owned(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Bool(b) => Value::Bool(b),
        ValueRef::Int(i) => Value::Int(i),
        ValueRef::Float(f) => Value::Float(f),
        ValueRef::Str(s) => Value::Str(s.to_string()),
        ValueRef::List(l) => Value::List(l.iter().map(owned).collect()),
    }
}

/// Decodes a whole document.
pub fn decode(bytes: &[u8], base: u64) -> Result<Metadata> {
    Ok(DocRef::new(bytes, base)?.to_metadata())
}

/// The checksum of an entry: of its id and its document.
pub fn checksum(id: u64, doc: &[u8]) -> u32 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&id.to_le_bytes());
    h.update(doc);
    h.digest() as u32
}

/// Bytes a heap entry for a document of `doc_len` bytes takes (head, document, padding).
pub fn entry_bytes(doc_len: usize) -> u64 {
    (ENTRY_HEAD_BYTES + doc_len as u64).div_ceil(8) * 8
}

/// Encodes a heap entry for the document of vector `id`.
pub fn encode_entry(id: u64, doc: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; entry_bytes(doc.len()) as usize];
    put_u32(&mut out, ENTRY_LENGTH_AT as usize, doc.len() as u32);
    put_u32(&mut out, ENTRY_CHECKSUM_AT as usize, checksum(id, doc));
    super::put_u64(&mut out, ENTRY_ID_AT as usize, id);
    out[ENTRY_HEAD_BYTES as usize..ENTRY_HEAD_BYTES as usize + doc.len()].copy_from_slice(doc);
    out
}

/// Reads the head of a heap entry: the document's length, once checked against the bytes
/// left in the chunk after the head (`room`).
pub fn entry_len(head: &[u8], room: u64, at: u64) -> Result<usize> {
    if head.len() < ENTRY_HEAD_BYTES as usize {
        return Err(Error::corrupt("metadata entry head cut short", at));
    }
    let len = u32_at(head, 0) as usize;
    if len > MAX_DOCUMENT_BYTES || len as u64 > room {
        return Err(Error::corrupt(
            format!("metadata entry of {len} bytes does not fit its chunk"),
            at,
        ));
    }
    Ok(len)
}

/// Checks a heap entry against its head: the checksum, and that it belongs to vector `id`.
pub fn check_entry<'a>(head: &[u8], doc: &'a [u8], id: u64, at: u64) -> Result<DocRef<'a>> {
    if head.len() < ENTRY_HEAD_BYTES as usize {
        return Err(Error::corrupt("metadata entry head cut short", at));
    }
    let owner = super::u64_at(head, ENTRY_ID_AT as usize);
    if checksum(owner, doc) != u32_at(head, ENTRY_CHECKSUM_AT as usize) {
        return Err(Error::corrupt("metadata entry checksum mismatch", at));
    }
    if owner != id {
        return Err(Error::corrupt(
            format!("metadata reference of id {id} names the entry of id {owner}"),
            at,
        ));
    }
    DocRef::new(doc, at + ENTRY_HEAD_BYTES)
}

/// A document from JSON: an object whose values are null, bools, numbers (integers that fit
/// an i64, or finite floats), strings, or lists of those.
pub fn from_json(v: &serde_json::Value) -> Result<Metadata> {
    let serde_json::Value::Object(map) = v else {
        return Err(invalid(format!(
            "metadata must be a JSON object of keys to values, got {}",
            kind_of(v)
        )));
    };
    let mut doc = Metadata::new();
    for (k, v) in map {
        check_key(k)?;
        let value = match v {
            serde_json::Value::Array(items) => Value::List(
                items
                    .iter()
                    .map(|x| scalar_from_json(k, x))
                    .collect::<Result<_>>()?,
            ),
            v => scalar_from_json(k, v)?,
        };
        doc.insert(k.clone(), value);
    }
    Ok(doc)
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a bool",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A scalar value from JSON (numbers: integers that fit an i64, else finite floats).
pub fn scalar_from_json(key: &str, v: &serde_json::Value) -> Result<Value> {
    Ok(match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if n.is_u64() {
                return Err(invalid(format!(
                    "metadata {key:?}: {n} does not fit a 64-bit signed integer"
                )));
            } else {
                match n.as_f64() {
                    Some(f) if f.is_finite() => Value::Float(f),
                    _ => {
                        return Err(invalid(format!(
                            "metadata {key:?}: {n} is not a finite number"
                        )))
                    }
                }
            }
        }
        serde_json::Value::String(s) => Value::Str(s.clone()),
        other => {
            return Err(invalid(format!(
                "metadata {key:?}: values are null, bools, numbers, strings or lists of those, \
                 not {} inside {}",
                kind_of(other),
                if matches!(other, serde_json::Value::Array(_)) {
                    "a list"
                } else {
                    "a document"
                }
            )))
        }
    })
}

/// A value as JSON.
pub fn value_to_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Value::Str(s) => serde_json::Value::String(s.clone()),
        Value::List(items) => serde_json::Value::Array(items.iter().map(value_to_json).collect()),
    }
}

/// A document as a JSON object.
pub fn to_json(doc: &Metadata) -> serde_json::Value {
    serde_json::Value::Object(
        doc.iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

/// Parses a document from JSON text.
pub fn parse_json(text: &str) -> Result<Metadata> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| invalid(format!("metadata is not valid JSON: {e}")))?;
    from_json(&v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.insert("tenant".into(), Value::from("acme"));
        m.insert("year".into(), Value::Int(2024));
        m.insert("score".into(), Value::Float(0.25));
        m.insert("draft".into(), Value::Bool(false));
        m.insert("none".into(), Value::Null);
        m.insert(
            "tags".into(),
            Value::List(vec![Value::from("a"), Value::Int(3), Value::Null]),
        );
        m
    }

    #[test]
    fn round_trip_and_field_lookup() {
        let m = sample();
        let b = encode(&m).unwrap();
        assert_eq!(decode(&b, 0).unwrap(), m);
        let d = DocRef::new(&b, 0).unwrap();
        assert_eq!(d.len(), 6);
        assert_eq!(d.get("year"), Some(ValueRef::Int(2024)));
        assert_eq!(d.get("tenant"), Some(ValueRef::Str("acme")));
        assert_eq!(d.get("zzz"), None);
        assert_eq!(d.get("aaa"), None);
        let Some(ValueRef::List(l)) = d.get("tags") else {
            panic!("tags is a list")
        };
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            vec![ValueRef::Str("a"), ValueRef::Int(3), ValueRef::Null]
        );
        assert_eq!(encode(&Metadata::new()).unwrap(), vec![0, 0]);
    }

    #[test]
    fn encode_refuses_what_the_format_cannot_hold() {
        let mut m = Metadata::new();
        m.insert("x".into(), Value::Float(f64::NAN));
        assert!(matches!(encode(&m), Err(Error::InvalidArgument(_))));
        let mut m = Metadata::new();
        m.insert("x".into(), Value::List(vec![Value::List(vec![])]));
        assert!(matches!(encode(&m), Err(Error::InvalidArgument(_))));
        let mut m = Metadata::new();
        m.insert("$x".into(), Value::Null);
        assert!(matches!(encode(&m), Err(Error::InvalidArgument(_))));
        let mut m = Metadata::new();
        m.insert("k".repeat(256), Value::Null);
        assert!(matches!(encode(&m), Err(Error::InvalidArgument(_))));
        let mut m = Metadata::new();
        m.insert("".into(), Value::Null);
        assert!(matches!(encode(&m), Err(Error::InvalidArgument(_))));
        // The size limit: a text of 64 KiB - 100 bytes fits, one of 64 KiB does not.
        let mut m = Metadata::new();
        m.insert(
            "text".into(),
            Value::Str("x".repeat(MAX_DOCUMENT_BYTES - 100)),
        );
        assert!(encode(&m).is_ok());
        m.insert("text".into(), Value::Str("x".repeat(MAX_DOCUMENT_BYTES)));
        let e = encode(&m).unwrap_err().to_string();
        assert!(e.contains("65536"), "{e}");
    }

    #[test]
    fn json_in_and_out() {
        let m = parse_json(
            r#"{"tenant": "acme", "year": 2024, "score": 0.25, "draft": false, "none": null,
                "tags": ["a", 3, null]}"#,
        )
        .unwrap();
        assert_eq!(m, sample());
        assert_eq!(from_json(&to_json(&m)).unwrap(), m);
        for bad in [
            r#"[1]"#,
            r#"{"a": {"b": 1}}"#,
            r#"{"a": [[1]]}"#,
            r#"{"a": 18446744073709551615}"#,
            r#"{"$a": 1}"#,
            r#"{"a": "#,
        ] {
            assert!(
                matches!(parse_json(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
        // 3.0 stays a float, 3 an integer.
        let m = parse_json(r#"{"a": 3.0, "b": 3}"#).unwrap();
        assert_eq!(m["a"], Value::Float(3.0));
        assert_eq!(m["b"], Value::Int(3));
    }

    #[test]
    fn entries_check_their_checksum() {
        let doc = encode(&sample()).unwrap();
        let e = encode_entry(77, &doc);
        assert_eq!(e.len() as u64, entry_bytes(doc.len()));
        assert_eq!(e.len() % 8, 0);
        let len = entry_len(&e[..16], e.len() as u64 - 16, 0).unwrap();
        assert_eq!(len, doc.len());
        let d = check_entry(&e[..16], &e[16..16 + len], 77, 0).unwrap();
        assert_eq!(d.to_metadata(), sample());
        assert!(
            check_entry(&e[..16], &e[16..16 + len], 78, 0).is_err(),
            "another id's entry"
        );
        for byte in 4..e.len().min(16 + len) {
            let mut bad = e.clone();
            bad[byte] ^= 1;
            assert!(
                check_entry(&bad[..16], &bad[16..16 + len], 77, 0).is_err(),
                "flip in byte {byte}"
            );
        }
        assert!(entry_len(&e[..16], 4, 0).is_err());
    }

    proptest! {
        /// Decoding never panics, and accepts only what re-encodes to the same bytes.
        #[test]
        fn decode_is_total_and_canonical(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(m) = decode(&bytes, 0) {
                prop_assert_eq!(encode(&m).unwrap(), bytes);
            }
        }

        /// Every bit flip of a valid document is an error or another valid document.
        #[test]
        fn flips_are_caught_or_harmless(bit in 0usize..(8 * 120)) {
            let b = encode(&sample()).unwrap();
            let mut c = b.clone();
            let i = (bit / 8) % c.len();
            c[i] ^= 1 << (bit % 8);
            if let Ok(m) = decode(&c, 0) {
                prop_assert_eq!(encode(&m).unwrap(), c);
            }
        }
    }
}

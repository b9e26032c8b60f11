//! Full-text and hybrid search through the C API: text fields as JSON, BM25 searches writing
//! ids and scores as `chassis_search` writes ids and distances, and hybrid searches whose
//! options are a JSON object. The helpers (argument checks, status codes) are the crate root's.

use super::*;
use chassis::{Fusion, HybridHit, HybridOptions, TextFieldSpec, TextHit};

/// Text fields from JSON: an array of names (`["text"]`) or objects (`{"name": "title",
/// "stem": true, "stop_words": true, "lowercase": true}`).
fn fields_of(json: &str) -> Result<Vec<TextFieldSpec>, Fail> {
    let bad = |why: String| Fail::Chassis(Error::InvalidArgument(why));
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("fields_json: {e}")))?;
    let items = v
        .as_array()
        .ok_or_else(|| bad("fields_json must be a JSON array".into()))?;
    items
        .iter()
        .map(|f| match f {
            serde_json::Value::String(name) => Ok(TextFieldSpec::new(name.clone())),
            serde_json::Value::Object(o) => {
                let known = ["name", "stem", "stop_words", "lowercase"];
                if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
                    return Err(bad(format!("text field: unknown key {k:?}")));
                }
                let flag = |k: &str, default: bool| -> Result<bool, Fail> {
                    match o.get(k) {
                        None => Ok(default),
                        Some(serde_json::Value::Bool(b)) => Ok(*b),
                        Some(_) => Err(bad(format!("text field: {k:?} must be true or false"))),
                    }
                };
                let name = o
                    .get("name")
                    .and_then(|n| n.as_str())
                    .ok_or_else(|| bad("text field: \"name\" must be a string".into()))?;
                Ok(TextFieldSpec::new(name)
                    .stem(flag("stem", false)?)
                    .stop_words(flag("stop_words", false)?)
                    .lowercase(flag("lowercase", true)?))
            }
            _ => Err(bad("a text field is a name or an object".into())),
        })
        .collect()
}

fn fields_json(specs: &[TextFieldSpec]) -> String {
    serde_json::Value::Array(
        specs
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name, "stem": s.stem, "stop_words": s.stop_words,
                    "lowercase": s.lowercase,
                })
            })
            .collect(),
    )
    .to_string()
}

/// A filter argument: null for none.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn filter_arg(p: *const c_char) -> Result<Option<Filter>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: NUL-terminated per the caller's contract.
    Ok(Some(Filter::parse(unsafe { text_arg(p, "filter_json") }?)?))
}

/// Hybrid options from JSON (null for the defaults): `{"fusion": "rrf" | "relative_score",
/// "rrf_k": 60, "weights": [vector, text], "depth": 50, "filter": {...}}`.
fn hybrid_of(json: Option<&str>) -> Result<(HybridOptions, Option<Filter>), Fail> {
    let bad = |why: String| Fail::Chassis(Error::InvalidArgument(why));
    let mut opts = HybridOptions::default();
    let Some(json) = json else {
        return Ok((opts, None));
    };
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("options_json: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| bad("options_json must be a JSON object".into()))?;
    let known = ["fusion", "rrf_k", "weights", "depth", "filter"];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(format!("options_json: unknown key {k:?}")));
    }
    let rrf_k = match o.get("rrf_k") {
        None => 60.0,
        Some(x) => x
            .as_f64()
            .ok_or_else(|| bad("options_json: rrf_k must be a number".into()))?
            as f32,
    };
    opts.fusion = match o.get("fusion").map(|f| f.as_str()) {
        None | Some(Some("rrf")) => Fusion::Rrf { k: rrf_k },
        Some(Some("relative_score")) => Fusion::RelativeScore,
        _ => {
            return Err(bad(
                "options_json: fusion must be \"rrf\" or \"relative_score\"".into(),
            ))
        }
    };
    if let Some(w) = o.get("weights") {
        let w: Vec<f64> = w
            .as_array()
            .filter(|a| a.len() == 2)
            .and_then(|a| a.iter().map(|x| x.as_f64()).collect())
            .ok_or_else(|| bad("options_json: weights must be [vector, text]".into()))?;
        opts.vector_weight = w[0] as f32;
        opts.text_weight = w[1] as f32;
    }
    if let Some(d) = o.get("depth") {
        opts.depth = d
            .as_u64()
            .ok_or_else(|| bad("options_json: depth must be a positive integer".into()))?
            as usize;
    }
    let filter = match o.get("filter") {
        None | Some(serde_json::Value::Null) => None,
        Some(f) => Some(Filter::parse(&f.to_string())?),
    };
    Ok((opts, filter))
}

fn write_text_hits(
    hits: &[TextHit],
    ids: *mut u64,
    scores: *mut f32,
    k: usize,
    found: *mut usize,
) -> Result<(), Fail> {
    let ids = out(ids, "ids")?;
    let found = out(found, "found")?;
    for (i, h) in hits.iter().take(k).enumerate() {
        // SAFETY: the caller provides room for `k` ids (and scores, if not null).
        unsafe {
            *ids.add(i) = h.id;
            if !scores.is_null() {
                *scores.add(i) = h.score;
            }
        }
    }
    // SAFETY: non-null, writable per the contract.
    unsafe { *found = hits.len().min(k) };
    Ok(())
}

/// Where a hybrid search writes each leg's rank and score (each pointer null to skip it).
#[repr(C)]
pub struct chassis_hybrid_legs {
    /// Room for `k`: the vector leg's rank of each hit, from 1; 0 where it did not return it.
    pub vector_ranks: *mut u32,
    /// Room for `k`: the vector leg's distance of each hit; NaN where it did not return it.
    pub vector_distances: *mut f32,
    /// Room for `k`: the text leg's rank of each hit, from 1; 0 where it did not return it.
    pub text_ranks: *mut u32,
    /// Room for `k`: the text leg's BM25 score of each hit; NaN where it did not return it.
    pub text_scores: *mut f32,
}

fn write_hybrid_hits(
    hits: &[HybridHit],
    ids: *mut u64,
    scores: *mut f32,
    legs: *mut chassis_hybrid_legs,
    k: usize,
    found: *mut usize,
) -> Result<(), Fail> {
    let ids = out(ids, "ids")?;
    let found = out(found, "found")?;
    // SAFETY: null or a readable struct per the contract.
    let legs = unsafe { legs.as_ref() };
    for (i, h) in hits.iter().take(k).enumerate() {
        // SAFETY: the caller provides room for `k` values behind every non-null pointer.
        unsafe {
            *ids.add(i) = h.id;
            if !scores.is_null() {
                *scores.add(i) = h.score;
            }
            if let Some(l) = legs {
                let (vr, vd) = h.vector.map_or((0, f32::NAN), |v| (v.rank, v.score));
                let (tr, ts) = h.text.map_or((0, f32::NAN), |t| (t.rank, t.score));
                if !l.vector_ranks.is_null() {
                    *l.vector_ranks.add(i) = vr;
                }
                if !l.vector_distances.is_null() {
                    *l.vector_distances.add(i) = vd;
                }
                if !l.text_ranks.is_null() {
                    *l.text_ranks.add(i) = tr;
                }
                if !l.text_scores.is_null() {
                    *l.text_scores.add(i) = ts;
                }
            }
        }
    }
    // SAFETY: non-null, writable per the contract.
    unsafe { *found = hits.len().min(k) };
    Ok(())
}

/// Indexes these metadata fields for full-text search from now on, every document already
/// stored included: `fields_json` is a JSON array of names (`["text"]`) or objects
/// (`{"name": "title", "stem": true, "stop_words": true}`: English Snowball stemming,
/// Lucene's English stop words; `"lowercase": false` keeps case); `[]` drops the index.
/// Committed by the next `chassis_flush` (a file with text fields has write version 9).
///
/// Thread safety: as `chassis_add`.
///
/// # Safety
/// `index` is a live handle; `fields_json` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn chassis_set_text_fields(
    index: *mut chassis_index,
    fields_json: *const c_char,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: NUL-terminated per the contract.
        let specs = fields_of(unsafe { text_arg(fields_json, "fields_json") }?)?;
        write(ix).set_text_fields(&specs)?;
        Ok(())
    })
}

/// Writes the index's text fields as a JSON array of objects (`[]` for none) and a NUL into
/// `buf` (room for `buf_len` bytes), and the length without the NUL to `out_len`;
/// `CHASSIS_STATUS_BUFFER_TOO_SMALL` (with `out_len` set) when it does not fit.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `buf` is null or writable for `buf_len` bytes; `out_len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_text_fields(
    index: *const chassis_index,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        write_text(&fields_json(&read(ix).text_fields()), buf, buf_len, out_len)
    })
}

/// The `k` live documents that best match `text` by BM25 over the index's text fields, best
/// first: writes up to `k` ids and scores (`scores` may be null) and the count to `found`
/// (fewer than `k` when fewer documents hold a query term). `filter_json` (null for none)
/// narrows what is returned, as in `chassis_search_filtered`.
/// `CHASSIS_STATUS_INVALID_ARGUMENT` when the index has no text fields.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `text` is a NUL-terminated string; `filter_json` is null or a
/// NUL-terminated string; `ids` has room for `k` values, `scores` is null or has room for
/// `k`; `found` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_text(
    index: *const chassis_index,
    text: *const c_char,
    k: usize,
    filter_json: *const c_char,
    ids: *mut u64,
    scores: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: NUL-terminated (or null, for the filter) per the contract.
        let (t, f) = unsafe { (text_arg(text, "text")?, filter_arg(filter_json)?) };
        let hits = read(ix).search_text(t, k, f.as_ref())?;
        write_text_hits(&hits, ids, scores, k, found)
    })
}

/// [`chassis_search_text`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_search_text`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_search_text(
    reader: *const chassis_reader,
    text: *const c_char,
    k: usize,
    filter_json: *const c_char,
    ids: *mut u64,
    scores: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: NUL-terminated (or null, for the filter) per the contract.
        let (t, f) = unsafe { (text_arg(text, "text")?, filter_arg(filter_json)?) };
        let hits = r.inner.search_text(t, k, f.as_ref())?;
        write_text_hits(&hits, ids, scores, k, found)
    })
}

/// Hybrid search: the `k` best live vectors by fusing a vector search for `query` and a
/// BM25 search for `text`. `options_json` (null for the defaults) is a JSON object:
/// `"fusion"` `"rrf"` (the default: reciprocal rank fusion, k = `"rrf_k"`, 60) or
/// `"relative_score"`; `"weights"` `[vector, text]` (default `[1, 1]`); `"depth"`, the
/// candidates each leg returns (default max(k, 50)); `"filter"`, a filter applied to both
/// legs. The vector leg searches with ef at least depth, completed by the text leg's hits
/// (scored by exact vector distance). Writes up to `k` ids and fused
/// scores (higher is better; `scores` may be null), each leg's rank and score into `legs`
/// (null to skip), and the count to `found`.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `query` points to `dims` floats; `text` is a NUL-terminated
/// string; `options_json` is null or a NUL-terminated string; `ids` has room for `k` values,
/// `scores` is null or has room for `k`; `legs` is null or points to a struct whose non-null
/// pointers each have room for `k`; `found` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_hybrid(
    index: *const chassis_index,
    query: *const f32,
    dims: usize,
    text: *const c_char,
    k: usize,
    ef: usize,
    options_json: *const c_char,
    ids: *mut u64,
    scores: *mut f32,
    legs: *mut chassis_hybrid_legs,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: strings NUL-terminated (options null or so) and `dims` floats, per the
        // contract.
        let (t, o, q) = unsafe {
            let o = if options_json.is_null() {
                None
            } else {
                Some(text_arg(options_json, "options_json")?)
            };
            (text_arg(text, "text")?, o, floats(query, dims)?)
        };
        let (opts, f) = hybrid_of(o)?;
        let hits = read(ix).search_hybrid(q, t, k, ef, f.as_ref(), &opts)?;
        write_hybrid_hits(&hits, ids, scores, legs, k, found)
    })
}

/// [`chassis_search_hybrid`] on a reader: both legs on one fresh snapshot.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_search_hybrid`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_search_hybrid(
    reader: *const chassis_reader,
    query: *const f32,
    dims: usize,
    text: *const c_char,
    k: usize,
    ef: usize,
    options_json: *const c_char,
    ids: *mut u64,
    scores: *mut f32,
    legs: *mut chassis_hybrid_legs,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: strings NUL-terminated (options null or so) and `dims` floats, per the
        // contract.
        let (t, o, q) = unsafe {
            let o = if options_json.is_null() {
                None
            } else {
                Some(text_arg(options_json, "options_json")?)
            };
            (text_arg(text, "text")?, o, floats(query, dims)?)
        };
        let (opts, f) = hybrid_of(o)?;
        let snap = r.inner.snapshot()?;
        let hits = r
            .inner
            .search_hybrid_in(&snap, q, t, k, ef, f.as_ref(), &opts)?;
        write_hybrid_hits(&hits, ids, scores, legs, k, found)
    })
}

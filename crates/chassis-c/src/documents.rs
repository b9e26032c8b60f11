//! Metadata through the C API: adds with a JSON document, setting and reading documents, and
//! filtered searches (docs/FILTERS.md), for the writer's handle and a reader's. The helpers
//! (argument checks, status codes, hit writing) are the crate root's.

use super::*;

/// Adds a vector with its metadata, a JSON object (`{"tenant": "acme", "tags": ["a"]}`; null
/// or "{}" for none; see docs/FILTERS.md for what it may hold). With `id` null the index
/// assigns the id, otherwise `*id` is used (`CHASSIS_STATUS_DUPLICATE_ID` if it is live); the
/// id is written to `out_id` if not null. Malformed metadata is `CHASSIS_STATUS_INVALID_ARGUMENT`
/// and adds nothing. Durable at the next `chassis_flush`.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle; `id` is null or readable; `vector` points to `dims` floats;
/// `metadata_json` is null or a NUL-terminated string; `out_id` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_add_with_metadata(
    index: *mut chassis_index,
    id: *const u64,
    vector: *const f32,
    dims: usize,
    metadata_json: *const c_char,
    out_id: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: `dims` readable floats per the contract.
        let v = unsafe { floats(vector, dims) }?;
        let doc = if metadata_json.is_null() {
            Metadata::new()
        } else {
            // SAFETY: NUL-terminated per the contract.
            metadata::parse_json(unsafe { text_arg(metadata_json, "metadata_json") }?)?
        };
        let w = write(ix);
        // SAFETY: null or readable per the contract.
        let added = match unsafe { id.as_ref() } {
            Some(&id) => {
                w.add_with_id_and_metadata(id, v, &doc)?;
                id
            }
            None => w.add_with_metadata(v, &doc)?,
        };
        if !out_id.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { *out_id = added };
        }
        Ok(())
    })
}

/// Replaces the metadata of a live `id` (a JSON object, as for `chassis_add_with_metadata`),
/// keeping its vector. Durable at the next flush.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle; `metadata_json` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn chassis_set_metadata(
    index: *mut chassis_index,
    id: u64,
    metadata_json: *const c_char,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: NUL-terminated per the contract.
        let doc = metadata::parse_json(unsafe { text_arg(metadata_json, "metadata_json") }?)?;
        write(ix).set_metadata(id, &doc)?;
        Ok(())
    })
}

/// Writes the metadata of `id` as a JSON object ("{}" for none) and a NUL into `buf`, which has
/// room for `buf_len` bytes, and its length without the NUL to `out_len`. When it does not
/// fit, returns `CHASSIS_STATUS_BUFFER_TOO_SMALL` with `out_len` set: call again with a buffer
/// of `out_len + 1` bytes. `CHASSIS_STATUS_NOT_FOUND` if `id` is not live.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `buf` is null or writable for `buf_len` bytes; `out_len` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_get_metadata(
    index: *const chassis_index,
    id: u64,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let doc = read(ix).get_metadata(id)?;
        write_text(&metadata::to_json(&doc).to_string(), buf, buf_len, out_len)
    })
}

/// [`chassis_get_metadata`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `chassis_get_metadata`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_get_metadata(
    reader: *const chassis_reader,
    id: u64,
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let doc = r.inner.get_metadata(id)?;
        write_text(&metadata::to_json(&doc).to_string(), buf, buf_len, out_len)
    })
}

/// [`chassis_search`] among the vectors whose metadata passes `filter_json`, a JSON filter
/// (`{"tenant": "acme", "year": {"$gte": 2020}}`; docs/FILTERS.md). Exact distances, and
/// min(k, live vectors that pass) hits. A malformed filter is
/// `CHASSIS_STATUS_INVALID_ARGUMENT` before any search work.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// As for `chassis_search`; `filter_json` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_filtered(
    index: *const chassis_index,
    query: *const f32,
    dims: usize,
    k: usize,
    ef: usize,
    filter_json: *const c_char,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: `dims` readable floats and a NUL-terminated filter, per the contract.
        let (q, f) = unsafe { filtered_query(query, dims, filter_json) }?;
        let hits = read(ix).search_filtered(q, k, ef, &f)?;
        write_hits(&hits, ids, distances, k, found)
    })
}

/// [`chassis_search_filtered`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_search_filtered`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_search_filtered(
    reader: *const chassis_reader,
    query: *const f32,
    dims: usize,
    k: usize,
    ef: usize,
    filter_json: *const c_char,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: `dims` readable floats and a NUL-terminated filter, per the contract.
        let (q, f) = unsafe { filtered_query(query, dims, filter_json) }?;
        let hits = r.inner.search_filtered(q, k, ef, &f)?;
        write_hits(&hits, ids, distances, k, found)
    })
}

/// A filtered search's query and its parsed filter (the filter first: a malformed one is
/// reported before the query is read), shared by the index's and the reader's calls.
///
/// # Safety
/// `query` is null or points to `dims` readable floats; `filter_json` is null or a
/// NUL-terminated string.
unsafe fn filtered_query<'a>(
    query: *const f32,
    dims: usize,
    filter_json: *const c_char,
) -> Result<(&'a [f32], Filter), Fail> {
    // SAFETY: NUL-terminated or null per the caller's contract.
    let f = Filter::parse(unsafe { text_arg(filter_json, "filter_json") }?)?;
    // SAFETY: `dims` readable floats or null per the caller's contract.
    let q = unsafe { floats(query, dims) }?;
    Ok((q, f))
}

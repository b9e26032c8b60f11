//! Vector search through the C API: one query (`chassis_search`, `chassis_reader_search`) or a
//! batch of them (`chassis_search_many`, `chassis_reader_search_many`), writing ids and distances
//! to the caller's arrays. The helpers (argument checks, status codes) are the crate root's.

use super::*;

pub(crate) fn write_hits(
    hits: &[chassis::Neighbor],
    ids: *mut u64,
    distances: *mut f32,
    k: usize,
    found: *mut usize,
) -> Result<(), Fail> {
    let ids = out(ids, "ids")?;
    let found = out(found, "found")?;
    for (i, h) in hits.iter().take(k).enumerate() {
        // SAFETY: the caller provides room for `k` ids (and distances, if not null).
        unsafe {
            *ids.add(i) = h.id;
            if !distances.is_null() {
                *distances.add(i) = h.distance;
            }
        }
    }
    // SAFETY: non-null, writable per the contract.
    unsafe { *found = hits.len().min(k) };
    Ok(())
}

/// The `k` nearest live vectors to `query` (nearest first), searching with beam width
/// max(`ef`, `k`); the writer sees its own unflushed adds and deletes. Writes up to `k` ids and
/// distances (`distances` may be null) and the count written to `found`: fewer than `k` only
/// when the index holds fewer live vectors.
///
/// Thread safety: any thread, concurrently with every other call on the same index but close;
/// never waits for a write (it sees the writer's last finished write, or the rows of a batch
/// in progress as they are linked).
///
/// # Safety
/// `index` is a live handle; `query` points to `dims` floats; `ids` has room for `k` values,
/// `distances` is null or has room for `k`; `found` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_search(
    index: *const chassis_index,
    query: *const f32,
    dims: usize,
    k: usize,
    ef: usize,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: `dims` readable floats per the contract.
        let q = unsafe { floats(query, dims) }?;
        let hits = read(ix).search(q, k, ef)?;
        write_hits(&hits, ids, distances, k, found)
    })
}

/// [`chassis_search`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_search`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_search(
    reader: *const chassis_reader,
    query: *const f32,
    dims: usize,
    k: usize,
    ef: usize,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: `dims` readable floats per the contract.
        let q = unsafe { floats(query, dims) }?;
        let hits = r.inner.search(q, k, ef)?;
        write_hits(&hits, ids, distances, k, found)
    })
}

/// The `count` queries at `queries` (`count` rows of `dims` floats, one after another), as
/// row slices. `dims` 0 gives empty rows (the search then reports the dimension mismatch).
///
/// # Safety
/// `queries` points to `count * dims` readable floats.
unsafe fn query_rows<'a>(
    queries: *const f32,
    count: usize,
    dims: usize,
) -> Result<Vec<&'a [f32]>, Fail> {
    let n = count
        .checked_mul(dims)
        .ok_or_else(|| Error::InvalidArgument("count * dims overflows".into()))?;
    // SAFETY: `count * dims` readable floats per the contract.
    let all = unsafe { floats(queries, n) }?;
    Ok(if dims == 0 {
        vec![all; count]
    } else {
        all.chunks_exact(dims).collect()
    })
}

/// A batch search's C side: the `count` rows at `queries` handed to `search`, its hits
/// written by [`write_many`]; nothing is read or written for `count` 0.
///
/// # Safety
/// As [`query_rows`]; `ids`, `distances` and `found` as for [`chassis_search_many`].
#[allow(clippy::too_many_arguments)]
unsafe fn answer_many(
    queries: *const f32,
    count: usize,
    dims: usize,
    k: usize,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
    search: impl FnOnce(&[&[f32]]) -> chassis::Result<Vec<Vec<chassis::Neighbor>>>,
) -> Result<(), Fail> {
    if count == 0 {
        return Ok(());
    }
    // SAFETY: `count * dims` readable floats per the contract.
    let rows = unsafe { query_rows(queries, count, dims) }?;
    let hits = search(&rows)?;
    write_many(&hits, ids, distances, k, found)
}

/// Writes each query's hits as [`write_hits`] does one's: row `i` at `ids + i * k`,
/// `distances + i * k` (when not null) and `found + i`.
fn write_many(
    rows: &[Vec<chassis::Neighbor>],
    ids: *mut u64,
    distances: *mut f32,
    k: usize,
    found: *mut usize,
) -> Result<(), Fail> {
    let ids = out(ids, "ids")?;
    let found = out(found, "found")?;
    rows.len()
        .checked_mul(k)
        .ok_or_else(|| Error::InvalidArgument("count * k overflows".into()))?;
    for (i, hits) in rows.iter().enumerate() {
        let at = i * k;
        let row_distances = if distances.is_null() {
            distances
        } else {
            distances.wrapping_add(at)
        };
        write_hits(
            hits,
            ids.wrapping_add(at),
            row_distances,
            k,
            found.wrapping_add(i),
        )?;
    }
    Ok(())
}

/// The `k` nearest live vectors to each of `count` queries (`queries`: `count` rows of `dims`
/// floats, one after another), the answers `count` calls of [`chassis_search`] give, all on
/// one view of the index (what the writer had published when the call began). Faster than
/// those calls where the file is larger than memory: each query's reads of the vectors it
/// ranks overlap the next query's walk. Row `i`'s hits go to `ids[i * k ..]` and
/// `distances[i * k ..]` (`distances` may be null) and their count to `found[i]`; a row's
/// places past its count are left as they were. `count` 0 writes nothing. An error (a wrong
/// `dims`, a NaN in any query, `k` 0) writes nothing either.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `queries` points to `count * dims` floats; `ids` has room for
/// `count * k` values, `distances` is null or has room for `count * k`; `found` has room for
/// `count`.
#[no_mangle]
pub unsafe extern "C" fn chassis_search_many(
    index: *const chassis_index,
    queries: *const f32,
    count: usize,
    dims: usize,
    k: usize,
    ef: usize,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: the pointers as this function's contract says.
        unsafe {
            answer_many(queries, count, dims, k, ids, distances, found, |rows| {
                read(ix).search_many(rows, k, ef)
            })
        }
    })
}

/// [`chassis_search_many`] on a reader: every query on one fresh snapshot of what is
/// committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_search_many`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_search_many(
    reader: *const chassis_reader,
    queries: *const f32,
    count: usize,
    dims: usize,
    k: usize,
    ef: usize,
    ids: *mut u64,
    distances: *mut f32,
    found: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        // SAFETY: the pointers as this function's contract says.
        unsafe {
            answer_many(queries, count, dims, k, ids, distances, found, |rows| {
                r.inner.search_many(rows, k, ef)
            })
        }
    })
}

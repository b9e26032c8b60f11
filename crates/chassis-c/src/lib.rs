//! The C ABI of Chassis. `include/chassis.h` is generated from this file by cbindgen and
//! checked in; `tests/header.rs` fails when it is stale.
//!
//! Conventions: every function returns a [`chassis_status`] (`CHASSIS_STATUS_OK` = 0) and
//! writes results through out-pointers; on failure `chassis_last_error_message()` describes the
//! error on the calling thread. Handles are opaque. No Rust panic crosses the boundary: one is
//! caught and reported as `CHASSIS_STATUS_PANIC`.
//!
//! Thread safety: a `chassis_index` (the writer) may be shared by threads; writes (add,
//! delete, flush, compact) run one at a time (a second waits for the first), and searches,
//! gets, lengths and infos run on any number of threads beside them without waiting for one. A `chassis_reader` is fully thread-safe and lock-free with respect to the writer; open
//! one per process (or share it), also in processes forked from the writer's. Closing a handle
//! while another thread uses it is undefined behaviour, as with `free`.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use chassis::format::metadata;
use chassis::{
    CompactOptions, Error, Filter, Index, IndexReader, Metadata, Metric, Options, VectorLayout,
};

/// What a call returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum chassis_status {
    /// Success.
    Ok = 0,
    /// The file is damaged; restore it from a backup.
    Corrupt = 1,
    /// The file is not a Chassis index.
    NotChassisFile = 2,
    /// The file needs a newer Chassis to read it.
    TooNew = 3,
    /// Another writer holds the file; open a reader instead, or retry later.
    Locked = 4,
    /// A flush failed; nothing more commits until the index is closed and reopened.
    Poisoned = 5,
    /// The index was opened read-only.
    ReadOnly = 6,
    /// The vector's length differs from the index's dimensions.
    DimensionMismatch = 7,
    /// The vector holds NaN or infinity, or is zero under cosine.
    InvalidVector = 8,
    /// The id is already live.
    DuplicateId = 9,
    /// No live vector has that id.
    NotFound = 10,
    /// An argument is out of range (see the message).
    InvalidArgument = 11,
    /// The index reached its largest size.
    Full = 12,
    /// The operating system reported an error (see the message).
    Io = 13,
    /// A null pointer or a path that is not UTF-8.
    NullPointer = 14,
    /// A bug in Chassis: a panic was caught at the boundary.
    Panic = 15,
    /// The caller's buffer is too small; the length needed was written (see the function).
    BufferTooSmall = 16,
}

/// Distance metrics.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum chassis_metric {
    /// Squared Euclidean distance.
    L2 = 0,
    /// 1 − cosine similarity (vectors are normalised when stored).
    Cosine = 1,
    /// 1 − inner product.
    Ip = 2,
}

/// `codes` of [`chassis_create_codes`]: no codes (searches walk by the vectors).
/// Format 3: vectors as f32 (`chassis_create_format`, `chassis_create_codes`).
pub const CHASSIS_FORMAT_F32: u32 = 3;
/// Format 4: f32 values stored as split halves side by side, walked by their high halves (for
/// files that releases before format 6 must open).
pub const CHASSIS_FORMAT_SPLIT: u32 = 4;
/// Half precision (read version 5): each value stored as an IEEE binary16, rounded to
/// nearest when added (a magnitude of 65,520 or more is `CHASSIS_STATUS_INVALID_VECTOR`); half
/// the vector bytes; distances exact to the stored values, which `chassis_get` returns.
pub const CHASSIS_FORMAT_F16: u32 = 5;
/// Format 6, the default: split halves as format 4, a segment's high halves stored together
/// (read version 6; walked faster).
pub const CHASSIS_FORMAT_PLANAR: u32 = 6;

pub const CHASSIS_CODES_NONE: u32 = 0;
/// `codes` of [`chassis_create_codes`]: one int8 code per dimension beside each vector.
pub const CHASSIS_CODES_INT8: u32 = 1;
/// `codes` of [`chassis_create_codes`]: one int4 code per dimension (half a byte) beside each
/// vector, for files larger than memory; write version 7.
pub const CHASSIS_CODES_INT4: u32 = 2;
/// `codes` of [`chassis_compact_codes`]: keep the file's codes.
pub const CHASSIS_CODES_KEEP: u32 = 0xFFFF_FFFF;

/// The writer of one index file (opaque).
pub struct chassis_index {
    /// `Index` is `Send + Sync` and serialises its own writes; searches never wait for them.
    inner: Index,
}

/// A lock-free reader of one index file (opaque).
pub struct chassis_reader {
    inner: IndexReader,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

mod backup;
mod documents;
mod search;
mod text;

// The functions moved out of this file stay where the crate's documentation lists them.
pub use backup::{chassis_backup, chassis_backup_report, chassis_reader_backup};
use search::write_hits;
pub use search::{
    chassis_reader_search, chassis_reader_search_many, chassis_search, chassis_search_many,
};

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn status_of(e: &Error) -> chassis_status {
    match e {
        Error::Corrupt { .. } => chassis_status::Corrupt,
        Error::NotChassisFile => chassis_status::NotChassisFile,
        Error::TooNew { .. } => chassis_status::TooNew,
        Error::Locked => chassis_status::Locked,
        Error::Poisoned => chassis_status::Poisoned,
        Error::ReadOnly { .. } => chassis_status::ReadOnly,
        Error::DimensionMismatch { .. } => chassis_status::DimensionMismatch,
        Error::InvalidVector { .. } => chassis_status::InvalidVector,
        Error::DuplicateId { .. } => chassis_status::DuplicateId,
        Error::NotFound { .. } => chassis_status::NotFound,
        Error::InvalidArgument(_) => chassis_status::InvalidArgument,
        Error::IdsExhausted { .. } => chassis_status::InvalidArgument,
        Error::Full { .. } => chassis_status::Full,
        _ => chassis_status::Io,
    }
}

/// Runs `f`, turning errors and panics into a status and the thread's last error message.
fn guard(f: impl FnOnce() -> Result<(), Fail>) -> chassis_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_error("");
            chassis_status::Ok
        }
        Ok(Err(Fail::Chassis(e))) => {
            set_error(&e.to_string());
            status_of(&e)
        }
        Ok(Err(Fail::Null(what))) => {
            set_error(&format!("{what} is a null pointer or not valid UTF-8"));
            chassis_status::NullPointer
        }
        Ok(Err(Fail::TooSmall(need))) => {
            set_error(&format!(
                "the buffer is too small: {need} bytes are needed, with the terminating NUL"
            ));
            chassis_status::BufferTooSmall
        }
        Err(_) => {
            set_error("internal error (a panic was caught); please report it");
            chassis_status::Panic
        }
    }
}

enum Fail {
    Chassis(Error),
    Null(&'static str),
    TooSmall(usize),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Chassis(e)
    }
}

/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn path_arg<'a>(p: *const c_char) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::Null("path"));
    }
    // SAFETY: the caller passes a NUL-terminated string (documented in the header).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Fail::Null("path"))
}

/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn text_arg<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::Null(what));
    }
    // SAFETY: the caller passes a NUL-terminated string (documented in the header).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Fail::Null(what))
}

/// Copies `text` and a NUL into `buf` (room for `len` bytes) and writes the length without
/// the NUL to `out_len`; `Fail::TooSmall` (with `out_len` still written) when it doesn't fit.
fn write_text(text: &str, buf: *mut c_char, len: usize, out_len: *mut usize) -> Result<(), Fail> {
    let out_len = out(out_len, "out_len")?;
    // SAFETY: non-null, writable per the contract.
    unsafe { *out_len = text.len() };
    if buf.is_null() || len < text.len() + 1 {
        return Err(Fail::TooSmall(text.len() + 1));
    }
    // SAFETY: `buf` has room for `len` ≥ text.len() + 1 bytes per the contract; the source is
    // our own string, which cannot overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

/// # Safety
/// `p` must be null or point to `n` readable f32 values.
unsafe fn floats<'a>(p: *const f32, n: usize) -> Result<&'a [f32], Fail> {
    if p.is_null() {
        return Err(Fail::Null("vector"));
    }
    // SAFETY: the caller promises `n` readable, initialised floats at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn out<T>(p: *mut T, what: &'static str) -> Result<*mut T, Fail> {
    if p.is_null() {
        Err(Fail::Null(what))
    } else {
        Ok(p)
    }
}

/// Gives the caller a writer handle through `out_index`.
///
/// # Safety
/// `out_index` is non-null (checked by [`out`]) and writable.
unsafe fn hand_out(ix: Index, out_index: *mut *mut chassis_index) {
    let h = Box::into_raw(Box::new(chassis_index { inner: ix }));
    // SAFETY: non-null and writable per this function's contract.
    unsafe { *out_index = h };
}

fn metric_code(m: Metric) -> chassis_metric {
    match m {
        Metric::L2Squared => chassis_metric::L2,
        Metric::Cosine => chassis_metric::Cosine,
        Metric::InnerProduct => chassis_metric::Ip,
    }
}

/// The vector layout of file format `format` (3, 4, 5 or 6).
fn layout_of(format: u32) -> Result<VectorLayout, Fail> {
    match format {
        CHASSIS_FORMAT_F32 => Ok(VectorLayout::F32),
        CHASSIS_FORMAT_SPLIT => Ok(VectorLayout::SplitHalves),
        CHASSIS_FORMAT_PLANAR => Ok(VectorLayout::SplitPlanar),
        CHASSIS_FORMAT_F16 => Ok(VectorLayout::F16),
        f => Err(Error::InvalidArgument(format!(
            "format must be 3 (f32 vectors), 4 (split halves side by side), 5 (half precision) \
             or 6 (planar split halves, the default), got {f}"
        ))
        .into()),
    }
}

/// The file format a vector layout belongs to.
fn format_of(layout: VectorLayout) -> u32 {
    match layout {
        VectorLayout::F32 => CHASSIS_FORMAT_F32,
        VectorLayout::SplitHalves => CHASSIS_FORMAT_SPLIT,
        VectorLayout::SplitPlanar => CHASSIS_FORMAT_PLANAR,
        VectorLayout::F16 => CHASSIS_FORMAT_F16,
    }
}

/// Copies a stored vector into the caller's buffer of `dims` floats.
fn write_vector(v: &[f32], out_vector: *mut f32, dims: usize) -> Result<(), Fail> {
    let out_vector = out(out_vector, "out_vector")?;
    if dims != v.len() {
        return Err(Error::DimensionMismatch {
            expected: v.len(),
            got: dims,
        }
        .into());
    }
    // SAFETY: `out_vector` is non-null and writable for `dims` = v.len() floats per the
    // contract; `v` is our own buffer and cannot overlap it.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out_vector, v.len()) };
    Ok(())
}

fn metric_of(m: chassis_metric) -> Metric {
    match m {
        chassis_metric::L2 => Metric::L2Squared,
        chassis_metric::Cosine => Metric::Cosine,
        chassis_metric::Ip => Metric::InnerProduct,
    }
}

fn read(ix: &chassis_index) -> &Index {
    &ix.inner
}

fn write(ix: &chassis_index) -> &Index {
    &ix.inner
}

/// The library version, e.g. "0.1.0" (static; never free it).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn chassis_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"",
        };
    VERSION.as_ptr()
}

/// Sets the most bytes of index files this process keeps locked in memory: `UINT64_MAX` for
/// the default (three quarters of the process's memory, the machine's or its cgroup limit), 0
/// to turn locking off. Only a file with codes larger than half that memory locks anything:
/// the bytes every search walks, so the page cache can't evict them for the vectors each
/// query reads once (the README, "Codes"). Applies to files opened and segments mapped after
/// the call. Locking needs RLIMIT_MEMLOCK (`ulimit -l`) at least the bytes locked, or
/// CAP_IPC_LOCK; refused, it is not tried again and searches go on unlocked.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn chassis_set_resident_limit(bytes: u64) {
    chassis::set_resident_limit((bytes != u64::MAX).then_some(bytes))
}

/// Bytes of index files this process holds locked in memory now (see
/// `chassis_set_resident_limit`).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn chassis_resident_bytes() -> u64 {
    chassis::resident_bytes()
}

/// The message of the last failed call on this thread ("" after a success). Valid until the
/// next Chassis call on the same thread; never free it.
///
/// Thread safety: any thread; the message is the calling thread's own.
#[no_mangle]
pub extern "C" fn chassis_last_error_message() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Creates a new index file at `path` (which must not exist, or be empty) and opens it as the
/// writer, in file format 4. `m` = 0 and `ef_construction` = 0 take the defaults (16 and 200).
///
/// Thread safety: any thread.
///
/// # Safety
/// `path` is a NUL-terminated UTF-8 string; `out` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_create(
    path: *const c_char,
    dims: usize,
    metric: chassis_metric,
    m: usize,
    ef_construction: usize,
    out_index: *mut *mut chassis_index,
) -> chassis_status {
    // SAFETY: this function's contract is `chassis_create_format`'s.
    unsafe {
        chassis_create_format(
            path,
            dims,
            metric,
            m,
            ef_construction,
            CHASSIS_FORMAT_PLANAR,
            out_index,
        )
    }
}

/// [`chassis_create`] in a chosen file format: 6 (`CHASSIS_FORMAT_PLANAR`: split halves, walked
/// faster; the default of `chassis_create`), 4 (`CHASSIS_FORMAT_SPLIT`: the same halves side
/// by side, for files that releases before format 6 must open), 3 (`CHASSIS_FORMAT_F32`: f32
/// vectors, for files that releases reading only format 3 must open) or 5 (`CHASSIS_FORMAT_F16`: half
/// precision, half the vector bytes, each value rounded to the nearest binary16). Any other
/// `format` is `CHASSIS_STATUS_INVALID_ARGUMENT`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `chassis_create`.
#[no_mangle]
pub unsafe extern "C" fn chassis_create_format(
    path: *const c_char,
    dims: usize,
    metric: chassis_metric,
    m: usize,
    ef_construction: usize,
    format: u32,
    out_index: *mut *mut chassis_index,
) -> chassis_status {
    // SAFETY: the same contract.
    unsafe {
        chassis_create_codes(
            path,
            dims,
            metric,
            m,
            ef_construction,
            format,
            CHASSIS_CODES_NONE,
            out_index,
        )
    }
}

/// [`chassis_create_format`] with quantized codes: `CHASSIS_CODES_INT8` keeps a one-byte code
/// per dimension beside each vector (trained once the file holds 1,000 vectors), which
/// searches walk the graph by, ranking what they find exactly (every returned distance stays
/// exact); `CHASSIS_CODES_INT4` half a byte per dimension (for files larger than memory);
/// `CHASSIS_CODES_NONE` is `chassis_create_format`. Files with int8 codes have write version
/// 6, with int4 codes 7. Any other `codes` is `CHASSIS_STATUS_INVALID_ARGUMENT`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As for `chassis_create`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn chassis_create_codes(
    path: *const c_char,
    dims: usize,
    metric: chassis_metric,
    m: usize,
    ef_construction: usize,
    format: u32,
    codes: u32,
    out_index: *mut *mut chassis_index,
) -> chassis_status {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path) }?;
        let out_index = out(out_index, "out_index")?;
        let mut opts = Options::new(dims, metric_of(metric))
            .vector_layout(layout_of(format)?)
            .codes(codes_of(codes)?);
        if m != 0 {
            opts = opts.m(m);
        }
        if ef_construction != 0 {
            opts = opts.ef_construction(ef_construction);
        }
        let ix = Index::create(path, opts)?;
        // SAFETY: `out_index` came through `out` (non-null) and is writable per the contract.
        unsafe { hand_out(ix, out_index) };
        Ok(())
    })
}

/// The code kind of a C `codes` argument.
fn codes_of(codes: u32) -> Result<chassis::CodeKind, Fail> {
    match codes {
        CHASSIS_CODES_NONE => Ok(chassis::CodeKind::None),
        CHASSIS_CODES_INT8 => Ok(chassis::CodeKind::Int8),
        CHASSIS_CODES_INT4 => Ok(chassis::CodeKind::Int4),
        c => Err(Error::InvalidArgument(format!(
            "codes must be CHASSIS_CODES_NONE (0), CHASSIS_CODES_INT8 (1) or \
             CHASSIS_CODES_INT4 (2), got {c}"
        ))
        .into()),
    }
}

/// Converts an hnswlib index file (`saveIndex`) at `src` into a new Chassis file at `dst`
/// (which must not exist) and opens it as the writer. hnswlib files don't record the metric:
/// pass the space the index was built with (`l2` → `CHASSIS_METRIC_L2`, `ip` →
/// `CHASSIS_METRIC_IP`, `cosine` → `CHASSIS_METRIC_COSINE`). Labels become ids, the graph is
/// kept, and searches return what hnswlib returns at the same ef. Written to `<dst>.migrating`
/// and renamed into place when complete, so a crash never leaves a partial `dst`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `src` and `dst` are NUL-terminated UTF-8 strings; `out_index` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn chassis_migrate_hnswlib(
    src: *const c_char,
    dst: *const c_char,
    metric: chassis_metric,
    out_index: *mut *mut chassis_index,
) -> chassis_status {
    guard(|| {
        // SAFETY: per this function's contract.
        let src = unsafe { text_arg(src, "src") }?;
        // SAFETY: per this function's contract.
        let dst = unsafe { text_arg(dst, "dst") }?;
        let out_index = out(out_index, "out_index")?;
        let ix = Index::migrate_hnswlib(src, dst, metric_of(metric))?;
        // SAFETY: `out_index` came through `out` (non-null) and is writable per the contract.
        unsafe { hand_out(ix, out_index) };
        Ok(())
    })
}

/// Opens an existing index file as its writer (exclusive lock: `CHASSIS_STATUS_LOCKED` if
/// another writer has it). Runs recovery if a crash interrupted a flush.
///
/// Thread safety: any thread.
///
/// # Safety
/// `path` is a NUL-terminated UTF-8 string; `out_index` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn chassis_open(
    path: *const c_char,
    out_index: *mut *mut chassis_index,
) -> chassis_status {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path) }?;
        let out_index = out(out_index, "out_index")?;
        let ix = Index::open(path)?;
        // SAFETY: `out_index` came through `out` (non-null) and is writable per the contract.
        unsafe { hand_out(ix, out_index) };
        Ok(())
    })
}

/// Opens a lock-free reader: works in any process while a writer holds the file; every search
/// sees the last flush.
///
/// Thread safety: any thread.
///
/// # Safety
/// `path` is a NUL-terminated UTF-8 string; `out_reader` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn chassis_open_reader(
    path: *const c_char,
    out_reader: *mut *mut chassis_reader,
) -> chassis_status {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path) }?;
        let out_reader = out(out_reader, "out_reader")?;
        let r = IndexReader::open(path)?;
        let h = Box::into_raw(Box::new(chassis_reader { inner: r }));
        // SAFETY: non-null and writable per the contract.
        unsafe { *out_reader = h };
        Ok(())
    })
}

/// Adds a vector of `dims` floats; the index assigns its id (written to `out_id` if not null).
/// Durable at the next `chassis_flush`.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle; `vector` points to `dims` floats; `out_id` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_add(
    index: *mut chassis_index,
    vector: *const f32,
    dims: usize,
    out_id: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: `dims` readable floats per the contract.
        let v = unsafe { floats(vector, dims) }?;
        let id = write(ix).add(v)?;
        if !out_id.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { *out_id = id };
        }
        Ok(())
    })
}

/// Adds `count` vectors of `dims` floats each, stored row after row at `vectors`, linking them
/// on `threads` threads (0: one per CPU; 1: the same graph as `count` calls of `chassis_add`).
/// With `ids` null the index assigns the ids (written to `out_ids` if not null, `count` of
/// them); otherwise `ids` holds `count` caller-chosen ids. Every row and id is checked and
/// every slot written before anything is added: a bad row, a live or repeated id, or a full
/// disk adds nothing. Durable at the next `chassis_flush`.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle; `vectors` points to `count * dims` floats; `ids` is null or
/// points to `count` ids; `out_ids` is null or writable for `count` ids.
#[no_mangle]
pub unsafe extern "C" fn chassis_add_batch(
    index: *mut chassis_index,
    vectors: *const f32,
    count: usize,
    dims: usize,
    ids: *const u64,
    threads: usize,
    out_ids: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let n = count
            .checked_mul(dims)
            .ok_or_else(|| Error::InvalidArgument("count * dims overflows".into()))?;
        // SAFETY: `count * dims` readable floats per the contract.
        let v = unsafe { floats(vectors, n) }?;
        let w = write(ix);
        if dims != w.dims() {
            return Err(Error::DimensionMismatch {
                expected: w.dims(),
                got: dims,
            }
            .into());
        }
        let added = if ids.is_null() {
            w.add_batch(v, threads)?
        } else {
            // SAFETY: `count` readable ids per the contract.
            let ids = unsafe { std::slice::from_raw_parts(ids, count) };
            w.add_batch_with_ids(ids, v, threads)?;
            ids.to_vec()
        };
        if !out_ids.is_null() {
            // SAFETY: non-null and writable for `count` ids per the contract; `added` holds
            // exactly `count`.
            unsafe { std::ptr::copy_nonoverlapping(added.as_ptr(), out_ids, added.len()) };
        }
        Ok(())
    })
}

/// Adds a vector under a caller-chosen id (`CHASSIS_STATUS_DUPLICATE_ID` if it is live).
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle; `vector` points to `dims` floats.
#[no_mangle]
pub unsafe extern "C" fn chassis_add_with_id(
    index: *mut chassis_index,
    id: u64,
    vector: *const f32,
    dims: usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        // SAFETY: `dims` readable floats per the contract.
        let v = unsafe { floats(vector, dims) }?;
        write(ix).add_with_id(id, v)?;
        Ok(())
    })
}

/// Deletes `id` (`CHASSIS_STATUS_NOT_FOUND` if it is not live). Durable at the next flush.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_delete(index: *mut chassis_index, id: u64) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        write(ix).delete(id)?;
        Ok(())
    })
}

/// Makes every add and delete since the last flush durable, all together.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_flush(index: *mut chassis_index) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        write(ix).flush()?;
        Ok(())
    })
}

/// Discards every add, delete and metadata change since the last flush (and a user version
/// set since), keeping the writer's lock: this handle's searches see the flushed state again
/// at once. Ids the discarded adds got automatically are given again by the next adds.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_rollback(index: *mut chassis_index) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        write(ix).rollback()?;
        Ok(())
    })
}

/// Sets the user version the next flush commits with the data: a number of the
/// application's (a transaction id, a log position) that readers see with exactly the state
/// it was flushed with, after any crash. Setting it counts as a change to flush.
///
/// Thread safety: as `chassis_flush`.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_set_user_version(
    index: *mut chassis_index,
    version: u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        write(ix).set_user_version(version)?;
        Ok(())
    })
}

/// The user version the writer's next flush commits: the last one set, else the committed
/// one.
///
/// Thread safety: any thread, concurrently with every other call on the same index.
///
/// # Safety
/// `index` is a live handle; `out_version` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_user_version(
    index: *const chassis_index,
    out_version: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let out_version = out(out_version, "out_version")?;
        let v = read(ix).user_version();
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_version = v };
        Ok(())
    })
}

/// The file's identity (docs/FORMAT.md, "File identity") as 32 lowercase hex digits and a
/// NUL into `buf` (room for `len` bytes; 33 is enough), its length (32, or 0 for a file
/// that has none yet) to `out_len`. `CHASSIS_STATUS_BUFFER_TOO_SMALL` (with `out_len`
/// written) when it doesn't fit.
///
/// Thread safety: any thread, concurrently with every other call on the same index.
///
/// # Safety
/// `index` is a live handle; `buf` has room for `len` bytes; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_file_id(
    index: *const chassis_index,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let id = read(ix).info()?.file_id.unwrap_or_default();
        write_text(&id, buf, len, out_len)
    })
}

/// The user version of the newest committed state a reader sees.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// `reader` is a live handle; `out_version` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_user_version(
    reader: *const chassis_reader,
    out_version: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let out_version = out(out_version, "out_version")?;
        let v = r.inner.user_version()?;
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_version = v };
        Ok(())
    })
}

/// Rewrites the index into a new file with only its live vectors (flushing first); `m` and
/// `ef_construction` of 0 keep the current values. The rebuilt graph is linked on one thread
/// per CPU. Readers move to the new file by themselves.
///
/// Thread safety: any thread; writes on the same index run one at a time (this one waits for
/// one in progress), and searches on it never wait for this one.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_compact(
    index: *mut chassis_index,
    m: usize,
    ef_construction: usize,
) -> chassis_status {
    // SAFETY: the same contract.
    unsafe { chassis_compact_codes(index, m, ef_construction, CHASSIS_CODES_KEEP) }
}

/// [`chassis_compact`] that also sets the new file's codes: `CHASSIS_CODES_INT8` or
/// `CHASSIS_CODES_INT4` adds codes of that kind (trained from the live vectors), `CHASSIS_CODES_NONE` drops them, `CHASSIS_CODES_KEEP`
/// keeps the file's.
///
/// Thread safety: as `chassis_compact`.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_compact_codes(
    index: *mut chassis_index,
    m: usize,
    ef_construction: usize,
    codes: u32,
) -> chassis_status {
    // SAFETY: the same contract.
    unsafe {
        compact_with(index, codes, |codes| CompactOptions {
            m: (m != 0).then_some(m),
            ef_construction: (ef_construction != 0).then_some(ef_construction),
            codes,
            ..CompactOptions::default()
        })
    }
}

/// Compacts `index` with the options `options` makes of the `codes` argument (a
/// `CHASSIS_CODES_*` value, checked here).
///
/// # Safety
/// `index` is a live handle.
unsafe fn compact_with(
    index: *mut chassis_index,
    codes: u32,
    options: impl FnOnce(Option<chassis::CodeKind>) -> CompactOptions,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let codes = match codes {
            CHASSIS_CODES_KEEP => None,
            c => Some(codes_of(c)?),
        };
        write(ix).compact(options(codes))?;
        Ok(())
    })
}

/// Rewrites the index into a new file that keeps its graph as it is instead of rebuilding it,
/// the slots renumbered so that neighbors sit near each other in the file: searches answer
/// as before and read fewer pages and cache lines. `codes` as in [`chassis_compact_codes`].
/// Needs an index without deleted vectors (`CHASSIS_STATUS_INVALID_ARGUMENT` otherwise, and
/// nothing changes: compact with [`chassis_compact`] first).
///
/// Thread safety: as `chassis_compact`.
///
/// # Safety
/// `index` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_compact_keep_graph(
    index: *mut chassis_index,
    codes: u32,
) -> chassis_status {
    // SAFETY: the same contract.
    unsafe {
        compact_with(index, codes, |codes| CompactOptions {
            codes,
            keep_graph: true,
            ..CompactOptions::default()
        })
    }
}

/// Live vectors the writer sees (its unflushed work included).
///
/// Thread safety: any thread, concurrently with every other call on the same index but close;
/// never waits for a write (it sees the writer's last finished write, or the rows of a batch
/// in progress as they are linked).
///
/// # Safety
/// `index` is a live handle; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_len(
    index: *const chassis_index,
    out_len: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let out_len = out(out_len, "out_len")?;
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_len = read(ix).len() as u64 };
        Ok(())
    })
}

/// Live vectors in a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// `reader` is a live handle; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_len(
    reader: *const chassis_reader,
    out_len: *mut u64,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let out_len = out(out_len, "out_len")?;
        let n = r.inner.len()?;
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_len = n };
        Ok(())
    })
}

/// What an index file is and holds ([`chassis_info`], [`chassis_reader_info`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct chassis_index_info {
    /// Live vectors (for the writer: its unflushed adds and deletes included).
    pub count: u64,
    /// Deleted slots not yet reclaimed by compaction.
    pub deleted: u64,
    /// Committed slots N (live and deleted) as of the last flush.
    pub committed_count: u64,
    /// Dimensions of every vector.
    pub dims: usize,
    /// Distance metric.
    pub metric: chassis_metric,
    /// M: neighbors per node on the upper layers (2·M on layer 0).
    pub m: usize,
    /// ef_construction the file was built with.
    pub ef_construction: usize,
    /// File format: 3 (f32 vectors) or 4 (split halves).
    pub format: u32,
    /// The file's read version (a release older than this refuses the file).
    pub read_version: u32,
    /// The file's write version (a release older than this opens it read-only).
    pub write_version: u32,
    /// Whether this handle is read-only (a reader always is; a writer when the file's write
    /// version is newer than this library's).
    pub read_only: bool,
}

/// The stored vector of `id` (as stored: unit length under cosine), `dims` floats written to
/// `out_vector`. `CHASSIS_STATUS_NOT_FOUND` when no live vector has that id;
/// `CHASSIS_STATUS_DIMENSION_MISMATCH` when `dims` is not the index's.
///
/// Thread safety: as `chassis_search`.
///
/// # Safety
/// `index` is a live handle; `out_vector` is writable for `dims` floats.
#[no_mangle]
pub unsafe extern "C" fn chassis_get(
    index: *const chassis_index,
    id: u64,
    out_vector: *mut f32,
    dims: usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let v = read(ix).get(id)?;
        write_vector(&v, out_vector, dims)
    })
}

/// [`chassis_get`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// As for `chassis_get`, with a live reader handle.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_get(
    reader: *const chassis_reader,
    id: u64,
    out_vector: *mut f32,
    dims: usize,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let v = r.inner.get(id)?;
        write_vector(&v, out_vector, dims)
    })
}

/// Whether a live vector has `id` (the writer's unflushed adds and deletes included).
///
/// Thread safety: as `chassis_get`.
///
/// # Safety
/// `index` is a live handle; `out_contains` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_contains(
    index: *const chassis_index,
    id: u64,
    out_contains: *mut bool,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let out_contains = out(out_contains, "out_contains")?;
        let live = read(ix).contains(id)?;
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_contains = live };
        Ok(())
    })
}

/// [`chassis_contains`] on a reader: a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// `reader` is a live handle; `out_contains` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_contains(
    reader: *const chassis_reader,
    id: u64,
    out_contains: *mut bool,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let out_contains = out(out_contains, "out_contains")?;
        let live = r.inner.contains(id)?;
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_contains = live };
        Ok(())
    })
}

/// What the writer's file is and holds: counts, dimensions, metric, M, format and versions.
///
/// Thread safety: as `chassis_get`.
///
/// # Safety
/// `index` is a live handle; `out_info` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_info(
    index: *const chassis_index,
    out_info: *mut chassis_index_info,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let ix = unsafe { index.as_ref() }.ok_or(Fail::Null("index"))?;
        let out_info = out(out_info, "out_info")?;
        let i = read(ix).info()?;
        let info = chassis_index_info {
            count: i.count,
            deleted: i.deleted,
            committed_count: i.committed_count,
            dims: i.dims,
            metric: metric_code(i.metric),
            m: i.m,
            ef_construction: i.ef_construction,
            format: format_of(i.vector_layout),
            read_version: i.versions.0,
            write_version: i.versions.1,
            read_only: i.read_only.is_some(),
        };
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_info = info };
        Ok(())
    })
}

/// [`chassis_info`] on a reader, from a fresh snapshot of what is committed.
///
/// Thread safety: any thread, concurrently with every other call on the same reader.
///
/// # Safety
/// `reader` is a live handle; `out_info` is writable.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_info(
    reader: *const chassis_reader,
    out_info: *mut chassis_index_info,
) -> chassis_status {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { reader.as_ref() }.ok_or(Fail::Null("reader"))?;
        let out_info = out(out_info, "out_info")?;
        let snap = r.inner.snapshot()?;
        let h = r.inner.header_of(&snap);
        let info = chassis_index_info {
            count: snap.len(),
            deleted: h.deleted_count,
            committed_count: h.committed_count,
            dims: r.inner.dims(),
            metric: metric_code(r.inner.metric()),
            m: r.inner.m(),
            ef_construction: r.inner.ef_construction(),
            format: format_of(h.layout()),
            read_version: h.read_version,
            write_version: h.write_version,
            read_only: true,
        };
        // SAFETY: non-null, writable per the contract.
        unsafe { *out_info = info };
        Ok(())
    })
}

/// Closes the writer and releases its lock. Unflushed adds and deletes are discarded (call
/// `chassis_flush` first). Null is ignored.
///
/// Thread safety: never while another thread uses the handle.
///
/// # Safety
/// `index` is null or a live handle no other thread is using; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn chassis_close(index: *mut chassis_index) {
    if !index.is_null() {
        // SAFETY: a handle from Box::into_raw, closed once, per the contract.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(index) })));
    }
}

/// Closes a reader. Null is ignored.
///
/// Thread safety: never while another thread uses the handle.
///
/// # Safety
/// `reader` is null or a live handle no other thread is using; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn chassis_reader_close(reader: *mut chassis_reader) {
    if !reader.is_null() {
        // SAFETY: a handle from Box::into_raw, closed once, per the contract.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(reader) })));
    }
}

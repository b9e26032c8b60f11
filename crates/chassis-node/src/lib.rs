//! The native half of the `chassis` npm package (napi-rs): `RawIndex` and `RawCollection`,
//! which the JavaScript layer (`index.js`) wraps with argument checks, Promises, typed error
//! classes and `Symbol.dispose`. No logic of its own: every call goes to the Rust core.
//!
//! Every call that can take time has an asynchronous form that runs on libuv's thread pool
//! (a napi `AsyncTask`), never on the event loop; the handle is an `Arc` of the core's
//! `Index` (`Send + Sync`), so searches from many callers and worker threads run in parallel
//! while one write runs. Errors reach JavaScript as `Error`s whose message starts with
//! `[CODE] ` (the JavaScript layer turns them into `ChassisError` subclasses with `code`).
//!
//! Vectors come in as a `Float32Array` of rows × dims, read in place by the task that uses it
//! (no copy): the JavaScript layer documents that such an array must not change until the
//! Promise settles.

use std::sync::{Arc, RwLock};

use chassis::{
    Collection, Error, Filter, Fusion, HybridHit, HybridOptions, Index, IndexReader, Metadata,
    Metric, Neighbor, Options, TextFieldSpec, TextHit, VectorLayout,
};
use napi::bindgen_prelude::*;
use napi_derive::napi;

mod args;
use args::{bigint_u64, compact_options, format_of, metric_of, options_of};

/// A core error as a JavaScript one: `[CODE] message`.
fn js(e: Error) -> napi::Error {
    let code = match &e {
        Error::Corrupt { .. } => "CORRUPT",
        Error::NotChassisFile => "NOT_CHASSIS_FILE",
        Error::TooNew { .. } => "TOO_NEW",
        Error::Locked => "LOCKED",
        Error::Poisoned => "POISONED",
        Error::ReadOnly { .. } => "READ_ONLY",
        Error::DimensionMismatch { .. } => "DIMENSION_MISMATCH",
        Error::InvalidVector { .. } => "INVALID_VECTOR",
        Error::DuplicateId { .. } => "DUPLICATE_ID",
        Error::NotFound { .. } => "NOT_FOUND",
        Error::InvalidArgument(_) => "INVALID_ARGUMENT",
        Error::IdsExhausted { .. } => "IDS_EXHAUSTED",
        Error::Full { .. } => "FULL",
        _ => "STORAGE",
    };
    let extra = if matches!(e, Error::Locked) {
        " (open it with { readOnly: true } to read beside the writer)"
    } else {
        ""
    };
    napi::Error::new(Status::GenericFailure, format!("[{code}] {e}{extra}"))
}

fn invalid(msg: impl Into<String>) -> napi::Error {
    napi::Error::new(
        Status::GenericFailure,
        format!("[INVALID_ARGUMENT] {}", msg.into()),
    )
}

fn closed() -> napi::Error {
    invalid("the index is closed")
}

/// An open file: the writer, or a lock-free reader.
pub enum Inner {
    Writer(Box<Index>),
    Reader(Box<IndexReader>),
}

impl Inner {
    fn writer(&self) -> napi::Result<&Index> {
        match self {
            Inner::Writer(ix) => Ok(ix),
            Inner::Reader(_) => Err(napi::Error::new(
                Status::GenericFailure,
                "[READ_ONLY] opened with { readOnly: true }; open without it to write (one \
                 writer at a time)",
            )),
        }
    }
    fn live(&self) -> napi::Result<u64> {
        match self {
            Inner::Writer(ix) => Ok(ix.len() as u64),
            Inner::Reader(r) => r.len().map_err(js),
        }
    }
    fn dims(&self) -> usize {
        match self {
            Inner::Writer(ix) => ix.dims(),
            Inner::Reader(r) => r.dims(),
        }
    }
}

/// The answer of `search`: ids and distances, rows × k, padded with 2^64 − 1 and +Infinity.
#[napi(object)]
pub struct SearchResult {
    pub ids: BigUint64Array,
    pub distances: Float32Array,
}

/// The answer of `searchText`: ids and BM25 scores, rows × k, padded with 2^64 − 1 and
/// −Infinity.
#[napi(object)]
pub struct TextResult {
    pub ids: BigUint64Array,
    pub scores: Float32Array,
}

/// The answer of `searchHybrid`, rows × k each: ids, fused scores, and each leg's rank (0:
/// not found by it) and own score (NaN: not found).
#[napi(object)]
pub struct HybridResult {
    pub ids: BigUint64Array,
    pub scores: Float32Array,
    pub vector_ranks: Uint32Array,
    pub vector_distances: Float32Array,
    pub text_ranks: Uint32Array,
    pub text_scores: Float32Array,
}

/// A text field: its metadata key and analysis.
#[napi(object)]
#[derive(Clone)]
pub struct TextField {
    pub name: String,
    pub stem: Option<bool>,
    pub stop_words: Option<bool>,
    pub lowercase: Option<bool>,
}

fn specs_of(fields: &[TextField]) -> Vec<TextFieldSpec> {
    fields
        .iter()
        .map(|f| {
            TextFieldSpec::new(f.name.clone())
                .stem(f.stem.unwrap_or(false))
                .stop_words(f.stop_words.unwrap_or(false))
                .lowercase(f.lowercase.unwrap_or(true))
        })
        .collect()
}

fn fields_of(specs: &[TextFieldSpec]) -> Vec<TextField> {
    specs
        .iter()
        .map(|s| TextField {
            name: s.name.clone(),
            stem: Some(s.stem),
            stop_words: Some(s.stop_words),
            lowercase: Some(s.lowercase),
        })
        .collect()
}

/// Answers are padded to `k` columns up to this `k` (as Python's `MAX_PADDED_K`).
const MAX_PADDED_K: usize = 65_536;
/// The most cells one answer may hold.
const MAX_ANSWER_CELLS: usize = 1 << 28;

/// The columns of an answer for `k` over `live` vectors (as the Python package's).
fn answer_width(k: usize, live: u64, rows: usize) -> napi::Result<usize> {
    if k == 0 {
        return Err(invalid("k must be at least 1"));
    }
    let live = usize::try_from(live).unwrap_or(usize::MAX);
    let width = if k <= MAX_PADDED_K || k <= live {
        k
    } else {
        live.max(1)
    };
    match rows.checked_mul(width) {
        Some(cells) if cells <= MAX_ANSWER_CELLS => Ok(width),
        _ => Err(invalid(format!(
            "an answer of {rows} rows of {width} would hold more than {MAX_ANSWER_CELLS} \
             results: ask for a smaller k or fewer queries per call"
        ))),
    }
}

fn parse_docs(texts: &[String]) -> napi::Result<Vec<Metadata>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            chassis::format::metadata::parse_json(t).map_err(|e| match e {
                Error::InvalidArgument(why) if texts.len() > 1 => {
                    invalid(format!("metadata {i}: {why}"))
                }
                e => js(e),
            })
        })
        .collect()
}

fn parse_filters(
    filters: &Option<Vec<Option<String>>>,
    rows: usize,
) -> napi::Result<Vec<Option<Filter>>> {
    let parsed: Vec<Option<Filter>> = filters
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|f| f.as_deref().map(Filter::parse).transpose())
        .collect::<std::result::Result<_, Error>>()
        .map_err(js)?;
    if parsed.len() > 1 && parsed.len() != rows {
        return Err(invalid(format!(
            "{} filters for {rows} queries: give one for all, or one per query",
            parsed.len()
        )));
    }
    Ok(parsed)
}

fn filter_at(filters: &[Option<Filter>], r: usize) -> Option<&Filter> {
    match filters.len() {
        0 => None,
        1 => filters[0].as_ref(),
        _ => filters[r].as_ref(),
    }
}

/// Runs `one(r)` for each row on `threads` threads (0: one per core), answers in row order.
fn per_row<T: Send>(
    rows: usize,
    threads: u32,
    one: impl Fn(usize) -> chassis::Result<T> + Sync,
) -> chassis::Result<Vec<T>> {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t as usize,
    }
    .min(rows.max(1));
    if threads <= 1 {
        return (0..rows).map(&one).collect();
    }
    let chunk = rows.div_ceil(threads);
    let parts: Vec<chassis::Result<Vec<T>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..rows)
            .step_by(chunk)
            .map(|from| {
                let one = &one;
                s.spawn(move || (from..(from + chunk).min(rows)).map(one).collect())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(Error::InvalidArgument("search thread panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(rows);
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// Options of `RawIndex.create`.
#[napi(object)]
pub struct CreateOptions {
    pub dims: u32,
    pub metric: Option<String>,
    #[napi(js_name = "M")]
    pub m: Option<u32>,
    pub ef_construction: Option<u32>,
    pub format: Option<u32>,
    pub codes: Option<String>,
    pub precision: Option<String>,
    pub text_fields: Option<Vec<TextField>>,
}

/// Options of `RawIndex.compact`.
#[napi(object)]
pub struct CompactArgs {
    #[napi(js_name = "M")]
    pub m: Option<u32>,
    pub ef_construction: Option<u32>,
    pub threads: Option<u32>,
    pub format: Option<u32>,
    pub codes: Option<String>,
    pub keep_graph: Option<bool>,
    pub precision: Option<String>,
}

/// The native index; use `Index` from the package.
#[napi]
pub struct RawIndex {
    inner: Arc<RwLock<Option<Arc<Inner>>>>,
    path: String,
}

impl RawIndex {
    fn wrap(inner: Inner, path: String) -> RawIndex {
        RawIndex {
            inner: Arc::new(RwLock::new(Some(Arc::new(inner)))),
            path,
        }
    }

    fn open_inner(&self) -> napi::Result<Arc<Inner>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Arc::clone)
            .ok_or_else(closed)
    }
}

/// The work of a [`Job`]: what it does with the open index.
type Work<T> = Box<dyn FnOnce(&Inner) -> napi::Result<T> + Send>;
/// The work of a [`CJob`].
type CWork<T> = Box<dyn FnOnce(&Collection) -> napi::Result<T> + Send>;

/// One of the index's operations, run on the thread pool: `work` on the open index, then
/// `done` to make the JavaScript value.
pub struct Job<T: Send, J> {
    inner: Option<Arc<Inner>>,
    work: Option<Work<T>>,
    done: fn(Env, T) -> napi::Result<J>,
}

impl<T: Send + 'static, J: ToNapiValue + TypeName> Task for Job<T, J> {
    type Output = T;
    type JsValue = J;
    fn compute(&mut self) -> napi::Result<T> {
        let inner = self.inner.take().ok_or_else(closed)?;
        let work = self
            .work
            .take()
            .ok_or_else(|| invalid("a task ran twice"))?;
        work(&inner)
    }
    fn resolve(&mut self, env: Env, output: T) -> napi::Result<J> {
        (self.done)(env, output)
    }
}

fn job<T: Send + 'static, J>(
    inner: Arc<Inner>,
    work: impl FnOnce(&Inner) -> napi::Result<T> + Send + 'static,
    done: fn(Env, T) -> napi::Result<J>,
) -> Job<T, J> {
    Job {
        inner: Some(inner),
        work: Some(Box::new(work)),
        done,
    }
}

fn unit(_: Env, _: ()) -> napi::Result<()> {
    Ok(())
}

fn ids_out(_: Env, ids: Vec<u64>) -> napi::Result<BigUint64Array> {
    Ok(BigUint64Array::new(ids))
}

fn json_out(_: Env, s: String) -> napi::Result<String> {
    Ok(s)
}

type Rows = (Vec<u64>, Vec<f32>);

fn search_out(_: Env, (ids, d): Rows) -> napi::Result<SearchResult> {
    Ok(SearchResult {
        ids: BigUint64Array::new(ids),
        distances: Float32Array::new(d),
    })
}

fn text_out(_: Env, (ids, s): Rows) -> napi::Result<TextResult> {
    Ok(TextResult {
        ids: BigUint64Array::new(ids),
        scores: Float32Array::new(s),
    })
}

type HybridCols = (Vec<u64>, Vec<f32>, Vec<u32>, Vec<f32>, Vec<u32>, Vec<f32>);

fn hybrid_out(_: Env, c: HybridCols) -> napi::Result<HybridResult> {
    Ok(HybridResult {
        ids: BigUint64Array::new(c.0),
        scores: Float32Array::new(c.1),
        vector_ranks: Uint32Array::new(c.2),
        vector_distances: Float32Array::new(c.3),
        text_ranks: Uint32Array::new(c.4),
        text_scores: Float32Array::new(c.5),
    })
}

/// Vectors of a call: rows × dims floats, read in place by the task. napi-rs's typed array
/// holds a reference that keeps its buffer alive until it is dropped (off the JavaScript
/// thread, napi-rs hands the release back to it); the package's documentation (index.d.ts)
/// asks callers not to change an array while the Promise that uses it is pending.
struct Rows32(Float32Array);

impl Rows32 {
    fn slice(&self) -> &[f32] {
        &self.0
    }
}

fn searched(
    inner: &Inner,
    data: &[f32],
    rows: usize,
    k: usize,
    ef: usize,
    threads: u32,
    filters: &[Option<Filter>],
) -> chassis::Result<Rows> {
    let dims = data.len().checked_div(rows).unwrap_or(0);
    let one = |r: usize| -> chassis::Result<Vec<Neighbor>> {
        let q = &data[r * dims..(r + 1) * dims];
        match (inner, filter_at(filters, r)) {
            (Inner::Writer(ix), None) => ix.search(q, k, ef),
            (Inner::Reader(rd), None) => rd.search(q, k, ef),
            (Inner::Writer(ix), Some(f)) => ix.search_filtered(q, k, ef, f),
            (Inner::Reader(rd), Some(f)) => rd.search_filtered(q, k, ef, f),
        }
    };
    let hits: Vec<Vec<Neighbor>> = if filters.is_empty() && threads == 1 {
        let qs: Vec<&[f32]> = data.chunks(dims.max(1)).take(rows).collect();
        match inner {
            Inner::Writer(ix) => ix.search_many(&qs, k, ef)?,
            Inner::Reader(rd) => rd.search_many(&qs, k, ef)?,
        }
    } else {
        per_row(rows, threads, one)?
    };
    let mut ids = vec![u64::MAX; rows * k];
    let mut dists = vec![f32::INFINITY; rows * k];
    for (r, list) in hits.iter().enumerate() {
        for (i, h) in list.iter().enumerate().take(k) {
            ids[r * k + i] = h.id;
            dists[r * k + i] = h.distance;
        }
    }
    Ok((ids, dists))
}

fn text_searched(
    inner: &Inner,
    texts: &[String],
    k: usize,
    threads: u32,
    filters: &[Option<Filter>],
) -> chassis::Result<Rows> {
    let rows = texts.len();
    let hits: Vec<Vec<TextHit>> = per_row(rows, threads, |r| {
        let f = filter_at(filters, r);
        match inner {
            Inner::Writer(ix) => ix.search_text(&texts[r], k, f),
            Inner::Reader(rd) => rd.search_text(&texts[r], k, f),
        }
    })?;
    let mut ids = vec![u64::MAX; rows * k];
    let mut scores = vec![f32::NEG_INFINITY; rows * k];
    for (r, list) in hits.iter().enumerate() {
        for (i, h) in list.iter().enumerate().take(k) {
            ids[r * k + i] = h.id;
            scores[r * k + i] = h.score;
        }
    }
    Ok((ids, scores))
}

/// Options of a hybrid search.
#[napi(object)]
pub struct HybridArgs {
    pub fusion: Option<String>,
    pub rrf_k: Option<f64>,
    pub vector_weight: Option<f64>,
    pub text_weight: Option<f64>,
    pub depth: Option<u32>,
}

fn hybrid_options(o: &HybridArgs) -> napi::Result<HybridOptions> {
    Ok(HybridOptions {
        fusion: match o.fusion.as_deref().unwrap_or("rrf") {
            "rrf" => Fusion::Rrf {
                k: o.rrf_k.unwrap_or(60.0) as f32,
            },
            "relative_score" | "relativeScore" => Fusion::RelativeScore,
            f => {
                return Err(invalid(format!(
                    "fusion must be 'rrf' or 'relative_score', got {f:?}"
                )))
            }
        },
        vector_weight: o.vector_weight.unwrap_or(1.0) as f32,
        text_weight: o.text_weight.unwrap_or(1.0) as f32,
        depth: o.depth.unwrap_or(0) as usize,
    })
}

#[allow(clippy::too_many_arguments)]
fn hybrid_searched(
    inner: &Inner,
    data: &[f32],
    texts: &[String],
    k: usize,
    ef: usize,
    threads: u32,
    filters: &[Option<Filter>],
    opts: &HybridOptions,
) -> chassis::Result<HybridCols> {
    let rows = texts.len();
    let dims = data.len().checked_div(rows).unwrap_or(0);
    let hits: Vec<Vec<HybridHit>> = per_row(rows, threads, |r| {
        let (q, t, f) = (
            &data[r * dims..(r + 1) * dims],
            &texts[r],
            filter_at(filters, r),
        );
        match inner {
            Inner::Writer(ix) => ix.search_hybrid(q, t, k, ef, f, opts),
            Inner::Reader(rd) => rd.search_hybrid(q, t, k, ef, f, opts),
        }
    })?;
    let n = rows * k;
    let mut c: HybridCols = (
        vec![u64::MAX; n],
        vec![f32::NEG_INFINITY; n],
        vec![0; n],
        vec![f32::NAN; n],
        vec![0; n],
        vec![f32::NAN; n],
    );
    for (r, list) in hits.iter().enumerate() {
        for (i, h) in list.iter().enumerate().take(k) {
            let at = r * k + i;
            c.0[at] = h.id;
            c.1[at] = h.score;
            if let Some(v) = h.vector {
                c.2[at] = v.rank;
                c.3[at] = v.score;
            }
            if let Some(t) = h.text {
                c.4[at] = t.rank;
                c.5[at] = t.score;
            }
        }
    }
    Ok(c)
}

fn check_rows(inner: &Inner, vectors: &Float32Array, rows: u32) -> napi::Result<usize> {
    let dims = inner.dims();
    let rows = rows as usize;
    if vectors.len() != rows * dims {
        return Err(napi::Error::new(
            Status::GenericFailure,
            format!(
                "[DIMENSION_MISMATCH] {} floats are not {rows} rows of {dims} dimensions",
                vectors.len()
            ),
        ));
    }
    Ok(rows)
}

fn info_json(inner: &Inner, path: &str) -> chassis::Result<String> {
    let v = match inner {
        Inner::Writer(ix) => {
            let i = ix.info()?;
            serde_json::json!({
                "path": path, "dims": i.dims, "metric": i.metric.name(), "M": i.m,
                "efConstruction": i.ef_construction, "count": i.count, "deleted": i.deleted,
                "committedCount": i.committed_count, "deleteEpoch": i.delete_epoch,
                "sequence": i.sequence, "segments": i.segments, "fileBytes": i.file_bytes,
                "customIds": i.custom_ids, "readOnly": i.read_only.is_some(),
                "pendingChanges": ix.has_pending_changes(),
                "readVersion": i.versions.0, "writeVersion": i.versions.1,
                "format": format_of(i.vector_layout),
                "precision": chassis::Precision::of(i.vector_layout).name(),
                "codes": i.codes.name(), "codesTrained": i.codes_trained,
                "metadataBytes": i.metadata_bytes, "indexedFields": i.indexed_fields,
                "fileId": i.file_id, "userVersion": i.user_version.to_string(),
                "textFields": i.text_fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            })
        }
        Inner::Reader(r) => {
            let snap = r.snapshot()?;
            let h = r.header_of(&snap);
            serde_json::json!({
                "path": path, "dims": r.dims(), "metric": r.metric().name(), "M": snap.m(),
                "efConstruction": h.ef_construction, "count": snap.len(),
                "deleted": h.deleted_count, "committedCount": snap.committed_count(),
                "deleteEpoch": snap.delete_epoch(), "sequence": snap.sequence(),
                "routingCount": snap.routing_count(), "segments": h.segment_count,
                "customIds": h.flags & 1 != 0, "readOnly": true,
                "readVersion": h.read_version, "writeVersion": h.write_version,
                "format": format_of(h.layout()),
                "precision": chassis::Precision::of(h.layout()).name(),
                "metadataBytes": snap.metadata_bytes(), "indexedFields": r.indexed_fields(),
                "fileId": snap.file_id(), "userVersion": snap.user_version().to_string(),
                "textFields": r.text_fields()?.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            })
        }
    };
    Ok(v.to_string())
}

/// Creating, opening or migrating a file on the thread pool.
pub struct OpenTask {
    what: Option<Opening>,
    path: String,
}

enum Opening {
    Create(Box<Options>),
    Open(bool),
    Migrate(String, Metric),
}

impl Task for OpenTask {
    type Output = Inner;
    type JsValue = RawIndex;
    fn compute(&mut self) -> napi::Result<Inner> {
        match self.what.take() {
            Some(Opening::Create(opts)) => Ok(Inner::Writer(Box::new(
                Index::create(&self.path, *opts).map_err(js)?,
            ))),
            Some(Opening::Open(true)) => Ok(Inner::Reader(Box::new(
                IndexReader::open(&self.path).map_err(js)?,
            ))),
            Some(Opening::Open(false)) => Ok(Inner::Writer(Box::new(
                Index::open(&self.path).map_err(js)?,
            ))),
            Some(Opening::Migrate(src, metric)) => Ok(Inner::Writer(Box::new(
                Index::migrate_hnswlib(&src, &self.path, metric).map_err(js)?,
            ))),
            None => Err(invalid("a task ran twice")),
        }
    }
    fn resolve(&mut self, _: Env, inner: Inner) -> napi::Result<RawIndex> {
        Ok(RawIndex::wrap(inner, self.path.clone()))
    }
}

/// Creates an index file and opens it as the writer, on the thread pool.
#[napi(ts_return_type = "Promise<RawIndex>")]
pub fn create_index(path: String, options: CreateOptions) -> napi::Result<AsyncTask<OpenTask>> {
    Ok(AsyncTask::new(OpenTask {
        what: Some(Opening::Create(Box::new(options_of(&options)?))),
        path,
    }))
}

/// Opens an index file (as the writer, or a lock-free reader), on the thread pool.
#[napi(ts_return_type = "Promise<RawIndex>")]
pub fn open_index(path: String, read_only: bool) -> AsyncTask<OpenTask> {
    AsyncTask::new(OpenTask {
        what: Some(Opening::Open(read_only)),
        path,
    })
}

/// Converts an hnswlib file into a new Chassis file at `dst`, on the thread pool.
#[napi(ts_return_type = "Promise<RawIndex>")]
pub fn migrate_hnswlib(
    src: String,
    dst: String,
    metric: String,
) -> napi::Result<AsyncTask<OpenTask>> {
    Ok(AsyncTask::new(OpenTask {
        what: Some(Opening::Migrate(src, metric_of(&metric)?)),
        path: dst,
    }))
}

#[napi]
impl RawIndex {
    /// Creates a new index file and opens it as the writer (synchronous).
    #[napi(factory)]
    pub fn create(path: String, options: CreateOptions) -> napi::Result<RawIndex> {
        let opts = options_of(&options)?;
        let ix = Index::create(&path, opts).map_err(js)?;
        Ok(RawIndex::wrap(Inner::Writer(Box::new(ix)), path))
    }

    /// Opens an existing index file (synchronous): as the writer, or a lock-free reader.
    #[napi(factory)]
    pub fn open(path: String, read_only: bool) -> napi::Result<RawIndex> {
        let inner = if read_only {
            Inner::Reader(Box::new(IndexReader::open(&path).map_err(js)?))
        } else {
            Inner::Writer(Box::new(Index::open(&path).map_err(js)?))
        };
        Ok(RawIndex::wrap(inner, path))
    }

    #[napi(getter)]
    pub fn path(&self) -> String {
        self.path.clone()
    }

    #[napi(getter)]
    pub fn dims(&self) -> napi::Result<u32> {
        Ok(self.open_inner()?.dims() as u32)
    }

    #[napi(getter)]
    pub fn metric(&self) -> napi::Result<String> {
        Ok(match &*self.open_inner()? {
            Inner::Writer(ix) => ix.metric().name().to_string(),
            Inner::Reader(r) => r.metric().name().to_string(),
        })
    }

    #[napi(getter)]
    pub fn read_only(&self) -> napi::Result<bool> {
        Ok(match &*self.open_inner()? {
            Inner::Writer(ix) => ix.read_only().is_some(),
            Inner::Reader(_) => true,
        })
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.inner.read().map(|g| g.is_none()).unwrap_or(true)
    }

    /// Live vectors.
    #[napi]
    pub fn size(&self) -> napi::Result<i64> {
        Ok(self.open_inner()?.live()? as i64)
    }

    /// Whether `id` is live.
    #[napi]
    pub fn has(&self, id: BigInt) -> napi::Result<bool> {
        let id = bigint_u64(&id, "an id")?;
        match &*self.open_inner()? {
            Inner::Writer(ix) => ix.contains(id),
            Inner::Reader(r) => r.contains(id),
        }
        .map_err(js)
    }

    /// Adds rows × dims floats; `ids` (or none for automatic ones) and `metadata` (JSON
    /// texts, one per row, or none) as given; returns the ids.
    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn add(
        &self,
        vectors: Float32Array,
        rows: u32,
        ids: Option<BigUint64Array>,
        metadata: Option<Vec<String>>,
        threads: u32,
    ) -> napi::Result<AsyncTask<Job<Vec<u64>, BigUint64Array>>> {
        let inner = self.open_inner()?;
        check_rows(&inner, &vectors, rows)?;
        let ids: Option<Vec<u64>> = ids.map(|a| a.to_vec());
        let v = Rows32(vectors);
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                let ix = inner.writer()?;
                let data = v.slice();
                let docs = metadata.map(|m| parse_docs(&m)).transpose()?;
                let threads = threads as usize;
                match (ids, docs) {
                    (None, None) => ix.add_batch(data, threads),
                    (Some(ids), None) => ix.add_batch_with_ids(&ids, data, threads).map(|_| ids),
                    (ids, Some(docs)) => {
                        ix.add_batch_with_metadata(ids.as_deref(), data, &docs, threads)
                    }
                }
                .map_err(js)
            },
            ids_out,
        )))
    }

    /// Adds the ids that are not live and replaces those that are (vector and metadata).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn upsert(
        &self,
        vectors: Float32Array,
        rows: u32,
        ids: BigUint64Array,
        metadata: Option<Vec<String>>,
    ) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        check_rows(&inner, &vectors, rows)?;
        let ids = ids.to_vec();
        let v = Rows32(vectors);
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                let ix = inner.writer()?;
                let docs = match metadata {
                    Some(m) => parse_docs(&m)?,
                    None => vec![Metadata::new(); ids.len()],
                };
                ix.upsert_many(&ids, v.slice(), &docs).map_err(js)
            },
            unit,
        )))
    }

    /// Replaces the metadata of live ids (JSON texts, one per id).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn set_metadata(
        &self,
        ids: BigUint64Array,
        metadata: Vec<String>,
    ) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        let ids = ids.to_vec();
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                let docs = parse_docs(&metadata)?;
                inner.writer()?.set_metadata_many(&ids, &docs).map_err(js)
            },
            unit,
        )))
    }

    /// The metadata of each id, as JSON texts.
    #[napi]
    pub fn get_metadata(&self, ids: BigUint64Array) -> napi::Result<Vec<String>> {
        let inner = self.open_inner()?;
        ids.iter()
            .map(|&id| {
                let m = match &*inner {
                    Inner::Writer(ix) => ix.get_metadata(id),
                    Inner::Reader(r) => r.get_metadata(id),
                }
                .map_err(js)?;
                Ok(chassis::format::metadata::to_json(&m).to_string())
            })
            .collect()
    }

    /// The stored vectors of `ids`, row after row.
    #[napi]
    pub fn get(&self, ids: BigUint64Array) -> napi::Result<Float32Array> {
        let inner = self.open_inner()?;
        let mut out = Vec::with_capacity(ids.len() * inner.dims());
        for &id in ids.iter() {
            let v = match &*inner {
                Inner::Writer(ix) => ix.get(id),
                Inner::Reader(r) => r.get(id),
            }
            .map_err(js)?;
            out.extend_from_slice(&v);
        }
        Ok(Float32Array::new(out))
    }

    /// Deletes every id, or none if one is not live.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete(&self, ids: BigUint64Array) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        let ids = ids.to_vec();
        Ok(AsyncTask::new(job(
            inner,
            move |inner| inner.writer()?.delete_many(&ids).map_err(js),
            unit,
        )))
    }

    /// Nearest neighbors of rows × dims queries.
    #[napi(ts_return_type = "Promise<SearchResult>")]
    pub fn search(
        &self,
        queries: Float32Array,
        rows: u32,
        k: u32,
        ef: u32,
        threads: u32,
        filters: Option<Vec<Option<String>>>,
    ) -> napi::Result<AsyncTask<Job<Rows, SearchResult>>> {
        let inner = self.open_inner()?;
        let rows = check_rows(&inner, &queries, rows)?;
        let k = answer_width(k as usize, inner.live()?, rows)?;
        let filters = parse_filters(&filters, rows)?;
        let q = Rows32(queries);
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                searched(inner, q.slice(), rows, k, ef as usize, threads, &filters).map_err(js)
            },
            search_out,
        )))
    }

    /// `search` on the calling thread.
    #[napi]
    pub fn search_sync(
        &self,
        queries: Float32Array,
        rows: u32,
        k: u32,
        ef: u32,
        filters: Option<Vec<Option<String>>>,
    ) -> napi::Result<SearchResult> {
        let inner = self.open_inner()?;
        let rows = check_rows(&inner, &queries, rows)?;
        let k = answer_width(k as usize, inner.live()?, rows)?;
        let filters = parse_filters(&filters, rows)?;
        let (ids, d) = searched(&inner, &queries, rows, k, ef as usize, 1, &filters).map_err(js)?;
        Ok(SearchResult {
            ids: BigUint64Array::new(ids),
            distances: Float32Array::new(d),
        })
    }

    /// BM25's top k for each text.
    #[napi(ts_return_type = "Promise<TextResult>")]
    pub fn search_text(
        &self,
        texts: Vec<String>,
        k: u32,
        threads: u32,
        filters: Option<Vec<Option<String>>>,
    ) -> napi::Result<AsyncTask<Job<Rows, TextResult>>> {
        let inner = self.open_inner()?;
        let k = answer_width(k as usize, inner.live()?, texts.len())?;
        let filters = parse_filters(&filters, texts.len())?;
        Ok(AsyncTask::new(job(
            inner,
            move |inner| text_searched(inner, &texts, k, threads, &filters).map_err(js),
            text_out,
        )))
    }

    /// `searchText` on the calling thread.
    #[napi]
    pub fn search_text_sync(
        &self,
        texts: Vec<String>,
        k: u32,
        filters: Option<Vec<Option<String>>>,
    ) -> napi::Result<TextResult> {
        let inner = self.open_inner()?;
        let k = answer_width(k as usize, inner.live()?, texts.len())?;
        let filters = parse_filters(&filters, texts.len())?;
        let (ids, s) = text_searched(&inner, &texts, k, 1, &filters).map_err(js)?;
        Ok(TextResult {
            ids: BigUint64Array::new(ids),
            scores: Float32Array::new(s),
        })
    }

    /// Hybrid search: one text per query row.
    #[napi(ts_return_type = "Promise<HybridResult>")]
    #[allow(clippy::too_many_arguments)]
    pub fn search_hybrid(
        &self,
        queries: Float32Array,
        rows: u32,
        texts: Vec<String>,
        k: u32,
        ef: u32,
        threads: u32,
        filters: Option<Vec<Option<String>>>,
        options: HybridArgs,
    ) -> napi::Result<AsyncTask<Job<HybridCols, HybridResult>>> {
        let inner = self.open_inner()?;
        let rows = check_rows(&inner, &queries, rows)?;
        if texts.len() != rows {
            return Err(invalid(format!(
                "{} texts for {rows} query vectors: give one text per vector",
                texts.len()
            )));
        }
        let k = answer_width(k as usize, inner.live()?, rows)?;
        let filters = parse_filters(&filters, rows)?;
        let opts = hybrid_options(&options)?;
        let q = Rows32(queries);
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                hybrid_searched(
                    inner,
                    q.slice(),
                    &texts,
                    k,
                    ef as usize,
                    threads,
                    &filters,
                    &opts,
                )
                .map_err(js)
            },
            hybrid_out,
        )))
    }

    /// Indexes these metadata fields for full-text search (synchronous: it indexes every
    /// stored document; use `setTextFields` from the package for the asynchronous form).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn set_text_fields(&self, fields: Vec<TextField>) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        let specs = specs_of(&fields);
        Ok(AsyncTask::new(job(
            inner,
            move |inner| inner.writer()?.set_text_fields(&specs).map_err(js),
            unit,
        )))
    }

    /// The fields indexed for full-text search.
    #[napi]
    pub fn text_fields(&self) -> napi::Result<Vec<TextField>> {
        Ok(match &*self.open_inner()? {
            Inner::Writer(ix) => fields_of(&ix.text_fields()),
            Inner::Reader(r) => fields_of(&r.text_fields().map_err(js)?),
        })
    }

    /// Makes every change since the last flush durable.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn flush(&self) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        Ok(AsyncTask::new(job(
            inner,
            |inner| inner.writer()?.flush().map_err(js),
            unit,
        )))
    }

    /// `flush` on the calling thread.
    #[napi]
    pub fn flush_sync(&self) -> napi::Result<()> {
        self.open_inner()?.writer()?.flush().map_err(js)
    }

    /// Discards every change since the last flush.
    #[napi]
    pub fn rollback(&self) -> napi::Result<()> {
        self.open_inner()?.writer()?.rollback().map_err(js)
    }

    /// The user version (a decimal string: it is a u64).
    #[napi]
    pub fn user_version(&self) -> napi::Result<String> {
        Ok(match &*self.open_inner()? {
            Inner::Writer(ix) => ix.user_version(),
            Inner::Reader(r) => r.user_version().map_err(js)?,
        }
        .to_string())
    }

    #[napi]
    pub fn set_user_version(&self, version: BigInt) -> napi::Result<()> {
        let v = bigint_u64(&version, "the user version")?;
        self.open_inner()?.writer()?.set_user_version(v).map_err(js)
    }

    /// Rewrites the index into a new file and renames it over the path.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn compact(&self, options: CompactArgs) -> napi::Result<AsyncTask<Job<(), ()>>> {
        let inner = self.open_inner()?;
        // Checked here, so that a bad argument throws at the call; resolved in the job against
        // the file's layout.
        compact_options(&options, VectorLayout::default())?;
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                let ix = inner.writer()?;
                let opts = compact_options(&options, ix.info().map_err(js)?.vector_layout)?;
                ix.compact(opts).map(|_| ()).map_err(js)
            },
            unit,
        )))
    }

    /// Copies the last committed state to `dst` (online backup); the report as JSON.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn backup(&self, dst: String) -> napi::Result<AsyncTask<Job<String, String>>> {
        let inner = self.open_inner()?;
        Ok(AsyncTask::new(job(
            inner,
            move |inner| {
                let r = match inner {
                    Inner::Writer(ix) => ix.backup(&dst),
                    Inner::Reader(r) => r.backup(&dst),
                }
                .map_err(js)?;
                Ok(serde_json::json!({
                    "sequence": r.sync.sequence, "previousSequence": r.sync.previous_sequence,
                    "live": r.sync.live, "bytesShipped": r.sync.bytes_shipped,
                    "bytesCompared": r.sync.bytes_compared,
                    "committedBytes": r.sync.committed_bytes, "unchanged": r.sync.unchanged,
                    "fullCopy": r.full_copy, "replacedBecause": r.replaced_because,
                    "repairedLists": r.repaired_lists,
                })
                .to_string())
            },
            json_out,
        )))
    }

    /// Counts, parameters and file details, as JSON.
    #[napi]
    pub fn info(&self) -> napi::Result<String> {
        info_json(&*self.open_inner()?, &self.path).map_err(js)
    }

    /// Closes the index; unflushed changes are discarded. Calls already running finish.
    #[napi]
    pub fn close(&self) {
        self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// The Chassis id (a u64) a string id is stored under: the first 8 bytes of its BLAKE2b
/// digest of 8 bytes, little-endian (as the Python LangChain store's `chassis_id`).
#[napi]
pub fn chassis_id(id: String) -> BigInt {
    use blake2::digest::{Update, VariableOutput};
    let mut out = [0u8; 8];
    let mut h = blake2::Blake2bVar::new(8).unwrap_or_else(|_| unreachable!("8 is a valid size"));
    h.update(id.as_bytes());
    let _ = h.finalize_variable(&mut out);
    BigInt::from(u64::from_le_bytes(out))
}

/// The name of every code kind this release writes (the package's `CODE_KINDS`).
#[napi]
pub fn code_kinds() -> Vec<&'static str> {
    chassis::CodeKind::ALL.iter().map(|k| k.name()).collect()
}

/// The shard an id belongs to among `shards` (as `Collection` routes it).
#[napi]
pub fn shard_of(ids: BigUint64Array, shards: u32) -> napi::Result<Uint32Array> {
    if shards == 0 {
        return Err(invalid("shards must be at least 1"));
    }
    Ok(Uint32Array::new(
        ids.iter()
            .map(|&id| chassis::collection::shard_of(id, shards as usize) as u32)
            .collect(),
    ))
}

/// The native collection; use `Collection` from the package.
#[napi]
pub struct RawCollection {
    inner: Arc<RwLock<Option<Arc<Collection>>>>,
}

impl RawCollection {
    fn open_inner(&self) -> napi::Result<Arc<Collection>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Arc::clone)
            .ok_or_else(|| invalid("the collection is closed"))
    }
}

/// A collection's operation on the thread pool.
pub struct CJob<T: Send, J> {
    inner: Option<Arc<Collection>>,
    work: Option<CWork<T>>,
    done: fn(Env, T) -> napi::Result<J>,
}

impl<T: Send + 'static, J: ToNapiValue + TypeName> Task for CJob<T, J> {
    type Output = T;
    type JsValue = J;
    fn compute(&mut self) -> napi::Result<T> {
        let inner = self
            .inner
            .take()
            .ok_or_else(|| invalid("the collection is closed"))?;
        let work = self
            .work
            .take()
            .ok_or_else(|| invalid("a task ran twice"))?;
        work(&inner)
    }
    fn resolve(&mut self, env: Env, output: T) -> napi::Result<J> {
        (self.done)(env, output)
    }
}

fn cjob<T: Send + 'static, J>(
    inner: Arc<Collection>,
    work: impl FnOnce(&Collection) -> napi::Result<T> + Send + 'static,
    done: fn(Env, T) -> napi::Result<J>,
) -> CJob<T, J> {
    CJob {
        inner: Some(inner),
        work: Some(Box::new(work)),
        done,
    }
}

#[napi]
impl RawCollection {
    /// Creates a collection of `shards` shard files in the directory `path`.
    #[napi(factory)]
    pub fn create(
        path: String,
        options: CreateOptions,
        shards: u32,
    ) -> napi::Result<RawCollection> {
        let opts = options_of(&options)?;
        let c = Collection::create(&path, opts, shards as usize).map_err(js)?;
        Ok(RawCollection {
            inner: Arc::new(RwLock::new(Some(Arc::new(c)))),
        })
    }

    #[napi(factory)]
    pub fn open(path: String, read_only: bool) -> napi::Result<RawCollection> {
        let c = if read_only {
            Collection::open_read_only(&path)
        } else {
            Collection::open(&path)
        }
        .map_err(js)?;
        Ok(RawCollection {
            inner: Arc::new(RwLock::new(Some(Arc::new(c)))),
        })
    }

    #[napi(getter)]
    pub fn dims(&self) -> napi::Result<u32> {
        Ok(self.open_inner()?.dims() as u32)
    }

    #[napi]
    pub fn size(&self) -> napi::Result<i64> {
        Ok(self.open_inner()?.len().map_err(js)? as i64)
    }

    #[napi]
    pub fn has(&self, id: BigInt) -> napi::Result<bool> {
        self.open_inner()?
            .contains(bigint_u64(&id, "an id")?)
            .map_err(js)
    }

    #[napi(ts_return_type = "Promise<BigUint64Array>")]
    pub fn add(
        &self,
        vectors: Float32Array,
        ids: Option<BigUint64Array>,
        metadata: Option<Vec<String>>,
    ) -> napi::Result<AsyncTask<CJob<Vec<u64>, BigUint64Array>>> {
        let c = self.open_inner()?;
        let ids: Option<Vec<u64>> = ids.map(|a| a.to_vec());
        let v = Rows32(vectors);
        Ok(AsyncTask::new(cjob(
            c,
            move |c| {
                let docs = metadata.map(|m| parse_docs(&m)).transpose()?;
                c.add(ids.as_deref(), v.slice(), docs.as_deref())
                    .map_err(js)
            },
            ids_out,
        )))
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn upsert(
        &self,
        vectors: Float32Array,
        ids: BigUint64Array,
        metadata: Option<Vec<String>>,
    ) -> napi::Result<AsyncTask<CJob<(), ()>>> {
        let c = self.open_inner()?;
        let ids = ids.to_vec();
        let v = Rows32(vectors);
        Ok(AsyncTask::new(cjob(
            c,
            move |c| {
                let docs = metadata.map(|m| parse_docs(&m)).transpose()?;
                c.upsert(&ids, v.slice(), docs.as_deref()).map_err(js)
            },
            unit,
        )))
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn set_metadata(
        &self,
        ids: BigUint64Array,
        metadata: Vec<String>,
    ) -> napi::Result<AsyncTask<CJob<(), ()>>> {
        let c = self.open_inner()?;
        let ids = ids.to_vec();
        Ok(AsyncTask::new(cjob(
            c,
            move |c| {
                let docs = parse_docs(&metadata)?;
                c.set_metadata(&ids, &docs).map_err(js)
            },
            unit,
        )))
    }

    #[napi]
    pub fn get_metadata(&self, ids: BigUint64Array) -> napi::Result<Vec<String>> {
        let c = self.open_inner()?;
        ids.iter()
            .map(|&id| {
                Ok(
                    chassis::format::metadata::to_json(&c.get_metadata(id).map_err(js)?)
                        .to_string(),
                )
            })
            .collect()
    }

    #[napi]
    pub fn get(&self, ids: BigUint64Array) -> napi::Result<Float32Array> {
        let c = self.open_inner()?;
        let mut out = Vec::new();
        for &id in ids.iter() {
            out.extend_from_slice(&c.get(id).map_err(js)?);
        }
        Ok(Float32Array::new(out))
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete(&self, ids: BigUint64Array) -> napi::Result<AsyncTask<CJob<(), ()>>> {
        let c = self.open_inner()?;
        let ids = ids.to_vec();
        Ok(AsyncTask::new(cjob(
            c,
            move |c| c.delete(&ids).map_err(js),
            unit,
        )))
    }

    #[napi(ts_return_type = "Promise<SearchResult>")]
    pub fn search(
        &self,
        queries: Float32Array,
        rows: u32,
        k: u32,
        ef: u32,
        threads: u32,
        filter: Option<String>,
    ) -> napi::Result<AsyncTask<CJob<Rows, SearchResult>>> {
        let c = self.open_inner()?;
        let rows = rows as usize;
        let k = answer_width(k as usize, c.len().map_err(js)?, rows)?;
        let filter = filter
            .as_deref()
            .map(Filter::parse)
            .transpose()
            .map_err(js)?;
        let q = Rows32(queries);
        Ok(AsyncTask::new(cjob(
            c,
            move |c| {
                let hits = c
                    .search_many(
                        q.slice(),
                        rows,
                        k,
                        ef as usize,
                        filter.as_ref(),
                        threads as usize,
                    )
                    .map_err(js)?;
                let mut ids = vec![u64::MAX; rows * k];
                let mut d = vec![f32::INFINITY; rows * k];
                for (r, list) in hits.iter().enumerate() {
                    for (i, h) in list.iter().enumerate().take(k) {
                        ids[r * k + i] = h.id;
                        d[r * k + i] = h.distance;
                    }
                }
                Ok((ids, d))
            },
            search_out,
        )))
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn flush(&self) -> napi::Result<AsyncTask<CJob<(), ()>>> {
        let c = self.open_inner()?;
        Ok(AsyncTask::new(cjob(c, |c| c.flush().map_err(js), unit)))
    }

    #[napi]
    pub fn refresh(&self) -> napi::Result<bool> {
        self.open_inner()?.refresh().map_err(js)
    }

    #[napi]
    pub fn info(&self) -> napi::Result<String> {
        let c = self.open_inner()?;
        let m = c.manifest();
        let (generation, consistent) = c.pinned_generation();
        Ok(serde_json::json!({
            "path": c.dir(), "dims": m.dims, "metric": m.metric.name(),
            "shards": m.shards.len(),
            "shardFiles": m.shards.iter().map(|s| s.file.clone()).collect::<Vec<_>>(),
            "generation": generation, "consistent": consistent,
            "count": c.len().map_err(js)?, "readOnly": c.read_only(),
        })
        .to_string())
    }

    #[napi]
    pub fn close(&self) -> napi::Result<()> {
        let taken = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        match taken.and_then(|c| Arc::try_unwrap(c).ok()) {
            Some(c) => c.close().map_err(js),
            None => Ok(()),
        }
    }
}

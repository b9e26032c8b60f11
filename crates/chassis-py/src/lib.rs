//! `chassis._chassis`: the native half of the Python package. The public class
//! `chassis.Index` (python/chassis/__init__.py) checks and converts its arguments with numpy
//! and calls `RawIndex`, which always receives C-contiguous float32 / uint64 arrays.
//!
//! Every call that does real work (add, search, flush, compact, get, delete) releases the GIL.
//! One `RwLock` per index lets searches run together while writes run one at a time, so a
//! Python thread can search while another adds.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

mod convert;

use chassis::{
    Collection, CompactOptions, Error, Filter, Fusion, HybridHit, HybridOptions, Index,
    IndexReader, Metadata, Metric, Options, TextFieldSpec, TextHit, VectorLayout,
};

create_exception!(
    _chassis,
    ChassisError,
    PyException,
    "Base class of every Chassis error."
);
create_exception!(
    _chassis,
    CorruptError,
    ChassisError,
    "The file is damaged; restore it from a backup."
);
create_exception!(
    _chassis,
    NotChassisFileError,
    CorruptError,
    "The file is not a Chassis index."
);
create_exception!(
    _chassis,
    TooNewError,
    ChassisError,
    "The file needs a newer Chassis to read it; upgrade."
);
create_exception!(
    _chassis,
    LockedError,
    ChassisError,
    "Another writer holds the file; open it with read_only=True, or retry later."
);
create_exception!(
    _chassis,
    PoisonedError,
    ChassisError,
    "A flush failed; close and reopen the index (it recovers the last committed state)."
);
create_exception!(
    _chassis,
    ReadOnlyError,
    ChassisError,
    "The index was opened read-only."
);
create_exception!(
    _chassis,
    DimensionMismatchError,
    ChassisError,
    "A vector's length differs from the index's dimensions."
);
create_exception!(
    _chassis,
    InvalidVectorError,
    ChassisError,
    "A vector holds NaN or infinity, or is zero under cosine."
);
create_exception!(
    _chassis,
    DuplicateIdError,
    ChassisError,
    "The id is already live."
);
create_exception!(
    _chassis,
    NotFoundError,
    ChassisError,
    "No live vector has that id."
);
create_exception!(
    _chassis,
    InvalidArgumentError,
    ChassisError,
    "An argument is out of range."
);
create_exception!(
    _chassis,
    IdsExhaustedError,
    InvalidArgumentError,
    "Automatic ids would pass 2**64 - 1; give ids explicitly."
);
create_exception!(
    _chassis,
    FullError,
    ChassisError,
    "The index reached its largest size."
);
create_exception!(
    _chassis,
    StorageError,
    ChassisError,
    "The operating system reported an error (disk full, permissions, ...)."
);

fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Corrupt { .. } => CorruptError::new_err(msg),
        Error::NotChassisFile => NotChassisFileError::new_err(msg),
        Error::TooNew { .. } => TooNewError::new_err(msg),
        Error::Locked => LockedError::new_err(format!(
            "{msg} (from Python: chassis.Index.open(path, read_only=True) reads beside the writer)"
        )),
        Error::Poisoned => PoisonedError::new_err(msg),
        Error::ReadOnly { .. } => ReadOnlyError::new_err(msg),
        Error::DimensionMismatch { .. } => DimensionMismatchError::new_err(msg),
        Error::InvalidVector { .. } => InvalidVectorError::new_err(msg),
        Error::DuplicateId { .. } => DuplicateIdError::new_err(msg),
        Error::NotFound { .. } => NotFoundError::new_err(msg),
        Error::InvalidArgument(_) => InvalidArgumentError::new_err(msg),
        Error::IdsExhausted { .. } => IdsExhaustedError::new_err(msg),
        Error::Full { .. } => FullError::new_err(msg),
        _ => StorageError::new_err(msg),
    }
}

enum Inner {
    Writer(Box<Index>),
    Reader(Box<IndexReader>),
}

/// Answers are padded to `k` columns up to this `k`; a larger `k` than the live count is
/// first clamped to the live count (`chassis.MAX_PADDED_K`).
const MAX_PADDED_K: usize = 65_536;
/// The most cells (rows × columns) one answer may hold: 2^28, 3 GiB of ids and distances
/// (`chassis.MAX_ANSWER_CELLS`).
const MAX_ANSWER_CELLS: usize = 1 << 28;

/// The columns of a search's answer for `k` over `live` vectors, checked before anything is
/// allocated: `k`, except that a `k` above both [`MAX_PADDED_K`] and the live count becomes the
/// live count; more than [`MAX_ANSWER_CELLS`] cells is an [`InvalidArgumentError`].
fn answer_width(k: usize, live: u64, rows: usize) -> PyResult<usize> {
    let live = usize::try_from(live).unwrap_or(usize::MAX);
    let width = if k <= MAX_PADDED_K || k <= live {
        k
    } else {
        live.max(1)
    };
    match rows.checked_mul(width) {
        Some(cells) if cells <= MAX_ANSWER_CELLS => Ok(width),
        _ => Err(InvalidArgumentError::new_err(format!(
            "an answer of {rows} rows of {width} would hold more than {MAX_ANSWER_CELLS} \
             results: ask for a smaller k or fewer queries per call"
        ))),
    }
}

/// What `search` returns: ids and distances, rows × k.
type Hits<'py> = (Bound<'py, PyArray2<u64>>, Bound<'py, PyArray2<f32>>);

/// `flat` (row-major, `shape[0] * shape[1]` long) as a 2-D array, moved without a copy or a
/// reshape (numpy's reshape makes a second array object each call).
fn matrix<T: numpy::Element>(
    py: Python<'_>,
    flat: Vec<T>,
    shape: [usize; 2],
) -> PyResult<Bound<'_, PyArray2<T>>> {
    numpy::ndarray::Array2::from_shape_vec(shape, flat)
        .map(|a| a.into_pyarray(py))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// A text field as Python gives it: (name, stem, stop_words, lowercase).
type FieldTuple = (String, bool, bool, bool);

fn specs_of(fields: Vec<FieldTuple>) -> Vec<TextFieldSpec> {
    fields
        .into_iter()
        .map(|(name, stem, stop, lower)| {
            TextFieldSpec::new(name)
                .stem(stem)
                .stop_words(stop)
                .lowercase(lower)
        })
        .collect()
}

fn tuples_of(specs: &[TextFieldSpec]) -> Vec<FieldTuple> {
    specs
        .iter()
        .map(|s| (s.name.clone(), s.stem, s.stop_words, s.lowercase))
        .collect()
}

/// What `search_hybrid` returns, rows × k each: ids, fused scores, each leg's rank (0: not
/// found by it) and its own score (NaN: not found).
type HybridArrays<'py> = (
    Bound<'py, PyArray2<u64>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray2<f32>>,
);

/// Runs `one(r)` for every row `r` of `rows`, on `threads` threads (0: one per core), and
/// returns the answers in row order.
fn per_row<T: Send>(
    rows: usize,
    threads: usize,
    one: impl Fn(usize) -> Result<T, Error> + Sync,
) -> Result<Vec<T>, Error> {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t,
    }
    .min(rows.max(1));
    if threads <= 1 {
        return (0..rows).map(&one).collect();
    }
    let chunk = rows.div_ceil(threads);
    let parts: Vec<Result<Vec<T>, Error>> = std::thread::scope(|s| {
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

fn filter_at(filters: &[Option<Filter>], r: usize) -> Option<&Filter> {
    match filters.len() {
        0 => None,
        1 => filters[0].as_ref(),
        _ => filters[r].as_ref(),
    }
}

/// The native index; use `chassis.Index`.
#[pyclass(module = "chassis._chassis")]
struct RawIndex {
    /// The open index; each call clones the `Arc` under the lock and lets go at once, so a
    /// search never waits for a write (nor a write for a search): `chassis::Index` runs
    /// searches beside writes itself. `close` takes it out; calls already running finish on
    /// their clone, and the last one to finish closes the file.
    inner: RwLock<Option<Arc<Inner>>>,
    path: PathBuf,
}

fn closed() -> PyErr {
    InvalidArgumentError::new_err("the index is closed")
}

impl RawIndex {
    /// The open index (a clone of the `Arc`; the lock is held only to clone it).
    fn read(&self) -> Option<Arc<Inner>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Arc::clone)
    }
    fn write(&self) -> RwLockWriteGuard<'_, Option<Arc<Inner>>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
    fn with_writer<T>(&self, f: impl FnOnce(&Index) -> Result<T, Error>) -> PyResult<T> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => f(ix).map_err(to_py),
            Some(Inner::Reader(_)) => Err(ReadOnlyError::new_err(
                "opened with read_only=True; open without it to write (one writer at a time)",
            )),
            None => Err(closed()),
        }
    }
}

fn metric_of(s: &str) -> PyResult<Metric> {
    Metric::parse(s).ok_or_else(|| {
        InvalidArgumentError::new_err(format!(
            "unknown metric {s:?}: use \"cosine\", \"l2\" or \"ip\""
        ))
    })
}

/// The vector layout of a file format: 3 (f32 vectors), 4 (split halves side by side), 5
/// (half precision) or 6 (planar split halves).
fn layout_of(format: u32) -> PyResult<VectorLayout> {
    match format {
        3 => Ok(VectorLayout::F32),
        4 => Ok(VectorLayout::SplitHalves),
        5 => Ok(VectorLayout::F16),
        6 => Ok(VectorLayout::SplitPlanar),
        f => Err(InvalidArgumentError::new_err(format!(
            "format must be 3 (f32 vectors), 4 (split halves side by side), 5 (half \
             precision) or 6 (planar split halves, the default), got {f}"
        ))),
    }
}

/// The precision a name means (`f32`, `f16`).
fn precision_of(precision: Option<&str>) -> PyResult<Option<chassis::Precision>> {
    precision
        .map(|p| {
            chassis::Precision::parse(p).ok_or_else(|| {
                InvalidArgumentError::new_err(format!(
                    "precision must be 'f32' or 'f16', got {p:?}"
                ))
            })
        })
        .transpose()
}

/// The layout `format` and `precision` name together (`precision="f16"` is format 5; with
/// format 3 it is a contradiction).
fn layout_with(format: Option<u32>, precision: Option<&str>) -> PyResult<Option<VectorLayout>> {
    let precision = precision_of(precision)?;
    let layout = format.map(layout_of).transpose()?;
    Ok(match (layout, precision) {
        (Some(VectorLayout::F32), Some(chassis::Precision::F16)) => {
            return Err(InvalidArgumentError::new_err(
                "format 3 stores f32 vectors: half precision is format 5 (leave format out)",
            ))
        }
        (_, Some(chassis::Precision::F16)) => Some(VectorLayout::F16),
        (Some(VectorLayout::F16) | None, Some(chassis::Precision::F32)) => {
            Some(VectorLayout::default())
        }
        (l, _) => l,
    })
}

/// The options `create` takes from Python.
fn options_of(
    dims: usize,
    metric: &str,
    m: usize,
    ef_construction: usize,
    format: u32,
    codes: &str,
    precision: &str,
) -> PyResult<Options> {
    let layout = layout_with(Some(format), Some(precision))?.unwrap_or_default();
    Ok(Options::new(dims, metric_of(metric)?)
        .m(m)
        .ef_construction(ef_construction)
        .vector_layout(layout)
        .codes(codes_of(codes)?))
}

/// The code kind a name means (one of [`code_kinds`]).
fn codes_of(codes: &str) -> PyResult<chassis::CodeKind> {
    chassis::CodeKind::parse(codes).ok_or_else(|| {
        InvalidArgumentError::new_err(format!(
            "codes must be one of {:?}, got {codes:?}",
            code_kinds()
        ))
    })
}

/// The name of every code kind this release writes (Python's `chassis.CODE_KINDS`).
#[pyfunction]
fn code_kinds() -> Vec<&'static str> {
    chassis::CodeKind::ALL.iter().map(|k| k.name()).collect()
}

/// The file format a vector layout belongs to.
fn format_of(layout: VectorLayout) -> u32 {
    match layout {
        VectorLayout::F32 => 3,
        VectorLayout::SplitHalves => 4,
        VectorLayout::F16 => 5,
        VectorLayout::SplitPlanar => 6,
    }
}

#[pymethods]
impl RawIndex {
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dims: usize,
        metric: &str,
        m: usize,
        ef_construction: usize,
        format: u32,
        codes: &str,
        precision: &str,
        text_fields: Vec<FieldTuple>,
    ) -> PyResult<RawIndex> {
        let opts = options_of(dims, metric, m, ef_construction, format, codes, precision)?
            .text_field_specs(specs_of(text_fields));
        let p = path.clone();
        let ix = py
            .allow_threads(|| Index::create(&p, opts))
            .map_err(to_py)?;
        Ok(RawIndex {
            inner: RwLock::new(Some(Arc::new(Inner::Writer(Box::new(ix))))),
            path,
        })
    }

    #[staticmethod]
    fn migrate_hnswlib(
        py: Python<'_>,
        src: PathBuf,
        dst: PathBuf,
        metric: &str,
    ) -> PyResult<RawIndex> {
        let metric = metric_of(metric)?;
        let d = dst.clone();
        let ix = py
            .allow_threads(|| Index::migrate_hnswlib(&src, &d, metric))
            .map_err(to_py)?;
        Ok(RawIndex {
            inner: RwLock::new(Some(Arc::new(Inner::Writer(Box::new(ix))))),
            path: dst,
        })
    }

    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<RawIndex> {
        let p = path.clone();
        let inner = py
            .allow_threads(|| {
                if read_only {
                    IndexReader::open(&p).map(|r| Inner::Reader(Box::new(r)))
                } else {
                    Index::open(&p).map(|ix| Inner::Writer(Box::new(ix)))
                }
            })
            .map_err(to_py)?;
        Ok(RawIndex {
            inner: RwLock::new(Some(Arc::new(inner))),
            path,
        })
    }

    fn add<'py>(
        &self,
        py: Python<'py>,
        vectors: PyReadonlyArray2<'py, f32>,
        ids: Option<PyReadonlyArray1<'py, u64>>,
        threads: usize,
        metadata: Option<Vec<Option<Bound<'_, PyAny>>>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let data = vectors.as_slice()?.to_vec();
        let ids: Option<Vec<u64>> = match ids {
            Some(a) => Some(a.as_slice()?.to_vec()),
            None => None,
        };
        let docs = metadata.map(convert::docs_of).transpose()?;
        let out = py.allow_threads(|| {
            self.with_writer(|ix| match (ids, docs) {
                (ids, Some(docs)) => {
                    ix.add_batch_with_metadata(ids.as_deref(), &data, &docs, threads)
                }
                (Some(ids), None) => ix.add_batch_with_ids(&ids, &data, threads).map(|()| ids),
                (None, None) => ix.add_batch(&data, threads),
            })
        })?;
        Ok(out.into_pyarray(py))
    }

    /// Replaces (or, for ids not live, adds) vectors with their metadata.
    fn upsert(
        &self,
        py: Python<'_>,
        vectors: PyReadonlyArray2<'_, f32>,
        ids: PyReadonlyArray1<'_, u64>,
        metadata: Vec<Option<Bound<'_, PyAny>>>,
    ) -> PyResult<()> {
        let data = vectors.as_slice()?.to_vec();
        let ids = ids.as_slice()?.to_vec();
        let docs = convert::docs_of(metadata)?;
        py.allow_threads(|| self.with_writer(|ix| ix.upsert_many(&ids, &data, &docs)))
    }

    /// Replaces the metadata of live ids (all checked first).
    fn set_metadata(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        metadata: Vec<Option<Bound<'_, PyAny>>>,
    ) -> PyResult<()> {
        let ids = ids.as_slice()?.to_vec();
        let docs = convert::docs_of(metadata)?;
        py.allow_threads(|| self.with_writer(|ix| ix.set_metadata_many(&ids, &docs)))
    }

    /// The metadata of each id, as dicts.
    fn get_metadata<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let ids = ids.as_slice()?.to_vec();
        let docs = py.allow_threads(|| {
            let g = self.read();
            ids.iter()
                .map(|&id| {
                    match g.as_deref() {
                        Some(Inner::Writer(ix)) => ix.get_metadata(id),
                        Some(Inner::Reader(r)) => r.get_metadata(id),
                        None => return Err(closed()),
                    }
                    .map_err(to_py)
                })
                .collect::<PyResult<Vec<Metadata>>>()
        })?;
        docs.iter().map(|m| convert::dict_of(py, m)).collect()
    }

    fn delete(&self, py: Python<'_>, ids: PyReadonlyArray1<'_, u64>) -> PyResult<()> {
        let ids = ids.as_slice()?.to_vec();
        py.allow_threads(|| {
            // All or nothing, as one write: every id must be live before any is deleted.
            self.with_writer(|ix| ix.delete_many(&ids))
        })
    }

    fn get<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let ids = ids.as_slice()?.to_vec();
        let dims = self.dims()?;
        let flat = py.allow_threads(|| -> PyResult<Vec<f32>> {
            let g = self.read();
            let mut flat = Vec::with_capacity(ids.len() * dims);
            for &id in &ids {
                let v = match g.as_deref() {
                    Some(Inner::Writer(ix)) => ix.get(id),
                    Some(Inner::Reader(r)) => r.get(id),
                    None => return Err(closed()),
                }
                .map_err(to_py)?;
                flat.extend(v);
            }
            Ok(flat)
        })?;
        matrix(py, flat, [ids.len(), dims])
    }

    fn contains(&self, id: u64) -> PyResult<bool> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => ix.contains(id).map_err(to_py),
            Some(Inner::Reader(r)) => r.contains(id).map_err(to_py),
            None => Err(closed()),
        }
    }

    fn len(&self) -> PyResult<usize> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.len()),
            Some(Inner::Reader(r)) => r.len().map(|n| n as usize).map_err(to_py),
            None => Err(closed()),
        }
    }

    fn dims(&self) -> PyResult<usize> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.dims()),
            Some(Inner::Reader(r)) => Ok(r.dims()),
            None => Err(closed()),
        }
    }

    fn search_distance_count(&self) -> PyResult<u64> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.search_distance_count()),
            Some(Inner::Reader(r)) => Ok(r.search_distance_count()),
            None => Err(closed()),
        }
    }

    fn metric(&self) -> PyResult<String> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.metric().name().to_string()),
            Some(Inner::Reader(r)) => Ok(r.metric().name().to_string()),
            None => Err(closed()),
        }
    }

    fn read_only(&self) -> PyResult<bool> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.read_only().is_some()),
            Some(Inner::Reader(_)) => Ok(true),
            None => Err(closed()),
        }
    }

    fn is_closed(&self) -> bool {
        self.read().is_none()
    }

    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.with_writer(|ix| ix.flush()))
    }

    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.with_writer(|ix| ix.rollback()))
    }

    fn set_user_version(&self, version: u64) -> PyResult<()> {
        self.with_writer(|ix| ix.set_user_version(version))
    }

    fn user_version(&self) -> PyResult<u64> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(ix.user_version()),
            Some(Inner::Reader(r)) => r.user_version().map_err(to_py),
            None => Err(closed()),
        }
    }

    /// Online backup of the last committed state to `dst`; a dict of what it did.
    fn backup<'py>(&self, py: Python<'py>, dst: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.read().ok_or_else(closed)?;
        let r = py
            .allow_threads(|| match &*inner {
                Inner::Writer(ix) => ix.backup(&dst),
                Inner::Reader(r) => r.backup(&dst),
            })
            .map_err(to_py)?;
        backup_dict(py, &r)
    }

    /// `backup` into a staging file, with the patch that replays it elsewhere.
    fn backup_patch<'py>(
        &self,
        py: Python<'py>,
        staging: PathBuf,
        full: bool,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, pyo3::types::PyBytes>)> {
        let inner = self.read().ok_or_else(closed)?;
        let (r, patch) = py
            .allow_threads(|| match &*inner {
                Inner::Writer(ix) => ix.backup_patch(&staging, full),
                Inner::Reader(r) => r.backup_patch(&staging, full),
            })
            .map_err(to_py)?;
        Ok((backup_dict(py, &r)?, pyo3::types::PyBytes::new(py, &patch)))
    }

    // The Python method's keyword arguments, one for one.
    #[allow(clippy::too_many_arguments)]
    fn compact(
        &self,
        py: Python<'_>,
        m: Option<usize>,
        ef_construction: Option<usize>,
        threads: usize,
        format: Option<u32>,
        codes: Option<&str>,
        keep_graph: bool,
        precision: Option<&str>,
    ) -> PyResult<()> {
        // A precision without a format keeps the file's layout where it already stores that
        // precision (`Precision::layout_from`).
        let (vector_layout, precision) = match format {
            Some(_) => (layout_with(format, precision)?, None),
            None => (None, precision_of(precision)?),
        };
        let codes = codes.map(codes_of).transpose()?;
        py.allow_threads(|| {
            self.with_writer(|ix| {
                let vector_layout = match precision {
                    Some(p) => Some(p.layout_from(ix.info()?.vector_layout)),
                    None => vector_layout,
                };
                ix.compact(CompactOptions {
                    m,
                    ef_construction,
                    threads,
                    vector_layout,
                    codes,
                    keep_graph,
                })
                .map(|_| ())
            })
        })
    }

    /// Returns (ids, distances), each rows × k, padded with u64::MAX and +inf.
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        ef: usize,
        threads: usize,
        filters: Option<Vec<Option<Bound<'_, PyAny>>>>,
    ) -> PyResult<Hits<'py>> {
        let rows = queries.shape()[0];
        let dims = queries.shape()[1];
        let data = queries.as_slice()?.to_vec();
        let live = match self.read().as_deref() {
            Some(Inner::Writer(ix)) => ix.len() as u64,
            Some(Inner::Reader(r)) => r.len().map_err(to_py)?,
            None => return Err(closed()),
        };
        let k = answer_width(k, live, rows)?;
        // Every filter is converted and checked before any search work: a malformed one
        // fails the call.
        let filters = convert::filters_of(filters, rows)?;
        let (ids, dists) = py.allow_threads(|| -> PyResult<(Vec<u64>, Vec<f32>)> {
            let g = self.read();
            let inner = g.as_deref().ok_or_else(closed)?;
            let one = |r: usize, q: &[f32]| match (inner, filter_at(&filters, r)) {
                (Inner::Writer(ix), None) => ix.search(q, k, ef),
                (Inner::Reader(rd), None) => rd.search(q, k, ef),
                (Inner::Writer(ix), Some(f)) => ix.search_filtered(q, k, ef, f),
                (Inner::Reader(rd), Some(f)) => rd.search_filtered(q, k, ef, f),
            };
            // Rows `from..from + n`: unfiltered ones as one batch, whose reads of the vectors
            // each query ranks overlap the next query's walk (a file larger than memory).
            let batch = |from: usize, n: usize| -> Result<Vec<Vec<chassis::Neighbor>>, Error> {
                if !filters.is_empty() {
                    return (from..from + n)
                        .map(|r| one(r, &data[r * dims..(r + 1) * dims]))
                        .collect();
                }
                let queries: Vec<&[f32]> = (from..from + n)
                    .map(|r| &data[r * dims..(r + 1) * dims])
                    .collect();
                match inner {
                    Inner::Writer(ix) => ix.search_many(&queries, k, ef),
                    Inner::Reader(rd) => rd.search_many(&queries, k, ef),
                }
            };
            let mut ids = vec![u64::MAX; rows * k];
            let mut dists = vec![f32::INFINITY; rows * k];
            let threads = match threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                t => t,
            }
            .min(rows.max(1));
            if threads <= 1 {
                // On the calling thread: no thread start per call (it would dominate the
                // latency of one small search).
                let all = batch(0, rows).map_err(to_py)?;
                for ((hits, ids), dists) in
                    all.iter().zip(ids.chunks_mut(k)).zip(dists.chunks_mut(k))
                {
                    for (i, h) in hits.iter().enumerate().take(k) {
                        ids[i] = h.id;
                        dists[i] = h.distance;
                    }
                }
                return Ok((ids, dists));
            }
            let chunk = rows.div_ceil(threads).max(1);
            let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
                let handles: Vec<_> = ids
                    .chunks_mut(chunk * k)
                    .zip(dists.chunks_mut(chunk * k))
                    .enumerate()
                    .map(|(c, (ids, dists))| {
                        let batch = &batch;
                        s.spawn(move || -> Result<(), Error> {
                            let all = batch(c * chunk, ids.len() / k)?;
                            for ((hits, ids), dists) in
                                all.iter().zip(ids.chunks_mut(k)).zip(dists.chunks_mut(k))
                            {
                                for (i, h) in hits.iter().enumerate().take(k) {
                                    ids[i] = h.id;
                                    dists[i] = h.distance;
                                }
                            }
                            Ok(())
                        })
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
            for r in results {
                r.map_err(to_py)?;
            }
            Ok((ids, dists))
        })?;
        Ok((matrix(py, ids, [rows, k])?, matrix(py, dists, [rows, k])?))
    }

    /// BM25's top k for each text: (ids, scores), rows × k, padded with u64::MAX and -inf.
    fn search_text<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        k: usize,
        threads: usize,
        filters: Option<Vec<Option<Bound<'_, PyAny>>>>,
    ) -> PyResult<Hits<'py>> {
        let rows = texts.len();
        let g = self.read();
        let inner = g.as_deref().ok_or_else(closed)?;
        let live = match inner {
            Inner::Writer(ix) => ix.len() as u64,
            Inner::Reader(r) => r.len().map_err(to_py)?,
        };
        let k = answer_width(k, live, rows)?;
        let filters = convert::filters_of(filters, rows)?;
        let (ids, scores) = py.allow_threads(|| -> PyResult<(Vec<u64>, Vec<f32>)> {
            let hits: Vec<Vec<TextHit>> = per_row(rows, threads, |r| {
                let f = filter_at(&filters, r);
                match inner {
                    Inner::Writer(ix) => ix.search_text(&texts[r], k, f),
                    Inner::Reader(rd) => rd.search_text(&texts[r], k, f),
                }
            })
            .map_err(to_py)?;
            let mut ids = vec![u64::MAX; rows * k];
            let mut scores = vec![f32::NEG_INFINITY; rows * k];
            for (r, list) in hits.iter().enumerate() {
                for (i, h) in list.iter().enumerate().take(k) {
                    ids[r * k + i] = h.id;
                    scores[r * k + i] = h.score;
                }
            }
            Ok((ids, scores))
        })?;
        Ok((matrix(py, ids, [rows, k])?, matrix(py, scores, [rows, k])?))
    }

    /// Hybrid search, one text per query row.
    #[allow(clippy::too_many_arguments)]
    fn search_hybrid<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        texts: Vec<String>,
        k: usize,
        ef: usize,
        threads: usize,
        filters: Option<Vec<Option<Bound<'_, PyAny>>>>,
        fusion: &str,
        rrf_k: f32,
        vector_weight: f32,
        text_weight: f32,
        depth: usize,
    ) -> PyResult<HybridArrays<'py>> {
        let rows = queries.shape()[0];
        let dims = queries.shape()[1];
        if texts.len() != rows {
            return Err(InvalidArgumentError::new_err(format!(
                "{} texts for {rows} query vectors: give one text per vector",
                texts.len()
            )));
        }
        let data = queries.as_slice()?.to_vec();
        let opts = HybridOptions {
            fusion: match fusion {
                "rrf" => Fusion::Rrf { k: rrf_k },
                "relative_score" | "relative" => Fusion::RelativeScore,
                f => {
                    return Err(InvalidArgumentError::new_err(format!(
                        "fusion must be 'rrf' or 'relative_score', got {f:?}"
                    )))
                }
            },
            vector_weight,
            text_weight,
            depth,
        };
        let g = self.read();
        let inner = g.as_deref().ok_or_else(closed)?;
        let live = match inner {
            Inner::Writer(ix) => ix.len() as u64,
            Inner::Reader(r) => r.len().map_err(to_py)?,
        };
        let k = answer_width(k, live, rows)?;
        let filters = convert::filters_of(filters, rows)?;
        type Cols = (Vec<u64>, Vec<f32>, Vec<u32>, Vec<f32>, Vec<u32>, Vec<f32>);
        let cols = py.allow_threads(|| -> PyResult<Cols> {
            let hits: Vec<Vec<HybridHit>> = per_row(rows, threads, |r| {
                let (q, t, f) = (
                    &data[r * dims..(r + 1) * dims],
                    &texts[r],
                    filter_at(&filters, r),
                );
                match inner {
                    Inner::Writer(ix) => ix.search_hybrid(q, t, k, ef, f, &opts),
                    Inner::Reader(rd) => rd.search_hybrid(q, t, k, ef, f, &opts),
                }
            })
            .map_err(to_py)?;
            let n = rows * k;
            let mut c: Cols = (
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
        })?;
        let shape = [rows, k];
        Ok((
            matrix(py, cols.0, shape)?,
            matrix(py, cols.1, shape)?,
            matrix(py, cols.2, shape)?,
            matrix(py, cols.3, shape)?,
            matrix(py, cols.4, shape)?,
            matrix(py, cols.5, shape)?,
        ))
    }

    fn set_text_fields(&self, py: Python<'_>, fields: Vec<FieldTuple>) -> PyResult<()> {
        let specs = specs_of(fields);
        py.allow_threads(|| self.with_writer(|ix| ix.set_text_fields(&specs)))
    }

    fn text_fields(&self) -> PyResult<Vec<FieldTuple>> {
        match self.read().as_deref() {
            Some(Inner::Writer(ix)) => Ok(tuples_of(&ix.text_fields())),
            Some(Inner::Reader(r)) => Ok(tuples_of(&r.text_fields().map_err(to_py)?)),
            None => Err(closed()),
        }
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let g = self.read();
        match g.as_deref() {
            Some(Inner::Writer(ix)) => {
                let i = ix.info().map_err(to_py)?;
                d.set_item("path", self.path.clone())?;
                d.set_item("dims", i.dims)?;
                d.set_item("metric", i.metric.name())?;
                d.set_item("M", i.m)?;
                d.set_item("ef_construction", i.ef_construction)?;
                d.set_item("count", i.count)?;
                d.set_item("deleted", i.deleted)?;
                d.set_item("committed_count", i.committed_count)?;
                d.set_item("delete_epoch", i.delete_epoch)?;
                d.set_item("sequence", i.sequence)?;
                d.set_item("segments", i.segments)?;
                d.set_item("file_bytes", i.file_bytes)?;
                d.set_item("custom_ids", i.custom_ids)?;
                d.set_item("read_only", i.read_only.is_some())?;
                d.set_item("pending_changes", ix.has_pending_changes())?;
                d.set_item("read_version", i.versions.0)?;
                d.set_item("write_version", i.versions.1)?;
                d.set_item("format", format_of(i.vector_layout))?;
                d.set_item("precision", chassis::Precision::of(i.vector_layout).name())?;
                d.set_item("codes", i.codes.name())?;
                d.set_item("codes_trained", i.codes_trained)?;
                d.set_item("metadata_bytes", i.metadata_bytes)?;
                d.set_item("indexed_fields", i.indexed_fields)?;
                d.set_item("file_id", i.file_id)?;
                d.set_item("user_version", i.user_version)?;
                let names: Vec<String> = i.text_fields.iter().map(|f| f.name.clone()).collect();
                d.set_item("text_fields", names)?;
                d.set_item("text_segments", i.text_segments.0 + i.text_segments.1)?;
            }
            Some(Inner::Reader(r)) => {
                let snap = r.snapshot().map_err(to_py)?;
                let h = r.header_of(&snap);
                d.set_item("path", self.path.clone())?;
                d.set_item("dims", r.dims())?;
                d.set_item("metric", r.metric().name())?;
                d.set_item("M", snap.m())?;
                d.set_item("ef_construction", h.ef_construction)?;
                d.set_item("count", snap.len())?;
                d.set_item("deleted", h.deleted_count)?;
                d.set_item("committed_count", snap.committed_count())?;
                d.set_item("delete_epoch", snap.delete_epoch())?;
                d.set_item("sequence", snap.sequence())?;
                d.set_item("routing_count", snap.routing_count())?;
                d.set_item("segments", h.segment_count)?;
                d.set_item("custom_ids", h.flags & 1 != 0)?;
                d.set_item("read_only", true)?;
                d.set_item("read_version", h.read_version)?;
                d.set_item("write_version", h.write_version)?;
                d.set_item("format", format_of(h.layout()))?;
                d.set_item("precision", chassis::Precision::of(h.layout()).name())?;
                d.set_item("metadata_bytes", snap.metadata_bytes())?;
                d.set_item("indexed_fields", r.indexed_fields())?;
                d.set_item("file_id", snap.file_id())?;
                d.set_item("user_version", snap.user_version())?;
                let names: Vec<String> = r
                    .text_fields()
                    .map_err(to_py)?
                    .iter()
                    .map(|f| f.name.clone())
                    .collect();
                d.set_item("text_fields", names)?;
            }
            None => return Err(closed()),
        }
        Ok(d)
    }

    /// Closes the index (discarding unflushed changes) and releases its lock.
    fn close(&self, py: Python<'_>) {
        py.allow_threads(|| {
            self.write().take();
        });
    }
}

/// The native collection; use `chassis.Collection`.
#[pyclass(module = "chassis._chassis")]
struct RawCollection {
    /// As `RawIndex::inner`: cloned per call, taken out by `close`.
    inner: RwLock<Option<Arc<Collection>>>,
}

impl RawCollection {
    fn get(&self) -> PyResult<Arc<Collection>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Arc::clone)
            .ok_or_else(|| InvalidArgumentError::new_err("the collection is closed"))
    }

    fn wrap(c: Collection) -> RawCollection {
        RawCollection {
            inner: RwLock::new(Some(Arc::new(c))),
        }
    }
}

#[pymethods]
impl RawCollection {
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dims: usize,
        metric: &str,
        shards: usize,
        m: usize,
        ef_construction: usize,
        format: u32,
        codes: &str,
        precision: &str,
    ) -> PyResult<RawCollection> {
        let opts = options_of(dims, metric, m, ef_construction, format, codes, precision)?;
        let c = py
            .allow_threads(|| Collection::create(&path, opts, shards))
            .map_err(to_py)?;
        Ok(RawCollection::wrap(c))
    }

    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<RawCollection> {
        let c = py
            .allow_threads(|| {
                if read_only {
                    Collection::open_read_only(&path)
                } else {
                    Collection::open(&path)
                }
            })
            .map_err(to_py)?;
        Ok(RawCollection::wrap(c))
    }

    fn add<'py>(
        &self,
        py: Python<'py>,
        vectors: PyReadonlyArray2<'py, f32>,
        ids: Option<PyReadonlyArray1<'py, u64>>,
        metadata: Option<Vec<Option<Bound<'_, PyAny>>>>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let data = vectors.as_slice()?.to_vec();
        let ids: Option<Vec<u64>> = match ids {
            Some(a) => Some(a.as_slice()?.to_vec()),
            None => None,
        };
        let docs = metadata.map(convert::docs_of).transpose()?;
        let c = self.get()?;
        let out =
            py.allow_threads(|| c.add(ids.as_deref(), &data, docs.as_deref()).map_err(to_py))?;
        Ok(out.into_pyarray(py))
    }

    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        ef: usize,
        threads: usize,
        filter: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Hits<'py>> {
        let rows = queries.shape()[0];
        let data = queries.as_slice()?.to_vec();
        let c = self.get()?;
        let k = answer_width(k, c.len().map_err(to_py)?, rows)?;
        let filter = filter.as_ref().map(convert::filter_of).transpose()?;
        let (ids, dists) = py.allow_threads(|| -> PyResult<(Vec<u64>, Vec<f32>)> {
            let hits = c
                .search_many(&data, rows, k, ef, filter.as_ref(), threads)
                .map_err(to_py)?;
            let mut ids = vec![u64::MAX; rows * k];
            let mut dists = vec![f32::INFINITY; rows * k];
            for (r, list) in hits.iter().enumerate() {
                for (i, h) in list.iter().enumerate().take(k) {
                    ids[r * k + i] = h.id;
                    dists[r * k + i] = h.distance;
                }
            }
            Ok((ids, dists))
        })?;
        let shape = [rows, k];
        Ok((matrix(py, ids, shape)?, matrix(py, dists, shape)?))
    }

    fn delete(&self, py: Python<'_>, ids: PyReadonlyArray1<'_, u64>) -> PyResult<()> {
        let ids = ids.as_slice()?.to_vec();
        let c = self.get()?;
        py.allow_threads(|| c.delete(&ids)).map_err(to_py)
    }

    fn upsert<'py>(
        &self,
        py: Python<'py>,
        vectors: PyReadonlyArray2<'py, f32>,
        ids: PyReadonlyArray1<'py, u64>,
        metadata: Option<Vec<Option<Bound<'_, PyAny>>>>,
    ) -> PyResult<()> {
        let data = vectors.as_slice()?.to_vec();
        let ids = ids.as_slice()?.to_vec();
        let docs = metadata.map(convert::docs_of).transpose()?;
        let c = self.get()?;
        py.allow_threads(|| c.upsert(&ids, &data, docs.as_deref()).map_err(to_py))
    }

    fn set_metadata(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        metadata: Vec<Option<Bound<'_, PyAny>>>,
    ) -> PyResult<()> {
        let ids = ids.as_slice()?.to_vec();
        let docs = convert::docs_of(metadata)?;
        let c = self.get()?;
        py.allow_threads(|| c.set_metadata(&ids, &docs).map_err(to_py))
    }

    fn get_vectors<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let ids = ids.as_slice()?.to_vec();
        let c = self.get()?;
        let dims = c.dims();
        let flat = py.allow_threads(|| -> PyResult<Vec<f32>> {
            let mut flat = Vec::with_capacity(ids.len() * dims);
            for &id in &ids {
                flat.extend(c.get(id).map_err(to_py)?);
            }
            Ok(flat)
        })?;
        matrix(py, flat, [ids.len(), dims])
    }

    fn get_metadata<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'py, u64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let ids = ids.as_slice()?.to_vec();
        let c = self.get()?;
        let docs = py.allow_threads(|| {
            ids.iter()
                .map(|&id| c.get_metadata(id).map_err(to_py))
                .collect::<PyResult<Vec<Metadata>>>()
        })?;
        docs.iter().map(|m| convert::dict_of(py, m)).collect()
    }

    fn contains(&self, id: u64) -> PyResult<bool> {
        self.get()?.contains(id).map_err(to_py)
    }

    fn len(&self) -> PyResult<u64> {
        self.get()?.len().map_err(to_py)
    }

    fn dims(&self) -> PyResult<usize> {
        Ok(self.get()?.dims())
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.get()?;
        py.allow_threads(|| c.flush()).map_err(to_py)
    }

    fn refresh(&self, py: Python<'_>) -> PyResult<bool> {
        let c = self.get()?;
        py.allow_threads(|| c.refresh()).map_err(to_py)
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.get()?;
        let m = c.manifest();
        let (generation, consistent) = c.pinned_generation();
        let d = PyDict::new(py);
        d.set_item("path", c.dir().to_path_buf())?;
        d.set_item("dims", m.dims)?;
        d.set_item("metric", m.metric.name())?;
        d.set_item("shards", m.shards.len())?;
        d.set_item(
            "shard_files",
            m.shards.iter().map(|s| s.file.clone()).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "shard_sequences",
            m.shards.iter().map(|s| s.sequence).collect::<Vec<_>>(),
        )?;
        d.set_item("generation", generation)?;
        d.set_item("consistent", consistent)?;
        d.set_item("count", c.len().map_err(to_py)?)?;
        d.set_item("read_only", c.read_only())?;
        Ok(d)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(c) = taken {
            if let Ok(c) = Arc::try_unwrap(c) {
                py.allow_threads(|| c.close()).map_err(to_py)?;
            }
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
}

fn backup_dict<'py>(py: Python<'py>, r: &chassis::BackupReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("sequence", r.sync.sequence)?;
    d.set_item("previous_sequence", r.sync.previous_sequence)?;
    d.set_item("live", r.sync.live)?;
    d.set_item("bytes_shipped", r.sync.bytes_shipped)?;
    d.set_item("bytes_compared", r.sync.bytes_compared)?;
    d.set_item("committed_bytes", r.sync.committed_bytes)?;
    d.set_item("unchanged", r.sync.unchanged)?;
    d.set_item("full_copy", r.full_copy)?;
    d.set_item("replaced_because", r.replaced_because.clone())?;
    d.set_item("repaired_lists", r.repaired_lists)?;
    Ok(d)
}

/// Replays a sync patch on the copy at `dst` (`chassis::apply_patch`).
#[pyfunction]
fn apply_patch<'py>(py: Python<'py>, dst: PathBuf, patch: Vec<u8>) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .allow_threads(|| chassis::apply_patch(&dst, &patch))
        .map_err(to_py)?;
    backup_dict(py, &r)
}

/// The shard each id lives in, for a collection of `shards` shards (`chassis::collection::shard_of`).
#[pyfunction]
fn shard_of<'py>(
    py: Python<'py>,
    ids: PyReadonlyArray1<'py, u64>,
    shards: usize,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let out: Vec<u64> = ids
        .as_slice()?
        .iter()
        .map(|&id| chassis::collection::shard_of(id, shards) as u64)
        .collect();
    Ok(out.into_pyarray(py))
}

/// Sets the most bytes of index files this process keeps locked in memory
/// (`chassis::set_resident_limit`): `None` for the default, 0 to turn locking off.
#[pyfunction]
#[pyo3(signature = (limit))]
fn set_resident_limit(limit: Option<u64>) {
    chassis::set_resident_limit(limit)
}

/// Bytes of index files this process holds locked in memory now (`chassis::resident_bytes`).
#[pyfunction]
fn resident_bytes() -> u64 {
    chassis::resident_bytes()
}

#[pymodule]
fn _chassis(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<RawIndex>()?;
    m.add_class::<RawCollection>()?;
    m.add_function(wrap_pyfunction!(shard_of, m)?)?;
    m.add_function(wrap_pyfunction!(apply_patch, m)?)?;
    m.add_function(wrap_pyfunction!(set_resident_limit, m)?)?;
    m.add_function(wrap_pyfunction!(resident_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(code_kinds, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    for (name, ty) in [
        ("ChassisError", py.get_type::<ChassisError>()),
        ("CorruptError", py.get_type::<CorruptError>()),
        ("NotChassisFileError", py.get_type::<NotChassisFileError>()),
        ("TooNewError", py.get_type::<TooNewError>()),
        ("LockedError", py.get_type::<LockedError>()),
        ("PoisonedError", py.get_type::<PoisonedError>()),
        ("ReadOnlyError", py.get_type::<ReadOnlyError>()),
        (
            "DimensionMismatchError",
            py.get_type::<DimensionMismatchError>(),
        ),
        ("InvalidVectorError", py.get_type::<InvalidVectorError>()),
        ("DuplicateIdError", py.get_type::<DuplicateIdError>()),
        ("NotFoundError", py.get_type::<NotFoundError>()),
        (
            "InvalidArgumentError",
            py.get_type::<InvalidArgumentError>(),
        ),
        ("IdsExhaustedError", py.get_type::<IdsExhaustedError>()),
        ("FullError", py.get_type::<FullError>()),
        ("StorageError", py.get_type::<StorageError>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}

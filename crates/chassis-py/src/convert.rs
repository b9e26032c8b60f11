//! Python values to and from the core's JSON values, without JSON text between them.
//!
//! Owns the one conversion of a caller's filter or metadata dict into the `serde_json::Value`
//! that `chassis::Filter::from_json` and `chassis::format::metadata::from_json` check (those
//! two stay the only validators), and of a stored document back into a Python dict.
//!
//! Invariants: a value converts as `json.dumps(x, allow_nan=False)` followed by a JSON parse
//! would (None, bools, ints, floats, strings, lists and tuples, dicts with string keys; numpy
//! scalars as their `.item()`, numpy arrays as their `.tolist()`), except that every dict key,
//! at any depth, must be a string; NaN and infinity are refused; nesting deeper than
//! [`MAX_DEPTH`] (or a container that holds itself) is refused, never a stack overflow.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use serde_json::{Map, Number, Value as Json};

use chassis::{Filter, Metadata, Value};

use crate::InvalidArgumentError;

/// The deepest nesting a filter or document may have (serde_json's own parse limit).
pub const MAX_DEPTH: usize = 128;

/// numpy's `generic` and `ndarray` types, imported once.
static NP_GENERIC: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static NP_NDARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

fn invalid(msg: String) -> PyErr {
    InvalidArgumentError::new_err(msg)
}

/// `x` as a JSON value (`what` names it in errors: "filter", "metadata").
pub fn json_of(x: &Bound<'_, PyAny>, what: &str) -> PyResult<Json> {
    json_at(x, what, 0)
}

fn json_at(x: &Bound<'_, PyAny>, what: &str, depth: usize) -> PyResult<Json> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!(
            "{what} is nested more than {MAX_DEPTH} deep (or holds itself)"
        )));
    }
    if x.is_none() {
        return Ok(Json::Null);
    }
    // bool before int: Python's bool is an int.
    if let Ok(b) = x.downcast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if let Ok(i) = x.downcast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Json::Number(v.into()));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Json::Number(v.into()));
        }
        // Past 64 bits JSON's parse would give the nearest float.
        let f = i
            .extract::<f64>()
            .map_err(|_| invalid(format!("{what}: an integer too large for a float")))?;
        return float(f, what);
    }
    if let Ok(f) = x.downcast::<PyFloat>() {
        return float(f.value(), what);
    }
    if let Ok(s) = x.downcast::<PyString>() {
        return Ok(Json::String(s.to_cow()?.into_owned()));
    }
    if let Ok(d) = x.downcast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let Ok(k) = k.downcast::<PyString>() else {
                return Err(invalid(format!("{what} keys must be strings, got {k:?}")));
            };
            map.insert(k.to_cow()?.into_owned(), json_at(&v, what, depth + 1)?);
        }
        return Ok(Json::Object(map));
    }
    if let Ok(l) = x.downcast::<PyList>() {
        return l.iter().map(|v| json_at(&v, what, depth + 1)).collect();
    }
    if let Ok(t) = x.downcast::<PyTuple>() {
        return t.iter().map(|v| json_at(&v, what, depth + 1)).collect();
    }
    let py = x.py();
    let generic = NP_GENERIC.import(py, "numpy", "generic")?;
    let ndarray = NP_NDARRAY.import(py, "numpy", "ndarray")?;
    if x.is_instance(generic)? {
        return json_at(&x.call_method0("item")?, what, depth + 1);
    }
    if x.is_instance(ndarray)? {
        return json_at(&x.call_method0("tolist")?, what, depth + 1);
    }
    Err(invalid(format!(
        "metadata and filters hold None, bools, numbers, strings and lists of those; not {}",
        x.get_type().name()?
    )))
}

fn float(f: f64, what: &str) -> PyResult<Json> {
    Number::from_f64(f)
        .map(Json::Number)
        .ok_or_else(|| invalid(format!("{what}: {f} (NaN and infinity are not allowed)")))
}

/// A filter dict (an `InvalidArgumentError` for anything else, or a malformed filter).
pub fn filter_of(x: &Bound<'_, PyAny>) -> PyResult<Filter> {
    if !x.is_instance_of::<PyDict>() {
        return Err(invalid(format!(
            "filter must be a dict, got {}",
            x.get_type().name()?
        )));
    }
    Filter::from_json(&json_of(x, "filter")?).map_err(crate::to_py)
}

/// The filter of each row: none, one for all rows, or one per row (each `None` or a dict),
/// every one checked before any search work.
pub fn filters_of(
    filters: Option<Vec<Option<Bound<'_, PyAny>>>>,
    rows: usize,
) -> PyResult<Vec<Option<Filter>>> {
    let filters: Vec<Option<Filter>> = filters
        .unwrap_or_default()
        .iter()
        .map(|f| f.as_ref().map(filter_of).transpose())
        .collect::<PyResult<_>>()?;
    if filters.len() > 1 && filters.len() != rows {
        return Err(invalid(format!(
            "{} filters for {rows} queries: give one for all, or one per query",
            filters.len()
        )));
    }
    Ok(filters)
}

/// One metadata document per row (`None`: no metadata), each checked; with several rows an
/// error names the row.
pub fn docs_of(docs: Vec<Option<Bound<'_, PyAny>>>) -> PyResult<Vec<Metadata>> {
    let n = docs.len();
    docs.iter()
        .enumerate()
        .map(|(i, d)| {
            let Some(d) = d else {
                return Ok(Metadata::new());
            };
            let doc = if d.is_instance_of::<PyDict>() {
                json_of(d, "metadata")
                    .and_then(|j| chassis::format::metadata::from_json(&j).map_err(crate::to_py))
            } else {
                Err(invalid(format!(
                    "metadata must be a dict, got {}",
                    d.get_type().name()?
                )))
            };
            doc.map_err(|e| {
                if n > 1 && e.is_instance_of::<InvalidArgumentError>(d.py()) {
                    invalid(format!("metadata {i}: {}", e.value(d.py())))
                } else {
                    e
                }
            })
        })
        .collect()
}

/// A stored document as a Python dict (what `json.loads` of its JSON would give).
pub fn dict_of<'py>(py: Python<'py>, doc: &Metadata) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in doc {
        d.set_item(k, value_of(py, v)?)?;
    }
    Ok(d)
}

fn value_of<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::List(items) => PyList::new(
            py,
            items
                .iter()
                .map(|x| value_of(py, x))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
    })
}

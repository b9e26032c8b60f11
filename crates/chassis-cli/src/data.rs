//! Vector and id files: `.fvecs` / `.bvecs` / `.ivecs` (TEXMEX), `.npy` (2-D float32 or
//! float64, C order; 1-D uint64 for ids), JSON lines (`{"id": 7, "vector": [...]}`), and id
//! lists (one per line).

use chassis::format::metadata::{self, Metadata};
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Vectors read from a file: `rows` × `dims`, row-major.
pub struct Matrix {
    pub rows: usize,
    pub dims: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dims..(i + 1) * self.dims]
    }
}

/// Reads `.fvecs`, `.bvecs`, `.npy` or JSON lines (`.jsonl`, ids dropped), chosen by
/// extension.
pub fn read_vectors(path: &Path) -> Result<Matrix> {
    Ok(read_vectors_with_ids(path)?.0)
}

/// Like [`read_vectors`], also returning the ids a JSON-lines file carries (all or none).
pub fn read_vectors_with_ids(path: &Path) -> Result<(Matrix, Option<Vec<u64>>)> {
    let r = read_rows(path)?;
    Ok((r.matrix, r.ids))
}

/// Vectors read from a file, with the ids and metadata JSON lines may carry.
pub struct Rows {
    pub matrix: Matrix,
    pub ids: Option<Vec<u64>>,
    pub metadata: Option<Vec<Metadata>>,
}

/// Reads vectors from .fvecs, .bvecs, .npy, or JSON lines (which may carry ids and metadata).
pub fn read_rows(path: &Path) -> Result<Rows> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let m = match ext.as_str() {
        "fvecs" => parse_fvecs(&bytes)
            .with_context(|| format!("{} is not a valid .fvecs file", path.display()))?,
        "bvecs" => parse_bvecs(&bytes)
            .with_context(|| format!("{} is not a valid .bvecs file", path.display()))?,
        "npy" => parse_npy(&bytes)
            .with_context(|| format!("{} is not a valid .npy file", path.display()))?,
        "jsonl" | "ndjson" | "json" => {
            let text = std::str::from_utf8(&bytes)
                .with_context(|| format!("{} is not UTF-8 text", path.display()))?;
            return parse_jsonl_rows(text).with_context(|| format!("{}", path.display()));
        }
        _ => bail!(
            "{}: unsupported vector file (use .fvecs, .bvecs, .npy or .jsonl)",
            path.display()
        ),
    };
    Ok(Rows {
        matrix: m,
        ids: None,
        metadata: None,
    })
}

/// One metadata document per line (line i for row i): a JSON object, or an empty line or
/// `null` for none.
pub fn read_metadata_lines(path: &Path) -> Result<Vec<Metadata>> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("cannot read {} as UTF-8 text", path.display()))?;
    let body = text.strip_suffix('\n').unwrap_or(&text);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    body.split('\n')
        .enumerate()
        .map(|(i, line)| {
            let line = line.trim();
            if line.is_empty() || line == "null" {
                return Ok(Metadata::new());
            }
            metadata::parse_json(line).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

/// JSON lines: `{"id": 7, "vector": [...]}` (the id optional, but all or none) or a bare
/// array per line. Blank lines are skipped.
pub fn parse_jsonl(text: &str) -> Result<(Matrix, Option<Vec<u64>>)> {
    let r = parse_jsonl_rows(text)?;
    Ok((r.matrix, r.ids))
}

/// JSON lines: `[...]` or `{"vector": [...], "id": 7, "metadata": {...}}` per line (ids on
/// every line or none; metadata optional per line).
pub fn parse_jsonl_rows(text: &str) -> Result<Rows> {
    let mut docs: Vec<Metadata> = Vec::new();
    let mut any_metadata = false;
    let mut data = Vec::new();
    let mut ids = Vec::new();
    let mut dims = None;
    let mut rows = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("line {}: not JSON", i + 1))?;
        let (id, vector, doc) = match &v {
            serde_json::Value::Array(_) => (None, &v, None),
            serde_json::Value::Object(o) => (
                o.get("id"),
                o.get("vector")
                    .with_context(|| format!("line {}: no \"vector\"", i + 1))?,
                o.get("metadata").filter(|m| !m.is_null()),
            ),
            _ => bail!("line {}: expected an object or an array", i + 1),
        };
        docs.push(match doc {
            Some(m) => {
                any_metadata = true;
                metadata::from_json(m).with_context(|| format!("line {}: metadata", i + 1))?
            }
            None => Metadata::new(),
        });
        let values: Vec<f32> = vector
            .as_array()
            .with_context(|| format!("line {}: \"vector\" is not an array", i + 1))?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<_>>()
            .with_context(|| format!("line {}: the vector holds a non-number", i + 1))?;
        match dims {
            None => dims = Some(values.len()),
            Some(d) if d != values.len() => {
                bail!(
                    "line {}: {} values, earlier lines have {d}",
                    i + 1,
                    values.len()
                )
            }
            _ => {}
        }
        match id {
            Some(id) => {
                ids.push(id.as_u64().with_context(|| {
                    format!("line {}: \"id\" must be an unsigned integer", i + 1)
                })?)
            }
            None if !ids.is_empty() => bail!("line {}: no \"id\", earlier lines have one", i + 1),
            None => {}
        }
        if !ids.is_empty() && ids.len() != rows + 1 {
            bail!("line {}: has an \"id\", earlier lines have none", i + 1);
        }
        data.extend(values);
        rows += 1;
    }
    let dims = dims.context("no vectors")?;
    if dims == 0 {
        bail!("vectors are empty");
    }
    let ids = (!ids.is_empty()).then_some(ids);
    Ok(Rows {
        matrix: Matrix { rows, dims, data },
        ids,
        metadata: any_metadata.then_some(docs),
    })
}

/// Ids from a `.npy` of uint64 (1-D) or a text file of one id per line.
pub fn read_ids(path: &Path) -> Result<Vec<u64>> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.starts_with(b"\x93NUMPY") {
        return parse_npy_u64(&bytes)
            .with_context(|| format!("{} is not a 1-D uint64 .npy file", path.display()));
    }
    let text = std::str::from_utf8(&bytes)
        .with_context(|| format!("{} is neither .npy nor text", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            l.trim()
                .parse::<u64>()
                .with_context(|| format!("{} line {}: not an id: {l:?}", path.display(), i + 1))
        })
        .collect()
}

fn npy_header(b: &[u8]) -> Result<(&str, &[u8])> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        bail!("no NUMPY magic");
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 => {
            if b.len() < 12 {
                bail!("truncated header");
            }
            (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
        }
        v => bail!("unsupported .npy version {v}"),
    };
    let header = b.get(start..start + hlen).context("truncated header")?;
    let header = std::str::from_utf8(header).context("header is not text")?;
    Ok((header, &b[start + hlen..]))
}

fn parse_npy_u64(b: &[u8]) -> Result<Vec<u64>> {
    let (header, body) = npy_header(b)?;
    let descr = dict_value(header, "descr").context("no descr")?;
    if !descr.starts_with("'<u8'") && !descr.starts_with("'<i8'") {
        bail!("dtype must be uint64 (or non-negative int64)");
    }
    let shape = dict_value(header, "shape").context("no shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .context("bad shape")?;
    let dims: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("bad shape")?;
    let [n] = dims[..] else {
        bail!("ids must be a 1-D array, shape is ({inner})")
    };
    let need = n.checked_mul(8).context("shape too large")?;
    if body.len() < need {
        bail!("file holds {} data bytes, shape needs {need}", body.len());
    }
    let signed = descr.starts_with("'<i8'");
    body[..need]
        .chunks_exact(8)
        .map(|c| {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            if signed && (v as i64) < 0 {
                bail!("negative id {}", v as i64);
            }
            Ok(v)
        })
        .collect()
}

/// `.bvecs`: each record a little-endian i32 dimension, then that many unsigned bytes.
pub fn parse_bvecs(b: &[u8]) -> Result<Matrix> {
    if b.len() < 4 {
        bail!("file is empty");
    }
    let dims = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if dims <= 0 || dims > 65_536 {
        bail!("bad dimension {dims} in the first record");
    }
    let dims = dims as usize;
    let rec = 4 + dims;
    if !b.len().is_multiple_of(rec) {
        bail!(
            "length {} is not a whole number of {dims}-d records",
            b.len()
        );
    }
    let rows = b.len() / rec;
    let mut data = Vec::with_capacity(rows * dims);
    for r in 0..rows {
        let at = r * rec;
        let d = i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if d as usize != dims {
            bail!("record {r} has dimension {d}, expected {dims}");
        }
        data.extend(b[at + 4..at + rec].iter().map(|&x| f32::from(x)));
    }
    Ok(Matrix { rows, dims, data })
}

/// `.ivecs` (ground truth): each record a little-endian i32 count, then that many i32.
pub fn read_ivecs(path: &Path) -> Result<Vec<Vec<u64>>> {
    let b = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let n = b
            .get(at..at + 4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .with_context(|| format!("{}: truncated record", path.display()))?;
        if n < 0 {
            bail!("{}: negative record length", path.display());
        }
        let end = at + 4 + 4 * n as usize;
        let body = b
            .get(at + 4..end)
            .with_context(|| format!("{}: truncated record", path.display()))?;
        out.push(
            body.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
                .collect(),
        );
        at = end;
    }
    Ok(out)
}

/// Reads vectors for an index of `dims` dimensions; a file of other dimensions is an error.
pub fn read_vectors_for(path: &Path, dims: usize) -> Result<Matrix> {
    let m = read_vectors(path)?;
    if m.dims != dims {
        bail!(
            "{} has {} dims, the index has {dims}",
            path.display(),
            m.dims
        );
    }
    Ok(m)
}

pub fn parse_fvecs(b: &[u8]) -> Result<Matrix> {
    if b.len() < 4 {
        bail!("file is empty");
    }
    let dims = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if dims <= 0 || dims > 65_536 {
        bail!("bad dimension {dims} in the first record");
    }
    let dims = dims as usize;
    let rec = 4 + 4 * dims;
    if !b.len().is_multiple_of(rec) {
        bail!(
            "length {} is not a whole number of {dims}-d records",
            b.len()
        );
    }
    let rows = b.len() / rec;
    let mut data = Vec::with_capacity(rows * dims);
    for r in 0..rows {
        let at = r * rec;
        let d = i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if d as usize != dims {
            bail!("record {r} has dimension {d}, expected {dims}");
        }
        data.extend(
            b[at + 4..at + rec]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    Ok(Matrix { rows, dims, data })
}

/// Writes `.fvecs`.
pub fn write_fvecs(path: &Path, rows: &[Vec<f32>]) -> Result<()> {
    let mut out = Vec::new();
    for r in rows {
        out.extend((r.len() as i32).to_le_bytes());
        for x in r {
            out.extend(x.to_le_bytes());
        }
    }
    fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}

fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("'{key}':");
    let at = header.find(&k)? + k.len();
    Some(header[at..].trim_start())
}

pub fn parse_npy(b: &[u8]) -> Result<Matrix> {
    let (header, body) = npy_header(b)?;
    let descr = dict_value(header, "descr").context("no descr")?;
    let width = if descr.starts_with("'<f4'") {
        4
    } else if descr.starts_with("'<f8'") {
        8
    } else {
        bail!(
            "dtype must be little-endian float32 or float64, found {}",
            descr.split(',').next().unwrap_or("")
        );
    };
    if dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        bail!("Fortran-ordered arrays are not supported; save with numpy.ascontiguousarray");
    }
    let shape = dict_value(header, "shape").context("no shape")?;
    let inner = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .context("bad shape")?;
    let dims_list: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<Result<_, _>>()
        .context("bad shape")?;
    let [rows, dims] = dims_list[..] else {
        bail!("array must be 2-D, has shape ({inner})")
    };
    let need = rows
        .checked_mul(dims)
        .and_then(|n| n.checked_mul(width))
        .context("shape too large")?;
    if body.len() < need {
        bail!("file holds {} data bytes, shape needs {need}", body.len());
    }
    let data = if width == 4 {
        body[..need]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    } else {
        body[..need]
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect()
    };
    Ok(Matrix { rows, dims, data })
}

/// Writes a 1-D uint64 `.npy`.
pub fn write_npy_u64(path: &Path, ids: &[u64]) -> Result<()> {
    let bytes: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
    write_npy_raw(path, "<u8", &format!("({},)", ids.len()), &bytes)
}

/// Writes a 2-D float32 `.npy`.
pub fn write_npy(path: &Path, rows: usize, dims: usize, data: &[f32]) -> Result<()> {
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    write_npy_raw(path, "<f4", &format!("({rows}, {dims})"), &bytes)
}

fn write_npy_raw(path: &Path, descr: &str, shape: &str, body: &[u8]) -> Result<()> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend_from_slice(body);
    fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip_and_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        write_npy(&p, 2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let m = read_vectors(&p).unwrap();
        assert_eq!((m.rows, m.dims), (2, 3));
        assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
        let b = std::fs::read(&p).unwrap();
        assert!(parse_npy(&b[..b.len() - 1]).is_err());
        assert!(parse_npy(&b[..20]).is_err());
        let bad = String::from_utf8_lossy(&b)
            .replace("(2, 3)", "(6,)    ")
            .into_bytes();
        assert!(parse_npy(&bad).is_err(), "1-D arrays are refused");
    }

    #[test]
    fn fvecs_round_trip_and_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.fvecs");
        write_fvecs(&p, &[vec![1.0, 2.0], vec![3.0, 4.0]]).unwrap();
        let m = read_vectors(&p).unwrap();
        assert_eq!((m.rows, m.dims), (2, 2));
        assert_eq!(m.row(0), &[1.0, 2.0]);
        let b = std::fs::read(&p).unwrap();
        assert!(parse_fvecs(&b[..b.len() - 2]).is_err());
        assert!(parse_fvecs(&[]).is_err());
    }
}

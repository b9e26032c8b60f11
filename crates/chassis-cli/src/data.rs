//! Vector file readers: `.fvecs` (TEXMEX) and `.npy` (2-D float32 or float64, C order).

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

/// Reads `.fvecs` or `.npy`, chosen by extension.
pub fn read_vectors(path: &Path) -> Result<Matrix> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match ext.as_str() {
        "fvecs" => parse_fvecs(&bytes)
            .with_context(|| format!("{} is not a valid .fvecs file", path.display())),
        "npy" => parse_npy(&bytes)
            .with_context(|| format!("{} is not a valid .npy file", path.display())),
        _ => bail!(
            "{}: unsupported vector file (use .fvecs or .npy)",
            path.display()
        ),
    }
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

#[cfg(test)]
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
    let body = &b[start + hlen..];
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

/// Writes a 2-D float32 `.npy` (used by tests).
#[cfg(test)]
pub fn write_npy(path: &Path, rows: usize, dims: usize, data: &[f32]) -> Result<()> {
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dims}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    for x in data {
        out.extend(x.to_le_bytes());
    }
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

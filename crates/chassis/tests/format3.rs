//! A format 3 file written by the last release that wrote format 3
//! (`tests/fixtures/format3/`, see its README): this release reads it, keeps writing it as
//! format 3 (so older releases still open it), compacts it as format 3, and into format 4
//! when asked.

use std::fs;
use std::path::{Path, PathBuf};

use chassis::{CompactOptions, Error, Index, IndexReader, VectorLayout};

const IDS: std::ops::Range<u64> = 0..300;
const DELETED: [u64; 3] = [1000, 1007, 1014];

fn fixture(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format3/l2-12d.chassis");
    let path = dir.join("f3.chassis");
    fs::copy(src, &path).unwrap();
    path
}

/// The fixture's vector i, as numpy computed it (float64, then rounded to f32).
fn expected(i: u64) -> Vec<f32> {
    (0..12)
        .map(|j| ((i as f64 * 0.37 + j as f64 * 1.3).sin() + 0.01 * j as f64) as f32)
        .collect()
}

fn id(i: u64) -> u64 {
    1000 + 7 * i
}

#[test]
fn a_format_3_file_reads_writes_and_compacts() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());

    // Read: as the reader and as the writer.
    let reader = IndexReader::open(&path).unwrap();
    let ix = Index::open(&path).unwrap();
    let info = ix.info().unwrap();
    assert_eq!(info.versions, (3, 3));
    assert_eq!(info.vector_layout, VectorLayout::F32);
    assert_eq!(ix.len(), 297);
    let mut stored = Vec::new();
    for i in IDS {
        if DELETED.contains(&id(i)) {
            assert!(matches!(ix.get(id(i)), Err(Error::NotFound { .. })));
            continue;
        }
        let v = ix.get(id(i)).unwrap();
        assert_eq!(reader.get(id(i)).unwrap(), v);
        // numpy's sin and Rust's may differ in the last bit of an f64; never by 1e-6.
        for (a, b) in v.iter().zip(expected(i)) {
            assert!((a - b).abs() < 1e-6, "id {}: {a} vs {b}", id(i));
        }
        let top = ix.search(&v, 1, 32).unwrap();
        assert_eq!((top[0].id, top[0].distance), (id(i), 0.0));
        assert_eq!(reader.search(&v, 1, 32).unwrap()[0].id, id(i));
        stored.push((id(i), v));
    }

    // Write: an add and a delete keep the file in format 3.
    let extra: Vec<f32> = (0..12).map(|j| j as f32 / 10.0).collect();
    ix.add_with_id(99, &extra).unwrap();
    ix.delete(id(5)).unwrap();
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.info().unwrap().versions, (3, 3));
    assert_eq!(ix.info().unwrap().vector_layout, VectorLayout::F32);
    assert_eq!(ix.get(99).unwrap(), extra);
    assert!(matches!(ix.get(id(5)), Err(Error::NotFound { .. })));
    assert_eq!(ix.search(&extra, 1, 32).unwrap()[0].id, 99);
    let report = ix.check(0).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    drop(ix);

    // Compact, keeping the layout (the default): still format 3, for older releases.
    let ix = Index::open(&path).unwrap();
    // One thread: the same graph on every run. This data is chains of near-duplicates (vector
    // i and i + 17 are 0.00028 apart), on which a graph linked by several threads sometimes
    // misses a vector's own top-1 at ef 32, in format 3 as in format 4.
    ix.compact(CompactOptions {
        threads: 1,
        ..CompactOptions::default()
    })
    .unwrap();
    let info = ix.info().unwrap();
    assert_eq!(info.versions, (3, 3));
    assert_eq!(info.vector_layout, VectorLayout::F32);
    assert_eq!(ix.len(), 297);
    assert_eq!(ix.get(99).unwrap(), extra);

    // Compact into format 4 when asked: the same vectors bit for bit.
    ix.compact(CompactOptions {
        threads: 1,
        vector_layout: Some(VectorLayout::SplitHalves),
        codes: None,
        ..CompactOptions::default()
    })
    .unwrap();
    let info = ix.info().unwrap();
    assert_eq!(info.versions, (4, 4));
    assert_eq!(info.vector_layout, VectorLayout::SplitHalves);
    assert_eq!(ix.len(), 297);
    for (i, v) in &stored {
        if *i == id(5) {
            continue;
        }
        let got = ix.get(*i).unwrap();
        assert!(got.iter().zip(v).all(|(a, b)| a.to_bits() == b.to_bits()));
        let top = ix.search(v, 1, 32).unwrap();
        assert_eq!((top[0].id, top[0].distance), (*i, 0.0));
    }
    assert_eq!(ix.get(99).unwrap(), extra);
}

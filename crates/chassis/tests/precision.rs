//! Half-precision storage (`Precision::F16`, vector layout 2, read version 5).
//!
//! What must hold: every value is stored as the nearest binary16 (ties to even) and `get`
//! returns exactly that; every distance a search returns is the exact distance from the f32
//! query to the stored values; recall against brute force over the stored values is what an
//! f32 file gets; a value half precision can't hold is refused before anything is written;
//! the file's vectors take half the bytes; reader, writer, reopen, compaction to and from f16,
//! codes over f16 vectors, backup and `check` all work; a release that reads only up to format
//! 4 is refused by such a file (read version 5).

mod common;

use chassis::format::vector::{from_f16, to_f16, VectorLayout};
use chassis::graph::distance::reference;
use chassis::{CodeKind, CompactOptions, Error, Index, IndexReader, Metric, Options, Precision};
use common::{brute_force, clustered};

fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| from_f16(to_f16(x))).collect()
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = reference::dot(v, v).sqrt();
    v.iter().map(|x| x / n).collect()
}

#[test]
fn half_precision_stores_rounded_values_and_searches_them_exactly() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.chassis");
        let data = clustered(1500, 24, 8, 3);
        let opts = Options::new(24, metric).m(8).precision(Precision::F16);
        let ix = Index::create(&path, opts).unwrap();
        ix.add_batch(&data[..1400].concat(), 2).unwrap();
        ix.flush().unwrap();
        let info = ix.info().unwrap();
        assert_eq!(info.vector_layout, VectorLayout::F16, "{metric:?}");
        assert_eq!(info.versions, (5, 5));
        // What is stored: the nearest half of each value (cosine: of the unit vector).
        let stored: Vec<Vec<f32>> = data[..1400]
            .iter()
            .map(|v| {
                if metric == Metric::Cosine {
                    rounded(&unit(v))
                } else {
                    rounded(v)
                }
            })
            .collect();
        for (id, want) in stored.iter().enumerate().step_by(97) {
            let got = ix.get(id as u64).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(want), "{metric:?} get {id}");
        }
        // Every distance exact to the stored values; recall against brute force over them.
        let reader = IndexReader::open(&path).unwrap();
        let mut hits = 0;
        for q in &data[1400..] {
            let qq = if metric == Metric::Cosine {
                unit(q)
            } else {
                q.clone()
            };
            let truth = brute_force(&stored, &qq, 10, metric);
            for (who, found) in [
                ("writer", ix.search(q, 10, 96).unwrap()),
                ("reader", reader.search(q, 10, 96).unwrap()),
            ] {
                for h in &found {
                    let exact = reference::distance(metric, &qq, &stored[h.id as usize]);
                    assert!(
                        (h.distance - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                        "{metric:?} {who}: {} vs {exact}",
                        h.distance
                    );
                }
                if who == "reader" {
                    hits += found
                        .iter()
                        .filter(|h| truth.contains(&(h.id as usize)))
                        .count();
                }
            }
        }
        let recall = hits as f64 / (10.0 * 100.0);
        assert!(recall >= 0.95, "{metric:?}: recall {recall}");
        assert!(ix.check(20).unwrap().problems.is_empty());
    }
}

#[test]
fn out_of_range_values_are_refused_and_the_file_is_half_the_vector_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(3000, 64, 8, 4);
    let (f16, f32) = (dir.path().join("h"), dir.path().join("f"));
    for (path, p) in [(&f16, Precision::F16), (&f32, Precision::F32)] {
        let ix = Index::create(path, Options::new(64, Metric::L2Squared).precision(p)).unwrap();
        ix.add_batch(&data.concat(), 2).unwrap();
        ix.flush().unwrap();
        if p == Precision::F16 {
            let mut bad = data[0].clone();
            bad[5] = 70_000.0;
            let before = ix.len();
            for r in [
                ix.add(&bad).map(drop),
                ix.add_batch(&[data[1].clone(), bad.clone()].concat(), 1)
                    .map(drop),
            ] {
                match r {
                    Err(Error::InvalidVector { reason }) => {
                        assert!(reason.contains("half precision"), "{reason}")
                    }
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(ix.len(), before);
            // The largest magnitude that rounds to a finite half is stored as 65,504.
            let mut edge = data[2].clone();
            edge[0] = 65_519.0;
            let id = ix.add(&edge).unwrap();
            assert_eq!(ix.get(id).unwrap()[0], 65_504.0);
        }
    }
    // Vector bytes per slot: 128 in half precision, 256 in f32.
    let seg = |path: &std::path::Path| {
        let ix = Index::open_read_only(path).unwrap();
        let h = ix.store().header().clone();
        h.segment_layout(0)
    };
    let (a, b) = (seg(&f16), seg(&f32));
    assert_eq!((a.records_at - a.vectors_at) / a.slots, 128);
    assert_eq!((b.records_at - b.vectors_at) / b.slots, 256);
}

#[test]
fn compaction_moves_between_precisions_and_codes_work_over_half_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(2200, 33, 8, 5);
    let ix = Index::create(&path, Options::new(33, Metric::Cosine).m(8)).unwrap();
    ix.add_batch(&data[..2000].concat(), 2).unwrap();
    ix.delete_many(&[3, 7, 11]).unwrap();
    ix.flush().unwrap();
    let before: Vec<Vec<f32>> = (0..2000u64)
        .filter(|id| ![3, 7, 11].contains(id))
        .map(|id| ix.get(id).unwrap())
        .collect();
    // f32 -> f16 with int4 codes: every vector rounded, codes trained from the halves.
    ix.compact(CompactOptions {
        vector_layout: Some(VectorLayout::F16),
        codes: Some(CodeKind::Int4),
        ..CompactOptions::default()
    })
    .unwrap();
    let info = ix.info().unwrap();
    assert_eq!(
        (info.vector_layout, info.codes, info.codes_trained),
        (VectorLayout::F16, CodeKind::Int4, true)
    );
    let ids: Vec<u64> = (0..2000u64).filter(|id| ![3, 7, 11].contains(id)).collect();
    for (id, v) in ids.iter().zip(&before).step_by(50) {
        assert_eq!(ix.get(*id).unwrap(), rounded(v));
    }
    let report = ix.check(50).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Searches by codes rank exactly against the halves.
    for q in &data[2000..2050] {
        let qq = unit(q);
        for h in ix.search(q, 5, 64).unwrap() {
            let exact = reference::distance(Metric::Cosine, &qq, &ix.get(h.id).unwrap());
            assert!((h.distance - exact).abs() < 1e-4);
        }
    }
    // Adds after the compaction, a backup, then back to f32 (the halves widened exactly).
    ix.add_batch(&data[2000..].concat(), 1).unwrap();
    ix.flush().unwrap();
    let copy = dir.path().join("copy.chassis");
    ix.backup(&copy).unwrap();
    let r = IndexReader::open(&copy).unwrap();
    assert_eq!(r.get(5).unwrap(), ix.get(5).unwrap());
    let halves = ix.get(5).unwrap();
    ix.compact(CompactOptions {
        vector_layout: Some(VectorLayout::SplitHalves),
        codes: Some(CodeKind::None),
        ..CompactOptions::default()
    })
    .unwrap();
    assert_eq!(ix.info().unwrap().versions, (4, 4));
    assert_eq!(ix.get(5).unwrap(), halves);
    drop(ix);
    let ix = Index::open(&path).unwrap();
    assert!(ix.check(20).unwrap().problems.is_empty());
}

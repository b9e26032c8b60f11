//! The exact vector layouts (format 3's f32, format 4's split halves side by side and format
//! 6's planar split halves) through the public API:
//! stored vectors come back bit for bit, returned distances are exact, recall matches brute
//! force, and a reader sees what the writer wrote.

mod common;

use chassis::graph::distance::reference;
use chassis::{Index, IndexReader, Metric, Options, VectorLayout};
use common::{brute_force, clustered};

const LAYOUTS: [VectorLayout; 3] = [
    VectorLayout::F32,
    VectorLayout::SplitHalves,
    VectorLayout::SplitPlanar,
];

#[test]
fn every_layout_keeps_vectors_exactly_and_returns_exact_distances() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        // 300 dims: the batch kernels' path (256 and more) with a tail of 12.
        let data = clustered(1500, 300, 12, 3);
        for layout in LAYOUTS {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("l.chassis");
            let ix = Index::create(&path, Options::new(300, metric).vector_layout(layout)).unwrap();
            for v in &data {
                ix.add(v).unwrap();
            }
            ix.flush().unwrap();
            let info = ix.info().unwrap();
            assert_eq!(info.vector_layout, layout);
            let version = layout.read_version();
            assert_eq!(info.versions, (version, version), "{layout:?}");
            // Inner-product files are walked exactly; these clusters are not too fine.
            assert_eq!(
                info.exact_walk,
                layout.is_split() && metric == Metric::InnerProduct
            );
            let reader = IndexReader::open(&path).unwrap();
            let mut hits = 0;
            for (i, q) in data.iter().enumerate().step_by(25) {
                let truth = brute_force(&data, q, 10, metric);
                for found in [
                    ix.search(q, 10, 64).unwrap(),
                    reader.search(q, 10, 64).unwrap(),
                ] {
                    for (rank, n) in found.iter().enumerate() {
                        let stored = ix.get(n.id).unwrap();
                        let prepared = ix.get(i as u64).unwrap();
                        // Exact: the distance of the query (as stored for cosine) to the
                        // vector as stored, up to the kernels' summation order.
                        let want = reference::distance(metric, &prepared, &stored);
                        assert!(
                            (n.distance - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{metric:?} {layout:?}: {} vs {want}",
                            n.distance
                        );
                        if rank > 0 {
                            assert!(found[rank - 1].distance <= n.distance, "ranked");
                        }
                        hits += usize::from(truth.contains(&(n.id as usize)));
                    }
                }
            }
            let recall = hits as f64 / (2 * 10 * data.len().div_ceil(25)) as f64;
            assert!(recall >= 0.95, "{metric:?} {layout:?}: recall {recall}");
            if metric == Metric::L2Squared {
                for (i, v) in data.iter().enumerate() {
                    let got = reader.get(i as u64).unwrap();
                    assert!(
                        got.iter().zip(v).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{layout:?}: vector {i} changed"
                    );
                }
            }
        }
    }
}

#[test]
fn split_and_f32_files_of_the_same_vectors_find_the_same_neighbors() {
    // The same vectors, inserts and seed in both layouts: the graphs differ only where the
    // truncated distances order candidates differently, and the answers agree.
    let data = clustered(3000, 384, 20, 9);
    let dir = tempfile::tempdir().unwrap();
    let mut ixs = Vec::new();
    for layout in LAYOUTS {
        let path = dir.path().join(format!("{layout:?}.chassis"));
        let ix = Index::create(
            &path,
            Options::new(384, Metric::Cosine).vector_layout(layout),
        )
        .unwrap();
        ix.add_batch(&data.concat(), 1).unwrap();
        ix.flush().unwrap();
        ixs.push(ix);
    }
    let (mut same, mut total) = (0, 0);
    for q in data.iter().step_by(30) {
        let a: Vec<u64> = ixs[0]
            .search(q, 10, 48)
            .unwrap()
            .iter()
            .map(|n| n.id)
            .collect();
        let b: Vec<u64> = ixs[1]
            .search(q, 10, 48)
            .unwrap()
            .iter()
            .map(|n| n.id)
            .collect();
        same += a.iter().filter(|id| b.contains(id)).count();
        total += a.len();
    }
    assert!(same as f64 >= 0.97 * total as f64, "{same} of {total}");
}

#[test]
fn data_too_fine_for_high_halves_is_walked_exactly_with_full_recall() {
    // Points spread by 0.01 around (1000, 1000, ...): high halves resolve 1000 to steps of 4,
    // so walking by them would see every vector at the same place.
    let dims = 32;
    let base: Vec<Vec<f32>> = clustered(2000, dims, 8, 4)
        .into_iter()
        .map(|v| v.iter().map(|x| 1000.0 + 0.01 * x).collect())
        .collect();
    let embeddings = clustered(2000, dims, 8, 4);
    for (data, fine) in [(&base, true), (&embeddings, false)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.chassis");
        let ix = Index::create(&path, Options::new(dims, Metric::L2Squared)).unwrap();
        for v in data.iter() {
            ix.add(v).unwrap();
        }
        ix.flush().unwrap();
        assert_eq!(ix.info().unwrap().exact_walk, fine);
        drop(ix);
        let ix = Index::open(&path).unwrap();
        assert_eq!(ix.info().unwrap().exact_walk, fine, "the flag is committed");
        let reader = IndexReader::open(&path).unwrap();
        let mut hits = 0;
        let queries: Vec<&Vec<f32>> = data.iter().step_by(20).collect();
        for q in &queries {
            let truth = brute_force(data, q, 10, Metric::L2Squared);
            for found in [
                ix.search(q, 10, 64).unwrap(),
                reader.search(q, 10, 64).unwrap(),
            ] {
                hits += found
                    .iter()
                    .filter(|n| truth.contains(&(n.id as usize)))
                    .count();
            }
        }
        let recall = hits as f64 / (20 * queries.len()) as f64;
        assert!(recall >= 0.95, "fine {fine}: recall {recall}");
    }
}

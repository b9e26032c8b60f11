//! Recall against brute force on synthetic clustered data, for every metric.

mod common;

use chassis::{Index, Metric, Options};
use common::{brute_force, clustered};

fn recall_at_10(metric: Metric) -> f64 {
    let (n, dims, queries) = (20_000, 32, 200);
    let data = clustered(n + queries, dims, 50, 7);
    let (base, qs) = data.split_at(n);
    let index = Index::in_memory(Options::new(dims, metric).ef_construction(100), 1 << 30).unwrap();
    for v in base {
        index.add(v).unwrap();
    }
    let mut hit = 0;
    for q in qs {
        let truth = brute_force(base, q, 10, metric);
        let got = index.search(q, 10, 64).unwrap();
        assert_eq!(got.len(), 10);
        assert!(
            got.windows(2).all(|w| w[0].distance <= w[1].distance),
            "nearest first"
        );
        hit += got
            .iter()
            .filter(|h| truth.contains(&(h.id as usize)))
            .count();
    }
    hit as f64 / (10 * queries) as f64
}

#[test]
fn recall_l2_at_ef_64() {
    let r = recall_at_10(Metric::L2Squared);
    assert!(r >= 0.95, "recall@10 = {r}");
}

#[test]
fn recall_cosine_at_ef_64() {
    let r = recall_at_10(Metric::Cosine);
    assert!(r >= 0.95, "recall@10 = {r}");
}

#[test]
fn recall_inner_product_at_ef_64() {
    let r = recall_at_10(Metric::InnerProduct);
    assert!(r >= 0.95, "recall@10 = {r}");
}

#[test]
fn search_distance_count_measures_graph_work() {
    let (n, dims) = (3_000, 16);
    let data = clustered(n, dims, 30, 3);
    let index = Index::in_memory(Options::new(dims, Metric::L2Squared), 1 << 28).unwrap();
    for v in &data {
        index.add(v).unwrap();
    }
    assert_eq!(index.search_distance_count(), 0, "inserts are not counted");
    for q in &data[..20] {
        index.search(q, 10, 32).unwrap();
    }
    let narrow = index.search_distance_count();
    assert!((20 * 32..20 * n as u64).contains(&narrow), "{narrow}");
    for q in &data[..20] {
        index.search(q, 10, 256).unwrap();
    }
    assert!(index.search_distance_count() - narrow > narrow);
}

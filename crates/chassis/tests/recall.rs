//! Recall against brute force on synthetic clustered data, for every metric.

mod common;

use chassis::{Index, Metric, Options};
use common::{brute_force, clustered};

fn recall_at_10(metric: Metric) -> f64 {
    let (n, dims, queries) = (20_000, 32, 200);
    let data = clustered(n + queries, dims, 50, 7);
    let (base, qs) = data.split_at(n);
    let mut index =
        Index::in_memory(Options::new(dims, metric).ef_construction(100), 1 << 30).unwrap();
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

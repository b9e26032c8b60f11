//! A batch of queries searched together (`Index::search_many`, `IndexReader::search_many`):
//! each query's reads of the vectors it ranks overlap the next query's walk
//! (graph::search_pipelined), and the answers are exactly those of one search at a time.

mod common;

use chassis::{CodeKind, Index, IndexReader, Metric};
use common::{clustered, small};

const DIMS: usize = 24;

/// Fails if a batch search answers any query otherwise than `search` does (hits, order,
/// distances), in a file with int4 codes, int8 codes or none, before and after deletes (the
/// widening path, for queries whose beam comes up short), from the writer and from a reader.
#[test]
fn a_batch_answers_as_one_search_at_a_time() {
    let data = clustered(3_000 + 60, DIMS, 30, 23);
    let (base, queries) = data.split_at(3_000);
    for codes in [CodeKind::Int4, CodeKind::Int8, CodeKind::None] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.chassis");
        let options = small(DIMS, Metric::Cosine, 12, 80).codes(codes);
        let index = Index::create(&path, options).unwrap();
        let ids = index.add_batch(&base.concat(), 2).unwrap();
        for round in 0..2 {
            if round == 1 {
                // Most of the data gone: a beam may come up short and widen.
                let gone: Vec<u64> = ids.iter().copied().filter(|id| id % 10 != 0).collect();
                index.delete_many(&gone).unwrap();
            }
            index.flush().unwrap();
            let reader = IndexReader::open(&path).unwrap();
            for ef in [10, 64] {
                let one: Vec<_> = queries
                    .iter()
                    .map(|q| index.search(q, 10, ef).unwrap())
                    .collect();
                assert!(one.iter().all(|hits| hits.len() == 10));
                let many = index.search_many(queries, 10, ef).unwrap();
                assert_eq!(many, one, "{codes:?} round {round} ef {ef}: writer");
                let many = reader.search_many(queries, 10, ef).unwrap();
                assert_eq!(many, one, "{codes:?} round {round} ef {ef}: reader");
            }
        }
    }
}

/// Fails if a batch search accepts k = 0 or a query of the wrong length, or answers an empty
/// index or an empty batch with anything but empty lists.
#[test]
fn a_batch_checks_its_queries_like_one_search() {
    let index = Index::in_memory(small(DIMS, Metric::L2Squared, 8, 40), 1 << 26).unwrap();
    let q = vec![0.5f32; DIMS];
    assert_eq!(
        index.search_many(&[&q[..], &q[..]], 3, 16).unwrap(),
        vec![Vec::new(), Vec::new()]
    );
    assert!(index.search_many(&[&q[..]], 0, 16).is_err());
    assert!(index.search_many(&[&q[..], &q[..3]], 3, 16).is_err());
    let none: [&[f32]; 0] = [];
    assert!(index.search_many(&none, 3, 16).unwrap().is_empty());
    index.add_batch(&q, 1).unwrap();
    let hits = index.search_many(&[&q[..]], 3, 16).unwrap();
    assert_eq!(hits, vec![index.search(&q, 3, 16).unwrap()]);
}

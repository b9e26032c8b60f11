//! Int4 codes (write version 7): half a byte per dimension, walked like int8 codes but ranked
//! by a likely bound (`Distance::code_likely_bound`) instead of a proved one; scans read
//! vectors, so they stay exact. And a kind a later release adds is ignored by
//! readers (searched by vectors) and refused by writers.

mod common;

use chassis::format::codes::INT4_WRITE_VERSION;
use chassis::graph::distance::reference;
use chassis::{CodeKind, CompactOptions, Filter, Index, IndexReader, Metadata, Metric, Value};
use common::{brute_force, clustered, current_header, exact_recall, small};

const DIMS: usize = 24;

fn int4(metric: Metric) -> chassis::Options {
    small(DIMS, metric, 12, 80).codes(CodeKind::Int4)
}

#[test]
fn int4_codes_walk_and_rank_the_nearest_exactly_in_every_metric() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        let data = clustered(4_000 + 100, DIMS, 40, 31);
        let (base, queries) = data.split_at(4_000);
        let index = Index::in_memory(int4(metric), 1 << 30).unwrap();
        index.add_batch(&base.concat(), 2).unwrap();
        let info = index.info().unwrap();
        assert_eq!((info.codes, info.codes_trained), (CodeKind::Int4, true));
        // Every returned distance is exact (checked inside exact_recall).
        let r = exact_recall(base, queries, metric, |q| index.search(q, 10, 64).unwrap());
        assert!(r >= 0.9, "{metric:?}: recall@10 = {r}");
        // A wide beam finds the exact top 10: the likely bound loses nothing here.
        let r = exact_recall(base, queries, metric, |q| index.search(q, 10, 400).unwrap());
        assert!(r >= 0.995, "{metric:?}: recall@10 at ef 400 = {r}");
    }
}

/// Fails if a search could score codes with the query a previous search prepared: the integer
/// kernels keep a query prepared per codebook in the search's scratch, keyed by the query's
/// address, which the next query's buffer often shares. Searched forwards and backwards (each
/// query after a different one), every query must get the same answer.
#[test]
fn each_search_scores_codes_with_its_own_query() {
    let data = clustered(3_000 + 40, DIMS, 30, 17);
    let (base, queries) = data.split_at(3_000);
    for metric in [Metric::L2Squared, Metric::Cosine] {
        let index = Index::in_memory(int4(metric), 1 << 30).unwrap();
        index.add_batch(&base.concat(), 2).unwrap();
        let mut buf = vec![0f32; DIMS];
        let mut search = |q: &[f32]| {
            buf.copy_from_slice(q);
            index.search(&buf, 10, 64).unwrap()
        };
        let forwards: Vec<_> = queries.iter().map(|q| search(q)).collect();
        let mut backwards: Vec<_> = queries.iter().rev().map(|q| search(q)).collect();
        backwards.reverse();
        assert_eq!(forwards, backwards, "{metric:?}");
        let r = exact_recall(base, queries, metric, |q| index.search(q, 10, 64).unwrap());
        assert!(r >= 0.9, "{metric:?}: recall@10 = {r}");
    }
}

#[test]
fn an_int4_file_raises_the_write_version_to_7_and_readers_walk_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(2_500 + 50, DIMS, 30, 9);
    let (base, queries) = data.split_at(2_500);
    let index = Index::create(&path, int4(Metric::Cosine)).unwrap();
    index.add_batch(&base[..1_200].concat(), 2).unwrap();
    index.flush().unwrap();
    let reader = IndexReader::open(&path).unwrap();
    index.add_batch(&base[1_200..].concat(), 2).unwrap();
    index.flush().unwrap();
    let info = index.info().unwrap();
    assert_eq!(info.versions, (4, INT4_WRITE_VERSION));
    let before: Vec<_> = queries
        .iter()
        .map(|q| index.search(q, 10, 64).unwrap())
        .collect();
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(&reader.search(q, 10, 64).unwrap(), want);
    }
    index.close().unwrap();
    let index = Index::open(&path).unwrap();
    assert!(index.info().unwrap().codes_trained);
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(&index.search(q, 10, 64).unwrap(), want);
    }
    let r = exact_recall(base, queries, Metric::Cosine, |q| {
        reader.search(q, 10, 64).unwrap()
    });
    assert!(r >= 0.85, "reader recall@10 = {r}");
    assert_eq!(index.check(0).unwrap().problems, Vec::<String>::new());
    // The stored vector comes back, never its code (off by up to half a 1/15 step).
    for id in [0u64, 1_199, 2_499] {
        let v = &base[id as usize];
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        for (a, b) in index.get(id).unwrap().iter().zip(v) {
            assert!((a - b / norm).abs() < 1e-6, "{id}: {a} vs {}", b / norm);
        }
    }
}

/// A filter few vectors pass is answered by a scan, which in an int4 file reads the vectors:
/// the answer is brute force's, with nothing lost to the codes' error.
#[test]
fn scans_of_an_int4_file_are_exact() {
    let data = clustered(3_000 + 40, DIMS, 30, 23);
    let (base, queries) = data.split_at(3_000);
    let index = Index::in_memory(int4(Metric::L2Squared), 1 << 30).unwrap();
    for (i, v) in base.iter().enumerate() {
        let mut m = Metadata::new();
        m.insert("group".into(), Value::Int((i % 100) as i64));
        index.add_with_metadata(v, &m).unwrap();
    }
    let f = Filter::parse(r#"{"group": 3}"#).unwrap();
    let pass: Vec<usize> = (0..base.len()).filter(|i| i % 100 == 3).collect();
    let subset: Vec<Vec<f32>> = pass.iter().map(|&i| base[i].clone()).collect();
    for q in queries {
        let got = index.search_filtered(q, 10, 64, &f).unwrap();
        let want: Vec<u64> = brute_force(&subset, q, 10, Metric::L2Squared)
            .into_iter()
            .map(|j| pass[j] as u64)
            .collect();
        let ids: Vec<u64> = got.iter().map(|h| h.id).collect();
        assert_eq!(ids, want);
        for h in &got {
            let exact = reference::distance(Metric::L2Squared, q, &base[h.id as usize]);
            assert!((h.distance - exact).abs() <= 1e-4 * (1.0 + exact));
        }
    }
}

#[test]
fn compaction_moves_a_file_between_code_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(2_000 + 40, DIMS, 20, 3);
    let (base, queries) = data.split_at(2_000);
    let index = Index::create(&path, small(DIMS, Metric::L2Squared, 12, 80)).unwrap();
    index.add_batch(&base.concat(), 2).unwrap();
    index.flush().unwrap();
    for (kind, versions) in [
        (CodeKind::Int4, (4, INT4_WRITE_VERSION)),
        (CodeKind::Int8, (4, 6)),
        (CodeKind::Int4, (4, INT4_WRITE_VERSION)),
        (CodeKind::None, (4, 4)),
    ] {
        index
            .compact(CompactOptions {
                codes: Some(kind),
                ..CompactOptions::default()
            })
            .unwrap();
        let info = index.info().unwrap();
        assert_eq!((info.codes, info.versions), (kind, versions), "{kind:?}");
        assert_eq!(info.codes_trained, kind != CodeKind::None);
        assert_eq!(index.check(0).unwrap().problems, Vec::<String>::new());
        let r = exact_recall(base, queries, Metric::L2Squared, |q| {
            index.search(q, 10, 64).unwrap()
        });
        assert!(r >= 0.85, "{kind:?}: recall after compaction = {r}");
    }
}

/// A damaged int4 code is found by `check` and costs recall at most, never a wrong distance.
#[test]
fn a_damaged_int4_code_is_found_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(1_200 + 20, DIMS, 20, 17);
    let (base, queries) = data.split_at(1_200);
    let index = Index::create(&path, int4(Metric::L2Squared)).unwrap();
    index.add_batch(&base.concat(), 1).unwrap();
    index.flush().unwrap();
    let (segments, _, _) = index.store().region_offsets();
    index.close().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let (h, _) = current_header(&bytes);
    let layout = h.segment_layout(0);
    assert_eq!(layout.code_bytes, (DIMS / 2) as u64);
    let at = (segments[0] + layout.codes_at + 5 * layout.code_bytes) as usize;
    bytes[at] ^= 0x88;
    std::fs::write(&path, &bytes).unwrap();
    let index = Index::open(&path).unwrap();
    let problems = index.check(0).unwrap().problems;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("slot 5: its code"), "{problems:?}");
    for q in queries {
        for h in index.search(q, 10, 64).unwrap() {
            let exact = reference::distance(Metric::L2Squared, q, &base[h.id as usize]);
            assert!((h.distance - exact).abs() <= 1e-4 * (1.0 + exact));
        }
    }
}

/// A code kind this release doesn't know (one a later release added, with the write version it
/// needs): readers ignore the codes and codebook and search by the vectors, with the answers
/// the file gives without codes; the writer opens it read-only.
#[test]
fn a_later_code_kind_is_read_by_vectors_and_refused_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(1_500 + 30, DIMS, 30, 41);
    let (base, queries) = data.split_at(1_500);
    let index = Index::create(&path, int4(Metric::L2Squared)).unwrap();
    index.add_batch(&base.concat(), 2).unwrap();
    index.close().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let (mut h, at) = current_header(&bytes);
    assert_ne!(h.codebook, 0);
    // The same file without its codes: what a reader must answer.
    let by_vectors = dir.path().join("v.chassis");
    h.codes = 0;
    h.codebook = 0;
    h.write_version = 4;
    let mut plain = bytes.clone();
    let enc = h.encode();
    plain[at..at + enc.len()].copy_from_slice(&enc);
    std::fs::write(&by_vectors, &plain).unwrap();
    let want: Vec<_> = {
        let r = IndexReader::open(&by_vectors).unwrap();
        queries
            .iter()
            .map(|q| r.search(q, 10, 64).unwrap())
            .collect()
    };
    let (mut h, _) = current_header(&bytes);
    h.codes = 99;
    h.write_version = chassis::format::WRITE_VERSION + 1;
    let enc = h.encode();
    bytes[at..at + enc.len()].copy_from_slice(&enc);
    std::fs::write(&path, &bytes).unwrap();
    let reader = IndexReader::open(&path).unwrap();
    for (q, want) in queries.iter().zip(&want) {
        assert_eq!(&reader.search(q, 10, 64).unwrap(), want);
    }
    // The writer opens it read-only: it searches by vectors too and refuses to write.
    let index = Index::open(&path).unwrap();
    for (q, want) in queries.iter().zip(&want) {
        assert_eq!(&index.search(q, 10, 64).unwrap(), want);
    }
    assert!(
        index.add(&base[0]).is_err(),
        "a later write version is refused"
    );
}

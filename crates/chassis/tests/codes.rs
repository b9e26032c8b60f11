//! Quantized codes (write version 6): searches walk by int8 codes and rank exactly; the codes
//! are trained at the add that reaches `TRAIN_MIN`, written with every later add, carried by
//! compaction and trained again when missing; readers walk by them from the flush that names
//! the codebook.

mod common;

use std::sync::Arc;

use chassis::format::codes::TRAIN_MIN;
use chassis::graph::distance::reference;
use chassis::os::MemStorage;
use chassis::{CodeKind, CompactOptions, Filter, Index, IndexReader, Metadata, Metric, Value};
use common::{brute_force, clustered, current_header, exact_recall as recall, small, Moment, Rng};

const DIMS: usize = 24;

fn coded(metric: Metric) -> chassis::Options {
    small(DIMS, metric, 12, 80).codes(CodeKind::Int8)
}

#[test]
fn searches_walk_by_codes_and_return_exact_distances_in_every_metric() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        let data = clustered(4_000 + 100, DIMS, 40, 11);
        let (base, queries) = data.split_at(4_000);
        let index = Index::in_memory(coded(metric), 1 << 30).unwrap();
        for v in &base[..(TRAIN_MIN as usize - 1)] {
            index.add(v).unwrap();
        }
        assert!(!index.info().unwrap().codes_trained, "trained too early");
        let rest: Vec<f32> = base[TRAIN_MIN as usize - 1..].concat();
        index.add_batch(&rest, 2).unwrap();
        let info = index.info().unwrap();
        assert_eq!(info.codes, CodeKind::Int8);
        assert!(info.codes_trained);
        let r = recall(base, queries, metric, |q| index.search(q, 10, 64).unwrap());
        assert!(r >= 0.9, "{metric:?}: recall@10 = {r}");
        // A wide beam finds the exact top 10: ranking by the codes' bound loses nothing.
        let r = recall(base, queries, metric, |q| index.search(q, 10, 600).unwrap());
        assert!(r >= 0.995, "{metric:?}: recall@10 at ef 600 = {r}");
    }
}

/// The bound ranks only what the codes leave in doubt: far fewer exact distances than the
/// beam found, and the same answers as ranking everything (a file without codes, its graph
/// built the same way but for the walks of its inserts, which a file with codes makes by
/// its codes: docs/decisions/0013).
#[test]
fn codes_answer_as_the_same_graph_walked_by_vectors() {
    let data = clustered(3_000 + 50, DIMS, 30, 5);
    let (base, queries) = data.split_at(3_000);
    let plain = Index::in_memory(small(DIMS, Metric::L2Squared, 12, 80), 1 << 30).unwrap();
    let with = Index::in_memory(coded(Metric::L2Squared), 1 << 30).unwrap();
    let flat: Vec<f32> = base.concat();
    plain.add_batch(&flat, 1).unwrap();
    with.add_batch(&flat, 1).unwrap();
    for q in queries {
        // Wide enough that both beams hold the true top 10.
        let a = plain.search(q, 10, 400).unwrap();
        let b = with.search(q, 10, 400).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn a_file_keeps_its_codes_and_readers_walk_by_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(2_500 + 50, DIMS, 30, 9);
    let (base, queries) = data.split_at(2_500);
    let index = Index::create(&path, coded(Metric::Cosine)).unwrap();
    index.add_batch(&base[..1_200].concat(), 2).unwrap();
    index.flush().unwrap();
    // A reader opened now sees the codebook the flush named.
    let reader = IndexReader::open(&path).unwrap();
    index.add_batch(&base[1_200..].concat(), 2).unwrap();
    index.flush().unwrap();
    let before: Vec<_> = queries
        .iter()
        .map(|q| index.search(q, 10, 64).unwrap())
        .collect();
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(&reader.search(q, 10, 64).unwrap(), want);
    }
    let info = index.info().unwrap();
    assert_eq!(info.versions, (4, 6), "codes raise the write version only");
    index.close().unwrap();
    let index = Index::open(&path).unwrap();
    let info = index.info().unwrap();
    assert!(info.codes_trained);
    for (q, want) in queries.iter().zip(&before) {
        assert_eq!(&index.search(q, 10, 64).unwrap(), want);
    }
    let r = recall(base, queries, Metric::Cosine, |q| {
        reader.search(q, 10, 64).unwrap()
    });
    assert!(r >= 0.9, "reader recall@10 = {r}");
    assert_eq!(index.check(0).unwrap().problems, Vec::<String>::new());
    // Both hand back the stored vector, never its code.
    for id in [0u64, 1_199, 1_200, 2_499] {
        let want = index.get(id).unwrap();
        assert_eq!(reader.get(id).unwrap(), want, "{id}");
        // Cosine stores the unit vector; a code would be off by up to half a step (~1e-3).
        let v = &base[id as usize];
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        for (a, b) in want.iter().zip(v) {
            assert!((a - b / norm).abs() < 1e-6, "{id}: {a} vs {}", b / norm);
        }
    }
}

#[test]
fn compaction_adds_and_drops_codes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(2_000 + 40, DIMS, 20, 3);
    let (base, queries) = data.split_at(2_000);
    let index = Index::create(&path, small(DIMS, Metric::L2Squared, 12, 80)).unwrap();
    index.add_batch(&base.concat(), 2).unwrap();
    index.delete(7).unwrap();
    index.flush().unwrap();
    // The default layout, planar split halves; with codes a new file keeps its halves side
    // by side (format 4: ranking reads each vector from one place, VectorLayout::for_codes).
    assert_eq!(index.info().unwrap().versions, (6, 6));
    index
        .compact(CompactOptions {
            codes: Some(CodeKind::Int8),
            ..CompactOptions::default()
        })
        .unwrap();
    let info = index.info().unwrap();
    assert_eq!((info.codes, info.codes_trained), (CodeKind::Int8, true));
    assert_eq!(info.versions, (4, 6));
    assert_eq!(info.vector_layout, chassis::VectorLayout::SplitHalves);
    let r = recall(base, queries, Metric::L2Squared, |q| {
        index
            .search(q, 11, 64)
            .unwrap()
            .into_iter()
            .filter(|h| h.id != 7)
            .take(10)
            .collect()
    });
    assert!(r >= 0.9, "recall after compaction = {r}");
    // Compaction keeps codes unless asked, and drops them when asked.
    index.compact(CompactOptions::default()).unwrap();
    assert!(index.info().unwrap().codes_trained);
    index
        .compact(CompactOptions {
            codes: Some(CodeKind::None),
            ..CompactOptions::default()
        })
        .unwrap();
    let info = index.info().unwrap();
    assert_eq!((info.codes, info.versions), (CodeKind::None, (4, 4)));
}

#[test]
fn filtered_searches_walk_and_scan_by_codes() {
    let data = clustered(3_000 + 40, DIMS, 30, 21);
    let (base, queries) = data.split_at(3_000);
    let index = Index::in_memory(coded(Metric::L2Squared), 1 << 30).unwrap();
    for (i, v) in base.iter().enumerate() {
        let mut m = Metadata::new();
        m.insert("group".into(), Value::Int((i % 10) as i64));
        index.add_with_metadata(v, &m).unwrap();
    }
    let broad = |i: usize| i % 10 < 7;
    let narrow = |i: usize| i % 10 == 3;
    for (filter, passes) in [
        (r#"{"group": {"$lt": 7}}"#, &broad as &dyn Fn(usize) -> bool), // the graph, filtered
        (r#"{"group": 3}"#, &narrow), // perhaps a scan of what passes
    ] {
        let f = Filter::parse(filter).unwrap();
        let pass: Vec<usize> = (0..base.len()).filter(|&i| passes(i)).collect();
        let subset: Vec<Vec<f32>> = pass.iter().map(|&i| base[i].clone()).collect();
        let mut hit = 0;
        for q in queries {
            let got = index.search_filtered(q, 10, 200, &f).unwrap();
            let truth: Vec<usize> = brute_force(&subset, q, 10, Metric::L2Squared)
                .into_iter()
                .map(|j| pass[j])
                .collect();
            for h in &got {
                let exact = reference::distance(Metric::L2Squared, q, &base[h.id as usize]);
                assert!((h.distance - exact).abs() <= 1e-4 * (1.0 + exact));
            }
            hit += got
                .iter()
                .filter(|h| truth.contains(&(h.id as usize)))
                .count();
        }
        let r = hit as f64 / (10 * queries.len()) as f64;
        assert!(r >= 0.95, "{filter}: recall@10 = {r}");
    }
}

/// Codes are derived data: a file whose codebook went missing is searched by its vectors
/// (same answers), and its next writer trains the codes again.
#[test]
fn missing_codes_are_trained_again_from_the_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(1_500 + 30, DIMS, 40, 13);
    let (base, queries) = data.split_at(1_500);
    let index = Index::create(&path, coded(Metric::L2Squared)).unwrap();
    index.add_batch(&base.concat(), 2).unwrap();
    index.close().unwrap();
    let wide: Vec<_> = {
        let r = IndexReader::open(&path).unwrap();
        queries
            .iter()
            .map(|q| r.search(q, 10, 500).unwrap())
            .collect()
    };
    // Lose the codebook: the current header no longer names it.
    let mut bytes = std::fs::read(&path).unwrap();
    let (mut h, at) = current_header(&bytes);
    assert_ne!(h.codebook, 0);
    h.codebook = 0;
    let enc = h.encode();
    bytes[at..at + enc.len()].copy_from_slice(&enc);
    std::fs::write(&path, &bytes).unwrap();
    let reader = IndexReader::open(&path).unwrap();
    for (q, want) in queries.iter().zip(&wide) {
        assert_eq!(
            &reader.search(q, 10, 500).unwrap(),
            want,
            "walked by vectors"
        );
    }
    let index = Index::open(&path).unwrap();
    assert!(index.info().unwrap().codes_trained, "trained again at open");
    index.flush().unwrap();
    assert_eq!(index.check(0).unwrap().problems, Vec::<String>::new());
    drop(index);
    let (h, _) = current_header(&std::fs::read(&path).unwrap());
    assert_ne!(h.codebook, 0, "the flush names the new codebook");
    for (q, want) in queries.iter().zip(&wide) {
        assert_eq!(&reader.search(q, 10, 500).unwrap(), want, "walked by codes");
    }
}

/// A damaged code costs recall at most, never a wrong distance; `check` finds it.
#[test]
fn a_damaged_code_is_found_by_check_and_never_returns_a_wrong_distance() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.chassis");
    let data = clustered(1_200 + 20, DIMS, 20, 17);
    let (base, queries) = data.split_at(1_200);
    let index = Index::create(&path, coded(Metric::L2Squared)).unwrap();
    index.add_batch(&base.concat(), 1).unwrap();
    index.flush().unwrap();
    let (segments, _, _) = index.store().region_offsets();
    index.close().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let (h, _) = current_header(&bytes);
    let layout = h.segment_layout(0);
    for slot in [5u64, 6] {
        let at = (segments[0] + layout.codes_at + slot * layout.code_bytes) as usize;
        for b in &mut bytes[at..at + DIMS] {
            *b = 255 - *b;
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    let index = Index::open(&path).unwrap();
    let problems = index.check(0).unwrap().problems;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("slot 5: its code"), "{problems:?}");
    for q in queries {
        for h in index.search(q, 10, 64).unwrap() {
            let exact = reference::distance(Metric::L2Squared, q, &base[h.id as usize]);
            assert!((h.distance - exact).abs() <= 1e-4 * (1.0 + exact));
        }
    }
}

/// Power loss while codes are trained: the flush that first names the codebook writes the
/// codebook region, the code of every slot so far and a header. A crash at each of that
/// flush's fsyncs (torn sectors included) must leave a file that opens as a reader and as the
/// writer, shows the state before or after the flush, passes `check` (codes, once a committed
/// header names a codebook, match their vectors) and answers with exact distances, walking by
/// codes exactly when the state shown is the one that trained them.
#[test]
fn power_loss_while_codes_are_trained_leaves_a_consistent_file() {
    const CAP: usize = 64 << 20;
    let mem = MemStorage::new(CAP).unwrap();
    let ix = Index::create_in(Arc::new(mem.reopen(true)), coded(Metric::L2Squared)).unwrap();
    let data = clustered(1_100 + 5, DIMS, 20, 5);
    let (base, queries) = data.split_at(1_100);
    ix.add_batch(&base[..900].concat(), 1).unwrap();
    ix.flush().unwrap();
    let before = ix.ids().unwrap();
    let start = mem.durable_image();
    mem.record_durable_history(true);
    ix.add_batch(&base[900..].concat(), 1).unwrap(); // reaches 1,000: trains
    ix.flush().unwrap();
    assert!(ix.info().unwrap().codes_trained);
    let after = ix.ids().unwrap();
    drop(ix);
    let history = mem.durable_history();
    assert!(history.len() >= 2, "the flush syncs data, then the header");
    let mut rng = Rng::new(9);
    let mut trained_images = 0;
    for k in 0..history.len() {
        let prior = if k == 0 { &start } else { &history[k - 1] };
        let moment = Moment::at_sync(prior, &history[k]);
        for _ in 0..4 {
            let img = moment.crash_image(&mut rng);
            let file = MemStorage::from_image(&img, CAP).unwrap();
            let reader = IndexReader::open_in(Arc::new(file.reopen(false))).unwrap();
            let snap = reader.snapshot().unwrap();
            let ids = reader.ids_in(&snap).unwrap();
            assert!(ids == before || ids == after, "sync {k}: {} ids", ids.len());
            for q in queries {
                for h in reader.search(q, 5, 64).unwrap() {
                    let v = &base[h.id as usize];
                    let exact = reference::distance(Metric::L2Squared, q, v);
                    assert!(
                        (h.distance - exact).abs() <= 1e-4 * (1.0 + exact),
                        "sync {k}"
                    );
                }
            }
            let ix = Index::open_in(Arc::new(file.reopen(true))).unwrap();
            let info = ix.info().unwrap();
            // The state after the flush is the one whose header names the codebook; the one
            // before holds 900 vectors, too few to train.
            assert_eq!(info.codes_trained, ids == after, "sync {k}");
            trained_images += usize::from(ids == after);
            assert_eq!(
                ix.check(0).unwrap().problems,
                Vec::<String>::new(),
                "sync {k}"
            );
            ix.flush().unwrap();
        }
    }
    assert!(trained_images > 0, "some images hold the trained flush");
}

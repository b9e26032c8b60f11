//! compact(keep_graph): the same graph, its slots renumbered for locality (graph/order.rs).

mod common;

use chassis::format::codes::CodeKind;
use chassis::{CompactOptions, Error, Filter, Index, IndexReader, Metadata, Metric, Value};
use common::{clustered, exact_recall, small};

const DIMS: usize = 16;

fn keep() -> CompactOptions {
    CompactOptions {
        keep_graph: true,
        ..CompactOptions::default()
    }
}

fn doc(i: usize) -> Metadata {
    Metadata::from([
        ("group".to_string(), Value::Int((i % 7) as i64)),
        ("name".to_string(), Value::Str(format!("v{i}"))),
    ])
}

/// Fails if the kept graph is not the same graph (any search answers differently), if an id,
/// vector or document moves to another vector, or if the slots were not renumbered.
#[test]
fn the_kept_graph_answers_every_search_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.chassis");
    let data = clustered(3_000, DIMS, 12, 31);
    let (base, queries) = data.split_at(2_900);
    let ix = Index::create(&path, small(DIMS, Metric::L2Squared, 12, 64)).unwrap();
    let docs: Vec<Metadata> = (0..1_000).map(doc).collect();
    ix.add_batch_with_metadata(None, &base[..1_000].concat(), &docs, 2)
        .unwrap();
    // Ids of the caller's own, not in slot order, for the rest.
    let ids: Vec<u64> = (1_000..2_900).map(|i| 10_000 + 3 * i as u64).collect();
    ix.add_batch_with_ids(&ids, &base[1_000..].concat(), 2)
        .unwrap();
    ix.flush().unwrap();
    let group = Filter::eq("group", 3i64);
    let before: Vec<_> = queries
        .iter()
        .map(|q| {
            (
                ix.search(q, 10, 48).unwrap(),
                ix.search_filtered(q, 10, 48, &group).unwrap(),
            )
        })
        .collect();
    let reader = IndexReader::open(&path).unwrap();
    let old_order = reader.ids_in(&reader.snapshot().unwrap()).unwrap();
    drop(reader);

    let report = ix.compact(keep()).unwrap();
    assert_eq!((report.live, report.old_slots), (2_900, 2_900));
    let verify = |ix: &Index, how: &str| {
        for (q, (plain, filtered)) in queries.iter().zip(&before) {
            assert_eq!(&ix.search(q, 10, 48).unwrap(), plain, "{how}");
            assert_eq!(
                &ix.search_filtered(q, 10, 48, &group).unwrap(),
                filtered,
                "{how}"
            );
        }
        for (i, v) in base.iter().enumerate() {
            let id = if i < 1_000 { i as u64 } else { ids[i - 1_000] };
            assert_eq!(&ix.get(id).unwrap(), v, "{how}: id {id}");
            if i < 1_000 {
                assert_eq!(ix.get_metadata(id).unwrap(), docs[i], "{how}: id {id}");
            }
        }
        let check = ix.check(200).unwrap();
        assert_eq!(check.problems, Vec::<String>::new(), "{how}");
        assert_eq!(check.unreachable, 0, "{how}");
        assert!(check.recall.unwrap_or(0.0) >= 0.95, "{how}: {check:?}");
    };
    verify(&ix, "after compaction");
    drop(ix);
    let ix = Index::open(&path).unwrap();
    verify(&ix, "reopened");
    let reader = IndexReader::open(&path).unwrap();
    let new_order = reader.ids_in(&reader.snapshot().unwrap()).unwrap();
    let mut sorted = new_order.clone();
    sorted.sort_unstable();
    let mut old_sorted = old_order.clone();
    old_sorted.sort_unstable();
    assert_eq!(sorted, old_sorted, "every id once");
    assert_ne!(new_order, old_order, "the slots were renumbered");
    // Index-assigned ids continue above every id stored.
    assert_eq!(ix.add(&base[0]).unwrap(), 10_000 + 3 * 2_899 + 1);
}

/// Fails if a kept graph loses codes (or their recall), or a layout change, on the way.
#[test]
fn the_kept_graph_carries_codes_and_layout_changes() {
    let dir = tempfile::tempdir().unwrap();
    let data = clustered(1_600, DIMS, 16, 32);
    let (base, queries) = data.split_at(1_500);
    for kind in [CodeKind::Int4, CodeKind::Int8] {
        let path = dir.path().join(format!("{kind:?}.chassis"));
        let ix = Index::create(&path, small(DIMS, Metric::Cosine, 12, 64).codes(kind)).unwrap();
        ix.add_batch(&base.concat(), 2).unwrap();
        ix.flush().unwrap();
        let recall = |ix: &Index| {
            exact_recall(base, queries, Metric::Cosine, |q| {
                ix.search(q, 10, 64).unwrap()
            })
        };
        let before = recall(&ix);
        ix.compact(keep()).unwrap();
        let info = ix.info().unwrap();
        assert_eq!((info.codes, info.codes_trained), (kind, true), "{kind:?}");
        let after = recall(&ix);
        assert!(after >= before - 0.02, "{kind:?}: {before} -> {after}");
        // Dropping the codes keeps the graph too: the walk is then exact.
        ix.compact(CompactOptions {
            codes: Some(CodeKind::None),
            ..keep()
        })
        .unwrap();
        assert_eq!(ix.info().unwrap().codes, CodeKind::None);
        assert!(recall(&ix) >= before - 0.02);
        assert_eq!(ix.check(0).unwrap().problems, Vec::<String>::new());
    }
}

/// Fails if keep_graph runs where it can't keep every slot and list (a deleted slot, a new M),
/// or if refusing changes anything.
#[test]
fn keep_graph_refuses_deleted_slots_and_a_new_m_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.chassis");
    let data = clustered(500, DIMS, 5, 33);
    let ix = Index::create(&path, small(DIMS, Metric::L2Squared, 12, 64)).unwrap();
    ix.add_batch(&data.concat(), 1).unwrap();
    ix.flush().unwrap();
    let m16 = CompactOptions {
        m: Some(16),
        ..keep()
    };
    assert!(matches!(ix.compact(m16), Err(Error::InvalidArgument(_))));
    ix.delete(7).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let err = ix.compact(keep()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("1 of 500")),
        "{err}"
    );
    assert!(!chassis::compacting_path(&path).exists());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    assert_eq!(ix.len(), 499);
    // A rebuild drops the deleted slot; then the graph can be kept.
    ix.compact(CompactOptions::default()).unwrap();
    ix.compact(keep()).unwrap();
    assert_eq!(ix.len(), 499);
    assert!(!ix.contains(7).unwrap());
}

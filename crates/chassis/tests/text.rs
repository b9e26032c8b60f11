//! Full-text and hybrid search (issue 38): BM25 against the formula computed straight from
//! the documents, through every change that touches documents (adds, deletes, replacements,
//! upserts, rollbacks, flushes, reopens, compaction), in the writer and in a reader, with
//! filters; hybrid fusion against fusing the same legs by hand; the integrity check.

mod common;

use std::collections::BTreeMap;

use chassis::{
    CompactOptions, Error, Filter, Fusion, HybridOptions, Index, IndexReader, Metadata, Metric,
    Options, TextFieldSpec, Value,
};
use common::{agree, bm25_reference as reference, clustered, Rng};

const WORDS: &[&str] = &[
    "python", "rust", "vector", "search", "library", "fast", "embedded", "database", "file",
    "crash", "safe", "index", "graph", "query", "filter", "text", "hybrid", "token", "parser",
    "async", "http", "client", "server", "json", "yaml", "config", "test", "mock", "plot", "image",
    "audio", "model", "train", "data", "frame", "array", "numpy", "torch", "cloud", "aws", "boto3",
    "django", "flask", "web", "api", "cli", "tool", "build", "package",
];

/// A document of 0..12 words drawn Zipf-like, some with a title.
fn doc(rng: &mut Rng, i: usize) -> Metadata {
    let n = rng.below(12);
    let words: Vec<&str> = (0..n)
        .map(|_| {
            let top = 1 + rng.below(WORDS.len());
            WORDS[rng.below(top)]
        })
        .collect();
    let mut m = Metadata::new();
    m.insert("text".into(), Value::Str(words.join(" ")));
    m.insert("n".into(), Value::Int(i as i64));
    if i.is_multiple_of(4) {
        m.insert(
            "title".into(),
            Value::Str(format!("{} Tools", WORDS[i % WORDS.len()])),
        );
    }
    m
}

const QUERIES: &[&str] = &[
    "python",
    "rust vector search",
    "fast embedded database file",
    "crash safe",
    "numpy array frame data",
    "boto3 aws cloud client",
    "Python PYTHON python",
    "nothing matches this",
    "tools",
];

fn check_all(ix: &Index, docs: &BTreeMap<u64, Metadata>, fields: &[&str], what: &str) {
    for q in QUERIES {
        let got: Vec<(u64, f32)> = ix
            .search_text(q, 10, None)
            .unwrap()
            .iter()
            .map(|h| (h.id, h.score))
            .collect();
        agree(
            &got,
            &reference(docs, fields, q, 10, |_| true),
            &format!("{what}: {q}"),
        );
    }
    // A filter narrows the candidates; the statistics stay those of every live document.
    let f = Filter::parse(r#"{"n": {"$lt": 150}}"#).unwrap();
    for q in &QUERIES[..4] {
        let got: Vec<(u64, f32)> = ix
            .search_text(q, 10, Some(&f))
            .unwrap()
            .iter()
            .map(|h| (h.id, h.score))
            .collect();
        let want = reference(
            docs,
            fields,
            q,
            10,
            |d| matches!(d.get("n"), Some(Value::Int(n)) if *n < 150),
        );
        agree(&got, &want, &format!("{what}: filtered {q}"));
    }
}

fn state(ix: &Index) -> BTreeMap<u64, Metadata> {
    ix.ids()
        .unwrap()
        .into_iter()
        .map(|id| (id, ix.get_metadata(id).unwrap()))
        .collect()
}

#[test]
fn bm25_matches_the_formula_through_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.chassis");
    let opts = common::small(8, Metric::L2Squared, 8, 32).text_fields(["text", "title"]);
    let ix = Index::create(&path, opts).unwrap();
    let fields = ["text", "title"];
    assert_eq!(
        ix.text_fields(),
        [TextFieldSpec::new("text"), TextFieldSpec::new("title")]
    );
    let data = clustered(700, 8, 5, 3);
    let mut rng = Rng::new(38);
    let docs: Vec<Metadata> = (0..700).map(|i| doc(&mut rng, i)).collect();
    // A batch, then single adds (with and without documents).
    ix.add_batch_with_metadata(None, &data[..400].concat(), &docs[..400], 2)
        .unwrap();
    for i in 400..500 {
        ix.add_with_metadata(&data[i], &docs[i]).unwrap();
    }
    ix.add(&data[500]).unwrap();
    check_all(&ix, &state(&ix), &fields, "before the first flush");
    ix.flush().unwrap();
    check_all(&ix, &state(&ix), &fields, "flushed");
    // Deletes, replacements, upserts, more adds: some flushed, some pending.
    ix.delete_many(&[1, 2, 3, 50, 120]).unwrap();
    ix.set_metadata(10, &docs[600]).unwrap();
    ix.upsert(11, &data[11], &docs[601]).unwrap();
    ix.upsert(5000, &data[602], &docs[602]).unwrap();
    check_all(
        &ix,
        &state(&ix),
        &fields,
        "pending deletes and replacements",
    );
    ix.flush().unwrap();
    for i in 510..650 {
        ix.add_with_metadata(&data[i], &docs[i]).unwrap();
        if i % 40 == 0 {
            ix.flush().unwrap();
        }
    }
    ix.delete(7).unwrap();
    check_all(&ix, &state(&ix), &fields, "many flushes");
    // Rollback: back to the last flush, text included.
    let flushed_state = {
        let ro = IndexReader::open(&path).unwrap();
        let ids = ro.ids_in(&ro.snapshot().unwrap()).unwrap();
        ids.into_iter()
            .map(|id| (id, ro.get_metadata(id).unwrap()))
            .collect::<BTreeMap<_, _>>()
    };
    ix.rollback().unwrap();
    check_all(&ix, &flushed_state, &fields, "rolled back");
    ix.delete(7).unwrap();
    ix.flush().unwrap();
    let report = ix.check(0).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.text_postings > 1000);
    let st = state(&ix);
    drop(ix);
    // A reader process's view, and the writer reopened.
    let reader = IndexReader::open(&path).unwrap();
    for q in QUERIES {
        let got: Vec<(u64, f32)> = reader
            .search_text(q, 10, None)
            .unwrap()
            .iter()
            .map(|h| (h.id, h.score))
            .collect();
        agree(
            &got,
            &reference(&st, &fields, q, 10, |_| true),
            &format!("reader: {q}"),
        );
    }
    let ix = Index::open(&path).unwrap();
    check_all(&ix, &st, &fields, "reopened");
    // Compaction rebuilds the index from the documents (slots renumbered).
    ix.compact(CompactOptions {
        threads: 1,
        ..Default::default()
    })
    .unwrap();
    check_all(&ix, &st, &fields, "compacted");
    let report = ix.check(0).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(ix.info().unwrap().versions.1, 9, "write version 9");
}

#[test]
fn text_fields_can_be_added_changed_and_dropped_on_a_file_with_documents() {
    let ix = Index::in_memory(common::small(4, Metric::L2Squared, 8, 32), 64 << 20).unwrap();
    let data = clustered(300, 4, 3, 9);
    let mut rng = Rng::new(5);
    let docs: Vec<Metadata> = (0..300).map(|i| doc(&mut rng, i)).collect();
    ix.add_batch_with_metadata(None, &data.concat(), &docs, 1)
        .unwrap();
    ix.delete_many(&[0, 1, 2]).unwrap();
    ix.flush().unwrap();
    assert!(matches!(
        ix.search_text("python", 5, None),
        Err(Error::InvalidArgument(_))
    ));
    ix.set_text_fields(&[TextFieldSpec::new("text")]).unwrap();
    check_all(
        &ix,
        &state(&ix),
        &["text"],
        "added to a file with documents",
    );
    ix.flush().unwrap();
    assert!(ix.check(0).unwrap().problems.is_empty());
    ix.set_text_fields(&[TextFieldSpec::new("title")]).unwrap();
    check_all(&ix, &state(&ix), &["title"], "changed");
    ix.flush().unwrap();
    assert!(ix.check(0).unwrap().problems.is_empty());
    ix.set_text_fields(&[]).unwrap();
    ix.flush().unwrap();
    assert!(ix.text_fields().is_empty());
    assert!(ix.search_text("python", 5, None).is_err());
    assert!(ix
        .set_text_fields(&[TextFieldSpec::new("a"), TextFieldSpec::new("a")])
        .is_err());
}

#[test]
fn stemming_and_stop_words_apply_to_documents_and_queries_alike() {
    let spec = TextFieldSpec::new("text").stem(true).stop_words(true);
    let ix = Index::in_memory(
        Options::new(2, Metric::L2Squared).text_field_specs(vec![spec.clone()]),
        16 << 20,
    )
    .unwrap();
    for (i, t) in [
        "The parser parses files",
        "running the runners",
        "a file of the tests",
    ]
    .iter()
    .enumerate()
    {
        let m = Metadata::from([("text".to_string(), Value::Str(t.to_string()))]);
        ix.add_with_metadata(&[i as f32, 1.0], &m).unwrap();
    }
    ix.flush().unwrap();
    assert_eq!(ix.text_fields(), [spec]);
    let ids = |q: &str| -> Vec<u64> {
        ix.search_text(q, 5, None)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect()
    };
    assert_eq!(ids("parsing"), [0]);
    assert_eq!(ids("run"), [1]);
    let mut files = ids("FILES");
    files.sort_unstable();
    assert_eq!(files, [0, 2]);
    assert!(ids("the").is_empty(), "a stop word matches nothing");
}

#[test]
fn hybrid_fuses_the_two_legs_as_defined() {
    let ix = Index::in_memory(
        common::small(8, Metric::Cosine, 8, 64).text_fields(["text"]),
        64 << 20,
    )
    .unwrap();
    let data = clustered(500, 8, 4, 11);
    let mut rng = Rng::new(12);
    let docs: Vec<Metadata> = (0..500).map(|i| doc(&mut rng, i)).collect();
    ix.add_batch_with_metadata(None, &data.concat(), &docs, 1)
        .unwrap();
    ix.delete_many(&[4, 8, 15]).unwrap();
    let q = &data[42];
    for fusion in [Fusion::default(), Fusion::RelativeScore] {
        for (wv, wt) in [(1.0, 1.0), (0.3, 1.0), (1.0, 0.0)] {
            let opts = HybridOptions {
                fusion,
                vector_weight: wv,
                text_weight: wt,
                depth: 40,
            };
            let got = ix
                .search_hybrid(q, "python search library", 10, 64, None, &opts)
                .unwrap();
            let v = ix.search(q, 40, opts.vector_ef(10, 64)).unwrap();
            let t = ix.search_text("python search library", 40, None).unwrap();
            let want = chassis::text::hybrid(&v, &t, &opts, 10);
            assert_eq!(got, want, "{fusion:?} {wv} {wt}");
            assert_eq!(got.len(), 10);
            for h in &got {
                assert!(h.vector.is_some() || h.text.is_some());
                if let Some(l) = h.vector {
                    assert_eq!(v[l.rank as usize - 1].id, h.id);
                }
                if let Some(l) = h.text {
                    assert_eq!(t[l.rank as usize - 1].id, h.id);
                }
            }
        }
    }
    // RRF: a document first in both legs scores 2/61.
    let top_both = ix
        .search_hybrid(&data[42], "python", 1, 64, None, &HybridOptions::default())
        .unwrap();
    assert!(top_both[0].score <= 2.0 / 61.0 + 1e-6);
    // Filters apply to both legs.
    let f = Filter::parse(r#"{"n": {"$gte": 250}}"#).unwrap();
    let hits = ix
        .search_hybrid(
            q,
            "python rust",
            20,
            64,
            Some(&f),
            &HybridOptions::default(),
        )
        .unwrap();
    assert_eq!(hits.len(), 20);
    for h in &hits {
        assert!(h.id >= 250, "{h:?}");
    }
    // Bad options are refused.
    for bad in [
        HybridOptions {
            vector_weight: -1.0,
            ..Default::default()
        },
        HybridOptions {
            vector_weight: 0.0,
            text_weight: 0.0,
            ..Default::default()
        },
        HybridOptions {
            fusion: Fusion::Rrf { k: 0.0 },
            ..Default::default()
        },
    ] {
        assert!(matches!(
            ix.search_hybrid(q, "x", 5, 64, None, &bad),
            Err(Error::InvalidArgument(_))
        ));
    }
}

/// The vector leg is completed by the text leg: a document the text leg found and the graph
/// search (at a low ef, on a weak graph) missed is scored by its exact vector distance and
/// takes its place among the vector leg's best `depth`, so fusion sees its vector rank. The
/// hybrid answer equals fusing by hand the graph's leg completed so.
#[test]
fn hybrid_completes_the_vector_leg_with_the_text_legs_hits() {
    let (n, dims, depth) = (4000, 24, 10);
    let ix = Index::in_memory(
        common::small(dims, Metric::L2Squared, 6, 16).text_fields(["text"]),
        64 << 20,
    )
    .unwrap();
    let mut rng = Rng::new(31);
    let data: Vec<Vec<f32>> = (0..n)
        .map(|_| (0..dims).map(|_| rng.normal()).collect())
        .collect();
    let docs: Vec<Metadata> = (0..n).map(|i| doc(&mut rng, i)).collect();
    ix.add_batch_with_metadata(None, &data.concat(), &docs, 1)
        .unwrap();
    let opts = HybridOptions {
        depth,
        ..Default::default()
    };
    let mut completed = 0;
    // Each query: near one document's vector, with its words (so both legs may find it).
    for j in (0..n).step_by(53) {
        let Some(Value::Str(text)) = docs[j].get("text") else {
            continue;
        };
        let text = text.as_str();
        let q: Vec<f32> = data[j].iter().map(|x| x + 0.7 * rng.normal()).collect();
        let got = ix
            .search_hybrid(&q, text, depth, depth, None, &opts)
            .unwrap();
        let v = ix.search(&q, depth, depth).unwrap();
        let t = ix.search_text(text, depth, None).unwrap();
        let mut leg = v.clone();
        for h in &t {
            if !leg.iter().any(|x| x.id == h.id) {
                let d = chassis::graph::distance::reference::l2sq(&data[h.id as usize], &q);
                leg.push(chassis::Neighbor {
                    id: h.id,
                    distance: d,
                });
            }
        }
        leg.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
        leg.truncate(depth);
        let want = chassis::text::hybrid(&leg, &t, &opts, depth);
        let ids = |h: &[chassis::HybridHit]| h.iter().map(|x| x.id).collect::<Vec<_>>();
        assert_eq!(ids(&got), ids(&want), "{text}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.text, w.text, "{text}");
            assert_eq!(g.vector.map(|l| l.rank), w.vector.map(|l| l.rank), "{text}");
            if let (Some(a), Some(b)) = (g.vector, w.vector) {
                assert!(
                    (a.score - b.score).abs() <= 1e-4 * b.score.max(1.0),
                    "{text}"
                );
            }
            if g.vector.is_some() && !v.iter().any(|x| x.id == g.id) {
                completed += 1;
            }
        }
    }
    assert!(
        completed > 0,
        "no query had a text hit the graph search missed"
    );
}

/// A file whose full-text index disagrees with its documents is reported by `check`, and one
/// whose root covers fewer slots than the file commits doesn't open.
#[test]
fn check_reports_an_index_that_disagrees_with_the_documents() {
    use chassis::mutants::{self, Mutant};
    for m in [Mutant::TextPostingsWrong, Mutant::TextRootNotCommitted] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.chassis");
        let ix = Index::create(
            &path,
            common::small(4, Metric::L2Squared, 8, 32).text_fields(["text"]),
        )
        .unwrap();
        let data = clustered(200, 4, 3, 2);
        let mut rng = Rng::new(1);
        let docs: Vec<Metadata> = (0..200).map(|i| doc(&mut rng, i)).collect();
        ix.add_batch_with_metadata(None, &data[..100].concat(), &docs[..100], 1)
            .unwrap();
        ix.flush().unwrap();
        mutants::set(Some(m));
        ix.add_batch_with_metadata(None, &data[100..].concat(), &docs[100..], 1)
            .unwrap();
        ix.flush().unwrap();
        mutants::set(None);
        match m {
            Mutant::TextPostingsWrong => {
                let r = ix.check(0).unwrap();
                assert!(
                    r.problems.iter().any(|p| p.contains("full-text index")),
                    "{m:?}: {:?}",
                    r.problems
                );
            }
            _ => {
                drop(ix);
                assert!(
                    matches!(Index::open(&path), Err(Error::Corrupt { .. })),
                    "{m:?}"
                );
            }
        }
    }
}

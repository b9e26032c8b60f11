//! Writes one golden file of `crates/chassis/tests/golden/` (issue: format permanence), with
//! what it must show beside it, and refuses to touch a file that exists.
//!
//! Run it through `scripts/golden-new NAME...` (or `cargo run --example golden -- NAME...`);
//! `--list` prints the recipes. Golden files are written once, by the release of the day, and
//! checked in; `SHA256SUMS` in the folder lists every one, and `tests/golden.rs` fails if a
//! file's bytes change, so nobody regenerates them to make a test pass. A format change adds
//! a recipe here and a new file; it never rewrites an old one.
//!
//! Beside `NAME.chassis`, `NAME.json` holds what every later release must show: versions,
//! counts, every live id, deleted ids, a few stored vectors (f32 values written as f64, so
//! they read back bit for bit), and for a few queries the exact top 10 (brute force over the
//! live vectors) that a search at ef 128 returned when the file was written.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chassis::format::metadata;
use chassis::graph::distance::reference;
use chassis::os::{MemStorage, Storage};
use chassis::{
    CodeKind, CompactOptions, Filter, Geometry, Index, Metadata, Metric, Options, Value,
    VectorLayout,
};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Results per expected query.
const K: usize = 10;
/// Beam width of the expected searches.
const EF: usize = 128;

/// A seeded xorshift64* (the tests' generator, restated so the example needs no test code).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let u1 = self.uniform().max(1e-7);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `n` vectors of `dims` in a few Gaussian clusters, plus `offset` on every component.
fn clustered(n: usize, dims: usize, seed: u64, offset: f32, spread: f32) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(seed);
    let centres: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..dims).map(|_| rng.normal() * 4.0).collect())
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[rng.below(centres.len())];
            c.iter()
                .map(|x| offset + spread * (x + rng.normal()))
                .collect()
        })
        .collect()
}

fn flat(rows: &[Vec<f32>]) -> Vec<f32> {
    rows.iter().flatten().copied().collect()
}

/// One recipe: a name, what it holds, and how it is made.
struct Recipe {
    name: &'static str,
    about: &'static str,
    make: fn(&Path) -> Made,
}

/// What a recipe made: the file's bytes are at the path; this is what it must show.
struct Made {
    /// State as a writer sees it after opening (recovery included).
    note: &'static str,
    /// Ids deleted (committed, or by recovery's outcome never live): `get` is NotFound.
    deleted: Vec<u64>,
    /// Whether opening as the writer runs recovery, and how many marks it resets.
    recovery: Option<u64>,
    /// Whether the last writer closed the file cleanly (the clean-close marker in the live
    /// page names the current header), so a writer opens it without a repair pass.
    clean_close: bool,
}

fn recipes() -> Vec<Recipe> {
    vec![
        Recipe {
            name: "f3-l2",
            about: "format 3 (f32 vectors), squared L2, 1,000 x 24, M 8",
            make: |p| plain(p, VectorLayout::F32, Metric::L2Squared, 1000, 24, 8, 31),
        },
        Recipe {
            name: "f3-cosine",
            about: "format 3 (f32 vectors), cosine, 1,200 x 16, M 8",
            make: |p| plain(p, VectorLayout::F32, Metric::Cosine, 1200, 16, 8, 32),
        },
        Recipe {
            name: "f3-ip",
            about: "format 3 (f32 vectors), inner product, 1,000 x 32, M 8 (the release that \
                    wrote it set flag bit 2, exact walk, on format 3 files too)",
            make: |p| plain(p, VectorLayout::F32, Metric::InnerProduct, 1000, 32, 8, 33),
        },
        Recipe {
            name: "f4-l2",
            about: "format 4 (split halves), squared L2, 1,000 x 24, M 8",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::L2Squared,
                    1000,
                    24,
                    8,
                    41,
                )
            },
        },
        Recipe {
            name: "f4-cosine",
            about: "format 4 (split halves), cosine, 1,200 x 16, M 8",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::Cosine,
                    1200,
                    16,
                    8,
                    42,
                )
            },
        },
        Recipe {
            name: "f4-ip",
            about: "format 4 (split halves), inner product (walked exactly), 1,000 x 32, M 8",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::InnerProduct,
                    1000,
                    32,
                    8,
                    43,
                )
            },
        },
        Recipe {
            name: "f4-64d",
            about: "format 4, cosine, 700 x 64, M 12 (the widest vectors of the corpus)",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::Cosine,
                    700,
                    64,
                    12,
                    44,
                )
            },
        },
        Recipe {
            name: "f4-exact-walk",
            about: "format 4, squared L2, 800 x 8 vectors sharing an offset of 100 (too fine \
                    for high halves: flag bit 2, walked exactly)",
            make: exact_walk,
        },
        Recipe {
            name: "f4-custom-ids",
            about: "format 4, squared L2, 900 x 12 under caller-chosen ids up to 2^64 - 2",
            make: custom_ids,
        },
        Recipe {
            name: "f4-deletes-pending",
            about: "format 4, squared L2, 8 dims: 600 vectors, a committed delete flush of 40, \
                    then a flush of 30 adds and 25 deletes that lost power after its delete \
                    marks (newest header: an intent, pending delete epoch 2)",
            make: deletes_pending,
        },
        Recipe {
            name: "f4-unflushed-tail",
            about: "format 4, cosine, 12 dims: 700 vectors committed, then 150 added by a \
                    writer that was killed before flushing (R > N in the live page, edges into \
                    the uncommitted slots)",
            make: |p| unflushed_tail(p, VectorLayout::SplitHalves),
        },
        Recipe {
            name: "f4-superseded",
            about: "format 4, squared L2, 500 x 16 with 20 deletes: the old file of a \
                    compaction, flag bit 1 (superseded) committed",
            make: superseded,
        },
        Recipe {
            name: "f4-small-geometry",
            about: "format 4 in the unit-test geometry (16-slot first segment, 1 KiB heap \
                    chunks, 4-entry table pages), squared L2, 300 x 8, M 4, 10 deletes: 6 \
                    segments, 3 heap chunks, 3 table pages",
            make: |p| small_geometry(p, VectorLayout::SplitHalves),
        },
        Recipe {
            name: "f3-small-geometry",
            about: "format 3 in the unit-test geometry, cosine, 150 x 8, M 4, custom ids, 10 \
                    deletes",
            make: small_geometry_f3,
        },
        Recipe {
            name: "f4-empty",
            about: "format 4, cosine, 16 dims, created and never added to",
            make: |p| {
                let ix = Index::create(p, Options::new(16, Metric::Cosine)).unwrap();
                drop(ix);
                Made {
                    note: "empty",
                    deleted: vec![],
                    recovery: None,
                    clean_close: false,
                }
            },
        },
        Recipe {
            name: "f4-metadata",
            about: "format 4 with metadata (write version 5), cosine, 600 x 16: documents of \
                    every value type, some vectors without, 12 replaced by set_metadata (new \
                    slot, old one deleted) and 5 by upsert, 10 deleted",
            make: |p| with_metadata(p, VectorLayout::SplitHalves, Metric::Cosine, 600, 16, 101),
        },
        Recipe {
            name: "f4-closed-clean",
            about: "format 4, inner product, 800 x 16, M 8, 15 deleted, closed with \
                    Index::close: the clean-close marker (CHCLEAN and the header's sequence) \
                    in the live page, every vector reachable",
            make: closed_clean,
        },
        Recipe {
            name: "f4-backup",
            about: "an online backup (Index::backup) of a format 4 squared-L2 file, 500 x 16, \
                    M 8, with metadata, 20 deleted, taken while 40 more rows were added and \
                    not flushed: the backup stamp in the header, repaired lists, the \
                    clean-close marker",
            make: backup,
        },
        Recipe {
            name: "f4-codes",
            about: "format 4 with int8 codes (write version 6), cosine, 1,500 x 16, M 8, 20 \
                    deleted: the codebook trained at the add that reached 1,000 vectors, \
                    codes and aux records in every segment",
            make: |p| {
                with_codes(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::Cosine,
                    1500,
                    16,
                    103,
                    CodeKind::Int8,
                )
            },
        },
        Recipe {
            name: "f3-codes",
            about: "format 3 with int8 codes (read version 3, write version 6), squared L2, \
                    1,200 x 8, M 8, 20 deleted",
            make: |p| {
                with_codes(
                    p,
                    VectorLayout::F32,
                    Metric::L2Squared,
                    1200,
                    8,
                    104,
                    CodeKind::Int8,
                )
            },
        },
        Recipe {
            name: "f4-int4",
            about: "format 4 with int4 codes (write version 7), cosine, 1,500 x 17 (an odd \
                    count: the last byte of each code holds one value), M 8, 20 deleted: the \
                    codebook trained at the add that reached 1,000 vectors, packed codes and aux \
                    records in every segment",
            make: |p| {
                with_codes(
                    p,
                    VectorLayout::SplitHalves,
                    Metric::Cosine,
                    1500,
                    17,
                    105,
                    CodeKind::Int4,
                )
            },
        },
        Recipe {
            name: "f4-user-version",
            about: "format 4 with a file identity and a user version (write version 8), \
                    squared L2, 600 x 16, M 8, 12 deleted, committed in three flushes whose \
                    user versions were 5, 6 and 7, then 30 rows added with user version 8 set \
                    and rolled back (discarded, never committed)",
            make: user_version,
        },
        Recipe {
            name: "f5-f16-metadata",
            about: "half precision (vector layout 2, read version 5), squared L2, 400 x 9 (an \
                    odd count: each vector padded with a zero half), with metadata as \
                    f4-metadata (12 replaced by set_metadata, 5 by upsert, 10 deleted)",
            make: |p| with_metadata(p, VectorLayout::F16, Metric::L2Squared, 400, 9, 108),
        },
        Recipe {
            name: "f5-f16-int4",
            about: "half precision with int4 codes (read version 5, write version 7), cosine, \
                    1,500 x 17, M 8, 20 deleted: codes trained from the stored halves",
            make: |p| {
                with_codes(
                    p,
                    VectorLayout::F16,
                    Metric::Cosine,
                    1500,
                    17,
                    111,
                    CodeKind::Int4,
                )
            },
        },
        Recipe {
            name: "f5-f16-ip",
            about: "half precision, inner product, 800 x 16, M 8, all committed",
            make: |p| plain(p, VectorLayout::F16, Metric::InnerProduct, 800, 16, 8, 110),
        },
        Recipe {
            name: "f4-text",
            about: "format 4 with a full-text index (write version 9), cosine, 700 x 12, M 8: \
                    300 documents added in three flushes, then text fields set (\"body\" as \
                    words, \"title\" stemmed without English stop words), 400 more in eight \
                    flushes (segments merged), 30 deleted, 10 replaced by set_metadata, 5 \
                    upserted; closed cleanly",
            make: text,
        },
        Recipe {
            name: "f3-metadata",
            about: "format 3 with metadata (read version 3, write version 5), squared L2, \
                    400 x 8, as f4-metadata",
            make: |p| with_metadata(p, VectorLayout::F32, Metric::L2Squared, 400, 8, 102),
        },
        Recipe {
            name: "f6-l2",
            about: "planar split halves (vector layout 3, read version 6), squared L2, \
                    1,000 x 24, M 8",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitPlanar,
                    Metric::L2Squared,
                    1000,
                    24,
                    8,
                    61,
                )
            },
        },
        Recipe {
            name: "f6-ip",
            about: "planar split halves, inner product (walked exactly), 800 x 16, M 8",
            make: |p| {
                plain(
                    p,
                    VectorLayout::SplitPlanar,
                    Metric::InnerProduct,
                    800,
                    16,
                    8,
                    62,
                )
            },
        },
        Recipe {
            name: "f6-small-geometry",
            about: "planar split halves in the unit-test geometry, as f4-small-geometry: each \
                    of 6 segments has its high plane and its low plane",
            make: |p| small_geometry(p, VectorLayout::SplitPlanar),
        },
        Recipe {
            name: "f6-unflushed-tail",
            about: "planar split halves, as f4-unflushed-tail: 700 vectors committed, 150 \
                    added and never flushed",
            make: |p| unflushed_tail(p, VectorLayout::SplitPlanar),
        },
        Recipe {
            name: "f6-int8",
            about: "planar split halves with int8 codes (read version 6, write version 6), \
                    cosine, 1,500 x 16, M 8, 20 deleted: codes and aux records after both \
                    planes of every segment",
            make: |p| {
                with_codes(
                    p,
                    VectorLayout::SplitPlanar,
                    Metric::Cosine,
                    1500,
                    16,
                    63,
                    CodeKind::Int8,
                )
            },
        },
    ]
}

/// The document of row `i`: every value type, and rows without any.
fn document(i: usize) -> Metadata {
    let mut m = Metadata::new();
    if i % 11 == 4 {
        return m;
    }
    let tenants = ["acme", "globex", "initech", "umbrella"];
    m.insert("tenant".into(), Value::from(tenants[i % 4]));
    m.insert("year".into(), Value::Int(1990 + (i % 35) as i64));
    m.insert(
        "score".into(),
        Value::Float((i * 37 % 1000) as f64 / 1000.0),
    );
    m.insert("draft".into(), Value::Bool(i.is_multiple_of(3)));
    m.insert(
        "tags".into(),
        Value::List(
            (0..i % 4)
                .map(|j| Value::from(format!("t{}", (i + j * 7) % 13)))
                .collect(),
        ),
    );
    if i.is_multiple_of(7) {
        m.insert("note".into(), Value::Null);
    }
    if i.is_multiple_of(5) {
        m.insert(
            "text".into(),
            Value::Str(format!("document {i}: ").repeat(1 + i % 9)),
        );
    }
    m.insert(
        "mixed".into(),
        if i.is_multiple_of(2) {
            Value::Int(i as i64 % 50)
        } else {
            Value::Float(i as f64 % 50.0 + 0.5)
        },
    );
    m
}

/// A document of row `i` for the full-text recipe: words drawn Zipf-like from a small
/// vocabulary, and a title on most rows.
fn text_document(i: usize) -> Metadata {
    const WORDS: &[&str] = &[
        "vector",
        "search",
        "file",
        "python",
        "rust",
        "fast",
        "crash",
        "safe",
        "index",
        "parser",
        "parsing",
        "parsed",
        "the",
        "a",
        "of",
        "json",
        "yaml",
        "server",
        "client",
        "Grüße",
        "naïve",
        "café",
        "1.43.0",
        "boto3",
        "mypy-boto3-builder",
        "émigré",
        "ΣΊΣΥΦΟΣ",
    ];
    let mut rng = Rng::new(7000 + i as u64);
    let n = rng.below(14);
    let body: Vec<&str> = (0..n)
        .map(|_| {
            let top = 1 + rng.below(WORDS.len());
            WORDS[rng.below(top)]
        })
        .collect();
    let mut m = Metadata::new();
    m.insert("body".into(), Value::Str(body.join(" ")));
    if i % 4 != 3 {
        m.insert(
            "title".into(),
            Value::Str(format!("The {} of {}", WORDS[i % 12], WORDS[(i / 3) % 12])),
        );
    }
    m.insert("n".into(), Value::Int(i as i64));
    m
}

fn text(p: &Path) -> Made {
    let data = clustered(720, 12, 120, 0.0, 1.0);
    let ix = Index::create(p, options(VectorLayout::SplitHalves, Metric::Cosine, 12, 8)).unwrap();
    for part in 0..3 {
        let rows = part * 100..(part + 1) * 100;
        let docs: Vec<Metadata> = rows.clone().map(text_document).collect();
        ix.add_batch_with_metadata(None, &flat(&data[rows]), &docs, 1)
            .unwrap();
        ix.flush().unwrap();
    }
    ix.set_text_fields(&[
        chassis::TextFieldSpec::new("body"),
        chassis::TextFieldSpec::new("title")
            .stem(true)
            .stop_words(true),
    ])
    .unwrap();
    ix.flush().unwrap();
    for part in 0..8 {
        let rows = 300 + part * 50..300 + (part + 1) * 50;
        let docs: Vec<Metadata> = rows.clone().map(text_document).collect();
        ix.add_batch_with_metadata(None, &flat(&data[rows]), &docs, 1)
            .unwrap();
        ix.flush().unwrap();
    }
    let deleted: Vec<u64> = (0..700).step_by(23).take(30).map(|i| i as u64).collect();
    ix.delete_many(&deleted).unwrap();
    for i in (1..700).step_by(70).take(10) {
        ix.set_metadata(i as u64, &text_document(i + 5000)).unwrap();
    }
    for i in (2..700).step_by(140).take(5) {
        ix.upsert(i as u64, &data[700 + i / 140], &text_document(i + 9000))
            .unwrap();
    }
    ix.flush().unwrap();
    assert_eq!(ix.info().unwrap().versions.1, 9);
    assert!(ix.info().unwrap().text_segments.0 > 1);
    drop(ix);
    Made {
        note: "all committed; closed cleanly",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

/// BM25 of `query` over the documents, straight from the formula (Lucene's k1 1.2, b 0.75,
/// idf ln(1 + (N - n + 0.5) / (n + 0.5)); N, n and the average length per field over these
/// documents; summed over the fields), each field cut by its own analyzer: the top `k`,
/// ties by id.
fn bm25(
    docs: &[(u64, Metadata)],
    fields: &[chassis::TextFieldSpec],
    query: &str,
    k: usize,
) -> Vec<(u64, f64)> {
    let mut scores: std::collections::BTreeMap<u64, f64> = Default::default();
    for spec in fields {
        let a = spec.to_field().unwrap().analyzer;
        let toks: Vec<(u64, Vec<String>)> = docs
            .iter()
            .map(|(id, d)| {
                let mut t = Vec::new();
                if let Some(Value::Str(s)) = d.get(&spec.name) {
                    chassis::text::analyze(s, &a, &mut t);
                }
                (*id, t)
            })
            .collect();
        let n = toks.iter().filter(|(_, t)| !t.is_empty()).count() as f64;
        if n == 0.0 {
            continue;
        }
        let avgdl = toks.iter().map(|(_, t)| t.len()).sum::<usize>() as f64 / n;
        let mut q = Vec::new();
        chassis::text::analyze(query, &a, &mut q);
        let mut qc: std::collections::BTreeMap<String, u32> = Default::default();
        for t in q {
            *qc.entry(t).or_insert(0) += 1;
        }
        for (term, c) in qc {
            let df = toks.iter().filter(|(_, t)| t.contains(&term)).count() as f64;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for (id, t) in &toks {
                let tf = t.iter().filter(|x| **x == term).count() as f64;
                if tf > 0.0 {
                    *scores.entry(*id).or_insert(0.0) += idf * f64::from(c) * tf
                        / (tf + 1.2 * (1.0 - 0.75 + 0.75 * t.len() as f64 / avgdl));
                }
            }
        }
    }
    let mut out: Vec<(u64, f64)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(k);
    out
}

fn with_metadata(
    p: &Path,
    layout: VectorLayout,
    metric: Metric,
    n: usize,
    dims: usize,
    seed: u64,
) -> Made {
    let data = clustered(n, dims, seed, 0.0, 1.0);
    let docs: Vec<Metadata> = (0..n).map(document).collect();
    let ix = Index::create(p, options(layout, metric, dims, 8)).unwrap();
    ix.add_batch_with_metadata(None, &flat(&data), &docs, 1)
        .unwrap();
    ix.flush().unwrap();
    for i in (0..n).step_by(n / 12) {
        let mut m = document(i + 1000);
        m.insert("replaced".into(), Value::Bool(true));
        ix.set_metadata(i as u64, &m).unwrap();
    }
    for i in (3..n).step_by(n / 5).take(5) {
        let v: Vec<f32> = data[i].iter().map(|x| x * 0.5 + 0.1).collect();
        ix.upsert(i as u64, &v, &document(i + 2000)).unwrap();
    }
    let deleted: Vec<u64> = (0..10).map(|i| 5 + i * (n as u64 / 10)).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    assert_eq!(ix.info().unwrap().versions.1, 5);
    // Dropped with nothing pending: closed cleanly (f4-metadata and f3-metadata were written
    // by a release before the clean-close marker, whose files say otherwise).
    drop(ix);
    Made {
        note: "all committed; closed cleanly (dropped after a flush)",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn with_codes(
    p: &Path,
    layout: VectorLayout,
    metric: Metric,
    n: usize,
    dims: usize,
    seed: u64,
    kind: CodeKind,
) -> Made {
    let data = clustered(n, dims, seed, 0.0, 1.0);
    let ix = Index::create(p, options(layout, metric, dims, 8).codes(kind)).unwrap();
    // Two batches: the codebook is trained at the first add that reaches 1,000 vectors, and
    // the second batch's codes are written with its vectors.
    ix.add_batch(&flat(&data[..1_100]), 1).unwrap();
    ix.flush().unwrap();
    ix.add_batch(&flat(&data[1_100..]), 1).unwrap();
    let deleted: Vec<u64> = (0..20).map(|i| 3 + i * (n as u64 / 20)).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    let info = ix.info().unwrap();
    assert_eq!(Some(info.versions.1), kind.write_version());
    assert!(info.codes_trained);
    Made {
        note: "all committed; closed cleanly (dropped after a flush)",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn options(layout: VectorLayout, metric: Metric, dims: usize, m: usize) -> Options {
    Options::new(dims, metric)
        .m(m)
        .ef_construction(64)
        .vector_layout(layout)
}

fn plain(
    p: &Path,
    layout: VectorLayout,
    metric: Metric,
    n: usize,
    dims: usize,
    m: usize,
    seed: u64,
) -> Made {
    let data = clustered(n, dims, seed, 0.0, 1.0);
    let ix = Index::create(p, options(layout, metric, dims, m)).unwrap();
    ix.add_batch(&flat(&data), 1).unwrap();
    ix.flush().unwrap();
    // Dropped with nothing pending: closed cleanly (the format 3 and 4 files of this recipe
    // were written by a release before the clean-close marker, whose files say otherwise).
    drop(ix);
    Made {
        note: "all committed; closed cleanly (dropped after a flush)",
        deleted: vec![],
        recovery: None,
        clean_close: true,
    }
}

fn user_version(p: &Path) -> Made {
    let data = clustered(630, 16, 107, 0.0, 1.0);
    let ix = Index::create(
        p,
        options(VectorLayout::SplitHalves, Metric::L2Squared, 16, 8),
    )
    .unwrap();
    for (round, part) in data[..600].chunks(200).enumerate() {
        ix.add_batch(&flat(part), 1).unwrap();
        ix.set_user_version(5 + round as u64).unwrap();
        ix.flush().unwrap();
    }
    let deleted: Vec<u64> = (0..600).step_by(50).collect();
    ix.delete_many(&deleted).unwrap();
    ix.flush().unwrap();
    ix.add_batch(&flat(&data[600..]), 1).unwrap();
    ix.set_user_version(8).unwrap();
    ix.rollback().unwrap();
    assert_eq!(ix.info().unwrap().user_version, 7);
    // Nothing pending after the rollback: dropping the index closes it cleanly.
    drop(ix);
    Made {
        note: "all committed; closed cleanly after the rollback",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn exact_walk(p: &Path) -> Made {
    let data = clustered(800, 8, 51, 100.0, 0.05);
    let ix = Index::create(
        p,
        options(VectorLayout::SplitHalves, Metric::L2Squared, 8, 8),
    )
    .unwrap();
    ix.add_batch(&flat(&data), 1).unwrap();
    ix.flush().unwrap();
    assert!(
        ix.info().unwrap().exact_walk,
        "offset data must be walked exactly"
    );
    Made {
        note: "all committed",
        deleted: vec![],
        recovery: None,
        clean_close: false,
    }
}

fn custom_ids(p: &Path) -> Made {
    let data = clustered(900, 12, 52, 0.0, 1.0);
    let ix = Index::create(
        p,
        options(VectorLayout::SplitHalves, Metric::L2Squared, 12, 8),
    )
    .unwrap();
    let mut rng = Rng::new(53);
    let mut ids: Vec<u64> = (0..898).map(|_| rng.next_u64() >> 1).collect();
    ids.push(u64::MAX - 1);
    ids.push(0);
    ix.add_batch_with_ids(&ids, &flat(&data), 1).unwrap();
    ix.flush().unwrap();
    let deleted = vec![ids[5], ids[77], ids[500]];
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    Made {
        note: "all committed",
        deleted,
        recovery: None,
        clean_close: false,
    }
}

fn deletes_pending(p: &Path) -> Made {
    const CAP: usize = 64 << 20;
    let data = clustered(630, 8, 61, 0.0, 1.0);
    let mem = Arc::new(MemStorage::new(CAP).unwrap());
    let ix = Index::create_in(
        Arc::new(mem.reopen(true)),
        options(VectorLayout::SplitHalves, Metric::L2Squared, 8, 8),
    )
    .unwrap();
    ix.add_batch(&flat(&data[..600]), 1).unwrap();
    ix.flush().unwrap();
    let committed: Vec<u64> = (0..40).map(|i| i * 15).collect();
    for &id in &committed {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    // The flush that loses power: 30 adds and 25 deletes of committed vectors.
    ix.add_batch(&flat(&data[600..]), 1).unwrap();
    for id in (0..25).map(|i| 7 + i * 15) {
        ix.delete(id).unwrap();
    }
    mem.record_durable_history(true);
    ix.flush().unwrap();
    drop(ix);
    let history = mem.durable_history();
    assert_eq!(history.len(), 3, "intent, marks, commit");
    // After the second fsync: the intent header is newest and the marks are on disk.
    let image = &history[1];
    let copies = [
        chassis::format::header::Header::decode(&image[..65_536], 0).unwrap(),
        chassis::format::header::Header::decode(&image[65_536..131_072], 65_536).unwrap(),
    ];
    let newest = copies.iter().max_by_key(|h| h.sequence).unwrap();
    assert_eq!(newest.pending_delete_epoch, 2);
    write_new(p, image);
    Made {
        note: "the state before the interrupted flush: 600 slots, 40 deleted",
        deleted: committed,
        recovery: Some(25),
        clean_close: false,
    }
}

fn unflushed_tail(p: &Path, layout: VectorLayout) -> Made {
    let data = clustered(850, 12, 71, 0.0, 1.0);
    let ix = Index::create(p, options(layout, Metric::Cosine, 12, 8)).unwrap();
    ix.add_batch(&flat(&data[..700]), 1).unwrap();
    ix.flush().unwrap();
    ix.add_batch(&flat(&data[700..]), 1).unwrap();
    // Killed: everything written stays in the file (the page cache survives a process), no
    // header counts it.
    drop(ix);
    Made {
        note: "the 700 committed vectors; the 150 unflushed ones are not there",
        deleted: vec![],
        recovery: None,
        clean_close: false,
    }
}

fn superseded(p: &Path) -> Made {
    let data = clustered(500, 16, 81, 0.0, 1.0);
    let ix = Index::create(
        p,
        options(VectorLayout::SplitHalves, Metric::L2Squared, 16, 8),
    )
    .unwrap();
    ix.add_batch(&flat(&data), 1).unwrap();
    ix.flush().unwrap();
    let deleted: Vec<u64> = (0..20).map(|i| 3 + i * 21).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    let target = Arc::new(MemStorage::new(64 << 20).unwrap());
    target.try_lock_exclusive().unwrap();
    let (new, _) = ix
        .compact_into(
            target,
            CompactOptions {
                threads: 1,
                ..CompactOptions::default()
            },
        )
        .unwrap();
    drop(new);
    assert!(ix.info().is_ok());
    Made {
        note: "the 480 live vectors; the file says it was superseded",
        deleted,
        recovery: None,
        clean_close: false,
    }
}

fn small_geometry(p: &Path, layout: VectorLayout) -> Made {
    let data = clustered(300, 8, 91, 0.0, 1.0);
    let opts = options(layout, Metric::L2Squared, 8, 4).geometry(Geometry::small_for_tests(4, 16));
    let ix = Index::create(p, opts).unwrap();
    ix.add_batch(&flat(&data), 1).unwrap();
    ix.flush().unwrap();
    let deleted: Vec<u64> = (0..10).map(|i| 2 + i * 29).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    let info = ix.info().unwrap();
    eprintln!(
        "small geometry: {} segments, {} heap chunks, {} table pages",
        info.segments, info.upper_heap_chunks, info.table_pages
    );
    drop(ix);
    // Dropped with nothing pending: closed cleanly (f4-small-geometry was written by a
    // release before the clean-close marker, whose file says otherwise).
    Made {
        note: "all committed",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn closed_clean(p: &Path) -> Made {
    let data = clustered(800, 16, 71, 0.0, 1.0);
    let ix = Index::create(
        p,
        options(VectorLayout::SplitHalves, Metric::InnerProduct, 16, 8),
    )
    .unwrap();
    ix.add_batch(&flat(&data), 1).unwrap();
    ix.flush().unwrap();
    let deleted: Vec<u64> = (0..15).map(|i| 3 + i * 50).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.close().unwrap();
    Made {
        note: "all committed; closed cleanly",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn backup(p: &Path) -> Made {
    let data = clustered(540, 16, 81, 0.0, 1.0);
    let dir = tempfile_dir();
    let src = dir.join("source.chassis");
    let ix = Index::create(
        &src,
        options(VectorLayout::SplitHalves, Metric::L2Squared, 16, 8),
    )
    .unwrap();
    let docs: Vec<Metadata> = (0..500).map(document).collect();
    ix.add_batch_with_metadata(None, &flat(&data[..500]), &docs, 1)
        .unwrap();
    ix.flush().unwrap();
    let deleted: Vec<u64> = (0..20).map(|i| 7 + i * 24).collect();
    ix.delete_many(&deleted).unwrap();
    ix.flush().unwrap();
    ix.add_batch(&flat(&data[500..]), 1).unwrap(); // linked into committed lists, unflushed
    let report = ix.backup(p).unwrap();
    assert!(report.full_copy && report.repaired_lists > 0);
    drop(ix);
    std::fs::remove_dir_all(&dir).unwrap();
    Made {
        note: "the source's last flush; the 40 unflushed rows are not in it",
        deleted,
        recovery: None,
        clean_close: true,
    }
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("chassis-golden-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn small_geometry_f3(p: &Path) -> Made {
    let data = clustered(150, 8, 92, 0.0, 1.0);
    let opts =
        options(VectorLayout::F32, Metric::Cosine, 8, 4).geometry(Geometry::small_for_tests(4, 16));
    let ix = Index::create(p, opts).unwrap();
    let ids: Vec<u64> = (0..150u64).map(|i| 10_000 + 3 * i).collect();
    ix.add_batch_with_ids(&ids, &flat(&data), 1).unwrap();
    ix.flush().unwrap();
    let deleted: Vec<u64> = (0..10).map(|i| ids[1 + i * 14]).collect();
    for &id in &deleted {
        ix.delete(id).unwrap();
    }
    ix.flush().unwrap();
    Made {
        note: "all committed",
        deleted,
        recovery: None,
        clean_close: false,
    }
}

/// Writes `bytes` to a path that must not exist.
fn write_new(p: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Reads the finished file back through a read-only writer handle and records what it shows.
fn expectations(name: &str, about: &str, path: &Path, made: &Made) -> serde_json::Value {
    // A copy: opening as the writer may recover, and the golden file must not change.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.chassis");
    fs::copy(path, &copy).unwrap();
    let reader = chassis::IndexReader::open(path).unwrap();
    let snap = reader.snapshot().unwrap();
    let h = reader.header_of(&snap).clone();
    let ix = Index::open(&copy).unwrap();
    assert_eq!(
        ix.open_report().recovered,
        made.recovery.is_some(),
        "{name}: recovery"
    );
    if let Some(reset) = made.recovery {
        assert_eq!(ix.open_report().marks_reset, reset, "{name}: marks reset");
    }
    assert_eq!(
        ix.open_report().clean,
        made.clean_close,
        "{name}: clean-close marker"
    );
    let info = ix.info().unwrap();
    let ids = ix.ids().unwrap();
    assert_eq!(ids, reader.ids_in(&snap).unwrap(), "{name}: reader ids");
    for id in &made.deleted {
        assert!(!ix.contains(*id).unwrap(), "{name}: {id} deleted");
    }
    let metric = ix.metric();
    let vectors: Vec<(u64, Vec<f32>)> = ids.iter().map(|&i| (i, ix.get(i).unwrap())).collect();
    let mut sample: Vec<serde_json::Value> = Vec::new();
    let step = (ids.len() / 6).max(1);
    let has_metadata = ix.info().unwrap().metadata_chunks > 0;
    for (id, v) in vectors.iter().step_by(step).take(8) {
        if has_metadata {
            let m = metadata::to_json(&ix.get_metadata(*id).unwrap());
            sample.push(json!({ "id": id, "vector": f64s(v), "metadata": m }));
        } else {
            sample.push(json!({ "id": id, "vector": f64s(v) }));
        }
    }
    let mut rng = Rng::new(0x601D);
    let mut queries = Vec::new();
    let dims = ix.dims();
    let mut attempts = 0;
    while queries.len() < 5 && !vectors.is_empty() {
        attempts += 1;
        assert!(
            attempts < 100,
            "{name}: no query the search answers exactly"
        );
        // Near a stored vector (a real query's situation), or anywhere in its range.
        let base = &vectors[rng.below(vectors.len())].1;
        let other = &vectors[rng.below(vectors.len())].1;
        let q: Vec<f32> = if queries.len() % 2 == 0 {
            base.iter()
                .map(|x| x + 0.01 * x.abs().max(1.0) * rng.normal())
                .collect()
        } else {
            // Between two stored vectors.
            (0..dims).map(|j| 0.5 * (base[j] + other[j])).collect()
        };
        if metric == Metric::Cosine && q.iter().all(|&x| x == 0.0) {
            continue;
        }
        let qs = if metric == Metric::Cosine {
            let n = reference::dot(&q, &q).sqrt();
            q.iter().map(|x| x / n).collect()
        } else {
            q.clone()
        };
        let mut truth: Vec<(f32, u64)> = vectors
            .iter()
            .map(|(id, v)| (reference::distance(metric, &qs, v), *id))
            .collect();
        truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        truth.truncate(K);
        // Exact answers only where no two are nearly tied (so any later kernel agrees).
        let tied = truth
            .windows(2)
            .any(|w| (w[1].0 - w[0].0).abs() <= 1e-4 * w[1].0.abs().max(1e-3));
        if tied {
            continue;
        }
        let hits = ix.search(&q, K, EF).unwrap();
        let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
        let want: Vec<u64> = truth.iter().map(|t| t.1).collect();
        let by_reader: Vec<u64> = reader
            .search_in(&snap, &q, K, EF)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        if got != want || by_reader != want {
            continue;
        }
        queries.push(json!({
            "vector": f64s(&q),
            "ids": want,
            "distances": truth.iter().map(|t| f64::from(t.0)).collect::<Vec<_>>(),
        }));
    }
    // Filtered queries, with their exact answers (brute force over the live documents).
    let mut filtered = Vec::new();
    if has_metadata {
        let docs: Vec<(u64, Metadata)> = ids
            .iter()
            .map(|&i| (i, ix.get_metadata(i).unwrap()))
            .collect();
        for (j, text) in [
            r#"{"tenant": "acme"}"#,
            r#"{"year": {"$gte": 2010, "$lt": 2015}}"#,
            r#"{"tags": {"$contains": "t3"}}"#,
            r#"{"$or": [{"draft": true}, {"note": null}]}"#,
            r#"{"mixed": {"$gt": 40}}"#,
            r#"{"replaced": true}"#,
            r#"{"tenant": {"$nin": ["acme", "globex"]}, "score": {"$lt": 0.5}}"#,
            r#"{"text": {"$exists": false}}"#,
        ]
        .iter()
        .enumerate()
        {
            let f = Filter::parse(text).unwrap();
            let q = &vectors[(j * 37) % vectors.len()].1;
            let qs = if metric == Metric::Cosine {
                let n = reference::dot(q, q).sqrt();
                q.iter().map(|x| x / n).collect::<Vec<_>>()
            } else {
                q.clone()
            };
            let mut truth: Vec<(f32, u64)> = vectors
                .iter()
                .zip(&docs)
                .filter(|(_, (_, d))| f.matches_metadata(d))
                .map(|((id, v), _)| (reference::distance(metric, &qs, v), *id))
                .collect();
            truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            truth.truncate(K);
            let got: Vec<u64> = ix
                .search_filtered(q, K, EF, &f)
                .unwrap()
                .iter()
                .map(|h| h.id)
                .collect();
            let want: Vec<u64> = truth.iter().map(|t| t.1).collect();
            assert_eq!(got, want, "{name}: filtered query {text}");
            filtered.push(json!({
                "vector": f64s(q),
                "filter": text,
                "ids": want,
                "distances": truth.iter().map(|t| f64::from(t.0)).collect::<Vec<_>>(),
            }));
        }
    }
    // Full-text queries, with BM25's answers computed straight from the live documents
    // (exact ties in the top k left out, so any later release agrees on the order).
    let mut text_queries = Vec::new();
    let fields = ix.text_fields();
    if !fields.is_empty() {
        let docs: Vec<(u64, Metadata)> = ids
            .iter()
            .map(|&i| (i, ix.get_metadata(i).unwrap()))
            .collect();
        for q in [
            "vector search",
            "parsing files",
            "the python of rust",
            "GRÜSSE naïve café",
            "boto3 1.43.0",
            "ΣΊΣΥΦΟΣ",
            "crash safe index crash",
            "nothing matches",
        ] {
            let want = bm25(&docs, &fields, q, 50);
            let cut = (1..=want.len().min(K))
                .rev()
                .find(|&n| n == want.len() || (want[n - 1].1 - want[n].1).abs() > 1e-4 * want[n].1)
                .unwrap_or(0);
            let want = &want[..cut];
            let got = ix.search_text(q, cut.max(1), None).unwrap();
            assert_eq!(
                got.iter().map(|h| h.id).take(cut).collect::<Vec<_>>(),
                want.iter().map(|w| w.0).collect::<Vec<_>>(),
                "{name}: text query {q}"
            );
            text_queries.push(json!({
                "text": q,
                "ids": want.iter().map(|w| w.0).collect::<Vec<_>>(),
                "scores": want.iter().map(|w| w.1).collect::<Vec<_>>(),
            }));
        }
    }
    json!({
        "name": name,
        "about": about,
        "state": made.note,
        "written_by": format!("chassis {} at commit {}", env!("CARGO_PKG_VERSION"), commit()),
        "read_version": h.read_version,
        "write_version": h.write_version,
        "flags": h.flags,
        "vector_layout": info.vector_layout.name(),
        "dims": info.dims,
        "metric": metric.name(),
        "m": info.m,
        "ef_construction": info.ef_construction,
        "custom_ids": info.custom_ids,
        "codes": info.codes.name(),
        "codes_trained": info.codes_trained,
        "file_id": info.file_id,
        "user_version": info.user_version,
        "committed_count": h.committed_count,
        "pending_delete_epoch": h.pending_delete_epoch,
        "recovery": made.recovery.map(|r| json!({ "marks_reset": r })),
        "clean_close": made.clean_close,
        "count": ids.len(),
        "ids": ids,
        "deleted_ids": made.deleted,
        "get": sample,
        "k": K,
        "ef": EF,
        "queries": queries,
        "filtered": filtered,
        "text_fields": fields.iter().map(|f| json!({
            "name": f.name, "stem": f.stem, "stop_words": f.stop_words, "lowercase": f.lowercase,
        })).collect::<Vec<_>>(),
        "text_queries": text_queries,
    })
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let all = recipes();
    if args.is_empty() || args[0] == "--list" {
        for r in &all {
            println!("{:<20} {}", r.name, r.about);
        }
        return;
    }
    let dir = golden_dir();
    fs::create_dir_all(&dir).unwrap();
    for name in &args {
        let Some(r) = all.iter().find(|r| r.name == name) else {
            eprintln!("golden: no recipe named {name} (see --list)");
            std::process::exit(2);
        };
        let file = dir.join(format!("{name}.chassis"));
        let expect = dir.join(format!("{name}.json"));
        if file.exists() || expect.exists() {
            eprintln!(
                "golden: {} exists; golden files are never rewritten (add a new recipe)",
                file.display()
            );
            std::process::exit(1);
        }
        let made = (r.make)(&file);
        let bytes = fs::read(&file).unwrap();
        assert!(bytes.len() <= 1 << 20, "{name}: {} bytes", bytes.len());
        let value = expectations(name, r.about, &file, &made);
        assert_eq!(
            fs::read(&file).unwrap(),
            bytes,
            "{name}: reading changed the file"
        );
        let mut text = serde_json::to_string_pretty(&value).unwrap();
        text.push('\n');
        write_new(&expect, text.as_bytes());
        let mut sums = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("SHA256SUMS"))
            .unwrap();
        for p in [&file, &expect] {
            let digest = Sha256::digest(fs::read(p).unwrap());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            let base = p.file_name().unwrap().to_string_lossy();
            writeln!(sums, "{hex}  {base}").unwrap();
        }
        println!(
            "wrote {} ({} bytes) and {}",
            file.display(),
            bytes.len(),
            expect.display()
        );
    }
}

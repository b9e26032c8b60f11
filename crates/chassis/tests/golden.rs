//! Format permanence: every file in `tests/golden/` was written once by an earlier release and
//! checked in (see `examples/golden.rs` and `scripts/golden-new`). This release must read each
//! one exactly as it was written (its `.json` says what it shows), open it as the writer on a
//! copy, add, delete, flush, reopen and compact it, and keep its read and write versions.
//! Files crafted from them test the version rules of docs/FORMAT.md ("Compatibility").

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use chassis::format::header::{self, Header};
use chassis::format::metadata;
use chassis::graph::distance::reference;
use chassis::{
    CodeKind, CompactOptions, Error, Filter, Index, IndexReader, Metadata, Metric, Neighbor,
    Value as Doc, VectorLayout,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// A filtered query of a golden file: the vector, the filter, and the exact ids and
/// distances it must return.
type FilteredQuery = (Vec<f32>, Filter, Vec<u64>, Vec<f32>);

/// A golden file and what it must show.
struct Golden {
    name: String,
    path: PathBuf,
    expect: Value,
}

impl Golden {
    fn ids(&self) -> Vec<u64> {
        u64s(&self.expect["ids"])
    }
    fn deleted(&self) -> Vec<u64> {
        u64s(&self.expect["deleted_ids"])
    }
    fn versions(&self) -> (u32, u32) {
        (
            self.expect["read_version"].as_u64().unwrap() as u32,
            self.expect["write_version"].as_u64().unwrap() as u32,
        )
    }
    fn layout(&self) -> VectorLayout {
        match self.expect["vector_layout"].as_str().unwrap() {
            "f32" => VectorLayout::F32,
            "split_halves" => VectorLayout::SplitHalves,
            "f16" => VectorLayout::F16,
            "split_planar" => VectorLayout::SplitPlanar,
            other => panic!("{}: layout {other}", self.name),
        }
    }
    fn metric(&self) -> Metric {
        Metric::parse(self.expect["metric"].as_str().unwrap()).unwrap()
    }
    fn dims(&self) -> usize {
        self.expect["dims"].as_u64().unwrap() as usize
    }
    /// The file's codes and whether their codebook is trained ("none" for files from before
    /// codes).
    fn codes(&self) -> (CodeKind, bool) {
        let kind = self.expect["codes"].as_str().unwrap_or("none");
        (
            CodeKind::parse(kind).unwrap(),
            self.expect["codes_trained"].as_bool().unwrap_or(false),
        )
    }
    fn custom_ids(&self) -> bool {
        self.expect["custom_ids"].as_bool().unwrap()
    }
    /// (id, metadata) pairs `get_metadata` must return (files written with metadata).
    fn sampled_metadata(&self) -> Vec<(u64, Metadata)> {
        self.expect["get"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| {
                let m = g.get("metadata")?;
                Some((g["id"].as_u64().unwrap(), metadata::from_json(m).unwrap()))
            })
            .collect()
    }
    /// (query, filter, ids, distances) of the filtered queries (files with metadata).
    fn filtered(&self) -> Vec<FilteredQuery> {
        self.expect
            .get("filtered")
            .and_then(Value::as_array)
            .map(|qs| {
                qs.iter()
                    .map(|q| {
                        (
                            f32s(&q["vector"]),
                            Filter::parse(q["filter"].as_str().unwrap()).unwrap(),
                            u64s(&q["ids"]),
                            f32s(&q["distances"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    /// (text, ids, scores) of the full-text queries (files with a full-text index).
    fn text_queries(&self) -> Vec<(String, Vec<u64>, Vec<f32>)> {
        self.expect
            .get("text_queries")
            .and_then(Value::as_array)
            .map(|qs| {
                qs.iter()
                    .map(|q| {
                        (
                            q["text"].as_str().unwrap().to_string(),
                            u64s(&q["ids"]),
                            f32s(&q["scores"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    /// The text fields (name, stem, stop words, lowercase), empty for files without them.
    fn text_fields(&self) -> Vec<chassis::TextFieldSpec> {
        self.expect
            .get("text_fields")
            .and_then(Value::as_array)
            .map(|fs| {
                fs.iter()
                    .map(|f| {
                        chassis::TextFieldSpec::new(f["name"].as_str().unwrap())
                            .stem(f["stem"].as_bool().unwrap())
                            .stop_words(f["stop_words"].as_bool().unwrap())
                            .lowercase(f["lowercase"].as_bool().unwrap())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    /// (id, vector) pairs `get` must return bit for bit.
    fn samples(&self) -> Vec<(u64, Vec<f32>)> {
        self.expect["get"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["id"].as_u64().unwrap(), f32s(&g["vector"])))
            .collect()
    }
    /// (query, ids, distances) at k and ef.
    fn queries(&self) -> Vec<(Vec<f32>, Vec<u64>, Vec<f32>)> {
        self.expect["queries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| (f32s(&q["vector"]), u64s(&q["ids"]), f32s(&q["distances"])))
            .collect()
    }
    fn k_ef(&self) -> (usize, usize) {
        (
            self.expect["k"].as_u64().unwrap() as usize,
            self.expect["ef"].as_u64().unwrap() as usize,
        )
    }
    /// A copy in `dir` (the golden file itself is never opened for writing).
    fn copy_to(&self, dir: &Path) -> PathBuf {
        let p = dir.join(format!("{}.chassis", self.name));
        fs::copy(&self.path, &p).unwrap();
        p
    }
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// f32 values stored as the f64 of each (exact both ways).
fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The checksum list: file name → SHA-256.
fn sums() -> Vec<(String, String)> {
    fs::read_to_string(golden_dir().join("SHA256SUMS"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (hash, name) = l.split_once("  ").expect("`<sha256>  <name>` lines");
            (name.to_string(), hash.to_string())
        })
        .collect()
}

fn goldens() -> Vec<Golden> {
    let mut out: Vec<Golden> = sums()
        .into_iter()
        .filter_map(|(name, _)| name.strip_suffix(".chassis").map(str::to_string))
        .map(|name| {
            let path = golden_dir().join(format!("{name}.chassis"));
            let text = fs::read_to_string(golden_dir().join(format!("{name}.json"))).unwrap();
            Golden {
                name,
                path,
                expect: serde_json::from_str(&text).unwrap(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Distances may be summed in another order by a later kernel: equal to a few ulps.
fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0)
}

/// What both the writer and the reader offer.
trait Shows {
    fn live_ids(&self) -> Vec<u64>;
    fn get(&self, id: u64) -> chassis::Result<Vec<f32>>;
    fn metadata(&self, id: u64) -> chassis::Result<Metadata>;
    fn contains(&self, id: u64) -> bool;
    fn search(&self, q: &[f32], k: usize, ef: usize) -> Vec<Neighbor>;
    fn search_filtered(&self, q: &[f32], k: usize, ef: usize, f: &Filter) -> Vec<Neighbor>;
    fn search_text(&self, q: &str, k: usize) -> Vec<chassis::TextHit>;
    fn text_fields(&self) -> Vec<chassis::TextFieldSpec>;
}

impl Shows for Index {
    fn live_ids(&self) -> Vec<u64> {
        self.ids().unwrap()
    }
    fn get(&self, id: u64) -> chassis::Result<Vec<f32>> {
        Index::get(self, id)
    }
    fn metadata(&self, id: u64) -> chassis::Result<Metadata> {
        Index::get_metadata(self, id)
    }
    fn contains(&self, id: u64) -> bool {
        Index::contains(self, id).unwrap()
    }
    fn search(&self, q: &[f32], k: usize, ef: usize) -> Vec<Neighbor> {
        Index::search(self, q, k, ef).unwrap()
    }
    fn search_filtered(&self, q: &[f32], k: usize, ef: usize, f: &Filter) -> Vec<Neighbor> {
        Index::search_filtered(self, q, k, ef, f).unwrap()
    }
    fn search_text(&self, q: &str, k: usize) -> Vec<chassis::TextHit> {
        Index::search_text(self, q, k, None).unwrap()
    }
    fn text_fields(&self) -> Vec<chassis::TextFieldSpec> {
        Index::text_fields(self)
    }
}

impl Shows for IndexReader {
    fn live_ids(&self) -> Vec<u64> {
        self.ids_in(&self.snapshot().unwrap()).unwrap()
    }
    fn get(&self, id: u64) -> chassis::Result<Vec<f32>> {
        IndexReader::get(self, id)
    }
    fn metadata(&self, id: u64) -> chassis::Result<Metadata> {
        IndexReader::get_metadata(self, id)
    }
    fn contains(&self, id: u64) -> bool {
        IndexReader::contains(self, id).unwrap()
    }
    fn search(&self, q: &[f32], k: usize, ef: usize) -> Vec<Neighbor> {
        IndexReader::search(self, q, k, ef).unwrap()
    }
    fn search_filtered(&self, q: &[f32], k: usize, ef: usize, f: &Filter) -> Vec<Neighbor> {
        IndexReader::search_filtered(self, q, k, ef, f).unwrap()
    }
    fn search_text(&self, q: &str, k: usize) -> Vec<chassis::TextHit> {
        IndexReader::search_text(self, q, k, None).unwrap()
    }
    fn text_fields(&self) -> Vec<chassis::TextFieldSpec> {
        IndexReader::text_fields(self).unwrap()
    }
}

/// Checks everything `g` must show through `ix`.
fn shows_what_it_must(g: &Golden, ix: &dyn Shows, how: &str) {
    let who = format!("{} ({how})", g.name);
    assert_eq!(ix.live_ids(), g.ids(), "{who}: live ids in slot order");
    for id in g.deleted() {
        assert!(!ix.contains(id), "{who}: deleted id {id} is live");
        assert!(
            matches!(ix.get(id), Err(Error::NotFound { .. })),
            "{who}: get of deleted id {id}"
        );
    }
    for (id, want) in g.samples() {
        let got = ix.get(id).unwrap();
        assert_eq!(got.len(), want.len(), "{who}: get {id}");
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.to_bits(), b.to_bits(), "{who}: get {id} bit for bit");
        }
    }
    let (k, ef) = g.k_ef();
    for (q, ids, distances) in g.queries() {
        let hits = ix.search(&q, k, ef);
        let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(got, ids, "{who}: search results");
        for (h, d) in hits.iter().zip(&distances) {
            assert!(
                close(h.distance, *d),
                "{who}: distance {} vs {d}",
                h.distance
            );
        }
    }
    for (id, want) in g.sampled_metadata() {
        assert_eq!(ix.metadata(id).unwrap(), want, "{who}: metadata of {id}");
    }
    assert_eq!(ix.text_fields(), g.text_fields(), "{who}: text fields");
    for (q, ids, scores) in g.text_queries() {
        if ids.is_empty() {
            continue;
        }
        let hits = ix.search_text(&q, ids.len());
        let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(got, ids, "{who}: text search {q:?}");
        for (h, s) in hits.iter().zip(&scores) {
            assert!(
                (h.score - s).abs() <= 1e-4 * s.abs().max(1.0),
                "{who}: BM25 {} vs {s} for {q:?}",
                h.score
            );
        }
    }
    for (q, f, ids, distances) in g.filtered() {
        let hits = ix.search_filtered(&q, k, ef, &f);
        let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(got, ids, "{who}: filtered search {f:?}");
        for (h, d) in hits.iter().zip(&distances) {
            assert!(
                close(h.distance, *d),
                "{who}: distance {} vs {d}",
                h.distance
            );
        }
    }
}

/// `Index::check` finds nothing wrong, unreachable vectors included: the release that wrote
/// the corpus left some (many in graphs on inner product, where small-norm vectors are
/// nobody's near neighbor), and a writer of this release gives each a supporter when it
/// opens a file its last writer did not close with the clean-close marker (hardening issue,
/// item 1).
fn no_problems(g: &Golden, ix: &Index) {
    let check = ix.check(0).unwrap();
    assert!(
        check.problems.is_empty(),
        "{}: {:?}",
        g.name,
        check.problems
    );
}

#[test]
fn golden_files_never_change() {
    let listed = sums();
    let names: BTreeSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names.len(),
        listed.len(),
        "a file listed twice in SHA256SUMS"
    );
    for (name, hash) in &listed {
        let bytes = fs::read(golden_dir().join(name))
            .unwrap_or_else(|e| panic!("{name} is listed in SHA256SUMS but unreadable: {e}"));
        assert_eq!(
            &sha256_hex(&bytes),
            hash,
            "{name} changed: golden files are written once and never regenerated (write a new \
             one with scripts/golden-new instead)"
        );
        if name.ends_with(".chassis") {
            assert!(bytes.len() <= 1 << 20, "{name}: over 1 MiB");
        }
    }
    for entry in fs::read_dir(golden_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name != "SHA256SUMS" && name != "README.md" {
            assert!(names.contains(name.as_str()), "{name} is not in SHA256SUMS");
        }
    }
    // Every format and layout, every metric, and the states the corpus promises.
    let all = goldens();
    assert!(all.len() >= 15, "{} golden files", all.len());
    for (layout, metric) in [
        VectorLayout::F32,
        VectorLayout::SplitHalves,
        VectorLayout::F16,
        VectorLayout::SplitPlanar,
    ]
    .into_iter()
    .flat_map(|l| [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct].map(move |m| (l, m)))
    {
        assert!(
            all.iter()
                .any(|g| g.layout() == layout && g.metric() == metric),
            "no golden file in {layout:?} / {metric:?}"
        );
    }
}

#[test]
fn every_golden_file_reads_as_it_must() {
    for g in goldens() {
        let before = fs::read(&g.path).unwrap();
        // The reader and a read-only handle, on the golden file itself: neither may write.
        let reader = IndexReader::open(&g.path).unwrap();
        shows_what_it_must(&g, &reader, "reader");
        let snap = reader.snapshot().unwrap();
        let h = reader.header_of(&snap);
        assert_eq!(
            (h.read_version, h.write_version),
            g.versions(),
            "{}",
            g.name
        );
        assert_eq!(
            h.pending_delete_epoch,
            g.expect["pending_delete_epoch"].as_u64().unwrap()
        );
        let ro = Index::open_read_only(&g.path).unwrap();
        shows_what_it_must(&g, &ro, "read-only");
        let info = ro.info().unwrap();
        assert_eq!(info.versions, g.versions(), "{}", g.name);
        assert_eq!(info.vector_layout, g.layout(), "{}", g.name);
        assert_eq!((info.dims, info.metric), (g.dims(), g.metric()));
        assert_eq!(info.custom_ids, g.custom_ids(), "{}", g.name);
        assert_eq!((info.codes, info.codes_trained), g.codes(), "{}", g.name);
        // Files written before identities and user versions have neither (their JSON says
        // nothing of them); later ones show exactly what was committed.
        let file_id = g.expect["file_id"].as_str().map(str::to_string);
        assert_eq!(info.file_id, file_id, "{}: file identity", g.name);
        assert_eq!(
            snap.file_id(),
            file_id,
            "{}: file identity (reader)",
            g.name
        );
        let user_version = g.expect["user_version"].as_u64().unwrap_or(0);
        assert_eq!(info.user_version, user_version, "{}: user version", g.name);
        assert_eq!(snap.user_version(), user_version, "{}", g.name);
        drop((reader, ro, snap));
        assert!(
            fs::read(&g.path).unwrap() == before,
            "{}: reading wrote",
            g.name
        );
    }
}

/// Rows of new vectors like the file's own (near its sampled vectors), and ids for them when
/// the file uses its own.
fn more(g: &Golden, n: usize, seed: u64) -> (Vec<f32>, Option<Vec<u64>>) {
    let samples = g.samples();
    let mut rng = common::Rng::new(seed);
    let flat: Vec<f32> = if samples.is_empty() {
        common::clustered(n, g.dims(), 3, seed)
            .into_iter()
            .flatten()
            .collect()
    } else {
        (0..n)
            .flat_map(|i| {
                let base = &samples[i % samples.len()].1;
                let rms = (base.iter().map(|x| x * x).sum::<f32>() / base.len() as f32).sqrt();
                base.iter()
                    .map(|x| x + 0.3 * rms * rng.normal())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let ids = g.custom_ids().then(|| {
        let live: BTreeSet<u64> = g.ids().into_iter().collect();
        (0..u64::MAX)
            .map(|i| 7_777_777 + 131 * i)
            .filter(|i| !live.contains(i))
            .take(n)
            .collect()
    });
    (flat, ids)
}

#[test]
fn every_golden_file_opens_as_the_writer_and_takes_writes_in_its_own_format() {
    for g in goldens() {
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        let ix = Index::open(&path).unwrap();
        assert!(ix.read_only().is_none(), "{}", g.name);
        let report = ix.open_report().clone();
        match g.expect["recovery"].as_object() {
            Some(r) => {
                assert!(report.recovered, "{}: recovery ran", g.name);
                assert_eq!(report.marks_reset, r["marks_reset"].as_u64().unwrap());
            }
            None => assert!(!report.recovered, "{}: no recovery", g.name),
        }
        shows_what_it_must(&g, &ix, "writer");
        // A file its last writer closed cleanly opens without a pass over the lists; any
        // other (every file written before the marker) with one.
        let clean = g.expect["clean_close"].as_bool().unwrap_or(false);
        assert_eq!(report.clean, clean, "{}: clean-close marker", g.name);
        assert_eq!(
            report.repaired_lists.is_some(),
            !clean,
            "{}: a repair pass only without the marker",
            g.name
        );
        no_problems(&g, &ix);

        // Add, delete, flush, reopen: the file keeps its versions and layout.
        let (rows, ids) = more(&g, 40, 5);
        let added = match &ids {
            Some(ids) => {
                ix.add_batch_with_ids(ids, &rows, 1).unwrap();
                ids.clone()
            }
            None => ix.add_batch(&rows, 1).unwrap(),
        };
        let gone: Vec<u64> = g.ids().into_iter().step_by(97).take(3).collect();
        for &id in &gone {
            ix.delete(id).unwrap();
        }
        ix.flush().unwrap();
        drop(ix);
        let ix = Index::open(&path).unwrap();
        assert!(ix.open_report().clean, "{}: closed cleanly", g.name);
        assert_eq!(ix.open_report().repaired_lists, None, "{}", g.name);
        let info = ix.info().unwrap();
        assert_eq!(info.versions, g.versions(), "{}: versions kept", g.name);
        assert_eq!(info.vector_layout, g.layout(), "{}: layout kept", g.name);
        assert_eq!(
            (info.codes, info.codes_trained),
            g.codes(),
            "{}: codes kept",
            g.name
        );
        assert_eq!(
            ix.len(),
            g.ids().len() + added.len() - gone.len(),
            "{}",
            g.name
        );
        let flags = ix.store().header().flags;
        assert_eq!(
            flags & header::FLAG_SUPERSEDED,
            0,
            "{}: flag cleared",
            g.name
        );
        if g.layout() == VectorLayout::F32 {
            assert_eq!(flags & header::FLAG_EXACT_WALK, 0, "{}", g.name);
        }
        for id in &gone {
            assert!(!ix.contains(*id).unwrap(), "{}: {id} deleted", g.name);
        }
        for (id, want) in g.samples() {
            if !gone.contains(&id) {
                assert_eq!(ix.get(id).unwrap(), want, "{}: {id} kept", g.name);
            }
        }
        // Added vectors are searchable: each one's nearest is what brute force says (itself,
        // except under inner product, where a longer vector can be nearer).
        let live: Vec<(u64, Vec<f32>)> = ix
            .ids()
            .unwrap()
            .into_iter()
            .map(|id| (id, ix.get(id).unwrap()))
            .collect();
        for (i, id) in added.iter().enumerate().step_by(7) {
            let v = &rows[i * g.dims()..(i + 1) * g.dims()];
            let q = &ix.get(*id).unwrap();
            let truth = live
                .iter()
                .map(|(j, u)| (reference::distance(g.metric(), q, u), *j))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap();
            if g.metric() != Metric::InnerProduct {
                assert_eq!(truth.1, *id, "{}", g.name);
            }
            let top = ix.search(v, 1, 128).unwrap();
            assert_eq!(
                top[0].id,
                truth.1,
                "{}: an added vector is found ({:?} vs {:?}; {} unreachable)",
                g.name,
                top,
                truth,
                ix.unreachable_count()
            );
        }
        no_problems(&g, &ix);
        drop(ix);
        // A reader agrees with the writer that wrote it.
        let reader = IndexReader::open(&path).unwrap();
        assert_eq!(
            reader.len().unwrap() as usize,
            g.ids().len() + added.len() - gone.len()
        );
    }
}

#[test]
fn every_golden_file_compacts_in_its_own_format() {
    for g in goldens() {
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        let ix = Index::open(&path).unwrap();
        ix.compact(CompactOptions {
            threads: 1,
            ..CompactOptions::default()
        })
        .unwrap();
        let info = ix.info().unwrap();
        assert_eq!(info.versions, g.versions(), "{}: versions kept", g.name);
        assert_eq!(info.vector_layout, g.layout(), "{}: layout kept", g.name);
        assert_eq!(
            (info.codes, info.codes_trained),
            g.codes(),
            "{}: codes kept",
            g.name
        );
        drop(ix);
        let ix = Index::open(&path).unwrap();
        shows_what_it_must(&g, &ix, "compacted");
        no_problems(&g, &ix);
        assert_eq!(ix.store().header().deleted_count, 0, "{}", g.name);
    }
}

// ---- Crafted files: the version rules (decision 7; docs/FORMAT.md, "Compatibility"). ----

/// Rewrites both header copies of the file at `path` through `edit`, with valid checksums.
fn edit_headers(path: &Path, edit: impl Fn(&mut Header)) {
    let mut bytes = fs::read(path).unwrap();
    for copy in 0..2 {
        let base = copy * 65_536;
        let mut h = Header::decode(&bytes[base..base + 65_536], base as u64).unwrap();
        edit(&mut h);
        let enc = h.encode();
        bytes[base..base + enc.len()].copy_from_slice(&enc);
    }
    fs::write(path, bytes).unwrap();
}

/// Sets raw bytes of both header copies and fixes their checksums (for fields `Header`
/// doesn't carry, such as the reserved ones).
fn poke_headers(path: &Path, at: usize, value: &[u8]) {
    let mut bytes = fs::read(path).unwrap();
    for copy in 0..2 {
        let base = copy * 65_536;
        bytes[base + at..base + at + value.len()].copy_from_slice(value);
        let len = u32::from_le_bytes(
            bytes[base + header::at::HEADER_LEN..base + header::at::HEADER_LEN + 4]
                .try_into()
                .unwrap(),
        ) as usize;
        let sum = header::checksum(&bytes[base..base + len]);
        bytes[base + header::at::CHECKSUM..base + header::at::CHECKSUM + 8]
            .copy_from_slice(&sum.to_le_bytes());
    }
    fs::write(path, bytes).unwrap();
}

fn golden(name: &str) -> Golden {
    goldens()
        .into_iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no golden file {name}"))
}

#[test]
fn a_newer_read_version_is_too_new_before_the_checksum() {
    for name in ["f3-l2", "f4-l2"] {
        let g = golden(name);
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        for base in [0usize, 65_536] {
            bytes[base + 8..base + 12]
                .copy_from_slice(&(chassis::format::READ_VERSION + 1).to_le_bytes());
            // Everything after the version is garbage to this release, checksum included.
            for b in &mut bytes[base + 12..base + 240] {
                *b = 0xA5;
            }
        }
        fs::write(&path, &bytes).unwrap();
        let too_new = |r: chassis::Result<()>| {
            assert!(
                matches!(r, Err(Error::TooNew { read_version }) if read_version == chassis::format::READ_VERSION + 1),
                "{name}: {r:?}"
            )
        };
        too_new(Index::open(&path).map(drop));
        too_new(Index::open_read_only(&path).map(drop));
        too_new(IndexReader::open(&path).map(drop));
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "{name}: refused files are untouched"
        );
    }
}

#[test]
fn a_newer_write_version_opens_read_only_and_searches() {
    for name in ["f3-cosine", "f4-cosine"] {
        let g = golden(name);
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        edit_headers(&path, |h| {
            h.write_version = chassis::format::WRITE_VERSION + 1
        });
        let before = fs::read(&path).unwrap();
        let ix = Index::open(&path).unwrap();
        assert_eq!(
            ix.read_only(),
            Some("the file's write version is newer than this release")
        );
        shows_what_it_must(&g, &ix, "newer write version");
        let v = vec![0.5f32; g.dims()];
        assert!(matches!(ix.add(&v), Err(Error::ReadOnly { .. })));
        assert!(matches!(ix.delete(g.ids()[0]), Err(Error::ReadOnly { .. })));
        assert!(matches!(
            ix.compact(CompactOptions::default()),
            Err(Error::ReadOnly { .. })
        ));
        // It holds no lock: the newer release's writer can still open the file.
        let second = Index::open(&path).unwrap();
        assert!(second.read_only().is_some());
        let reader = IndexReader::open(&path).unwrap();
        shows_what_it_must(&g, &reader, "newer write version, reader");
        drop((ix, second, reader));
        assert_eq!(fs::read(&path).unwrap(), before, "{name}: nothing written");
    }
}

#[test]
fn unknown_flag_bits_are_read_and_never_written() {
    let g = golden("f4-l2");
    for bit in [3u32, 7, 31] {
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        edit_headers(&path, |h| h.flags |= 1 << bit);
        let before = fs::read(&path).unwrap();
        let reader = IndexReader::open(&path).unwrap();
        shows_what_it_must(&g, &reader, "unknown flag, reader");
        let ix = Index::open(&path).unwrap();
        assert_eq!(
            ix.read_only(),
            Some("the file has flag bits this release does not know")
        );
        shows_what_it_must(&g, &ix, "unknown flag, writer");
        assert!(matches!(
            ix.add(&vec![0.5f32; g.dims()]),
            Err(Error::ReadOnly { .. })
        ));
        drop((ix, reader));
        assert_eq!(
            fs::read(&path).unwrap(),
            before,
            "bit {bit}: nothing written"
        );
    }
}

#[test]
fn reserved_fields_are_ignored_when_read_and_written_as_zero() {
    // The header's reserved bytes, and the backup stamp, codes fields and user version
    // before them (ignored when read in a file of this write version, and written as zero by
    // every commit, as reserved bytes are). The file identity (bytes 192..208, reserved
    // before it) is read from every file and kept.
    let g = golden("f4-custom-ids");
    let dir = tempfile::tempdir().unwrap();
    let path = g.copy_to(dir.path());
    poke_headers(&path, header::at::BACKUP_STAMP, &[0x5A; 20]);
    poke_headers(&path, header::at::FILE_ID, &[0x5B; 16]);
    poke_headers(&path, header::at::USER_VERSION, &[0x5A; 16]);
    let reader = IndexReader::open(&path).unwrap();
    shows_what_it_must(&g, &reader, "reserved header bytes, reader");
    let ix = Index::open(&path).unwrap();
    assert!(ix.read_only().is_none());
    shows_what_it_must(&g, &ix, "reserved header bytes, writer");
    let (rows, ids) = more(&g, 3, 9);
    ix.add_batch_with_ids(ids.as_deref().unwrap(), &rows, 1)
        .unwrap();
    ix.flush().unwrap();
    let copy = ix.store().header_copy();
    drop(ix);
    let bytes = fs::read(&path).unwrap();
    let base = copy * 65_536;
    let zero = |from: usize, to: usize| bytes[base + from..base + to].iter().all(|&b| b == 0);
    assert!(
        zero(header::at::BACKUP_STAMP, header::at::FILE_ID)
            && zero(header::at::USER_VERSION, header::at::SEQUENCE),
        "the header a writer writes has zero reserved bytes"
    );
    assert_eq!(
        &bytes[base + header::at::FILE_ID..base + header::at::FILE_ID + 16],
        &[0x5B; 16],
        "the identity is kept"
    );

    // Reserved words in the live page, upper-heap entries and heap chunk heads: readers and
    // the writer ignore them.
    let g = golden("f4-small-geometry");
    let dir = tempfile::tempdir().unwrap();
    let path = g.copy_to(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    let live = 131_072 + chassis::format::live::TABLE_PAGE_COUNT_AT as usize + 4;
    bytes[live..live + 4].copy_from_slice(&[0x5A; 4]);
    let reader = IndexReader::open(&path).unwrap();
    let snap = reader.snapshot().unwrap();
    let (_, chunks, _) = {
        let ro = Index::open_read_only(&path).unwrap();
        let offsets = ro.store().region_offsets();
        offsets
    };
    drop((reader, snap));
    let mut entries = 0;
    for &chunk in &chunks {
        let c = chunk as usize;
        // The chunk head's reserved word.
        bytes[c + 12..c + 16].copy_from_slice(&[0x5A; 4]);
        // Each entry's reserved word: walk the entries (layers at 0, reserved at 4).
        let mut off = 16usize;
        while off + 8 <= 1024 {
            let layers = u32::from_le_bytes(bytes[c + off..c + off + 4].try_into().unwrap());
            if layers == 0 {
                break;
            }
            bytes[c + off + 4..c + off + 8].copy_from_slice(&[0x5A; 4]);
            entries += 1;
            off += chassis::format::record::upper_entry_bytes(4, layers) as usize;
        }
    }
    assert!(entries > 10, "{entries} upper entries poked");
    fs::write(&path, &bytes).unwrap();
    let reader = IndexReader::open(&path).unwrap();
    shows_what_it_must(&g, &reader, "reserved words, reader");
    let ix = Index::open(&path).unwrap();
    shows_what_it_must(&g, &ix, "reserved words, writer");
    no_problems(&g, &ix);
    let (rows, _) = more(&g, 20, 11);
    ix.add_batch(&rows, 1).unwrap();
    ix.flush().unwrap();
    drop(ix);
    let ix = Index::open(&path).unwrap();
    assert_eq!(ix.len(), g.ids().len() + 20);
}

/// The compatibility rule for metadata, on files from before it: metadata added to a golden
/// file of format 3 or 4 raises its write version to 5 and leaves its read version (releases
/// that read the format still read and search it, ignoring metadata; scripts/compat checks that
/// with those releases themselves), and everything it held reads as before.
#[test]
fn metadata_added_to_an_older_file_raises_only_its_write_version() {
    for name in ["f3-l2", "f4-cosine", "f4-small-geometry"] {
        let g = golden(name);
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        let ix = Index::open(&path).unwrap();
        let (rows, _) = more(&g, 3, 21);
        let doc = Metadata::from([("source".to_string(), Doc::from(name))]);
        let docs = vec![doc.clone(); 3];
        let ids = ix.add_batch_with_metadata(None, &rows, &docs, 1).unwrap();
        ix.flush().unwrap();
        drop(ix);
        let (read, _) = g.versions();
        let reader = IndexReader::open(&path).unwrap();
        let snap = reader.snapshot().unwrap();
        let h = reader.header_of(&snap);
        assert_eq!((h.read_version, h.write_version), (read, 5), "{name}");
        for id in &ids {
            assert_eq!(reader.get_metadata(*id).unwrap(), doc, "{name}");
        }
        let hits = reader
            .search_filtered(&rows[..g.dims()], 3, 64, &Filter::eq("source", name))
            .unwrap();
        assert_eq!(hits.len(), 3, "{name}");
        for (id, want) in g.samples() {
            assert_eq!(reader.get(id).unwrap(), want, "{name}: {id}");
            assert!(reader.get_metadata(id).unwrap().is_empty());
        }
        // The file reopens as the writer, compacts and keeps (read, 5).
        let ix = Index::open(&path).unwrap();
        ix.compact(CompactOptions::default()).unwrap();
        assert_eq!(ix.info().unwrap().versions, (read, 5), "{name}");
    }
}

#[test]
fn a_backup_is_stamped_until_something_commits_to_it() {
    let g = golden("f4-backup");
    let dir = tempfile::tempdir().unwrap();
    let path = g.copy_to(dir.path());
    let stamp = |p: &Path| {
        let s = chassis::os::FileStorage::open(p, false).unwrap();
        let b = chassis::storage::base_state(&s).unwrap();
        (b.sequence, b.copy, b.stamped)
    };
    let (sequence, _, stamped) = stamp(&path);
    assert!(
        stamped,
        "a backup's header carries the stamp for its sequence"
    );
    // A writer that opens it and closes without a change keeps it (nothing committed) ...
    let ix = Index::open(&path).unwrap();
    assert!(ix.open_report().clean);
    ix.close().unwrap();
    assert_eq!(stamp(&path), (sequence, stamp(&path).1, true));
    // ... a commit clears it, so a later backup into the file would replace it whole.
    let ix = Index::open(&path).unwrap();
    let (rows, _) = more(&g, 1, 5);
    ix.add(&rows).unwrap();
    ix.flush().unwrap();
    drop(ix);
    let (after, _, stamped) = stamp(&path);
    assert!(after > sequence && !stamped);
}

/// The compatibility rule for codes, on files from before them: a compaction that adds int8
/// codes to a golden file of format 3 or 4 raises its write version to 6 (int4 codes: 7) and
/// leaves its read version (releases that read the format still search it by its vectors, ignoring the codes;
/// scripts/compat checks that with those releases themselves). The file shows what it showed
/// before, with exact distances, walked by codes once its codebook is trained (at compaction
/// when it holds 1,000 live vectors, else at the add that reaches them); a second compaction
/// drops them again, and with them the write version.
#[test]
fn codes_added_to_an_older_file_raise_only_its_write_version() {
    for (name, kind) in [
        ("f3-l2", CodeKind::Int8),
        ("f4-cosine", CodeKind::Int8),
        ("f4-small-geometry", CodeKind::Int8),
        ("f3-l2", CodeKind::Int4),
        ("f4-cosine", CodeKind::Int4),
    ] {
        let g = golden(name);
        let dir = tempfile::tempdir().unwrap();
        let path = g.copy_to(dir.path());
        let ix = Index::open(&path).unwrap();
        ix.compact(CompactOptions {
            threads: 1,
            codes: Some(kind),
            ..CompactOptions::default()
        })
        .unwrap();
        let (read, _) = g.versions();
        let info = ix.info().unwrap();
        assert_eq!(
            Some(info.versions),
            kind.write_version().map(|w| (read, w)),
            "{name}"
        );
        let trained = g.ids().len() >= 1000;
        assert_eq!((info.codes, info.codes_trained), (kind, trained));
        drop(ix);
        let reader = IndexReader::open(&path).unwrap();
        shows_what_it_must(&g, &reader, "with codes");
        let ix = Index::open(&path).unwrap();
        shows_what_it_must(&g, &ix, "writer with codes");
        no_problems(&g, &ix);
        if !trained {
            let (rows, _) = more(&g, 1000 - g.ids().len(), 31);
            ix.add_batch(&rows, 1).unwrap();
            ix.flush().unwrap();
            assert!(ix.info().unwrap().codes_trained, "{name}: trained at 1,000");
            no_problems(&g, &ix);
        }
        ix.compact(CompactOptions {
            threads: 1,
            codes: Some(CodeKind::None),
            ..CompactOptions::default()
        })
        .unwrap();
        let info = ix.info().unwrap();
        assert_eq!((info.codes, info.codes_trained), (CodeKind::None, false));
        // The new file holds nothing its old versions can't: older releases may write it again.
        assert_eq!(
            info.versions,
            g.versions(),
            "{name}: versions without codes"
        );
    }
}

//! Full-text search in the file, and hybrid search: BM25 over the index the writer keeps
//! beside the vectors (`format::text` gives its bytes), and the fusion of a vector leg and a
//! BM25 leg.
//!
//! What this module owns:
//! - [`analyzer`]: cutting text into terms (UAX #29 words, lowercased, optionally stop words
//!   and Snowball stemming), per field, as recorded in the file;
//! - [`segment`]: the in-memory segments a writer builds and the stored ones a flush writes;
//! - [`TextView`]: one state of the index (stored segments, in-memory ones, statistics over the
//!   live documents) and [`TextView::search`], the exact top k by BM25 as Lucene scores it;
//! - [`fuse`]: reciprocal rank fusion and relative-score fusion of two ranked lists.
//!
//! Invariants: a search's N, n and average length are over the live documents of the state it
//! reads (deleted slots never count; a filter narrows the candidates, never the statistics);
//! every live document holding a query term is scored, so the top k is exact (no pruning);
//! ties are broken by slot, so the same state always gives the same list.

pub mod analyzer;
pub mod segment;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::metadata::{DocRef, ValueRef};
use crate::format::text::{FieldStats, Root, TextField, KIND_ROOT};
use crate::storage::HeapBlobs;

pub use crate::format::text::Analyzer;
pub use analyzer::{analyze, ENGLISH_STOP_WORDS};
use segment::{key, BlobSource, DocTerms, MemSegment, StoredSegment};

impl BlobSource for HeapBlobs<'_> {
    fn bytes(&self, r: u64, n: usize) -> Option<&[u8]> {
        HeapBlobs::bytes(self, r, n)
    }
}

/// A field to index for full-text search: a metadata key and how its text is cut into terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextFieldSpec {
    /// The metadata key whose string values (a string, or a list's strings) are indexed.
    pub name: String,
    /// Leave out English stop words (Lucene's list, [`ENGLISH_STOP_WORDS`]).
    pub stop_words: bool,
    /// Stem English words (Snowball's Porter 2: "parsing" and "parsed" are both "pars").
    pub stem: bool,
    /// Lowercase every term (the default; turn off only for case-sensitive codes).
    pub lowercase: bool,
}

impl TextFieldSpec {
    /// `name` with the default analysis: Unicode words, lowercased, nothing left out, no
    /// stemming.
    pub fn new(name: impl Into<String>) -> TextFieldSpec {
        TextFieldSpec {
            name: name.into(),
            stop_words: false,
            stem: false,
            lowercase: true,
        }
    }

    /// With English stop words left out.
    pub fn stop_words(mut self, on: bool) -> TextFieldSpec {
        self.stop_words = on;
        self
    }

    /// With English stemming.
    pub fn stem(mut self, on: bool) -> TextFieldSpec {
        self.stem = on;
        self
    }

    /// With (or without) lowercasing.
    pub fn lowercase(mut self, on: bool) -> TextFieldSpec {
        self.lowercase = on;
        self
    }

    /// The field as recorded in the file.
    pub fn to_field(&self) -> Result<TextField> {
        crate::format::metadata::check_key(&self.name)?;
        Ok(TextField {
            name: self.name.clone(),
            analyzer: Analyzer {
                tokenizer: 1,
                lowercase: self.lowercase,
                stemmer: u32::from(self.stem),
                stop_words: self.stop_words,
            },
        })
    }

    /// The spec of a field read from a file.
    pub fn of(f: &TextField) -> TextFieldSpec {
        TextFieldSpec {
            name: f.name.clone(),
            stop_words: f.analyzer.stop_words,
            stem: f.analyzer.stemmer == 1,
            lowercase: f.analyzer.lowercase,
        }
    }
}

/// Checks a list of field specs (names valid and distinct, at most
/// [`crate::format::text::MAX_FIELDS`]) and returns them as recorded in the file.
pub fn fields_of(specs: &[TextFieldSpec]) -> Result<Vec<TextField>> {
    if specs.len() > crate::format::text::MAX_FIELDS {
        return Err(Error::InvalidArgument(format!(
            "{} text fields; at most {} are indexed",
            specs.len(),
            crate::format::text::MAX_FIELDS
        )));
    }
    let mut out: Vec<TextField> = Vec::with_capacity(specs.len());
    for s in specs {
        let f = s.to_field()?;
        if out.iter().any(|o| o.name == f.name) {
            return Err(Error::InvalidArgument(format!(
                "text field {:?} named twice",
                f.name
            )));
        }
        out.push(f);
    }
    Ok(out)
}

/// BM25's k1 (Lucene's default).
pub const K1: f32 = 1.2;
/// BM25's b (Lucene's default).
pub const B: f32 = 0.75;

/// BM25's idf as Lucene computes it: ln(1 + (N − n + 0.5) / (n + 0.5)).
pub fn idf(n_docs: u64, df: u64) -> f32 {
    let (n, df) = (n_docs as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
}

/// One term's BM25 score in a document (Lucene's form since 8.0: the constant (k1 + 1) of
/// the classic formula left out; it scales every score alike and changes no ranking):
/// idf · tf / (tf + k1 · (1 − b + b · dl / avgdl)).
#[inline]
pub fn term_score(idf: f32, tf: u32, dl: u32, avgdl: f32) -> f32 {
    let tf = tf as f32;
    idf * tf / (tf + K1 * (1.0 - B + B * dl as f32 / avgdl))
}

/// The terms of `doc`'s indexed fields: each field's string values (a string, or a list's
/// strings) cut by the field's analyzer; other values are not text and add nothing.
pub fn doc_terms(fields: &[TextField], doc: &DocRef<'_>) -> DocTerms {
    let mut out = DocTerms {
        fields: vec![BTreeMap::new(); fields.len()],
        lengths: vec![0; fields.len()],
    };
    let mut toks = Vec::new();
    for (f, field) in fields.iter().enumerate() {
        toks.clear();
        match doc.get(&field.name) {
            Some(ValueRef::Str(s)) => analyze(s, &field.analyzer, &mut toks),
            Some(ValueRef::List(items)) => {
                for v in items.iter() {
                    if let ValueRef::Str(s) = v {
                        analyze(s, &field.analyzer, &mut toks);
                    }
                }
            }
            _ => {}
        }
        out.lengths[f] = toks.len() as u32;
        for t in toks.drain(..) {
            *out.fields[f].entry(t).or_insert(0) += 1;
        }
    }
    out
}

/// One text hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// The slot.
    pub slot: u32,
    /// Its id.
    pub id: u64,
    /// Its BM25 score (higher is better).
    pub score: f32,
}

impl Scored {
    /// The hit as the public type (without its slot).
    pub fn hit(&self) -> TextHit {
        TextHit {
            id: self.id,
            score: self.score,
        }
    }
}

/// Reusable memory of text searches: a score per slot and the slots touched.
#[derive(Debug, Default)]
pub struct TextScratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
    postings: Vec<(u32, u32)>,
    /// Postings passed over without scoring (their document could not reach the top k).
    pub skipped: u64,
}

/// One state of the full-text index, as a search reads it. Cheap to clone (shared lists).
#[derive(Clone, Debug, Default)]
pub struct TextView {
    /// The fields and their analyzers (empty: the file has no full-text index).
    pub fields: Arc<Vec<TextField>>,
    /// Each field's statistics over the live documents of this state.
    pub stats: Vec<FieldStats>,
    /// Stored segments, oldest first.
    pub stored: Arc<Vec<StoredSegment>>,
    /// In-memory segments (a writer's unflushed documents), after the stored ones.
    pub memory: Arc<Vec<Arc<MemSegment>>>,
}

/// Field `f`'s lengths of every segment of a view, in slot order, for a walk through
/// ascending slots.
struct LengthCursor<'a> {
    runs: Vec<(u32, &'a [u16])>,
    at: usize,
}

impl<'a> LengthCursor<'a> {
    fn new(view: &'a TextView, f: usize) -> LengthCursor<'a> {
        let mut runs: Vec<(u32, &'a [u16])> = Vec::new();
        for s in view.stored.iter() {
            runs.push((
                s.head.first_slot,
                s.lengths.get(f).map_or(&[][..], |l| l.as_slice()),
            ));
        }
        for m in view.memory.iter() {
            runs.push((m.first, m.lengths.get(f).map_or(&[][..], |l| l.as_slice())));
        }
        LengthCursor { runs, at: 0 }
    }

    /// The length of `slot`; slots asked for ascend between [`LengthCursor::rewind`]s.
    #[inline]
    fn get(&mut self, slot: u32) -> u32 {
        while let Some(&(first, l)) = self.runs.get(self.at) {
            if slot < first {
                return 0;
            }
            if let Some(&x) = l.get((slot - first) as usize) {
                return u32::from(x);
            }
            self.at += 1;
        }
        0
    }
}

impl TextView {
    /// The index the root blob at `root` describes (an empty view for 0), for a state of
    /// `committed` slots: its segments must tile slots `0..committed` in order. Segments
    /// already open in `reuse` (an earlier state of the same file) are taken from it rather
    /// than read again.
    pub fn load<B: BlobSource + ?Sized>(
        src: &B,
        root: u64,
        committed: u64,
        reuse: Option<&TextView>,
    ) -> Result<TextView> {
        if root == 0 {
            return Ok(TextView::default());
        }
        let r = Root::decode(segment::blob(src, root, KIND_ROOT)?, root)?;
        let mut stored = Vec::with_capacity(r.segments.len());
        let mut end = 0u64;
        for &at in &r.segments {
            let s = match reuse.and_then(|v| v.stored.iter().find(|s| s.at == at)) {
                Some(s) => s.clone(),
                None => StoredSegment::open(src, at)?,
            };
            if u64::from(s.head.first_slot) != end || s.head.fields.len() != r.fields.len() {
                return Err(Error::corrupt(
                    "full-text index: segments don't tile the slots in order",
                    at,
                ));
            }
            end += u64::from(s.head.slots);
            stored.push(s);
        }
        if end != committed {
            return Err(Error::corrupt(
                format!(
                    "full-text index covers {end} slots, the file commits {committed}: the index \
                     and the documents disagree (rebuild it with set_text_fields)"
                ),
                root,
            ));
        }
        Ok(TextView {
            fields: Arc::new(r.fields),
            stats: r.stats,
            stored: Arc::new(stored),
            memory: Arc::default(),
        })
    }

    /// Whether the file keeps a full-text index.
    pub fn is_enabled(&self) -> bool {
        !self.fields.is_empty()
    }

    /// Field `f`'s length in `slot`.
    pub fn length(&self, f: usize, slot: u32) -> u32 {
        if let Some(m) = self
            .memory
            .iter()
            .find(|m| slot >= m.first && slot - m.first < m.slots())
        {
            return m.length(f, slot);
        }
        self.stored
            .iter()
            .find(|s| slot >= s.head.first_slot && slot - s.head.first_slot < s.head.slots)
            .map_or(0, |s| s.length(f, slot))
    }

    /// Slots covered by every segment (stored and in memory).
    pub fn slots(&self) -> u64 {
        self.stored
            .iter()
            .map(|s| u64::from(s.head.slots))
            .chain(self.memory.iter().map(|m| u64::from(m.slots())))
            .sum()
    }

    /// The query's terms per field (each with how often the query repeats it).
    pub fn query_terms(&self, query: &str) -> Vec<Vec<(String, u32)>> {
        let mut toks = Vec::new();
        self.fields
            .iter()
            .map(|field| {
                toks.clear();
                analyze(query, &field.analyzer, &mut toks);
                let mut counts: BTreeMap<String, u32> = BTreeMap::new();
                for t in toks.drain(..) {
                    *counts.entry(t).or_insert(0) += 1;
                }
                counts.into_iter().collect()
            })
            .collect()
    }

    /// Every posting of `k` in this state, slot order (stored segments, then memory).
    pub fn postings<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        k: &[u8],
        out: &mut Vec<(u32, u32)>,
    ) -> Result<()> {
        out.clear();
        for s in self.stored.iter() {
            if let Some((df, first)) = s.find(src, k)? {
                s.postings(src, first, df, out)?;
            }
        }
        for m in self.memory.iter() {
            if let Some(p) = m.postings.get(k) {
                out.extend_from_slice(p);
            }
        }
        Ok(())
    }

    /// The `k` best live documents for `query` by BM25 (summed over the fields), exact: the
    /// same top k as scoring every live document holding a query term. `live` says whether a
    /// slot is a live document of this state (`all_live`: every covered slot is, so `live` is
    /// never asked); `pass` whether it may be returned (a filter); `id_of` a slot's id. Best
    /// first, ties by id (so the answer doesn't depend on where documents sit in the file).
    ///
    /// Terms are taken by their weight (idf times their count in the query), highest first
    /// (MaxScore, Turtle and Flood 1995). A term's score in a document is below its weight,
    /// so once the k-th best score so far is above the sum of the weights still to come, no
    /// document untouched so far can reach the top k: the remaining terms (the common words)
    /// only add to documents already scored, and touch no new ones.
    #[allow(clippy::too_many_arguments)]
    pub fn search<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        query: &str,
        k: usize,
        all_live: bool,
        live: impl Fn(u32) -> bool,
        pass: impl Fn(u32) -> bool,
        id_of: impl Fn(u32) -> Result<u64>,
        scratch: &mut TextScratch,
    ) -> Result<Vec<Scored>> {
        if k == 0 {
            return Ok(Vec::new());
        }
        for &s in &scratch.touched {
            if let Some(x) = scratch.scores.get_mut(s as usize) {
                *x = 0.0;
            }
        }
        scratch.touched.clear();
        let plan = self.plan(src, query, all_live, &live)?;
        // Weights still to come after each term.
        let mut rest = vec![0f32; plan.len() + 1];
        for i in (0..plan.len()).rev() {
            rest[i] = rest[i + 1] + plan[i].w;
        }
        let mut theta = f32::NEG_INFINITY;
        let mut best = 0f32;
        let mut kth = std::mem::take(&mut scratch.postings);
        for (i, t) in plan.iter().enumerate() {
            let stats = &self.stats[t.f];
            let avgdl = (stats.tokens as f64 / stats.docs as f64).max(f64::MIN_POSITIVE) as f32;
            let mut lengths = LengthCursor::new(self, t.f);
            // Margin for the f32 sums: a document's score is a sum of at most 64 · 256 terms.
            let essential = rest[i] * (1.0 + 1e-4) >= theta;
            let scores = &mut scratch.scores;
            let touched = &mut scratch.touched;
            if essential {
                self.for_each_posting(src, t, |slot, tf| {
                    if !all_live && !live(slot) || !pass(slot) {
                        return;
                    }
                    let at = slot as usize;
                    if at >= scores.len() {
                        scores.resize(at + 1, 0.0);
                    }
                    if scores[at] == 0.0 {
                        touched.push(slot);
                    }
                    let x = scores[at] + term_score(t.w, tf, lengths.get(slot), avgdl);
                    scores[at] = x;
                    best = best.max(x);
                })?;
            } else {
                // Only documents already scored: the rest can't reach the top k.
                let skipped = &mut scratch.skipped;
                self.for_each_posting(src, t, |slot, tf| match scores.get_mut(slot as usize) {
                    Some(x) if *x != 0.0 => {
                        *x += term_score(t.w, tf, lengths.get(slot), avgdl);
                        best = best.max(*x);
                    }
                    _ => *skipped += 1,
                })?;
            }
            // The k-th best score so far, once it could make the next term non-essential.
            if i + 1 < plan.len() && touched.len() >= k && rest[i + 1] < best {
                kth.clear();
                kth.extend(touched.iter().map(|&s| (scores[s as usize].to_bits(), 0)));
                let (_, x, _) = kth.select_nth_unstable_by(k - 1, |a, b| b.0.cmp(&a.0));
                theta = f32::from_bits(x.0);
            }
        }
        scratch.postings = kth;
        let scores = &scratch.scores;
        let mut cand: Vec<u32> = scratch.touched.clone();
        if cand.len() > k {
            // The k best, and every document tied with the k-th (documents MaxScore passed
            // over score strictly below it): ids decide among the tied.
            cand.select_nth_unstable_by(k - 1, |a, b| {
                scores[*b as usize].total_cmp(&scores[*a as usize])
            });
            let kth = scores[cand[k - 1] as usize];
            let (top, rest) = cand.split_at(k);
            let mut keep = top.to_vec();
            keep.extend(rest.iter().copied().filter(|&s| scores[s as usize] == kth));
            cand = keep;
        }
        let mut hits = cand
            .into_iter()
            .map(|slot| {
                Ok(Scored {
                    slot,
                    id: id_of(slot)?,
                    score: scores[slot as usize],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        hits.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(k);
        Ok(hits)
    }

    /// The query's terms that some live document holds, each with where its postings are,
    /// its live document frequency and its weight; heaviest first.
    fn plan<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        query: &str,
        all_live: bool,
        live: &impl Fn(u32) -> bool,
    ) -> Result<Vec<Term>> {
        let mut plan = Vec::new();
        for (f, field_terms) in self.query_terms(query).into_iter().enumerate() {
            let Some(stats) = self.stats.get(f) else {
                continue;
            };
            if stats.docs == 0 {
                continue;
            }
            for (t, qtf) in field_terms {
                let k = key(f, &t);
                let mut term = Term {
                    f,
                    stored: Vec::new(),
                    memory: Vec::new(),
                    w: 0.0,
                };
                let mut df = 0u64;
                for (i, s) in self.stored.iter().enumerate() {
                    if let Some((n, first)) = s.find(src, &k)? {
                        term.stored.push((i, n, first));
                        df += u64::from(n);
                    }
                }
                for (i, m) in self.memory.iter().enumerate() {
                    if let Some(p) = m.postings.get(&k) {
                        term.memory.push((i, k.clone()));
                        df += p.len() as u64;
                    }
                }
                if df > 0 && !all_live {
                    let mut n = 0u64;
                    self.for_each_posting(src, &term, |slot, _| n += u64::from(live(slot)))?;
                    df = n;
                }
                if df == 0 {
                    continue;
                }
                term.w = idf(stats.docs, df) * qtf as f32;
                plan.push(term);
            }
        }
        plan.sort_by(|a, b| b.w.total_cmp(&a.w));
        Ok(plan)
    }

    /// Calls `g(slot, tf)` for every posting of `t`, ascending (stored segments, then memory).
    #[inline]
    fn for_each_posting<B: BlobSource + ?Sized>(
        &self,
        src: &B,
        t: &Term,
        mut g: impl FnMut(u32, u32),
    ) -> Result<()> {
        for &(i, df, first) in &t.stored {
            if let Some(s) = self.stored.get(i) {
                s.for_each_posting(src, first, df, &mut g)?;
            }
        }
        for (i, k) in &t.memory {
            if let Some(p) = self.memory.get(*i).and_then(|m| m.postings.get(k)) {
                for &(slot, tf) in p {
                    g(slot, tf);
                }
            }
        }
        Ok(())
    }
}

/// One query term in a field, as a search processes it.
struct Term {
    f: usize,
    /// (stored segment, df there, first postings piece).
    stored: Vec<(usize, u32, u64)>,
    /// (memory segment, key).
    memory: Vec<(usize, Vec<u8>)>,
    /// idf times the term's count in the query: above its score in any document.
    w: f32,
}

/// How a hybrid search combines its two legs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion: Σ weight / (k + rank), rank from 1, over the legs a document
    /// is found by (Cormack et al.; `k` 60 by default). Uses ranks only, so it needs no
    /// tuning across queries whose scores differ in scale.
    Rrf {
        /// The constant k.
        k: f32,
    },
    /// Relative-score fusion: each leg's scores min-max normalised to 0..1 over its own list
    /// (1 for the best; vector distances turned around so nearer is higher), then a weighted
    /// sum; a document one leg didn't return scores 0 in it.
    RelativeScore,
}

impl Default for Fusion {
    fn default() -> Fusion {
        Fusion::Rrf { k: 60.0 }
    }
}

/// Candidates each leg of a hybrid search contributes by default (never fewer than k):
/// docs/decisions/0002-hybrid-depth.md.
pub const DEFAULT_DEPTH: usize = 50;

/// The vector leg completed by the text leg: each of the text leg's `text` hits that the
/// vector leg didn't return is scored by its exact vector distance (`distance(slot)`; `None`
/// leaves it out) and merged in, and the best `depth` by distance are kept (ties by id).
///
/// A graph search at a modest ef finds the vector leg's top ranks but misses some deeper ones;
/// the deeper ones that move a fused result are those the text leg found too, and those are
/// scored here for a few microseconds. On pypi-minilm's known-item queries the hybrid MRR@10
/// at ef 64 went from 0.732 to 0.766, the exact legs' 0.766
/// (docs/decisions/0005-hybrid-vector-leg-completed.md).
fn complete_vector_leg(
    vector: &mut Vec<crate::query::Neighbor>,
    text: &[Scored],
    depth: usize,
    mut distance: impl FnMut(u32) -> Option<f32>,
) {
    for h in text {
        if vector.iter().any(|n| n.id == h.id) {
            continue;
        }
        if let Some(d) = distance(h.slot) {
            vector.push(crate::query::Neighbor {
                id: h.id,
                distance: d,
            });
        }
    }
    vector.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
    vector.truncate(depth);
}

/// One hybrid search of `k` over the legs a handle provides (the writer's publication or a
/// reader's snapshot, so both legs see one state): `vector_leg(depth, ef)` (filtered when the
/// search is), `text_leg(depth)`, and `distance(slot)`, the exact vector distance of a text
/// hit, which completes the vector leg (`complete_vector_leg`); then fusion.
pub fn search_hybrid(
    k: usize,
    ef: usize,
    opts: &HybridOptions,
    vector_leg: impl FnOnce(usize, usize) -> Result<Vec<crate::query::Neighbor>>,
    text_leg: impl FnOnce(usize) -> Result<Vec<Scored>>,
    distance: impl FnMut(u32) -> Option<f32>,
) -> Result<Vec<HybridHit>> {
    if k == 0 {
        return Err(Error::InvalidArgument("k must be at least 1".into()));
    }
    opts.validate()?;
    let depth = opts.depth_for(k);
    let mut v = vector_leg(depth, opts.vector_ef(k, ef))?;
    let t = text_leg(depth)?;
    // The text leg's hits are live and pass the filter: their exact vector distances.
    complete_vector_leg(&mut v, &t, depth, distance);
    let t: Vec<TextHit> = t.iter().map(Scored::hit).collect();
    Ok(hybrid(&v, &t, opts, k))
}

/// How a hybrid search runs its legs and fuses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HybridOptions {
    /// How the two lists are combined (RRF with k = 60 by default).
    pub fusion: Fusion,
    /// The vector leg's weight (1 by default).
    pub vector_weight: f32,
    /// The text leg's weight (1 by default).
    pub text_weight: f32,
    /// How many candidates each leg returns before fusion; 0 (the default) means
    /// max(k, [`DEFAULT_DEPTH`]). The vector leg searches with ef at least this, and is
    /// completed by the text leg's candidates (`complete_vector_leg`).
    pub depth: usize,
}

impl Default for HybridOptions {
    fn default() -> HybridOptions {
        HybridOptions {
            fusion: Fusion::default(),
            vector_weight: 1.0,
            text_weight: 1.0,
            depth: 0,
        }
    }
}

impl HybridOptions {
    /// Candidates per leg for a search of `k`.
    pub fn depth_for(&self, k: usize) -> usize {
        match self.depth {
            0 => k.max(DEFAULT_DEPTH),
            d => d.max(k),
        }
    }

    /// The vector leg's ef for a search of `k` asked to use `ef`: at least the depth.
    pub fn vector_ef(&self, k: usize, ef: usize) -> usize {
        ef.max(self.depth_for(k))
    }

    /// Refuses weights that are negative, not finite or both zero, and an RRF k that is not
    /// positive and finite.
    pub fn validate(&self) -> Result<()> {
        let ok = |w: f32| w.is_finite() && w >= 0.0;
        if !ok(self.vector_weight) || !ok(self.text_weight) {
            return Err(Error::InvalidArgument(
                "hybrid weights must be finite and at least 0".into(),
            ));
        }
        if self.vector_weight == 0.0 && self.text_weight == 0.0 {
            return Err(Error::InvalidArgument(
                "hybrid weights can't both be 0".into(),
            ));
        }
        if let Fusion::Rrf { k } = self.fusion {
            if !(k.is_finite() && k > 0.0) {
                return Err(Error::InvalidArgument(format!(
                    "the RRF constant must be positive, not {k}"
                )));
            }
        }
        Ok(())
    }
}

/// One full-text hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextHit {
    /// The stored id.
    pub id: u64,
    /// Its BM25 score (higher is better).
    pub score: f32,
}

/// Where one leg of a hybrid search placed a hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LegHit {
    /// Rank in the leg's list, from 1.
    pub rank: u32,
    /// The leg's own score: a distance for the vector leg (lower is better), BM25 for the
    /// text leg (higher is better).
    pub score: f32,
}

/// One hybrid hit: the fused score and what each leg said.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HybridHit {
    /// The stored id.
    pub id: u64,
    /// The fused score (higher is better).
    pub score: f32,
    /// The vector leg's rank and distance, if it found the hit.
    pub vector: Option<LegHit>,
    /// The text leg's rank and BM25 score, if it found the hit.
    pub text: Option<LegHit>,
}

/// One leg's list for fusion: ids in rank order with the leg's own score.
#[derive(Clone, Debug, Default)]
pub struct Leg {
    /// (id, score), best first.
    pub hits: Vec<(u64, f32)>,
    /// Whether a lower score is better (distances).
    pub lower_is_better: bool,
    /// The leg's weight.
    pub weight: f32,
}

/// The top `k` of `vector` and `text` fused by `fusion`, best first; ties by id.
pub fn fuse(vector: &Leg, text: &Leg, fusion: Fusion, k: usize) -> Vec<HybridHit> {
    let mut all: BTreeMap<u64, HybridHit> = BTreeMap::new();
    for (leg, is_vector) in [(vector, true), (text, false)] {
        let (lo, hi) = leg
            .hits
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), h| {
                (lo.min(h.1), hi.max(h.1))
            });
        for (i, &(id, s)) in leg.hits.iter().enumerate() {
            let rank = i as u32 + 1;
            let part = match fusion {
                Fusion::Rrf { k } => leg.weight / (k + rank as f32),
                Fusion::RelativeScore => {
                    let norm = if hi > lo {
                        let x = (s - lo) / (hi - lo);
                        if leg.lower_is_better {
                            1.0 - x
                        } else {
                            x
                        }
                    } else {
                        1.0
                    };
                    leg.weight * norm
                }
            };
            let e = all.entry(id).or_insert(HybridHit {
                id,
                score: 0.0,
                vector: None,
                text: None,
            });
            e.score += part;
            let at = Some(LegHit { rank, score: s });
            if is_vector {
                e.vector = at;
            } else {
                e.text = at;
            }
        }
    }
    let mut out: Vec<HybridHit> = all.into_values().collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    out.truncate(k);
    out
}

/// The hybrid answer from a vector leg's neighbors and a text leg's hits.
pub fn hybrid(
    vector: &[crate::query::Neighbor],
    text: &[TextHit],
    opts: &HybridOptions,
    k: usize,
) -> Vec<HybridHit> {
    let v = Leg {
        hits: vector.iter().map(|n| (n.id, n.distance)).collect(),
        lower_is_better: true,
        weight: opts.vector_weight,
    };
    let t = Leg {
        hits: text.iter().map(|h| (h.id, h.score)).collect(),
        lower_is_better: false,
        weight: opts.text_weight,
    };
    fuse(&v, &t, opts.fusion, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::text::Analyzer;

    struct NoBlobs;
    impl BlobSource for NoBlobs {
        fn bytes(&self, _: u64, _: usize) -> Option<&[u8]> {
            None
        }
    }

    fn field() -> Vec<TextField> {
        vec![TextField {
            name: "text".into(),
            analyzer: Analyzer::default(),
        }]
    }

    /// BM25 straight from the formula over a corpus of token lists, for comparison.
    fn reference(docs: &[Vec<String>], live: &[bool], q: &[String], k: usize) -> Vec<(u32, f32)> {
        let n = docs
            .iter()
            .zip(live)
            .filter(|(d, &l)| l && !d.is_empty())
            .count() as u64;
        let tokens: usize = docs
            .iter()
            .zip(live)
            .filter(|(_, &l)| l)
            .map(|(d, _)| d.len())
            .sum();
        let avgdl = tokens as f32 / n as f32;
        let mut qc: BTreeMap<&String, u32> = BTreeMap::new();
        for t in q {
            *qc.entry(t).or_insert(0) += 1;
        }
        let mut scores = vec![0f32; docs.len()];
        for (t, c) in qc {
            let df = docs
                .iter()
                .zip(live)
                .filter(|(d, &l)| l && d.contains(t))
                .count() as u64;
            if df == 0 {
                continue;
            }
            let w = idf(n, df) * c as f32;
            for (i, d) in docs.iter().enumerate() {
                if !live[i] {
                    continue;
                }
                let tf = d.iter().filter(|x| *x == t).count() as u32;
                if tf > 0 {
                    scores[i] += term_score(w, tf, d.len() as u32, avgdl);
                }
            }
        }
        let mut out: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(_, &s)| s > 0.0)
            .map(|(i, &s)| (i as u32, s))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(k);
        out
    }

    /// The exact top k matches the formula on random corpora, with deletes (which must not
    /// count in N, n or the average length) and a filter (which must not change them).
    #[test]
    fn search_matches_the_formula_on_random_corpora() {
        let vocab: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |n: usize| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
        };
        for round in 0..30 {
            let n = 50 + next(300);
            let docs: Vec<Vec<String>> = (0..n)
                .map(|_| {
                    let len = next(12);
                    // Zipf-ish: low words far more common.
                    (0..len)
                        .map(|_| {
                            let top = 1 + next(60);
                            vocab[next(top)].clone()
                        })
                        .collect()
                })
                .collect();
            let live: Vec<bool> = (0..n).map(|_| next(5) != 0).collect();
            let fields = field();
            let terms: Vec<DocTerms> = docs
                .iter()
                .map(|d| {
                    let mut m = crate::format::metadata::Metadata::new();
                    m.insert(
                        "text".into(),
                        crate::format::metadata::Value::Str(d.join(" ")),
                    );
                    let bytes = crate::format::metadata::encode(&m).unwrap();
                    doc_terms(&fields, &DocRef::new(&bytes, 0).unwrap())
                })
                .collect();
            // Two in-memory segments, the corpus split at a random slot.
            let cut = next(n);
            let segs = vec![
                Arc::new(MemSegment::build(0, 1, &terms[..cut])),
                Arc::new(MemSegment::build(cut as u32, 1, &terms[cut..])),
            ];
            let stats = vec![FieldStats {
                docs: docs
                    .iter()
                    .zip(&live)
                    .filter(|(d, &l)| l && !d.is_empty())
                    .count() as u64,
                tokens: docs
                    .iter()
                    .zip(&live)
                    .filter(|(_, &l)| l)
                    .map(|(d, _)| d.len() as u64)
                    .sum(),
            }];
            let view = TextView {
                fields: Arc::new(fields),
                stats,
                stored: Arc::default(),
                memory: Arc::new(segs),
            };
            let mut scratch = TextScratch::default();
            for _ in 0..10 {
                // Rare and common words mixed, so the weightiest terms often decide the top k
                // and the common ones only add to what they found (MaxScore's pruning).
                let q: Vec<String> = (0..1 + next(8)).map(|_| vocab[next(60)].clone()).collect();
                let kk = [1, 3, 10][next(3)];
                let want = reference(&docs, &live, &q, kk);
                let got = view
                    .search(
                        &NoBlobs,
                        &q.join(" "),
                        kk,
                        false,
                        |s| live[s as usize],
                        |_| true,
                        |s| Ok(u64::from(s)),
                        &mut scratch,
                    )
                    .unwrap();
                let got: Vec<(u32, f32)> = got.iter().map(|h| (h.slot, h.score)).collect();
                assert_eq!(got.len(), want.len(), "round {round} {q:?}");
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g.1 - w.1).abs() <= 1e-4 * w.1.abs().max(1.0),
                        "{g:?} vs {w:?}"
                    );
                }
                // Same scores in the same order: the same slots except among exact ties.
                let gs: Vec<u32> = got.iter().map(|g| g.0).collect();
                let ws: Vec<u32> = want.iter().map(|w| w.0).collect();
                if gs != ws {
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g.1 - w.1).abs() <= 1e-5, "{gs:?} vs {ws:?}");
                    }
                }
                // A filter narrows the candidates and keeps the scores.
                let filtered = view
                    .search(
                        &NoBlobs,
                        &q.join(" "),
                        10,
                        false,
                        |s| live[s as usize],
                        |s| s % 2 == 0,
                        |s| Ok(u64::from(s)),
                        &mut scratch,
                    )
                    .unwrap();
                for h in &filtered {
                    assert_eq!(h.slot % 2, 0);
                }
            }
        }
    }

    /// A rare term decides the top k and a term in every document only adds to it: the
    /// common term's other postings are passed over, and the answer is the formula's.
    #[test]
    fn common_terms_only_add_to_what_rare_ones_found() {
        let fields = field();
        let docs: Vec<String> = (0..2000)
            .map(|i| match i % 500 {
                7 => "rare common common".to_string(),
                _ => format!("common filler{}", i % 13),
            })
            .collect();
        let terms: Vec<DocTerms> = docs
            .iter()
            .map(|d| {
                let mut m = crate::format::metadata::Metadata::new();
                m.insert(
                    "text".into(),
                    crate::format::metadata::Value::Str(d.clone()),
                );
                let bytes = crate::format::metadata::encode(&m).unwrap();
                doc_terms(&fields, &DocRef::new(&bytes, 0).unwrap())
            })
            .collect();
        let toks: Vec<Vec<String>> = docs
            .iter()
            .map(|d| d.split(' ').map(str::to_string).collect())
            .collect();
        let live = vec![true; docs.len()];
        let view = TextView {
            fields: Arc::new(fields),
            stats: vec![FieldStats {
                docs: 2000,
                tokens: toks.iter().map(|t| t.len() as u64).sum(),
            }],
            stored: Arc::default(),
            memory: Arc::new(vec![Arc::new(MemSegment::build(0, 1, &terms))]),
        };
        let mut scratch = TextScratch::default();
        let got = view
            .search(
                &NoBlobs,
                "common rare",
                3,
                true,
                |_| true,
                |_| true,
                |s| Ok(u64::from(s)),
                &mut scratch,
            )
            .unwrap();
        let want = reference(&toks, &live, &["common".into(), "rare".into()], 3);
        assert_eq!(
            got.iter().map(|h| h.slot).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>()
        );
        for (g, w) in got.iter().zip(&want) {
            assert!((g.score - w.1).abs() < 1e-5);
        }
        assert!(scratch.skipped >= 1990, "skipped {}", scratch.skipped);
    }

    #[test]
    fn rrf_and_relative_score_fuse_as_defined() {
        let v = Leg {
            hits: vec![(1, 0.1), (2, 0.2), (3, 0.4)],
            lower_is_better: true,
            weight: 1.0,
        };
        let t = Leg {
            hits: vec![(3, 9.0), (4, 5.0), (1, 1.0)],
            lower_is_better: false,
            weight: 1.0,
        };
        let r = fuse(&v, &t, Fusion::default(), 10);
        // 1: 1/61 + 1/63; 3: 1/63 + 1/61: a tie, broken by id.
        assert_eq!(r[0].id, 1);
        assert_eq!(r[1].id, 3);
        assert!((r[0].score - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-7);
        assert_eq!(
            r[0].vector,
            Some(LegHit {
                rank: 1,
                score: 0.1
            })
        );
        assert_eq!(
            r[0].text,
            Some(LegHit {
                rank: 3,
                score: 1.0
            })
        );
        let r = fuse(&v, &t, Fusion::RelativeScore, 10);
        // 1: vector 1.0 + text 0.0; 3: vector 0.0 + text 1.0; 2: 2/3; 4: 0.5.
        assert_eq!(r.iter().map(|f| f.id).collect::<Vec<_>>(), [1, 3, 2, 4]);
        assert!((r[2].score - 2.0 / 3.0).abs() < 1e-6);
    }
}

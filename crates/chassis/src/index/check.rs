//! The integrity check behind `chassis check`, as `PRAGMA integrity_check` is SQLite's: every
//! committed slot, neighbor word, upper-layer reference and the entry point, reachability of
//! every live vector, uniqueness of live ids, and optionally recall against brute force.
//!
//! Invariant: it only reads; every problem is one precise line.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::format::{header, record};

use super::{lock, Index, Writer};

/// What [`Index::check`] found: every problem as one precise line, and what it looked at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// Problems, one line each; empty when all is well.
    pub problems: Vec<String>,
    /// Committed slots checked.
    pub slots: u64,
    /// Neighbor words checked (all layers).
    pub edges: u64,
    /// Neighbor words naming a slot at or past N but below R: routing hints an unflushed
    /// writer left, harmless (the next writer reuses those slots).
    pub hints: u64,
    /// Live vectors no path from the entry point reaches.
    pub unreachable: u64,
    /// Up to ten of them.
    pub unreachable_sample: Vec<u64>,
    /// recall@10 of searches for sampled stored vectors against brute force, if asked.
    pub recall: Option<f64>,
    /// Postings of the full-text index checked against the documents (0 without one).
    pub text_postings: u64,
}

impl Writer {
    pub(super) fn check(&self, recall_sample: usize) -> Result<CheckReport> {
        let h = self.store.header();
        let n = h.committed_count as u32;
        let routing = self
            .store
            .live_routing_count()
            .unwrap_or(u64::from(n))
            .max(u64::from(self.count));
        let mut r = CheckReport {
            slots: u64::from(n),
            ..CheckReport::default()
        };
        let mut problem = |s: String| {
            if r.problems.len() < 1000 {
                r.problems.push(s);
            }
        };
        let top = h.max_layers.saturating_sub(1) as usize;
        let mut ids: HashMap<u64, u32> = HashMap::new();
        let mut deleted = 0u64;
        for slot in 0..n {
            let Some((id, epoch, _)) = self.store.slot_header(slot) else {
                problem(format!("slot {slot}: its segment is not mapped"));
                continue;
            };
            if epoch > h.delete_epoch && h.pending_delete_epoch == 0 {
                problem(format!(
                    "slot {slot}: deleted epoch {epoch} is above the committed epoch {} with no \
                     delete pending",
                    h.delete_epoch
                ));
            }
            if let Err(e) = self.store.metadata(slot) {
                problem(format!("slot {slot}: metadata: {e}"));
            }
            let live = epoch == 0 || epoch > h.delete_epoch;
            if live {
                if let Some(other) = ids.insert(id, slot) {
                    problem(format!("id {id} is live in slots {other} and {slot}"));
                }
            } else {
                deleted += 1;
            }
            let mut words: Vec<(usize, Vec<u32>)> = Vec::new();
            if let Some(w) = self.store.level0(slot) {
                words.push((
                    0,
                    w.iter()
                        .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
                        .collect(),
                ));
            }
            let upper = self.store.upper_ref(slot).unwrap_or(0);
            if upper != 0 {
                let (chunk, off) = record::split_heap_ref(upper);
                let layers = self.store.upper_layers_stored(slot).unwrap_or(0) as usize;
                if u64::from(chunk) >= self.store.upper_chunk_count()
                    || u64::from(off) < record::HEAP_CHUNK_HEAD_BYTES
                {
                    problem(format!(
                        "slot {slot}: upper-layer reference {upper:#x} is outside the heap"
                    ));
                } else if layers == 0 || layers > top {
                    problem(format!(
                        "slot {slot}: {layers} upper layers (1..={top} allowed)"
                    ));
                } else {
                    for layer in 1..=layers {
                        match self.store.upper(slot, layer) {
                            Some(w) => words.push((
                                layer,
                                w.iter()
                                    .map(|a| a.load(std::sync::atomic::Ordering::Relaxed))
                                    .collect(),
                            )),
                            None => problem(format!(
                                "slot {slot}: layer {layer}'s list lies outside its heap chunk"
                            )),
                        }
                    }
                }
            }
            for (layer, list) in words {
                for w in list {
                    if w == record::EMPTY {
                        continue;
                    }
                    r.edges += 1;
                    if w == slot {
                        problem(format!("slot {slot}: layer {layer} lists itself"));
                    } else if u64::from(w) >= routing {
                        problem(format!(
                            "slot {slot}: layer {layer} neighbor {w} is out of range (N = {n}, R = {routing})"
                        ));
                    } else if w >= n {
                        r.hints += 1;
                    }
                }
            }
        }
        if deleted != h.deleted_count && h.pending_delete_epoch == 0 {
            problem(format!(
                "{deleted} slots are deleted, the header counts {}",
                h.deleted_count
            ));
        }
        if n > 0 {
            if h.entry_point >= n {
                problem(format!(
                    "entry point {} is not below N = {n}",
                    h.entry_point
                ));
            } else if self.store.upper_layers(h.entry_point) != h.max_layer as usize {
                problem(format!(
                    "entry point {} has {} upper layers, the header says {}",
                    h.entry_point,
                    self.store.upper_layers(h.entry_point),
                    h.max_layer
                ));
            }
        } else if h.entry_point != header::NO_ENTRY {
            problem("an empty index names an entry point".into());
        }
        // Codes are derived data: each committed slot's code and aux record must be what
        // coding its vector with the committed codebook gives.
        if let (true, Some(book)) = (h.codebook != 0, self.store.codebook()) {
            let mut code = vec![0u8; book.packed_bytes()];
            let mut v = Vec::new();
            for slot in 0..n {
                let (Some(stored), Some(aux), Some(vector)) = (
                    self.store.code(slot),
                    self.store.code_aux(slot),
                    self.store.vector(slot),
                ) else {
                    problem(format!("slot {slot}: its code is not mapped"));
                    continue;
                };
                vector.decode_into(&mut v);
                let want = book.encode(&v, &mut code);
                let same = matches!(stored, crate::format::vector::VectorRef::Code(c, _) if c == code.as_slice());
                if !same
                    || aux.0.to_bits() != want.0.to_bits()
                    || aux.1.to_bits() != want.1.to_bits()
                {
                    problem(format!(
                        "slot {slot}: its code or error bound is not its vector's (compact to \
                         rebuild codes)"
                    ));
                }
            }
        }
        // The full-text index is derived data too: it must be exactly what indexing the
        // committed documents gives, with the live documents' statistics.
        r.text_postings = self.check_text(&mut problem);
        let lost = if r.problems.is_empty() {
            self.unreachable_slots()
        } else {
            Vec::new()
        };
        r.unreachable = lost.len() as u64;
        for &s in lost.iter().take(10) {
            r.unreachable_sample.push(self.id_of(s)?);
        }
        if r.unreachable > 0 {
            r.problems.push(format!(
                "{} live vectors are unreachable from the entry point (ids {:?}…): no flush of \
                 this release leaves any (a file last written by an earlier release is repaired \
                 the first time this release opens it as the writer); compacting rebuilds the \
                 graph",
                r.unreachable, r.unreachable_sample
            ));
        }
        if recall_sample > 0 && r.problems.is_empty() && !ids.is_empty() {
            let live: Vec<u32> = (0..n).filter(|&s| self.slot_live(s)).collect();
            let step = (live.len() / recall_sample).max(1);
            let (mut found, mut total) = (0usize, 0usize);
            // Searched as searches see it: publish this writer's state, then read that.
            self.publish();
            let p = self.view.load_full();
            let routing = p.routing();
            for &s in live.iter().step_by(step).take(recall_sample) {
                let q = self
                    .store
                    .vector(s)
                    .ok_or_else(|| Error::corrupt("vector unreadable", 0))?
                    .to_vec();
                let truth: HashSet<u32> = p
                    .brute_force(&q, 10, routing)
                    .iter()
                    .map(|x| x.slot)
                    .collect();
                let hits = p.search(&q, 10, 64)?;
                for hit in hits {
                    if self
                        .lookup(hit.id)?
                        .is_some_and(|slot| truth.contains(&slot))
                    {
                        found += 1;
                    }
                }
                total += truth.len();
            }
            r.recall = Some(found as f64 / total.max(1) as f64);
        }
        Ok(r)
    }
}

impl Index {
    /// Checks the committed index the way `PRAGMA integrity_check` checks a database: every
    /// slot header (deleted epochs against E), every neighbor word (in range), every upper-layer
    /// reference and layer count, the entry point, reachability of every live vector from the
    /// entry point, and uniqueness of live ids. With `recall_sample` > 0, also searches for that
    /// many sampled stored vectors (k = 10, ef = 64) and measures recall against brute force.
    /// Header copies, table pages and region offsets are checked when the file is opened.
    pub fn check(&self, recall_sample: usize) -> Result<CheckReport> {
        lock(&self.writer).check(recall_sample)
    }
}

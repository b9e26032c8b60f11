//! What the last prune of each layer-0 list established, so the next prune of that list
//! skips the comparisons whose outcome it already knows (the writer's memory; never stored).
//!
//! The heuristic of algorithm 4 ([`super::select_neighbors`]) keeps a candidate `c` of node
//! `u` only if `d(k, c) ≥ d(u, c)` for every neighbor `k` kept before it. That test is a
//! property of the three vectors alone: once two slots were both kept by one run of the
//! heuristic over `u`'s list, the later of them passed the test against the earlier, and it
//! would pass again in any later run over `u` (the same vectors, the same deterministic
//! kernels, the same order by distance to `u`). A prune of a full list re-runs the heuristic
//! over the old list plus one new edge: without this memo it compares about m²/2 pairs, most
//! of them between neighbors the last prune already kept together.
//!
//! Invariants:
//! - A node's entry is a mask over its layer-0 words and a hash of the (word, slot) pairs the
//!   mask names. An entry is trusted only while the words it names still hold the slots it
//!   hashed: any other change to those words (a support edge, a repair, a rewrite by another
//!   code path that knows nothing of the memo) invalidates it, and the next prune compares
//!   everything, as it would without a memo. So the memo changes how much a prune computes,
//!   never what it keeps: the graph is the one the heuristic builds without it.
//! - A slot's vector never changes while the memo lives: the writer clears it whenever a
//!   slot may be rewritten (a rollback discards slots), and a compaction makes a new writer.
//! - Entries are read and written only under the node's lock ([`super::NodeLocks`]) or by the
//!   one thread linking.
//! - Lists longer than 64 words (m over 32) are not remembered.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The words a mask can name.
const MAX_WORDS: usize = 64;

/// Per slot: which of its layer-0 words hold neighbors its last prune kept together, and a
/// hash that says whether they still do.
#[derive(Debug, Default)]
pub struct PruneMemo {
    masks: Vec<AtomicU64>,
    hashes: Vec<AtomicU64>,
}

/// One (word, slot) pair's share of an entry's hash (SplitMix64's finalizer).
fn mix(word: usize, slot: u32) -> u64 {
    let mut z = ((word as u64) << 32 | u64::from(slot)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hash(words: &[u32], mask: u64) -> u64 {
    words
        .iter()
        .enumerate()
        .filter(|&(i, _)| mask >> i & 1 == 1)
        .fold(0u64, |h, (i, &s)| h.wrapping_add(mix(i, s)))
}

impl PruneMemo {
    /// Room for slots below `slots` (entries start empty).
    pub fn ensure(&mut self, slots: usize) {
        if self.masks.len() < slots {
            self.masks.resize_with(slots, AtomicU64::default);
            self.hashes.resize_with(slots, AtomicU64::default);
        }
    }

    /// Forgets every entry (slots may be rewritten with other vectors).
    pub fn clear(&mut self) {
        self.masks = Vec::new();
        self.hashes = Vec::new();
    }

    /// Which of `words` (the list of `slot`, as read under its lock) hold neighbors that its
    /// last prune kept together: a mask by word, empty unless the entry still holds.
    pub fn known(&self, slot: u32, words: &[u32]) -> u64 {
        let (Some(m), Some(h)) = (
            self.masks.get(slot as usize),
            self.hashes.get(slot as usize),
        ) else {
            return 0;
        };
        let mask = m.load(Ordering::Relaxed);
        if mask == 0 || words.len() > MAX_WORDS || hash(words, mask) != h.load(Ordering::Relaxed) {
            return 0;
        }
        mask
    }

    /// Records that the words of `slot` now holding any of `together` hold neighbors one run
    /// of the heuristic kept together (every pair of them compared), and nothing else.
    pub fn remember(&self, slot: u32, words: &[AtomicU32], together: &[u32]) {
        let (Some(m), Some(h)) = (
            self.masks.get(slot as usize),
            self.hashes.get(slot as usize),
        ) else {
            return;
        };
        if words.len() > MAX_WORDS {
            return;
        }
        let now: Vec<u32> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let mask = now
            .iter()
            .enumerate()
            .filter(|(_, s)| together.contains(s))
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        m.store(mask, Ordering::Relaxed);
        h.store(hash(&now, mask), Ordering::Relaxed);
    }

    /// Forgets `slot`'s entry.
    pub fn forget(&self, slot: u32) {
        if let Some(m) = self.masks.get(slot as usize) {
            m.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[u32]) -> Vec<AtomicU32> {
        s.iter().map(|&x| AtomicU32::new(x)).collect()
    }

    #[test]
    fn an_entry_holds_until_a_word_it_names_changes() {
        let mut memo = PruneMemo::default();
        memo.ensure(4);
        let list = words(&[7, 3, u32::MAX, 9]);
        memo.remember(2, &list, &[3, 9]);
        assert_eq!(memo.known(2, &[7, 3, u32::MAX, 9]), 0b1010);
        // A word it doesn't name may change (an edge appended into a free word).
        assert_eq!(memo.known(2, &[7, 3, 5, 9]), 0b1010);
        // One it names may not: moved, replaced or emptied.
        assert_eq!(memo.known(2, &[7, 9, 5, 3]), 0);
        assert_eq!(memo.known(2, &[7, 3, 5, 8]), 0);
        assert_eq!(memo.known(2, &[7, u32::MAX, 5, 9]), 0);
        // Other slots, and slots past the memo's room, know nothing.
        assert_eq!(memo.known(1, &[7, 3, u32::MAX, 9]), 0);
        assert_eq!(memo.known(9, &[7, 3, u32::MAX, 9]), 0);
        memo.forget(2);
        assert_eq!(memo.known(2, &[7, 3, u32::MAX, 9]), 0);
        memo.remember(2, &list, &[3, 9]);
        memo.clear();
        assert_eq!(memo.known(2, &[7, 3, u32::MAX, 9]), 0);
    }
}

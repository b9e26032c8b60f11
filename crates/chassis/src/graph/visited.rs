//! The visited set of one search: a bit per slot, and the words a search set, so that clearing
//! costs what the search touched, not a pass over the graph.
//!
//! A bit rather than a generation stamp per slot: at 1,000,000 slots the bits take 128 KiB,
//! which stays in a core's L2 cache, where 4-byte stamps (4 MB) missed it on most neighbor
//! checks (docs/performance/codes.md: a fifth of a search's time at 1M x 128 went to that
//! one load).
//!
//! Invariants: bit i of `bits` is set exactly when slot i was inserted since the last reset;
//! every nonzero word's index is in `touched` (each once), so zeroing those words clears the set.

/// Visited slots of one search.
#[derive(Debug, Default)]
pub struct VisitedSet {
    bits: Vec<u64>,
    /// Indices of the words of `bits` that are nonzero.
    touched: Vec<u32>,
    /// Slots at or past this count as visited.
    len: usize,
}

impl VisitedSet {
    /// Starts a new search over slots below `n`.
    pub fn reset(&mut self, n: usize) {
        if self.touched.len() > self.bits.len() / 8 {
            self.bits.iter_mut().for_each(|w| *w = 0);
        } else {
            for &w in &self.touched {
                if let Some(word) = self.bits.get_mut(w as usize) {
                    *word = 0;
                }
            }
        }
        self.touched.clear();
        let words = n.div_ceil(64);
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
        self.len = n;
    }

    /// Whether `slot` was visited (slots beyond the reset size count as visited).
    #[inline]
    pub fn contains(&self, slot: u32) -> bool {
        let s = slot as usize;
        s >= self.len
            || self
                .bits
                .get(s / 64)
                .is_none_or(|w| w & (1u64 << (s % 64)) != 0)
    }

    /// Marks `slot`; returns true if it was not yet visited. Slots beyond the reset size are
    /// reported as visited, so they are skipped.
    #[inline]
    pub fn insert(&mut self, slot: u32) -> bool {
        let s = slot as usize;
        if s >= self.len {
            return false;
        }
        let (w, bit) = (s / 64, 1u64 << (s % 64));
        match self.bits.get_mut(w) {
            Some(word) if *word & bit == 0 => {
                if *word == 0 {
                    // w < len / 64 + 1 ≤ u32::MAX / 64 + 1: slots are u32.
                    self.touched.push(w as u32);
                }
                *word |= bit;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_isolate_searches_and_clear_every_word_they_set() {
        let mut v = VisitedSet::default();
        v.reset(10);
        assert!(v.insert(3));
        assert!(!v.insert(3));
        assert!(!v.insert(10), "out of range counts as visited");
        v.reset(10);
        assert!(v.insert(3));
        // Many words set (the whole-array clear) and few (the touched-word clear), across a
        // larger and then a smaller reset: nothing set before a reset survives it.
        for n in [1000usize, 70, 5000, 64, 65] {
            v.reset(n);
            let slots: Vec<u32> = (0..n as u32)
                .filter(|s| s % 7 == 3 || s % 64 == 63)
                .collect();
            for &s in &slots {
                assert!(v.insert(s), "n={n} slot {s} visited before it was inserted");
                assert!(!v.insert(s));
            }
            assert!(!v.insert(n as u32), "n={n}: out of range counts as visited");
            v.reset(n);
            for s in 0..n as u32 {
                assert!(v.insert(s), "n={n}: slot {s} survived the reset");
            }
        }
    }
}

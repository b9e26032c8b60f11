//! The visited set of one search: a bit per slot, and the words a search set, so that clearing
//! costs what the search touched, not a pass over the graph.
//!
//! A bit rather than a generation stamp per slot: at 1,000,000 slots the bits take 128 KiB,
//! which stays in a core's L2 cache, where 4-byte stamps (4 MB) missed it on most neighbor
//! checks (docs/performance/codes.md: a fifth of a search's time at 1M x 128 went to that
//! one load).
//!
//! Invariants: bit i of `bits` is set exactly when slot i was inserted since the last reset;
//! every nonzero word's index is among `touched[..touched_len]` (at least once), so zeroing
//! those words clears the set.

/// Visited slots of one search.
#[derive(Debug, Default)]
pub struct VisitedSet {
    bits: Vec<u64>,
    /// Indices of the words of `bits` that are nonzero: the first `touched_len` entries (the
    /// rest is room written ahead of the count, so recording one takes no branch).
    touched: Vec<u32>,
    touched_len: usize,
    /// Slots at or past this count as visited.
    len: usize,
}

impl VisitedSet {
    /// Starts a new search over slots below `n`.
    pub fn reset(&mut self, n: usize) {
        let touched = self.touched.get(..self.touched_len).unwrap_or(&[]);
        if touched.len() > self.bits.len() / 8 {
            self.bits.iter_mut().for_each(|w| *w = 0);
        } else {
            for &w in touched {
                if let Some(word) = self.bits.get_mut(w as usize) {
                    *word = 0;
                }
            }
        }
        self.touched_len = 0;
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
        self.make_room(1);
        self.mark(slot)
    }

    /// Marks every slot `words` yields (up to `out.len()` of them) and writes the ones not
    /// visited before to `out`, in order; returns how many it wrote. The same as calling
    /// [`VisitedSet::insert`] on each.
    ///
    /// Neither decides by a branch on the answer: about half of a neighbor list was visited
    /// before, in no order a branch predictor can learn, and each wrong guess cost more than
    /// the test (a 128-d walk's largest single cost in cache; docs/decisions/0014).
    #[inline]
    pub fn insert_new(&mut self, words: impl Iterator<Item = u32>, out: &mut [u32]) -> usize {
        self.make_room(out.len());
        let mut fresh = 0;
        for s in words.take(out.len()) {
            // Written whatever the answer; counted only when new (then overwritten if not).
            // `fresh` < out.len() here: at most one is counted per word taken.
            if let Some(o) = out.get_mut(fresh) {
                *o = s;
            }
            fresh += usize::from(self.mark(s));
        }
        fresh
    }

    /// Makes room in `touched` for `marks` more words past its count.
    #[inline]
    fn make_room(&mut self, marks: usize) {
        let room = self.touched_len + marks;
        if self.touched.len() < room {
            self.touched.resize(room, 0);
        }
    }

    /// Sets `slot`'s bit; returns whether it was clear (false at or past the reset size). A
    /// word that was zero is recorded in `touched` by writing it past the count and moving the
    /// count by whether it was zero; the caller made room ([`VisitedSet::make_room`]).
    #[inline(always)]
    fn mark(&mut self, slot: u32) -> bool {
        let s = slot as usize;
        if s >= self.len {
            return false;
        }
        let w = s / 64;
        let Some(word) = self.bits.get_mut(w) else {
            return false;
        };
        let old = *word;
        let bit = 1u64 << (s % 64);
        *word = old | bit;
        // w < len / 64 + 1 ≤ u32::MAX / 64 + 1: slots are u32.
        if let Some(t) = self.touched.get_mut(self.touched_len) {
            *t = w as u32;
        }
        self.touched_len += usize::from(old == 0);
        old & bit == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_new_answers_as_insert_does_and_its_words_are_cleared() {
        // Lists of up to 32 words (duplicates, slots past the reset size, words never set
        // before and words set already), fed to insert_new on one set and one by one to
        // insert on another: the same fresh slots in the same order, the same bits after.
        let (mut a, mut b) = (VisitedSet::default(), VisitedSet::default());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [300usize, 5000, 70, 100_000] {
            a.reset(n);
            b.reset(n);
            // Few rounds in the largest set, so its reset clears by the touched words alone.
            let rounds = if n > 50_000 { 5 } else { 200 };
            for round in 0..rounds {
                let mut words = Vec::new();
                for _ in 0..(round % 33) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly in range, some past it, some repeated.
                    words.push((x % (n as u64 + n as u64 / 8)) as u32);
                }
                if let Some(&w) = words.first() {
                    words.push(w);
                }
                words.truncate(32);
                let mut out = [0u32; 32];
                let fresh = a.insert_new(words.iter().copied(), &mut out);
                let expected: Vec<u32> = words.iter().copied().filter(|&w| b.insert(w)).collect();
                assert_eq!(&out[..fresh], &expected[..], "n={n} round {round}");
            }
            assert_eq!(a.bits[..n.div_ceil(64)], b.bits[..n.div_ceil(64)]);
            // A reset clears every word insert_new set, by the touched words or the whole
            // array: nothing is visited afterwards.
            a.reset(n);
            let all: Vec<u32> = (0..n as u32).collect();
            for chunk in all.chunks(32) {
                let mut out = [0u32; 32];
                assert_eq!(a.insert_new(chunk.iter().copied(), &mut out), chunk.len());
            }
        }
        // Only out.len() words are taken.
        let mut v = VisitedSet::default();
        v.reset(100);
        let mut out = [0u32; 2];
        assert_eq!(v.insert_new([1, 2, 3].into_iter(), &mut out), 2);
        assert!(v.insert(3), "the third word was not taken");
    }

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

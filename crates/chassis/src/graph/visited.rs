//! A generation-stamped visited set: clearing is one increment, not a pass over memory.
//!
//! Invariant: `marks[i] == generation` exactly when slot `i` was visited in the current search;
//! when the generation wraps, the marks are zeroed once and counting restarts at 1.

/// Visited slots of one search.
#[derive(Debug, Default)]
pub struct VisitedSet {
    marks: Vec<u32>,
    generation: u32,
}

impl VisitedSet {
    /// Starts a new search over slots below `n`.
    pub fn reset(&mut self, n: usize) {
        if self.marks.len() < n {
            self.marks.resize(n, 0);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.marks.iter_mut().for_each(|m| *m = 0);
            self.generation = 1;
        }
    }

    /// Marks `slot`; returns true if it was not yet visited. Slots beyond the reset size are
    /// reported as visited, so they are skipped.
    #[inline]
    pub fn insert(&mut self, slot: u32) -> bool {
        match self.marks.get_mut(slot as usize) {
            Some(m) if *m != self.generation => {
                *m = self.generation;
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
    fn generations_isolate_searches_and_survive_wrap() {
        let mut v = VisitedSet::default();
        v.reset(10);
        assert!(v.insert(3));
        assert!(!v.insert(3));
        assert!(!v.insert(10), "out of range counts as visited");
        v.reset(10);
        assert!(v.insert(3));
        v.generation = u32::MAX;
        v.reset(10);
        assert_eq!(v.generation, 1);
        assert!(v.insert(3));
    }
}

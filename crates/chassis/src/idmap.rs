//! The hash of the id → slot tables, the writer's and each reader's (ADR-0008 decision 3).

/// The hash of the id → slot tables (writer and readers): a folded 64×64→128-bit multiply of
/// the id mixed with a per-process random seed. Building a table at 10M slots is dominated by
/// cache misses, and SipHash's rounds on top made it miss ADR-0008's 1 s (experiment 5,
/// docs/performance/experiments.md). The seed keeps a file's ids from choosing their own collisions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdHashBuilder {
    seed: u64,
}

impl Default for IdHashBuilder {
    fn default() -> IdHashBuilder {
        use std::hash::BuildHasher;
        IdHashBuilder {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5EED_u64) | 1,
        }
    }
}

impl std::hash::BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.seed)
    }
}

/// See [`IdHashBuilder`].
pub(crate) struct IdHasher(u64);

impl IdHasher {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    #[inline]
    fn mix(&mut self, x: u64) {
        let m = u128::from(x ^ self.0) * u128::from(Self::K);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

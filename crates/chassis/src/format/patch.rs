//! A sync patch: the writes and fsyncs one incremental backup made to its destination, as
//! bytes another machine can replay on its own copy (docs/SCALING.md, replicas without a
//! shared file system). Replaying them in order, with the fsyncs where they were, gives the
//! copy the same contents and the same crash safety as the sync that recorded them
//! (`storage/backup.rs` argues the order).
//!
//! Layout (little-endian): magic `CHPATCH\0`, version u32 (2), flags u32 (bit 0: full copy,
//! replay into a new file; bit 1: the base sequence is in header copy B), base sequence u64
//! (the destination's sequence the patch applies to; `u64::MAX` for a full copy), sequence
//! u64 (what it leaves), op count u64; from version 2, the source's file identity (16 bytes)
//! and the base header's checksum u64 (the checksum field of the destination's header copy
//! at the base sequence; 0 for a full copy); then the ops:
//! tag u8 (1 write: offset u64, length u64, bytes; 2 grow: length u64; 3 sync), then xxh3-64
//! of everything before it. Decoding checks every bound and the checksum before anything is
//! replayed; it never panics on any input. Version 1 (no identity, no base checksum) is still
//! decoded: its full patches apply, its incremental ones are refused (nothing in them says
//! which file they belong to).
//!
//! A patch is trusted input, as a database file is: its checksum catches damage in transit,
//! and `apply_patch` checks that an incremental one belongs to the replica (identity, base
//! sequence, base header checksum, the backup stamp), but the bytes it writes at its offsets
//! are not otherwise validated until the repair pass opens the result. Apply patches only
//! from a source you trust (docs/SCALING.md).

use crate::error::{Error, Result};

/// `CHPATCH\0`.
pub const MAGIC: [u8; 8] = *b"CHPATCH\0";
/// The layout version this release writes (it reads 1 and 2).
pub const VERSION: u32 = 2;
/// Flag bit 0: the patch is a full copy (replay into a new file).
pub const FLAG_FULL: u32 = 1;
/// Flag bit 1: the base sequence is in header copy B (A otherwise).
pub const FLAG_BASE_IN_B: u32 = 2;
/// The base sequence of a full copy.
pub const NO_BASE: u64 = u64::MAX;
/// Bytes before the first op.
const HEAD: usize = 8 + 4 + 4 + 8 + 8 + 8;

/// One recorded step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write these bytes at this offset.
    Write {
        /// File offset.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Grow the file to at least this length.
    Grow(u64),
    /// Make every write so far durable.
    Sync,
}

/// A decoded patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patch {
    /// Whether it is a full copy.
    pub full: bool,
    /// The destination sequence it applies to ([`NO_BASE`] for a full copy).
    pub base_sequence: u64,
    /// The header copy (0 = A, 1 = B) holding the base sequence.
    pub base_copy: usize,
    /// The sequence the destination holds after it.
    pub sequence: u64,
    /// The source file's identity (all zero in a version 1 patch, or from a source that has
    /// none).
    pub file_id: [u8; 16],
    /// The checksum field of the destination's header at the base sequence (0 for a full
    /// copy, or in a version 1 patch).
    pub base_checksum: u64,
    /// The steps, in order.
    pub ops: Vec<Op>,
}

impl Patch {
    /// Bytes of data the patch writes.
    pub fn bytes_written(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Write { bytes, .. } => bytes.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// The patch as bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b =
            Vec::with_capacity(HEAD + self.bytes_written() as usize + 17 * self.ops.len() + 8);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        let mut flags = if self.full { FLAG_FULL } else { 0 };
        if self.base_copy == 1 {
            flags |= FLAG_BASE_IN_B;
        }
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.base_sequence.to_le_bytes());
        b.extend_from_slice(&self.sequence.to_le_bytes());
        b.extend_from_slice(&(self.ops.len() as u64).to_le_bytes());
        b.extend_from_slice(&self.file_id);
        b.extend_from_slice(&self.base_checksum.to_le_bytes());
        for op in &self.ops {
            match op {
                Op::Write { offset, bytes } => {
                    b.push(1);
                    b.extend_from_slice(&offset.to_le_bytes());
                    b.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                    b.extend_from_slice(bytes);
                }
                Op::Grow(len) => {
                    b.push(2);
                    b.extend_from_slice(&len.to_le_bytes());
                }
                Op::Sync => b.push(3),
            }
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and checks a patch.
    pub fn decode(b: &[u8]) -> Result<Patch> {
        let bad = |what: &str| Error::InvalidArgument(format!("not a usable sync patch: {what}"));
        if b.len() < HEAD + 8 || b[..8] != MAGIC {
            return Err(bad("no CHPATCH magic"));
        }
        let (body, sum) = b.split_at(b.len() - 8);
        if xxhash_rust::xxh3::xxh3_64(body) != super::u64_at(sum, 0) {
            return Err(bad("checksum mismatch (truncated or damaged)"));
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != 1 && version != VERSION {
            return Err(bad(&format!(
                "version {version}, this release reads 1 and {VERSION}"
            )));
        }
        let flags = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        if flags & !(FLAG_FULL | FLAG_BASE_IN_B) != 0 {
            return Err(bad(&format!("unknown flags {flags:#x}")));
        }
        let base_sequence = super::u64_at(b, 16);
        let sequence = super::u64_at(b, 24);
        let count = super::u64_at(b, 32);
        let mut cur = Cursor { b: body, at: HEAD };
        let mut file_id = [0u8; 16];
        let mut base_checksum = 0;
        if version >= 2 {
            let id = cur.take(16).ok_or_else(|| bad("truncated head"))?;
            file_id.copy_from_slice(id);
            let sum = cur.take(8).ok_or_else(|| bad("truncated head"))?;
            base_checksum = super::u64_at(sum, 0);
        }
        let mut ops = Vec::new();
        for _ in 0..count {
            let tag = cur.take(1).ok_or_else(|| bad("an op past the end"))?[0];
            let word = |c: &mut Cursor| c.take(8).map(|w| super::u64_at(w, 0));
            ops.push(match tag {
                1 => {
                    let (Some(offset), Some(len)) = (word(&mut cur), word(&mut cur)) else {
                        return Err(bad("an op past the end"));
                    };
                    let bytes = usize::try_from(len)
                        .ok()
                        .and_then(|n| cur.take(n))
                        .ok_or_else(|| bad("an op past the end"))?;
                    Op::Write {
                        offset,
                        bytes: bytes.to_vec(),
                    }
                }
                2 => Op::Grow(word(&mut cur).ok_or_else(|| bad("an op past the end"))?),
                3 => Op::Sync,
                t => return Err(bad(&format!("unknown op {t}"))),
            });
        }
        if cur.at != body.len() {
            return Err(bad("bytes after the last op"));
        }
        Ok(Patch {
            full: flags & FLAG_FULL != 0,
            base_sequence,
            base_copy: usize::from(flags & FLAG_BASE_IN_B != 0),
            sequence,
            file_id,
            base_checksum,
            ops,
        })
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len())?;
        let s = &self.b[self.at..end];
        self.at = end;
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_is_refused() {
        let p = Patch {
            full: false,
            base_sequence: 4,
            base_copy: 1,
            sequence: 9,
            file_id: [3; 16],
            base_checksum: 0xDEAD_BEEF,
            ops: vec![
                Op::Write {
                    offset: 131_072,
                    bytes: vec![0; 8],
                },
                Op::Sync,
                Op::Grow(1 << 20),
                Op::Write {
                    offset: 200_000,
                    bytes: vec![7; 100],
                },
                Op::Sync,
            ],
        };
        let b = p.encode();
        assert_eq!(Patch::decode(&b).unwrap(), p);
        assert_eq!(p.bytes_written(), 108);
        for cut in [0, 8, 40, b.len() - 1] {
            assert!(Patch::decode(&b[..cut]).is_err());
        }
        let mut flipped = b.clone();
        flipped[50] ^= 1;
        assert!(Patch::decode(&flipped).is_err());
    }

    /// A version 1 patch (written before identities) still decodes, with no identity and
    /// no base checksum: apply_patch then takes only its full form.
    #[test]
    fn version_1_decodes_without_identity() {
        let p = Patch {
            full: true,
            base_sequence: NO_BASE,
            base_copy: 0,
            sequence: 3,
            file_id: [0; 16],
            base_checksum: 0,
            ops: vec![Op::Grow(4096), Op::Sync],
        };
        let v2 = p.encode();
        // Version 1: the same head without the identity and base checksum.
        let mut v1 = v2[..HEAD].to_vec();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&v2[HEAD + 24..v2.len() - 8]);
        let sum = xxhash_rust::xxh3::xxh3_64(&v1);
        v1.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(Patch::decode(&v1).unwrap(), p);
        let mut v3 = v2.clone();
        v3[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert!(Patch::decode(&v3).is_err());
    }
}

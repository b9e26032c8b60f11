//! The one error type of the library.
//!
//! Every variant is something a caller can act on: a corrupt or foreign file, a newer format,
//! a lock held by another writer, bad input, an unknown id, or an I/O failure. Corrupt input
//! never panics; it becomes [`Error::Corrupt`] with what was wrong and where in the file.

use std::io;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Chassis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file is damaged: a checksum, a bound or a structure does not hold.
    #[error("corrupt index file: {what} (at byte offset {offset}); restore it from a backup")]
    Corrupt {
        /// What was found wrong.
        what: String,
        /// Byte offset in the file where it was found.
        offset: u64,
    },
    /// The file does not start with the Chassis magic: it is some other kind of file.
    #[error("not a Chassis index file (no CHASSIS magic at byte 0)")]
    NotChassisFile,
    /// The file was written by a newer Chassis whose format this release cannot read.
    #[error(
        "index file needs a newer Chassis: its read version is {read_version}, this release reads up to {}",
        crate::format::READ_VERSION
    )]
    TooNew {
        /// The file's read version.
        read_version: u32,
    },
    /// Another writer (process or handle) holds the file's exclusive lock.
    #[error("index file is locked by another writer; open it read-only or close the other writer")]
    Locked,
    /// An earlier fsync or write of committed data failed; the OS may have dropped dirty pages,
    /// so no further commit is safe until the index is reopened (which recovers from disk).
    #[error("index is poisoned by an earlier failed write or fsync; reopen it to recover")]
    Poisoned,
    /// The index was opened read-only (or the file's write version is newer than this release).
    #[error("index is open read-only: {reason}")]
    ReadOnly {
        /// Why it is read-only.
        reason: &'static str,
    },
    /// A vector or query has the wrong number of components.
    #[error("dimension mismatch: the index has {expected} dimensions, the vector has {got}")]
    DimensionMismatch {
        /// The index's dimensions.
        expected: usize,
        /// The given vector's length.
        got: usize,
    },
    /// A vector cannot be stored or searched (NaN, infinite, zero under cosine).
    #[error("invalid vector: {reason}")]
    InvalidVector {
        /// What is wrong with it.
        reason: String,
    },
    /// The id is already stored (and not deleted).
    #[error("id {id} is already in the index; delete it first to replace it")]
    DuplicateId {
        /// The id.
        id: u64,
    },
    /// Automatic ids would pass 2^64 − 1: `count` more from `next` don't fit (ids the
    /// caller chooses still work).
    #[error(
        "automatic ids are used up: {count} more starting at {next} would pass 2^64 - 1; give ids explicitly"
    )]
    IdsExhausted {
        /// The id the next automatic add would get.
        next: u64,
        /// How many were asked for.
        count: u64,
    },
    /// The id is not in the index (never added, or deleted).
    #[error("id {id} is not in the index")]
    NotFound {
        /// The id.
        id: u64,
    },
    /// A parameter is outside its allowed range (M, k, dims, ef...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The index holds as many vectors as the format allows (u32 slots, u32::MAX reserved).
    #[error("index is full: format 3 holds at most {max} vectors")]
    Full {
        /// Largest number of slots.
        max: u64,
    },
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    pub(crate) fn corrupt(what: impl Into<String>, offset: u64) -> Self {
        Error::Corrupt {
            what: what.into(),
            offset,
        }
    }
}

//! The only code that touches the operating system: the [`Storage`] seam.
//!
//! A `Storage` is one index file: positional reads and writes, shared mappings of byte ranges,
//! growth (never shrinking), space allocation, fsync of the file and of its directory, and the
//! writer's exclusive lock. [`FileStorage`] is the real file (mmap, flock, fallocate, fsync);
//! [`MemStorage`] keeps the bytes in memory, with a durable image that only `sync` updates, so
//! a power-loss simulator can build crash images from it. Both pass one conformance suite
//! (`tests/storage_conformance.rs`).
//!
//! Invariants: a [`Region`] never moves or shrinks while it is alive, so pointers into it stay
//! valid; bytes are reached only through copies and atomics (never a `&mut [u8]` over shared
//! memory), except [`Region::f32s`], whose callers promise the range is not being written.

pub mod budget;
#[cfg(target_os = "linux")]
pub(crate) mod direct;
mod file;
mod mem;
mod region;

pub use file::FileStorage;
pub use mem::{FaultKind, MemStorage};
pub use region::Region;

use crate::error::Result;

/// One index file, as the layers above see it.
#[allow(clippy::len_without_is_empty)]
pub trait Storage: Send + Sync + 'static {
    /// Current length in bytes.
    fn len(&self) -> Result<u64>;
    /// Grows the file to at least `len` bytes (new bytes read as zero). Never shrinks: a
    /// smaller `len` leaves the file as it is.
    fn grow(&self, len: u64) -> Result<()>;
    /// Reads exactly `buf.len()` bytes at `offset`; reading past the end is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `buf` at `offset`, growing the file if needed.
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()>;
    /// Maps `len` bytes at `offset` (a multiple of 64 KiB), shared with every other mapping and
    /// process; `writable` only for the writer. The range must lie inside the file.
    fn map(&self, offset: u64, len: u64, writable: bool) -> Result<Region>;
    /// Allocates blocks for `offset..offset + len` so later writes (through a mapping too)
    /// cannot fail for space: fallocate on Linux, writing zeros where that is missing. Callers
    /// only allocate ranges that hold nothing committed and nothing this writer wrote yet (new
    /// slots, heap entries and table pages), because the portable path zeroes them.
    fn allocate(&self, offset: u64, len: u64) -> Result<()>;
    /// Hints that `offset..offset + len` will be read soon, so that reads of several places
    /// overlap instead of waiting on the disk one after another (posix_fadvise WILLNEED on
    /// Linux; nothing elsewhere). A hint only: it never fails and changes no contents.
    fn will_need(&self, _offset: u64, _len: u64) {}
    /// Makes every write so far durable (fsync; F_FULLFSYNC on Apple platforms).
    fn sync(&self) -> Result<()>;
    /// Makes the file's directory entry durable (fsync of the parent directory).
    fn sync_dir(&self) -> Result<()>;
    /// Takes the exclusive writer lock without waiting: [`crate::Error::Locked`] if another
    /// handle holds it. Released when this handle is dropped.
    fn try_lock_exclusive(&self) -> Result<()>;
    /// The open file's identity on disk (device, inode, link count), for noticing that the
    /// path now names another file (decision 8). `None` for storage with no path.
    fn identity(&self) -> Result<Option<FileIdentity>> {
        Ok(None)
    }
}

/// Which file on disk a handle has open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Hard links; 0 once the file was unlinked or renamed over.
    pub nlink: u64,
}

/// The identity of the file a path names now (following symlinks), `None` if none does.
pub fn path_identity(path: &std::path::Path) -> Result<Option<FileIdentity>> {
    file::path_identity(path)
}

/// A new file identity (docs/FORMAT.md, "File identity"): 16 bytes from the operating
/// system's random source, never all zero (all zero means "no identity").
pub fn new_file_id() -> Result<[u8; 16]> {
    let mut id = [0u8; 16];
    while id == [0u8; 16] {
        getrandom::fill(&mut id).map_err(|e| {
            crate::Error::Io(std::io::Error::other(format!(
                "the operating system's random source failed: {e}"
            )))
        })?;
    }
    Ok(id)
}

/// Bytes available to this process on the file system holding `dir`.
pub fn free_space(dir: &std::path::Path) -> Result<u64> {
    file::free_space(dir)
}

/// Renames `from` over `to` (atomic on POSIX; on Windows a write-through move, durable when
/// it returns).
pub fn rename(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    file::rename(from, to)
}

/// Makes the directory entry of `path` durable (fsync of its directory; nothing on Windows,
/// where [`rename`] is already write-through).
pub fn sync_dir_of(path: &std::path::Path) -> Result<()> {
    file::sync_dir(path)
}

/// Renames `from` to `to` only when no file is at `to` (atomic on Linux), then makes the
/// directory entry durable: for a replacement that found nothing at its destination and so
/// holds no lock there ([`crate::Error::Io`] with `AlreadyExists` if one appeared).
pub fn rename_noreplace_durably(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    file::rename_noreplace(from, to)?;
    sync_dir_of(to)
}

/// Renames `from` over `to` (atomic on POSIX), then makes the directory entry durable.
pub fn rename_durably(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    rename(from, to)?;
    sync_dir_of(to)
}

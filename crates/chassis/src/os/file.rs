//! The real file backend: pread/pwrite, memmap2 shared mappings, flock, fallocate, fsync.
//! Platform differences live here and nowhere else.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Region, Storage};
use crate::error::{Error, Result};

/// An index file on disk.
#[derive(Debug)]
pub struct FileStorage {
    file: Arc<File>,
    path: PathBuf,
    writable: bool,
    locked: AtomicBool,
}

impl FileStorage {
    /// Opens an existing file; `writable` for the writer, else read-only.
    pub fn open(path: &Path, writable: bool) -> Result<FileStorage> {
        let file = OpenOptions::new().read(true).write(writable).open(path)?;
        Ok(FileStorage::wrap(file, path, writable))
    }

    /// Opens the file for writing, creating it (empty) if it does not exist.
    pub fn create(path: &Path) -> Result<FileStorage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(FileStorage::wrap(file, path, true))
    }

    fn wrap(file: File, path: &Path, writable: bool) -> FileStorage {
        FileStorage {
            file: Arc::new(file),
            path: path.to_path_buf(),
            writable,
            locked: AtomicBool::new(false),
        }
    }

    /// The path this file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The portable allocation (macOS, the BSDs, and Linux file systems without fallocate;
    /// untested outside Linux): writing zeros makes the file system allocate every block now,
    /// so a full disk fails here rather than as SIGBUS under a mapping. The Storage contract
    /// allows it: callers only allocate ranges nothing committed lives in yet.
    fn allocate_by_writing(&self, offset: u64, end: u64) -> Result<()> {
        self.grow(end)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = offset;
        while at < end {
            let n = (end - at).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Whether the path still names the file this handle has open (after taking the lock, a
    /// writer checks this: locks follow the inode, not the path; decision 8).
    pub fn still_at_path(&self) -> Result<bool> {
        let mine = self.identity()?;
        let now = path_identity(&self.path)?;
        Ok(matches!((mine, now), (Some(a), Some(b)) if a.dev == b.dev && a.ino == b.ino))
    }

    /// Bytes actually allocated on disk (st_blocks · 512).
    pub fn allocated_bytes(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.file.metadata()?.blocks() * 512)
    }
}

impl Storage for FileStorage {
    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn grow(&self, len: u64) -> Result<()> {
        if len > self.len()? {
            self.file.set_len(len)?;
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                Error::corrupt(
                    format!("file ends before byte {}", offset + buf.len() as u64),
                    offset,
                )
            } else {
                Error::Io(e)
            }
        })
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        Ok(self.file.write_all_at(buf, offset)?)
    }

    fn map(&self, offset: u64, len: u64, writable: bool) -> Result<Region> {
        let writable = writable && self.writable;
        let file_len = self.len()?;
        if offset.checked_add(len).is_none_or(|end| end > file_len) || len == 0 {
            return Err(Error::corrupt(
                format!("mapping of {len} bytes at {offset} beyond the file's {file_len} bytes"),
                offset,
            ));
        }
        let len_usize =
            usize::try_from(len).map_err(|_| Error::corrupt("region too large", offset))?;
        let mut opts = memmap2::MmapOptions::new();
        opts.offset(offset).len(len_usize);
        let map = if writable {
            opts.map_raw(&*self.file)?
        } else {
            opts.map_raw_read_only(&*self.file)?
        };
        let ptr = map.as_mut_ptr();
        // SAFETY: `map` is a live mapping of exactly `len_usize` bytes at a page-aligned
        // address; the Region keeps it alive, and writes are allowed only if it was mapped
        // read-write.
        Ok(unsafe { Region::new(ptr, len_usize, writable, Arc::new(map)) })
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::Io(io::Error::other("allocation past 2^64 bytes")))?;
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{fallocate, FallocateFlags};
            match fallocate(&*self.file, FallocateFlags::empty(), offset, len) {
                Ok(()) => return Ok(()),
                // File systems without fallocate take the portable path below.
                Err(e) if e == rustix::io::Errno::OPNOTSUPP => {}
                Err(e) => return Err(Error::Io(e.into())),
            }
        }
        self.allocate_by_writing(offset, end)
    }

    fn sync(&self) -> Result<()> {
        #[cfg(target_vendor = "apple")]
        {
            // Untested: F_FULLFSYNC flushes the drive's cache too, which fsync does not on Apple.
            rustix::fs::fcntl_fullfsync(&*self.file).map_err(|e| Error::Io(e.into()))?;
            return Ok(());
        }
        #[cfg(not(target_vendor = "apple"))]
        {
            Ok(self.file.sync_all()?)
        }
    }

    fn sync_dir(&self) -> Result<()> {
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(File::open(dir)?.sync_all()?)
    }

    // The stat field types differ across platforms: the casts are not no-ops everywhere.
    #[allow(clippy::unnecessary_cast)]
    fn identity(&self) -> Result<Option<super::FileIdentity>> {
        let st = rustix::fs::fstat(&*self.file).map_err(io::Error::from)?;
        Ok(Some(super::FileIdentity {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            nlink: st.st_nlink as u64,
        }))
    }

    fn try_lock_exclusive(&self) -> Result<()> {
        use rustix::fs::{flock, FlockOperation};
        match flock(&*self.file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                self.locked.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Error::Locked),
            Err(e) => Err(Error::Io(e.into())),
        }
    }
}

#[allow(clippy::unnecessary_cast)] // stat field types differ across platforms
pub(super) fn path_identity(path: &Path) -> Result<Option<super::FileIdentity>> {
    match rustix::fs::stat(path) {
        Ok(st) => Ok(Some(super::FileIdentity {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            nlink: st.st_nlink as u64,
        })),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::Io(e.into())),
    }
}

pub(super) fn free_space(dir: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

pub(super) fn rename_durably(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to)?;
    let dir = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(File::open(dir)?.sync_all()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_portable_allocation_zeroes_only_its_range_and_allocates_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        let f = FileStorage::create(&path).unwrap();
        f.write_at(0, &[7u8; 100]).unwrap();
        f.allocate_by_writing(4096, 3 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 3 << 20);
        let mut head = [0u8; 100];
        f.read_at(0, &mut head).unwrap();
        assert_eq!(head, [7u8; 100], "outside the range: untouched");
        assert!(
            f.allocated_bytes().unwrap() >= (3 << 20) - 4096,
            "blocks exist"
        );
    }
}

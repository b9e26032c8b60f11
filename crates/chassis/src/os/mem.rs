//! The in-memory backend: the file's bytes in one fixed allocation, plus a durable image.
//!
//! Writes (through `write_at` or a mapping) change the current image at once; `sync` copies
//! the current image into the durable image. A power-loss simulator reads both
//! ([`MemStorage::current_image`], [`MemStorage::durable_image`]) and builds crash images with
//! [`MemStorage::from_image`]. The allocation is reserved up front (`capacity`), so mappings
//! never move; growing past it fails like a full disk.
//!
//! Several handles ([`MemStorage::reopen`]) share one file, as several `open` calls would; the
//! writer lock belongs to a handle and is released when that handle is dropped.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Region, Storage};
use crate::error::{Error, Result};

const ALIGN: usize = 64 * 1024;

struct MemFile {
    ptr: *mut u8,
    capacity: usize,
    len: AtomicU64,
    durable: Mutex<Vec<u8>>,
    lock_owner: Mutex<Option<u64>>,
    next_handle: AtomicU64,
    syncs: AtomicU64,
    /// Fail every sync from this (1-based) sync number on; 0 = never.
    fail_sync_from: AtomicU64,
    /// Durable images after each successful sync, when recording.
    history: Mutex<Option<Vec<Vec<u8>>>>,
}

// SAFETY: the allocation is only reached through Region (copies and atomics) and through
// `write_at` / `read_at`, which copy; the raw pointer itself is never handed out mutably.
unsafe impl Send for MemFile {}
// SAFETY: as above.
unsafe impl Sync for MemFile {}

impl Drop for MemFile {
    fn drop(&mut self) {
        if let Ok(layout) = Layout::from_size_align(self.capacity, ALIGN) {
            // SAFETY: `ptr` came from `alloc_zeroed` with this same layout, and every Region
            // holds an Arc to this MemFile, so none outlives the allocation.
            unsafe { dealloc(self.ptr, layout) };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An index file held in memory.
pub struct MemStorage {
    file: Arc<MemFile>,
    handle: u64,
    writable: bool,
}

impl MemStorage {
    /// A new empty file that can grow to `capacity` bytes.
    pub fn new(capacity: usize) -> Result<MemStorage> {
        let capacity = capacity.div_ceil(ALIGN).max(1) * ALIGN;
        let layout = Layout::from_size_align(capacity, ALIGN)
            .map_err(|e| Error::Io(io::Error::other(e.to_string())))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "MemStorage",
            )));
        }
        Ok(MemStorage {
            file: Arc::new(MemFile {
                ptr,
                capacity,
                len: AtomicU64::new(0),
                durable: Mutex::new(Vec::new()),
                lock_owner: Mutex::new(None),
                next_handle: AtomicU64::new(1),
                syncs: AtomicU64::new(0),
                fail_sync_from: AtomicU64::new(0),
                history: Mutex::new(None),
            }),
            handle: 0,
            writable: true,
        })
    }

    /// A file whose current and durable images are both `bytes` (a crash image).
    pub fn from_image(bytes: &[u8], capacity: usize) -> Result<MemStorage> {
        let s = MemStorage::new(capacity.max(bytes.len()))?;
        s.write_at(0, bytes)?;
        s.sync()?;
        Ok(s)
    }

    /// Another handle on the same file (like a second `open`), writable or not.
    pub fn reopen(&self, writable: bool) -> MemStorage {
        MemStorage {
            file: Arc::clone(&self.file),
            handle: self.file.next_handle.fetch_add(1, Ordering::Relaxed),
            writable,
        }
    }

    /// The bytes as they are now (what a reader would see).
    pub fn current_image(&self) -> Vec<u8> {
        let len = self.file.len.load(Ordering::Acquire) as usize;
        let mut v = vec![0u8; len];
        // SAFETY: `len` never exceeds capacity; the copy is into a fresh local buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.file.ptr, v.as_mut_ptr(), len) };
        v
    }

    /// The bytes as of the last `sync` (what survives a power loss with no torn writes).
    pub fn durable_image(&self) -> Vec<u8> {
        lock(&self.file.durable).clone()
    }

    /// How many times `sync` has succeeded on this file.
    pub fn sync_count(&self) -> u64 {
        self.file.syncs.load(Ordering::Relaxed)
    }

    /// Makes the `n`-th sync from now, and every one after it, fail with EIO without making
    /// anything durable (an fsync failure that never heals). `None` heals the file.
    pub fn fail_syncs_after(&self, n: Option<u64>) {
        let at = n.map_or(0, |n| self.sync_count() + n.max(1));
        self.file.fail_sync_from.store(at, Ordering::Relaxed);
    }

    /// Starts (or stops) keeping a copy of the durable image after every successful sync.
    pub fn record_durable_history(&self, on: bool) {
        *lock(&self.file.history) = on.then(Vec::new);
    }

    /// The durable images recorded since [`MemStorage::record_durable_history`], oldest first.
    pub fn durable_history(&self) -> Vec<Vec<u8>> {
        lock(&self.file.history).clone().unwrap_or_default()
    }
}

impl Drop for MemStorage {
    fn drop(&mut self) {
        let mut owner = lock(&self.file.lock_owner);
        if *owner == Some(self.handle) {
            *owner = None;
        }
    }
}

fn full() -> Error {
    Error::Io(io::Error::new(
        io::ErrorKind::StorageFull,
        "in-memory file capacity exhausted",
    ))
}

impl Storage for MemStorage {
    fn len(&self) -> Result<u64> {
        Ok(self.file.len.load(Ordering::Acquire))
    }

    fn grow(&self, len: u64) -> Result<()> {
        if len > self.file.capacity as u64 {
            return Err(full());
        }
        self.file.len.fetch_max(len, Ordering::AcqRel);
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = self.len()?;
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > len)
        {
            return Err(Error::corrupt(
                format!(
                    "file ends before byte {}",
                    offset.saturating_add(buf.len() as u64)
                ),
                offset,
            ));
        }
        // SAFETY: offset + buf.len() <= len <= capacity; `buf` is the caller's own memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.file.ptr.add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(Error::ReadOnly {
                reason: "handle opened read-only",
            });
        }
        let end = offset.checked_add(buf.len() as u64).ok_or_else(full)?;
        self.grow(end)?;
        // SAFETY: end <= capacity (checked by grow); `buf` is the caller's own memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf.as_ptr(),
                self.file.ptr.add(offset as usize),
                buf.len(),
            )
        };
        Ok(())
    }

    fn map(&self, offset: u64, len: u64, writable: bool) -> Result<Region> {
        let file_len = self.len()?;
        if !offset.is_multiple_of(ALIGN as u64)
            || len == 0
            || offset.checked_add(len).is_none_or(|end| end > file_len)
        {
            return Err(Error::corrupt(
                format!("mapping of {len} bytes at {offset} beyond the file's {file_len} bytes"),
                offset,
            ));
        }
        let keep: Arc<dyn std::any::Any + Send + Sync> = self.file.clone();
        // SAFETY: offset + len <= capacity, the allocation is 64 KiB-aligned and never moves
        // or shrinks while `keep` holds the MemFile.
        Ok(unsafe {
            Region::new(
                self.file.ptr.add(offset as usize),
                len as usize,
                writable && self.writable,
                keep,
            )
        })
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset.checked_add(len).ok_or_else(full)?;
        if end > self.file.capacity as u64 {
            return Err(full());
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let fail_from = self.file.fail_sync_from.load(Ordering::Relaxed);
        if fail_from != 0 && self.sync_count() + 1 >= fail_from {
            return Err(Error::Io(io::Error::from_raw_os_error(5)));
        }
        let image = self.current_image();
        if let Some(h) = lock(&self.file.history).as_mut() {
            h.push(image.clone());
        }
        *lock(&self.file.durable) = image;
        self.file.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn sync_dir(&self) -> Result<()> {
        Ok(())
    }

    fn try_lock_exclusive(&self) -> Result<()> {
        let mut owner = lock(&self.file.lock_owner);
        match *owner {
            Some(h) if h != self.handle => Err(Error::Locked),
            _ => {
                *owner = Some(self.handle);
                Ok(())
            }
        }
    }
}

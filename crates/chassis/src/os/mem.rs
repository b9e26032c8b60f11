//! The in-memory backend: the file's bytes in one fixed allocation, plus a durable image.
//!
//! Writes (through `write_at` or a mapping) change the current image at once; `sync` copies
//! the current image into the durable image. A power-loss simulator reads both
//! ([`MemStorage::current_image`], [`MemStorage::durable_image`]) and builds crash images with
//! [`MemStorage::from_image`]. The allocation is reserved up front (`capacity`), so mappings
//! never move; growing past it fails like a full disk.
//!
//! A failed sync follows Linux after an fsync error ("fsyncgate"): the pages it was writing are
//! marked clean without reaching the disk, so a later successful sync does not write them.
//! [`MemStorage::clean_image`] is the image as of the last sync attempt; a crash image takes
//! the durable contents wherever the current image equals it.
//!
//! Fault injection ([`MemStorage::inject_fault`]) makes the N-th mutating call (write, growth,
//! allocation or sync) fail with EIO or ENOSPC, once or from then on.
//!
//! Several handles ([`MemStorage::reopen`]) share one file, as several `open` calls would; the
//! writer lock belongs to a handle and is released when that handle is dropped.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Region, Storage};
use crate::error::{Error, Result};

const ALIGN: usize = 64 * 1024;
/// The page size of the simulated page cache: what a sync writes or a failed sync drops.
const PAGE: usize = 4096;

struct MemFile {
    /// An anonymous mapping: zero pages come from the kernel lazily, so a large capacity
    /// costs nothing until it is written.
    _anon: memmap2::MmapMut,
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
    /// The image as of the last sync attempt, successful or failed.
    clean: Mutex<Vec<u8>>,
    /// Mutating calls so far (write_at, grow, allocate, sync).
    ops: AtomicU64,
    /// The injected fault, if any.
    fault: Mutex<Option<Fault>>,
}

/// What an injected fault returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// EIO: the device failed.
    Eio,
    /// ENOSPC: no space left.
    NoSpace,
}

/// An injected fault: the mutating call numbered `at` fails, and with `forever` every later one.
#[derive(Clone, Copy, Debug)]
struct Fault {
    at: u64,
    kind: FaultKind,
    forever: bool,
}

// SAFETY: the allocation is only reached through Region (copies and atomics) and through
// `write_at` / `read_at`, which copy; the raw pointer itself is never handed out mutably.
unsafe impl Send for MemFile {}
// SAFETY: as above.
unsafe impl Sync for MemFile {}

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
        let mut anon = memmap2::MmapMut::map_anon(capacity).map_err(Error::Io)?;
        let ptr = anon.as_mut_ptr();
        Ok(MemStorage {
            file: Arc::new(MemFile {
                _anon: anon,
                ptr,
                capacity,
                len: AtomicU64::new(0),
                durable: Mutex::new(Vec::new()),
                lock_owner: Mutex::new(None),
                next_handle: AtomicU64::new(1),
                syncs: AtomicU64::new(0),
                fail_sync_from: AtomicU64::new(0),
                history: Mutex::new(None),
                clean: Mutex::new(Vec::new()),
                ops: AtomicU64::new(0),
                fault: Mutex::new(None),
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

    /// The bytes as of the last sync attempt: where the current image still equals them, a
    /// crash leaves the durable contents (unchanged pages, or pages a failed sync marked clean).
    pub fn clean_image(&self) -> Vec<u8> {
        lock(&self.file.clean).clone()
    }

    /// Mutating calls (write_at, grow, allocate, sync) made on this file so far.
    pub fn op_count(&self) -> u64 {
        self.file.ops.load(Ordering::Relaxed)
    }

    /// Makes the `n`-th mutating call from now (1 = the next) fail with `kind`; with `forever`
    /// every call after it fails too. A failing call changes nothing, except that a failing
    /// sync marks the pending pages clean (see the module doc). Replaces any earlier fault.
    pub fn inject_fault(&self, n: u64, kind: FaultKind, forever: bool) {
        *lock(&self.file.fault) = Some(Fault {
            at: self.op_count() + n.max(1),
            kind,
            forever,
        });
    }

    /// Removes an injected fault.
    pub fn clear_fault(&self) {
        *lock(&self.file.fault) = None;
    }

    /// Counts one mutating call and returns the injected error, if this call must fail.
    fn fault_check(&self) -> Result<()> {
        let n = self.file.ops.fetch_add(1, Ordering::Relaxed) + 1;
        match *lock(&self.file.fault) {
            Some(f) if n == f.at || (f.forever && n > f.at) => {
                Err(Error::Io(io::Error::from_raw_os_error(match f.kind {
                    FaultKind::Eio => 5,
                    FaultKind::NoSpace => 28,
                })))
            }
            _ => Ok(()),
        }
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
        self.fault_check()?;
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
        self.fault_check()?;
        let end = offset.checked_add(buf.len() as u64).ok_or_else(full)?;
        if end > self.file.capacity as u64 {
            return Err(full());
        }
        self.file.len.fetch_max(end, Ordering::AcqRel);
        // Stored as relaxed atomics, 4 bytes at a time where aligned (vectors, all of them):
        // a reader may load the vector of a hint slot a restarted writer is rewriting, as u32
        // words, at the same time (reader::View::hint_vector). A file's `write_at` is a
        // pwrite, which the kernel performs; this is the in-memory equivalent.
        let base = offset as usize;
        let mut i = 0;
        while i < buf.len() {
            let at = base + i;
            if at.is_multiple_of(4) && i + 4 <= buf.len() {
                let word = u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
                // SAFETY: at + 4 <= end <= capacity, `at` is 4-aligned (the allocation is
                // page-aligned), and the memory lives as long as `self.file`.
                unsafe { AtomicU32::from_ptr(self.file.ptr.add(at).cast::<u32>()) }
                    .store(word, Ordering::Relaxed);
                i += 4;
            } else {
                // SAFETY: at < end <= capacity; any address is aligned for a byte.
                unsafe { AtomicU8::from_ptr(self.file.ptr.add(at)) }
                    .store(buf[i], Ordering::Relaxed);
                i += 1;
            }
        }
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
        // SAFETY: offset + len <= capacity, the mapping is page-aligned and never moves
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
        self.fault_check()?;
        let end = offset.checked_add(len).ok_or_else(full)?;
        if end > self.file.capacity as u64 {
            return Err(full());
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let image = self.current_image();
        let fail_from = self.file.fail_sync_from.load(Ordering::Relaxed);
        let failed = if fail_from != 0 && self.sync_count() + 1 >= fail_from {
            Err(Error::Io(io::Error::from_raw_os_error(5)))
        } else {
            self.fault_check()
        };
        // Failed or not, the pages this sync was writing are clean from now on.
        let clean = std::mem::replace(&mut *lock(&self.file.clean), image.clone());
        failed?;
        // Only pages written since the last attempt reach the disk: pages a failed sync marked
        // clean stay as the durable image had them.
        let mut durable = lock(&self.file.durable);
        durable.resize(image.len(), 0);
        for (p, page) in image.chunks(PAGE).enumerate() {
            let at = p * PAGE;
            let was = clean.get(at..(at + page.len()).min(clean.len()));
            if was != Some(page) {
                durable[at..at + page.len()].copy_from_slice(page);
            }
        }
        if let Some(h) = lock(&self.file.history).as_mut() {
            h.push(durable.clone());
        }
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

//! A mapped byte range of the file, shared with other mappings and processes.
//!
//! Invariants: a Region never lends a byte outside its mapping; advice (huge pages, read
//! ahead, give back) never changes what a read sees; and the bytes [`Region::keep_resident`]
//! locked are counted in os/budget.rs's lock allowance for exactly as long as the mapping
//! lives (the kernel ends the lock at munmap, the last clone gives the count back).

use std::any::Any;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use crate::error::{Error, Result};

/// A mapped range. Cheap to clone; the mapping lives until the last clone is dropped.
#[derive(Clone)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    /// [`Region::advise_huge`] may ask for huge pages (false for a file larger than the
    /// memory budget: os/budget.rs).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    huge_pages: bool,
    /// Bytes of this mapping locked by [`Region::keep_resident`], shared by its clones and
    /// given back to the lock allowance when the last one goes (the mapping goes with it).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    locked: Arc<Locked>,
    /// The file again, opened for direct reads, and where this mapping starts in it: set for
    /// a read-only mapping of a file larger than memory ([`Region::direct_range`]).
    #[cfg(target_os = "linux")]
    direct: Option<(Arc<super::direct::DirectFile>, u64)>,
    _keep: Arc<dyn Any + Send + Sync>,
}

/// Bytes a mapping holds locked (os/budget.rs's allowance).
#[derive(Default)]
struct Locked(AtomicU64);

impl Drop for Locked {
    fn drop(&mut self) {
        let n = *self.0.get_mut();
        if n > 0 {
            super::budget::locks().give_back(n, false);
        }
    }
}

// SAFETY: a Region is a pointer into a mapping that `_keep` keeps alive; every access goes
// through bounds-checked copies or atomics, which are sound to perform from any thread.
unsafe impl Send for Region {}
// SAFETY: as above; shared access only reads through atomics or copies.
unsafe impl Sync for Region {}

#[cold]
#[inline(never)]
fn out_of_range(off: u64, n: u64, len: usize) -> Error {
    Error::Io(io::Error::other(format!(
        "access of {n} bytes at {off} outside a mapped region of {len} bytes"
    )))
}

impl Region {
    /// Wraps a mapping. `keep` must own the memory at `ptr..ptr + len` and keep it mapped
    /// (and unmoved) until dropped.
    ///
    /// # Safety
    /// `ptr` must be valid for reads (and writes if `writable`) of `len` bytes, aligned to at
    /// least 8, for as long as `keep` lives.
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len: usize,
        writable: bool,
        keep: Arc<dyn Any + Send + Sync>,
    ) -> Region {
        Region {
            ptr,
            len,
            writable,
            huge_pages: true,
            locked: Arc::default(),
            #[cfg(target_os = "linux")]
            direct: None,
            _keep: keep,
        }
    }

    /// Whether [`Region::advise_huge`] may ask for huge pages (Linux only: elsewhere there is
    /// no advice to give).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn set_huge_pages(&mut self, allowed: bool) {
        self.huge_pages = allowed;
    }

    /// Lets reads of this mapping's bytes bypass it ([`Region::direct_range`]): `file` is the
    /// mapped file opened for direct reads, `offset` where the mapping starts in it.
    #[cfg(target_os = "linux")]
    pub(crate) fn set_direct(&mut self, file: Arc<super::direct::DirectFile>, offset: u64) {
        self.direct = Some((file, offset));
    }

    /// Where `off..off + len` of this region lies in the file, and the file opened for direct
    /// reads (os/direct.rs), for a read-only mapping of a file larger than memory (Linux
    /// only); `None` elsewhere, or for a range outside the region. A search reads the vectors
    /// it ranks this way, many at once, instead of faulting each in through the mapping.
    #[cfg(target_os = "linux")]
    #[inline]
    pub(crate) fn direct_range(
        &self,
        off: u64,
        len: u64,
    ) -> Option<(&super::direct::DirectFile, u64)> {
        let (file, start) = self.direct.as_ref()?;
        let end = off.checked_add(len)?;
        (end <= self.len as u64).then(|| (&**file, start + off))
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// The address of the region's first byte (for tests of where mappings are placed).
    #[cfg(test)]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Asks the kernel to back `off..off + len` with huge pages where it can (MADV_HUGEPAGE on
    /// the whole 2 MiB pages inside the range, Linux only), unless the file is too large for
    /// memory (os/budget.rs). A hint: contents never change.
    pub fn advise_huge(&self, off: u64, len: u64) {
        #[cfg(target_os = "linux")]
        if self.huge_pages {
            const HUGE: usize = 2 << 20;
            let (Ok(off), Ok(len)) = (usize::try_from(off), usize::try_from(len)) else {
                return;
            };
            let end = off.saturating_add(len).min(self.len);
            let start = self.ptr as usize + off;
            let first = start.div_ceil(HUGE) * HUGE;
            let last = (self.ptr as usize + end) / HUGE * HUGE;
            if last > first {
                // SAFETY: `first..last` lies inside this live mapping; advice changes no
                // contents.
                let _ = unsafe {
                    rustix::mm::madvise(
                        first as *mut std::ffi::c_void,
                        last - first,
                        rustix::mm::Advice::LinuxHugepage,
                    )
                };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (off, len);
    }

    /// Starts reading `off..off + len` from the file, without waiting, in a file too large
    /// for memory (os/budget.rs; Linux only, MADV_WILLNEED on the pages it touches): a search
    /// names every vector it is about to rank exactly, so their misses are read side by side
    /// instead of one after another. Elsewhere, and for a file that fits, nothing (its pages
    /// are resident, and the call would cost a system call per vector). A hint: contents never
    /// change.
    #[inline]
    pub fn will_need(&self, off: u64, len: u64) {
        #[cfg(target_os = "linux")]
        self.advise_pages(off, len, rustix::mm::Advice::WillNeed);
        #[cfg(not(target_os = "linux"))]
        let _ = (off, len);
    }

    /// Keeps the pages under `off..off + len` in memory once read, in a file too large for
    /// memory (Linux only, mlock2 with MLOCK_ONFAULT: a page is locked when first touched, not
    /// read ahead): the bytes every search walks (codes, neighbor lists) stay resident while
    /// the vectors it ranks come and go. Under a small memory cgroup the kernel's LRU keeps
    /// them no better than pages read once: at most about half the cached file pages sit on
    /// its active list, and a page there is moved back to the inactive list however often it
    /// is read. Only within the lock allowance (three quarters of the memory budget,
    /// os/budget.rs), and only where the kernel allows it (RLIMIT_MEMLOCK or CAP_IPC_LOCK): a
    /// refusal is remembered and nothing else is tried. Returns whether the range is locked.
    /// Contents never change.
    pub fn keep_resident(&self, off: u64, len: u64) -> bool {
        #[cfg(target_os = "linux")]
        if let Some((addr, bytes)) = self.pages_of(off, len) {
            use std::sync::atomic::Ordering;
            let locks = super::budget::locks();
            if !locks.take(bytes as u64, super::budget::lock_most()) {
                return false;
            }
            use rustix::mm::{mlock_with, MlockFlags};
            // SAFETY: `addr..addr + bytes` lies inside this live mapping (`pages_of`); locking
            // changes no contents, and munmap ends the lock with the mapping.
            let locked = unsafe { mlock_with(addr, bytes, MlockFlags::ONFAULT) };
            if locked.is_err() {
                locks.give_back(bytes as u64, true);
                return false;
            }
            self.locked.0.fetch_add(bytes as u64, Ordering::Relaxed);
            return true;
        }
        let _ = (off, len);
        false
    }

    /// Gives the pages under `off..off + len` back to the kernel now, in a file too large for
    /// memory whose walked bytes this mapping could not lock ([`Region::keep_resident`]:
    /// refused, or over the allowance; Linux only, MADV_PAGEOUT on the pages it touches): a
    /// search is done with a vector it ranked exactly and will most likely not read it again,
    /// so its page should not push the pages every search walks out of a page cache too small
    /// for both. Where they are locked the call would only cost a system call. Elsewhere, and
    /// for a file that fits, nothing. A hint: contents never change, and a later read of the
    /// range reads the file again.
    #[inline]
    pub fn release(&self, off: u64, len: u64) {
        #[cfg(target_os = "linux")]
        if self.locked.0.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            self.advise_pages(off, len, rustix::mm::Advice::LinuxPageOut);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (off, len);
    }

    /// The whole pages under `off..off + len` (clamped to the region), as an address and a
    /// length, in a file too large for memory only (`None` for one that fits, or nothing to
    /// cover). They lie inside the mapping: it starts on a page boundary and the kernel maps
    /// whole pages, so rounding out to pages stays inside it.
    #[cfg(target_os = "linux")]
    #[inline]
    fn pages_of(&self, off: u64, len: u64) -> Option<(*mut std::ffi::c_void, usize)> {
        if self.huge_pages {
            return None;
        }
        let (Ok(off), Ok(len)) = (usize::try_from(off), usize::try_from(len)) else {
            return None;
        };
        let page = rustix::param::page_size();
        let end = off.saturating_add(len).min(self.len);
        if end <= off {
            return None;
        }
        let start = (self.ptr as usize + off) / page * page;
        let stop = (self.ptr as usize + end).div_ceil(page) * page;
        Some((start as *mut std::ffi::c_void, stop - start))
    }

    /// `advice` on the pages `off..off + len` touches, for a file too large for memory only.
    #[cfg(target_os = "linux")]
    #[inline]
    fn advise_pages(&self, off: u64, len: u64, advice: rustix::mm::Advice) {
        if let Some((addr, bytes)) = self.pages_of(off, len) {
            // Neither advice changes contents: WILLNEED reads ahead, and PAGEOUT is
            // non-destructive (file mappings here are shared, so a page it reclaims is written
            // back first if dirty and read from the file again by the next access).
            // SAFETY: `addr..addr + bytes` lies inside this live mapping (`pages_of`), and the
            // advice changes no contents (above).
            let _ = unsafe { rustix::mm::madvise(addr, bytes, advice) };
        }
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    #[inline]
    fn check(&self, off: u64, n: u64, align: u64) -> Result<usize> {
        match off.checked_add(n) {
            Some(end) if end <= self.len as u64 && off.is_multiple_of(align) => Ok(off as usize),
            _ => Err(out_of_range(off, n, self.len)),
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let o = self.check(off, buf.len() as u64, 1)?;
        // SAFETY: `check` keeps o..o+len inside the mapping; `buf` is a distinct local buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(o), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies bytes into the region (the writer only).
    pub fn write(&self, off: u64, buf: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(Error::ReadOnly {
                reason: "write through a read-only mapping",
            });
        }
        let o = self.check(off, buf.len() as u64, 1)?;
        // SAFETY: in bounds per `check`, the mapping is writable, and `buf` cannot overlap it
        // (it is the caller's own memory, never a slice of a mapping).
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.add(o), buf.len()) };
        Ok(())
    }

    /// The aligned u32 at `off`, as an atomic.
    #[inline]
    pub fn u32_at(&self, off: u64) -> Result<&AtomicU32> {
        let o = self.check(off, 4, 4)?;
        // SAFETY: in bounds and 4-aligned (the mapping base is page-aligned); AtomicU32 has
        // the layout of u32 and the memory lives as long as `self`.
        Ok(unsafe { AtomicU32::from_ptr(self.ptr.add(o).cast::<u32>()) })
    }

    /// The aligned u64 at `off`, as an atomic.
    #[inline]
    pub fn u64_at(&self, off: u64) -> Result<&AtomicU64> {
        let o = self.check(off, 8, 8)?;
        // SAFETY: in bounds and 8-aligned; AtomicU64 has the layout of u64.
        Ok(unsafe { AtomicU64::from_ptr(self.ptr.add(o).cast::<u64>()) })
    }

    /// `n` aligned u32 words at `off`, as atomics (neighbor lists, and the vectors of slots a
    /// writer may be writing while a reader reads them).
    #[inline]
    pub fn u32_words(&self, off: u64, n: usize) -> Result<&[AtomicU32]> {
        let o = self.check(off, 4 * n as u64, 4)?;
        // SAFETY: in bounds and 4-aligned; a slice of AtomicU32 may alias memory others
        // access atomically, which is all anyone does with graph words.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(o).cast::<AtomicU32>(), n) })
    }

    /// `n` u16 values at `off` (vectors split in halves), under the contract of [`Region::f32s`].
    #[inline]
    pub fn u16s(&self, off: u64, n: usize) -> Result<&[u16]> {
        let o = self.check(off, 2 * n as u64, 2)?;
        // SAFETY: in bounds and 2-aligned; every bit pattern is a valid u16; as for `f32s`, no
        // write to this range happens while the returned slice is alive.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(o).cast::<u16>(), n) })
    }

    /// `n` bytes at `off` (metadata documents), under the contract of [`Region::f32s`]:
    /// committed entries never change, and the writer's own are written only by `&mut` code.
    #[inline]
    pub fn bytes(&self, off: u64, n: usize) -> Result<&[u8]> {
        let o = self.check(off, n as u64, 1)?;
        // SAFETY: in bounds; every bit pattern is a valid u8; per the contract above no write
        // to this range happens while the returned slice is alive.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(o), n) })
    }

    /// `n` f32 values at `off` (vectors).
    ///
    /// Callers use this only for ranges nothing writes while the slice lives: committed
    /// vectors, which never change, or the writer's own slots, which only `&mut` code writes.
    /// A reader never borrows a slot at or past the committed count N this way (a writer that
    /// restarted may be rewriting it): it copies such a vector out through
    /// [`Region::u32_words`] with atomic loads (`reader::View::hint_vector`).
    #[inline]
    pub fn f32s(&self, off: u64, n: usize) -> Result<&[f32]> {
        let o = self.check(off, 4 * n as u64, 4)?;
        // SAFETY: in bounds and 4-aligned; every bit pattern is a valid f32; per the contract
        // above (committed slots or the writer's own, hint slots copied atomically instead) no
        // write to this range happens while the returned slice is alive.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(o).cast::<f32>(), n) })
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

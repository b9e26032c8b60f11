//! The real file backend: pread/pwrite, memmap2 shared mappings, flock, fallocate, fsync.
//! Platform differences live here and nowhere else.

use std::fs::{File, OpenOptions};
use std::io;
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
    /// The file opened again for direct reads, on the first read-only mapping of a file
    /// larger than memory (os/direct.rs); `None` inside where that was refused.
    #[cfg(target_os = "linux")]
    direct: std::sync::OnceLock<Option<Arc<super::direct::DirectFile>>>,
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

    /// Claims the temporary file a replacement writes before renaming it over its
    /// destination (`<name>.compacting`, `.migrating`, a backup's): opens it, creating it if
    /// missing, takes its lock ([`Error::Locked`] while another process writes it), checks
    /// the path still names the file locked, and empties it (a leftover of a run that
    /// stopped). Never unlinks a file another process may be writing.
    pub fn claim_temp(path: &Path) -> Result<FileStorage> {
        for _ in 0..100 {
            let f = FileStorage::create(path)?;
            f.try_lock_exclusive()?;
            if f.still_at_path()? {
                f.file.set_len(0)?;
                return Ok(f);
            }
        }
        Err(Error::Io(io::Error::other(format!(
            "{} keeps being replaced while claiming it",
            path.display()
        ))))
    }

    fn wrap(file: File, path: &Path, writable: bool) -> FileStorage {
        FileStorage {
            file: Arc::new(file),
            path: path.to_path_buf(),
            writable,
            locked: AtomicBool::new(false),
            #[cfg(target_os = "linux")]
            direct: std::sync::OnceLock::new(),
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
            platform::write_all_at(&self.file, &zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Whether the path still names the file this handle has open (after taking the lock, a
    /// writer checks this: locks follow the inode, not the path; decision 8). Platforms
    /// without file identities (Windows) always say yes.
    pub fn still_at_path(&self) -> Result<bool> {
        let mine = self.identity()?;
        let now = path_identity(&self.path)?;
        Ok(match (mine, now) {
            (Some(a), Some(b)) => a.dev == b.dev && a.ino == b.ino,
            (None, _) => true,
            (Some(_), None) => false,
        })
    }

    /// Bytes actually allocated on disk (st_blocks · 512; the length on Windows).
    pub fn allocated_bytes(&self) -> Result<u64> {
        platform::allocated_bytes(&self.file)
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
        platform::read_exact_at(&self.file, buf, offset).map_err(|e| {
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
        Ok(platform::write_all_at(&self.file, buf, offset)?)
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
        #[cfg(target_os = "linux")]
        if len_usize >= huge::PAGE {
            let fits = super::budget::fits_in_memory(file_len);
            let map = huge::map(&self.file, offset, len_usize, writable, fits)?;
            let ptr = map.ptr;
            // SAFETY: `map` owns a live mapping of exactly `len_usize` bytes at a page-aligned
            // address, writable only if `writable`, and unmaps it only when dropped; the
            // Region keeps it alive.
            let mut region = unsafe { Region::new(ptr, len_usize, writable, Arc::new(map)) };
            region.set_huge_pages(fits);
            if !fits && !writable {
                let direct = self
                    .direct
                    .get_or_init(|| super::direct::DirectFile::open(&self.file).map(Arc::new));
                if let Some(direct) = direct {
                    region.set_direct(direct.clone(), offset);
                }
            }
            return Ok(region);
        }
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

    fn will_need(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        if let Some(len) = std::num::NonZeroU64::new(len) {
            // A hint: an error (an odd file system) only means the reads are not overlapped.
            let _ =
                rustix::fs::fadvise(&*self.file, offset, Some(len), rustix::fs::Advice::WillNeed);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
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
        platform::sync_dir(&self.path)
    }

    fn identity(&self) -> Result<Option<super::FileIdentity>> {
        platform::identity(&self.file)
    }

    fn try_lock_exclusive(&self) -> Result<()> {
        platform::lock_exclusive(&self.file)?;
        self.locked.store(true, Ordering::Relaxed);
        Ok(())
    }
}

pub(super) fn path_identity(path: &Path) -> Result<Option<super::FileIdentity>> {
    platform::path_identity(path)
}

pub(super) fn free_space(dir: &Path) -> Result<u64> {
    platform::free_space(dir)
}

pub(super) fn rename(from: &Path, to: &Path) -> Result<()> {
    platform::rename(from, to)
}

pub(super) fn sync_dir(path: &Path) -> Result<()> {
    platform::sync_dir(path)
}

pub(super) fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
    platform::rename_noreplace(from, to)
}

/// The error of a rename that would have replaced a file.
fn already_there(to: &Path) -> Error {
    Error::Io(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} appeared meanwhile; nothing was replaced (a file at the path is never \
             overwritten unless its writer lock was taken first)",
            to.display()
        ),
    ))
}

/// Unix (Linux, where Chassis is built and tested; macOS and the BSDs, type-checked only).
/// Mappings that the kernel may back with 2 MiB pages. A search touches vectors all over a
/// segment, so with 4 KiB pages nearly every vector costs a TLB miss; a file page can be mapped
/// huge only where the address and the file offset agree modulo 2 MiB, so large mappings are
/// placed that way inside a reserved range. Read-only ones are advised MADV_HUGEPAGE whole; the
/// writer advises only ranges it never writes through the mapping ([`Region::advise_huge`]), so
/// a flush writes back only the blocks that changed. Whether the kernel maps huge pages depends
/// on the file system (large folios: ext4 and XFS on recent kernels) and on how the pages came
/// into the cache; either way the mapping reads the same bytes.
#[cfg(target_os = "linux")]
mod huge {
    use std::ffi::c_void;
    use std::fs::File;
    use std::io;

    use rustix::mm::{madvise, mmap, mmap_anonymous, munmap, Advice, MapFlags, ProtFlags};

    /// A huge page's size (x86-64 and aarch64 with 4 KiB base pages).
    pub const PAGE: usize = 2 << 20;

    /// A mapping this module made; unmapped on drop.
    pub struct Map {
        pub ptr: *mut u8,
        len: usize,
    }

    // SAFETY: `Map` only owns the mapping (it is read through `Region`, never through `Map`);
    // unmapping from another thread is sound.
    unsafe impl Send for Map {}
    // SAFETY: as above: `Map` has no methods that read or write through the pointer.
    unsafe impl Sync for Map {}

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: `ptr..ptr + len` is exactly the mapping `map` made, and no
            // Region refers to it any more (each Region holds an Arc of this Map).
            let _ = unsafe { munmap(self.ptr.cast::<c_void>(), self.len) };
        }
    }

    /// Maps `len` bytes of `file` at `offset` (both multiples of the base page size), shared,
    /// at an address congruent to `offset` modulo [`PAGE`]. Read-only ones are advised huge
    /// when the file `fits` in memory; any mapping of a file that doesn't is advised random
    /// (os/budget.rs says why).
    pub fn map(
        file: &File,
        offset: u64,
        len: usize,
        writable: bool,
        fits: bool,
    ) -> io::Result<Map> {
        let reserve = len
            .checked_add(PAGE)
            .ok_or_else(|| io::Error::other("mapping too large"))?;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel picks; it
        // overlaps nothing of ours.
        let base = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }? as usize;
        let want = (offset % PAGE as u64) as usize;
        let mut addr = base - base % PAGE + want;
        if addr < base {
            addr += PAGE;
        }
        // Now base <= addr < base + PAGE, so addr + len <= base + reserve.
        // SAFETY: MAP_FIXED replaces only pages of the reservation made above, which nothing
        // else uses.
        let mapped = unsafe {
            mmap(
                addr as *mut c_void,
                len,
                if writable {
                    ProtFlags::READ | ProtFlags::WRITE
                } else {
                    ProtFlags::READ
                },
                MapFlags::SHARED | MapFlags::FIXED,
                file,
                offset,
            )
        };
        let end = addr + len;
        // SAFETY: the reservation's head and tail outside `addr..end` are ours and unused.
        unsafe {
            if addr > base {
                let _ = munmap(base as *mut c_void, addr - base);
            }
            if base + reserve > end {
                let _ = munmap(end as *mut c_void, base + reserve - end);
            }
        }
        if let Err(e) = mapped {
            // SAFETY: `addr..end` is still the unused middle of our reservation.
            let _ = unsafe { munmap(addr as *mut c_void, len) };
            return Err(e.into());
        }
        // Hints: where the kernel has no huge pages for files, the mapping works as it is.
        let advice = if !fits {
            Some(Advice::Random)
        } else if !writable {
            Some(Advice::LinuxHugepage)
        } else {
            None
        };
        if let Some(advice) = advice {
            // SAFETY: advising a range we mapped changes no contents.
            let _ = unsafe { madvise(addr as *mut c_void, len, advice) };
        }
        Ok(Map {
            ptr: addr as *mut u8,
            len,
        })
    }
}

#[cfg(unix)]
mod platform {
    use std::fs::File;
    use std::io;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use crate::error::{Error, Result};
    use crate::os::FileIdentity;

    pub fn read_exact_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
        f.read_exact_at(buf, off)
    }

    pub fn write_all_at(f: &File, buf: &[u8], off: u64) -> io::Result<()> {
        f.write_all_at(buf, off)
    }

    pub fn allocated_bytes(f: &File) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(f.metadata()?.blocks() * 512)
    }

    fn dir_of(path: &Path) -> &Path {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    }

    pub fn sync_dir(path: &Path) -> Result<()> {
        Ok(File::open(dir_of(path))?.sync_all()?)
    }

    pub fn rename(from: &Path, to: &Path) -> Result<()> {
        Ok(std::fs::rename(from, to)?)
    }

    /// Renames `from` to `to` only if nothing is at `to` (atomically: RENAME_NOREPLACE on
    /// Linux; elsewhere, or where the file system lacks it, a hard link that fails if `to`
    /// exists, then the old name removed).
    pub fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{renameat_with, RenameFlags, CWD};
            use rustix::io::Errno;
            match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
                Ok(()) => return Ok(()),
                Err(Errno::EXIST) => return Err(super::already_there(to)),
                Err(Errno::INVAL | Errno::NOSYS) => {}
                Err(e) => return Err(Error::Io(e.into())),
            }
        }
        match std::fs::hard_link(from, to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(super::already_there(to))
            }
            Err(e) => return Err(e.into()),
        }
        Ok(std::fs::remove_file(from)?)
    }

    // The stat field types differ across platforms: the casts are not no-ops everywhere.
    #[allow(clippy::unnecessary_cast)]
    fn identity_of(st: &rustix::fs::Stat) -> FileIdentity {
        FileIdentity {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            nlink: st.st_nlink as u64,
        }
    }

    pub fn identity(f: &File) -> Result<Option<FileIdentity>> {
        let st = rustix::fs::fstat(f).map_err(io::Error::from)?;
        Ok(Some(identity_of(&st)))
    }

    pub fn path_identity(path: &Path) -> Result<Option<FileIdentity>> {
        match rustix::fs::stat(path) {
            Ok(st) => Ok(Some(identity_of(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::Io(e.into())),
        }
    }

    pub fn free_space(dir: &Path) -> Result<u64> {
        let st = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }

    pub fn lock_exclusive(f: &File) -> Result<()> {
        use rustix::fs::{flock, FlockOperation};
        match flock(f, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Error::Locked),
            Err(e) => Err(Error::Io(e.into())),
        }
    }
}

/// Windows: written to the ADR's plan and type-checked only, never run (untested).
/// LockFileEx on the byte at 2^62 (decision 5), positional I/O with seek_read/seek_write,
/// MoveFileExW with write-through for replacement; NTFS keeps directory entries durable
/// itself, so syncing a directory is a no-op. Inode re-checks and free-space checks are
/// skipped (`identity` is `None`, free space unknown).
#[cfg(windows)]
mod platform {
    use std::fs::File;
    use std::io;
    use std::os::windows::fs::FileExt;
    use std::os::windows::io::AsRawHandle;
    use std::path::Path;

    use windows_sys::Win32::Foundation::{ERROR_LOCK_VIOLATION, HANDLE};
    use windows_sys::Win32::Storage::FileSystem::{
        LockFileEx, MoveFileExW, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
        MOVEFILE_REPLACE_EXISTING, MOVEFILE_WRITE_THROUGH,
    };
    use windows_sys::Win32::System::IO::OVERLAPPED;

    use crate::error::{Error, Result};
    use crate::os::FileIdentity;

    pub fn read_exact_at(f: &File, mut buf: &mut [u8], mut off: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match f.seek_read(buf, off)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    off += n as u64;
                }
            }
        }
        Ok(())
    }

    pub fn write_all_at(f: &File, mut buf: &[u8], mut off: u64) -> io::Result<()> {
        while !buf.is_empty() {
            let n = f.seek_write(buf, off)?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
            off += n as u64;
        }
        Ok(())
    }

    pub fn allocated_bytes(f: &File) -> Result<u64> {
        Ok(f.metadata()?.len())
    }

    pub fn sync_dir(_path: &Path) -> Result<()> {
        Ok(())
    }

    fn wide(p: &Path) -> Vec<u16> {
        use std::os::windows::ffi::OsStrExt;
        p.as_os_str().encode_wide().chain(Some(0)).collect()
    }

    pub fn rename(from: &Path, to: &Path) -> Result<()> {
        let (f, t) = (wide(from), wide(to));
        // SAFETY: both are NUL-terminated UTF-16 strings that outlive the call.
        let ok = unsafe {
            MoveFileExW(
                f.as_ptr(),
                t.as_ptr(),
                MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH,
            )
        };
        if ok == 0 {
            return Err(Error::Io(io::Error::last_os_error()));
        }
        Ok(())
    }

    pub fn rename_noreplace(from: &Path, to: &Path) -> Result<()> {
        let (f, t) = (wide(from), wide(to));
        // SAFETY: both are NUL-terminated UTF-16 strings that outlive the call.
        let ok = unsafe { MoveFileExW(f.as_ptr(), t.as_ptr(), MOVEFILE_WRITE_THROUGH) };
        if ok == 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::AlreadyExists {
                return Err(super::already_there(to));
            }
            return Err(Error::Io(e));
        }
        Ok(())
    }

    pub fn identity(_f: &File) -> Result<Option<FileIdentity>> {
        Ok(None)
    }

    pub fn path_identity(_path: &Path) -> Result<Option<FileIdentity>> {
        Ok(None)
    }

    pub fn free_space(_dir: &Path) -> Result<u64> {
        Ok(u64::MAX)
    }

    pub fn lock_exclusive(f: &File) -> Result<()> {
        // SAFETY: OVERLAPPED is plain data; all-zero is a valid value before the offsets are set.
        let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
        // Lock the single byte at 2^62 (decision 5): far past any data, so it never blocks I/O.
        ov.Anonymous.Anonymous.Offset = 0;
        ov.Anonymous.Anonymous.OffsetHigh = 1 << 30;
        // SAFETY: the handle is open for the life of `f`; `ov` is valid for the call.
        let ok = unsafe {
            LockFileEx(
                f.as_raw_handle() as HANDLE,
                LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY,
                0,
                1,
                0,
                &mut ov,
            )
        };
        if ok != 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
            Err(Error::Locked)
        } else {
            Err(Error::Io(e))
        }
    }
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

    /// Fails if large mappings lose their placement (address congruent to the file offset
    /// modulo 2 MiB, the condition for the kernel to map a file page huge) or their contents.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_maps_are_placed_for_huge_pages() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileStorage::create(&dir.path().join("a")).unwrap();
        f.grow(16 << 20).unwrap();
        for writable in [false, true] {
            for offset in [0u64, 65_536, (2 << 20) + 5 * 65_536] {
                f.write_at(offset, b"first").unwrap();
                let r = f.map(offset, 8 << 20, writable).unwrap();
                assert_eq!(
                    r.as_ptr() as u64 % huge::PAGE as u64,
                    offset % huge::PAGE as u64
                );
                r.advise_huge(0, 8 << 20);
                let mut b = [0u8; 5];
                r.read(0, &mut b).unwrap();
                assert_eq!(&b, b"first");
                assert_eq!(r.write((4 << 20) + 3, b"later").is_ok(), writable);
                if writable {
                    f.read_at(offset + (4 << 20) + 3, &mut b).unwrap();
                    assert_eq!(&b, b"later", "a write through the mapping reaches the file");
                }
            }
        }
    }

    /// Fails if a mapping of a file too large for memory doesn't lock what it is asked to keep
    /// resident (where the kernel allows it), keeps it locked or counted once unmapped, or
    /// gives pages back to the kernel differently from its lock: or if either changes what
    /// reads see.
    #[cfg(target_os = "linux")]
    #[test]
    fn resident_ranges_stay_locked_while_mapped() {
        use crate::os::budget;
        let _one = budget::LOCK_TESTS.lock();
        let dir = tempfile::tempdir().unwrap();
        let f = FileStorage::create(&dir.path().join("a")).unwrap();
        f.grow(8 << 20).unwrap();
        f.write_at(5000, b"kept").unwrap();
        f.write_at(3 << 20, b"freed").unwrap();
        let may = budget::may_lock(1 << 20);
        let before = (budget::vm_locked(), budget::locks().held());
        let mut r = f.map(0, 4 << 20, false).unwrap();
        // As for a file larger than half the memory budget (os/budget.rs).
        r.set_huge_pages(false);
        let mut b = [0u8; 5];
        r.release(3 << 20, 5);
        r.read(3 << 20, &mut b).unwrap();
        assert_eq!(&b, b"freed", "a page given back reads the file again");
        assert_eq!(r.keep_resident(4096, 65_536), may);
        let want = if may { 65_536 } else { 0 };
        assert_eq!(budget::vm_locked() - before.0, want);
        assert_eq!(budget::locks().held() - before.1, want);
        r.release(3 << 20, 5);
        r.read(3 << 20, &mut b).unwrap();
        assert_eq!(&b, b"freed");
        r.read(5000, &mut b[..4]).unwrap();
        assert_eq!(&b[..4], b"kept");
        let clone = r.clone();
        drop(r);
        assert_eq!(
            budget::locks().held() - before.1,
            want,
            "a clone keeps the lock"
        );
        drop(clone);
        assert_eq!((budget::vm_locked(), budget::locks().held()), before);
        // A file that fits locks nothing: its pages are read once and stay.
        let fits = f.map(0, 4 << 20, false).unwrap();
        assert!(!fits.keep_resident(4096, 65_536));
        assert_eq!(budget::locks().held(), before.1);
        // A limit of 0 turns locking off; the default comes back with None.
        let mut r = f.map(0, 4 << 20, false).unwrap();
        r.set_huge_pages(false);
        budget::set_resident_limit(Some(0));
        assert!(!r.keep_resident(4096, 65_536));
        assert_eq!(budget::resident_bytes(), before.1);
        budget::set_resident_limit(None);
        assert_eq!(r.keep_resident(4096, 65_536), may);
        assert_eq!(budget::resident_bytes() - before.1, want);
        assert_eq!(budget::lock_most(), budget::budget() / 4 * 3);
    }
}

//! Reads that bypass the page cache, many at once: the vectors a search ranks exactly in a file
//! larger than memory (Linux only: O_DIRECT reads submitted together through io_uring).
//!
//! Why: under a memory cap a search reads each vector it ranks from disk. Through the mapping
//! each read is a fault or an madvise of its own: a system call, a page-cache page the cgroup
//! must reclaim another for, a block request and a doorbell write to the virtual disk, then a
//! fault to map the page (measured: about 10 us of CPU a read on the benchmark machine, more
//! under the cap). Read directly, a query's batch is one system call and one submission, and
//! no page-cache page is taken, so the vectors never crowd the codes and neighbor lists every
//! search walks (docs/ARCHITECTURE.md, "Larger than memory").
//!
//! Invariants: no read is ever left in flight when [`DirectFile::read_many`] returns (a
//! buffer the kernel may still write into is leaked, never freed or reused); a read that
//! fails, comes back short, or can't be issued makes `read_many` return `false` and nothing
//! else: the caller reads through the mapping instead, so this path can only be faster, never
//! different. The bytes read are the file's: O_DIRECT reads write back any dirty page-cache
//! pages of the range first, and committed vectors never change.

use std::cell::RefCell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, types, IoUring};

/// Offsets, lengths and buffer addresses of direct reads are multiples of this (the largest
/// logical block size in common use; any smaller one divides it).
const ALIGN: usize = 4096;

/// Reads in flight at once (the ring's submission queue).
const RING_ENTRIES: u32 = 64;

/// The same file as an index's [`super::FileStorage`], opened again for direct reads.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    /// Set when a read was refused for good (the file system or device doesn't take direct
    /// reads of this alignment): no more are tried.
    refused: AtomicBool,
}

impl DirectFile {
    /// Opens `file` again with O_DIRECT (through /proc/self/fd, so a file renamed over its
    /// path since is never the one opened), or `None` where that is refused (no /proc, a file
    /// system without direct I/O) or the file opened is not the same one.
    pub fn open(file: &File) -> Option<DirectFile> {
        use rustix::fs::{fstat, Mode, OFlags};
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let direct = rustix::fs::open(
            path.as_str(),
            OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let (a, b) = (fstat(file).ok()?, fstat(&direct).ok()?);
        (a.st_dev == b.st_dev && a.st_ino == b.st_ino).then(|| DirectFile {
            file: File::from(direct),
            refused: AtomicBool::new(false),
        })
    }

    /// Reads each `(offset, len)` of `reads` from the file, all submitted together, and hands
    /// `each(i, bytes)` the bytes of the `i`-th, in order, once every read has completed.
    /// Returns `false`, having called `each` for none of them, where the reads could not all
    /// be made (no io_uring on this kernel or in this sandbox, a refused or failed or short
    /// read): the caller reads through its mapping instead.
    pub fn read_many(&self, reads: &[(u64, usize)], mut each: impl FnMut(usize, &[u8])) -> bool {
        if reads.is_empty() || self.refused.load(Ordering::Relaxed) {
            return reads.is_empty();
        }
        // Aligned reads covering each range, laid end to end in the buffer: (aligned file
        // offset, length read, where in the buffer, bytes that must come back).
        let mut plan = Vec::with_capacity(reads.len());
        let mut total = 0usize;
        for &(off, len) in reads {
            let Ok(off) = usize::try_from(off) else {
                return false;
            };
            let start = off / ALIGN * ALIGN;
            let Some(end) = off.checked_add(len).map(|e| e.div_ceil(ALIGN) * ALIGN) else {
                return false;
            };
            let Ok(read_len) = u32::try_from(end - start) else {
                return false;
            };
            plan.push((start as u64, read_len, total, off - start + len));
            total += end - start;
        }
        RING.with(|ring| {
            let mut ring = ring.borrow_mut();
            if matches!(*ring, Ring::Untried) {
                *ring = match IoUring::new(RING_ENTRIES) {
                    Ok(uring) => Ring::Ready(Box::new(uring), Vec::new()),
                    Err(_) => Ring::Off,
                };
            }
            let Ring::Ready(uring, buf) = &mut *ring else {
                return false;
            };
            // Grown only here, when nothing is in flight.
            if buf.len() < total + ALIGN {
                buf.resize(total + ALIGN, 0);
            }
            let base = buf.as_ptr().align_offset(ALIGN);
            for round in plan.chunks(RING_ENTRIES as usize) {
                match self.read_round(uring, &mut buf[base..], round) {
                    Round::Done => {}
                    Round::Failed => return false,
                    Round::Refused => {
                        self.refused.store(true, Ordering::Relaxed);
                        return false;
                    }
                    Round::Broken => {
                        // A read may still be in flight into the buffer: leak it and the ring.
                        if let Ring::Ready(uring, buf) = std::mem::replace(&mut *ring, Ring::Off) {
                            std::mem::forget(uring);
                            std::mem::forget(buf);
                        }
                        return false;
                    }
                }
            }
            for (i, (&(off, len), &(start, _, at, _))) in reads.iter().zip(&plan).enumerate() {
                let from = base + at + (off - start) as usize;
                each(i, &buf[from..from + len]);
            }
            true
        })
    }

    /// Issues the reads of one `round` of the plan (at most [`RING_ENTRIES`]) into `buf`
    /// (aligned to [`ALIGN`], long enough for every read of the plan) and waits for all of
    /// them.
    fn read_round(
        &self,
        uring: &mut IoUring,
        buf: &mut [u8],
        round: &[(u64, u32, usize, usize)],
    ) -> Round {
        let fd = types::Fd(self.file.as_raw_fd());
        for (i, &(start, read_len, at, _)) in round.iter().enumerate() {
            let into = buf[at..at + read_len as usize].as_mut_ptr();
            let entry = opcode::Read::new(fd, into, read_len)
                .offset(start)
                .build()
                .user_data(i as u64);
            // `buf` is neither moved nor freed until every read of this round has completed
            // (waited for below, or leaked with a broken ring).
            // SAFETY: `into..into + read_len` lies inside `buf` (sliced above), alive until the
            // read completes (above); `fd` is open as long as `self`, which outlives this call.
            if unsafe { uring.submission().push(&entry) }.is_err() {
                // Never: the queue holds RING_ENTRIES, a round is at most that, and every
                // earlier round was drained. What was pushed was not submitted yet.
                return Round::Broken;
            }
        }
        let mut results = vec![None; round.len()];
        let mut reaped = 0;
        while reaped < round.len() {
            match uring.submit_and_wait(round.len() - reaped) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Round::Broken,
            }
            for entry in uring.completion() {
                if let Some(slot) = results.get_mut(entry.user_data() as usize) {
                    *slot = Some(entry.result());
                    reaped += 1;
                }
            }
        }
        let mut outcome = Round::Done;
        for (result, &(_, _, _, needed)) in results.iter().zip(round) {
            match *result {
                Some(n) if n >= 0 && n as usize >= needed => {}
                Some(n) if n == -einval() => outcome = Round::Refused,
                _ if matches!(outcome, Round::Done) => outcome = Round::Failed,
                _ => {}
            }
        }
        outcome
    }
}

/// EINVAL: a direct read this file system or device won't take (alignment).
fn einval() -> i32 {
    rustix::io::Errno::INVAL.raw_os_error()
}

/// How one round of reads ended.
enum Round {
    /// All read in full.
    Done,
    /// A read failed or came back short: this batch goes through the mapping.
    Failed,
    /// A read was refused as misaligned: every later batch goes through the mapping too.
    Refused,
    /// The ring can no longer be trusted to have finished its reads.
    Broken,
}

/// A thread's ring and the buffer its reads land in.
enum Ring {
    Untried,
    Ready(Box<IoUring>, Vec<u8>),
    /// io_uring is unavailable (an old kernel, a sandbox that forbids it) or broke.
    Off,
}

thread_local! {
    static RING: RefCell<Ring> = const { RefCell::new(Ring::Untried) };
}

/// Whether this kernel (and sandbox) lets a process set up an io_uring (for tests).
#[cfg(test)]
pub(crate) fn io_uring_works() -> bool {
    IoUring::new(4).is_ok()
}

/// Whether the file system under `path` takes O_DIRECT opens (for tests).
#[cfg(test)]
pub(crate) fn direct_io_works(path: &std::path::Path) -> bool {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECT, Mode::empty()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Fails if a batch of direct reads hands back other bytes than the file holds at any
    /// offset, length or alignment (ranges straddling 4 KiB pages, at the file's end, longer
    /// than a page, more than one ring's worth), or reports success without reading.
    #[test]
    fn reads_many_ranges_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        let f = File::open(&path).unwrap();
        let Some(direct) = DirectFile::open(&f) else {
            // A file system without O_DIRECT (tmpfs before Linux 6.6): the caller's fallback
            // is the mapping, and nothing else here can be read directly.
            assert!(
                !direct_io_works(&path),
                "O_DIRECT works here but was refused"
            );
            return;
        };
        let mut reads = vec![(0u64, 10usize), (4090, 12), (8192, 4096), (299_990, 10)];
        let mut x = 12345u64;
        for _ in 0..150 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = 1 + (x >> 40) as usize % 9000;
            let off = (x >> 8) as usize % (data.len() - len);
            reads.push((off as u64, len));
        }
        let mut seen = 0;
        let ok = direct.read_many(&reads, |i, bytes| {
            let (off, len) = reads[i];
            assert_eq!(bytes, &data[off as usize..off as usize + len], "read {i}");
            assert_eq!(i, seen);
            seen += 1;
        });
        if io_uring_works() {
            assert!(ok, "io_uring works here, so the reads must have been made");
            assert_eq!(seen, reads.len());
        } else {
            // A sandbox without io_uring: refused, and nothing handed out.
            assert!(!ok && seen == 0);
        }
        // Past the file's end: refused as a whole, nothing handed out.
        let mut handed = 0;
        assert!(!direct.read_many(&[(0, 10), (299_995, 10)], |_, _| handed += 1));
        assert_eq!(handed, 0);
    }
}

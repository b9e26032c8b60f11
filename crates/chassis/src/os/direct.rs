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
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{opcode, types, IoUring};

/// Offsets, lengths and buffer addresses of direct reads are multiples of this (the largest
/// logical block size in common use; any smaller one divides it).
const ALIGN: usize = 4096;

/// The most reads one batch holds (the ring's submission queue): a larger batch is refused
/// and read through the mapping.
pub const MOST_READS: usize = 128;

/// The same file as an index's [`super::FileStorage`], opened again for direct reads.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    /// Set when a read was refused for good (the file system or device doesn't take direct
    /// reads of this alignment): no more are tried.
    refused: AtomicBool,
}

/// One read of a batch: where it reads (aligned), where its bytes land in the buffer, and
/// where the caller's range lies within them.
#[derive(Clone, Copy)]
struct Planned {
    start: u64,
    read_len: u32,
    at: usize,
    skip: usize,
    len: usize,
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

    /// Starts reading each `(offset, len)` of `reads` from the file, all in one submission,
    /// without waiting: [`Pending::finish`] waits and hands the bytes out. `None` where the
    /// reads can't be started (no io_uring on this kernel or in this sandbox, more than
    /// [`MOST_READS`], direct reads refused earlier, another batch of this thread still
    /// pending): the caller reads through its mapping instead.
    pub fn start_many(&self, reads: &[(u64, usize)]) -> Option<Pending<'_>> {
        if reads.is_empty() || reads.len() > MOST_READS || self.refused.load(Ordering::Relaxed) {
            return None;
        }
        // Aligned reads covering each range, laid end to end in the buffer.
        let mut plan = Vec::with_capacity(reads.len());
        let mut total = 0usize;
        for &(off, len) in reads {
            let off = usize::try_from(off).ok()?;
            let start = off / ALIGN * ALIGN;
            let end = off.checked_add(len)?.div_ceil(ALIGN) * ALIGN;
            plan.push(Planned {
                start: start as u64,
                read_len: u32::try_from(end - start).ok()?,
                at: total,
                skip: off - start,
                len,
            });
            total += end - start;
        }
        let (mut uring, mut buf) = take_ring()?;
        // Grown only here, when nothing is in flight.
        if buf.len() < total + ALIGN {
            buf.resize(total + ALIGN, 0);
        }
        let base = buf.as_ptr().align_offset(ALIGN);
        let fd = types::Fd(self.file.as_raw_fd());
        for (i, p) in plan.iter().enumerate() {
            let into = buf[base + p.at..base + p.at + p.read_len as usize].as_mut_ptr();
            let entry = opcode::Read::new(fd, into, p.read_len)
                .offset(p.start)
                .build()
                .user_data(i as u64);
            // `buf` is neither moved nor freed until every read of this batch has completed
            // (`Pending` waits for them before it gives the buffer back, or leaks it).
            // SAFETY: `into..into + read_len` lies inside `buf` (sliced above), alive until the
            // read completes (above); `fd` is open as long as `self`, which `Pending` borrows.
            if unsafe { uring.submission().push(&entry) }.is_err() {
                // Never: the queue holds MOST_READS and is empty between batches. What was
                // pushed is not submitted yet, but may be by a later call: never reuse it.
                leak(uring, buf);
                return None;
            }
        }
        let mut pending = Pending {
            file: self,
            ring: Some((uring, buf)),
            plan,
            base,
            results: vec![None; reads.len()],
            reaped: 0,
            _one_thread: PhantomData,
        };
        loop {
            let (uring, _) = pending.ring.as_mut()?;
            match uring.submit() {
                Ok(_) if uring.submission().is_empty() => return Some(pending),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Some may be in flight, some not submitted: never reuse the ring.
                    pending.abandon();
                    return None;
                }
            }
        }
    }

    /// [`DirectFile::start_many`], then [`Pending::finish`]: `false` where either can't.
    #[cfg(test)]
    pub fn read_many(&self, reads: &[(u64, usize)], each: impl FnMut(usize, &[u8])) -> bool {
        self.start_many(reads).is_some_and(|p| p.finish(each))
    }
}

/// Reads started by [`DirectFile::start_many`]. Holds its thread's ring and buffer until every
/// read has completed: [`Pending::finish`] waits for them, and so does dropping it.
pub struct Pending<'a> {
    file: &'a DirectFile,
    ring: Option<(Box<IoUring>, Vec<u8>)>,
    plan: Vec<Planned>,
    /// Where the aligned part of the buffer starts.
    base: usize,
    results: Vec<Option<i32>>,
    reaped: usize,
    /// Given back to the thread that started it.
    _one_thread: PhantomData<*const ()>,
}

impl Pending<'_> {
    /// Waits for every read of the batch, then hands `each(i, bytes)` the bytes of the `i`-th
    /// range, in order. `false`, having called `each` for none, where any read failed, was
    /// refused or came back short: the caller reads through its mapping instead.
    pub fn finish(mut self, mut each: impl FnMut(usize, &[u8])) -> bool {
        if !self.wait() {
            self.abandon();
            return false;
        }
        let mut ok = true;
        for (result, p) in self.results.iter().zip(&self.plan) {
            match *result {
                Some(n) if n >= 0 && n as usize >= p.skip + p.len => {}
                Some(n) if n == -einval() => {
                    self.file.refused.store(true, Ordering::Relaxed);
                    ok = false;
                }
                _ => ok = false,
            }
        }
        if ok {
            if let Some((_, buf)) = &self.ring {
                for (i, p) in self.plan.iter().enumerate() {
                    let from = self.base + p.at + p.skip;
                    each(i, &buf[from..from + p.len]);
                }
            }
        }
        ok
    }

    /// Reaps completions until every read of the batch has one; `false` if the ring failed
    /// while some may still be in flight.
    fn wait(&mut self) -> bool {
        let Some((uring, _)) = self.ring.as_mut() else {
            return false;
        };
        while self.reaped < self.plan.len() {
            match uring.submit_and_wait(self.plan.len() - self.reaped) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
            for entry in uring.completion() {
                if let Some(slot) = self.results.get_mut(entry.user_data() as usize) {
                    if slot.is_none() {
                        *slot = Some(entry.result());
                        self.reaped += 1;
                    }
                }
            }
        }
        true
    }

    /// Gives up on the ring and buffer for good: reads may still land in the buffer, so it is
    /// leaked, never freed or reused; this thread reads through the mapping from now on.
    fn abandon(&mut self) {
        if let Some((uring, buf)) = self.ring.take() {
            leak(uring, buf);
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.ring.is_some() {
            if self.wait() {
                if let Some((uring, buf)) = self.ring.take() {
                    give_back(uring, buf);
                }
            } else {
                self.abandon();
            }
        }
    }
}

/// EINVAL: a direct read this file system or device won't take (alignment).
fn einval() -> i32 {
    rustix::io::Errno::INVAL.raw_os_error()
}

/// A thread's ring and the buffer its reads land in.
enum Ring {
    Untried,
    Idle(Box<IoUring>, Vec<u8>),
    /// Lent to a [`Pending`] batch.
    Busy,
    /// io_uring is unavailable (an old kernel, a sandbox that forbids it) or broke.
    Off,
}

thread_local! {
    static RING: RefCell<Ring> = const { RefCell::new(Ring::Untried) };
}

/// This thread's ring and buffer, made on first use; `None` if io_uring is unavailable or a
/// batch of this thread is still pending.
fn take_ring() -> Option<(Box<IoUring>, Vec<u8>)> {
    RING.with(|ring| {
        let mut ring = ring.borrow_mut();
        match std::mem::replace(&mut *ring, Ring::Busy) {
            Ring::Idle(uring, buf) => Some((uring, buf)),
            Ring::Untried => match IoUring::new(MOST_READS as u32) {
                Ok(uring) => Some((Box::new(uring), Vec::new())),
                Err(_) => {
                    *ring = Ring::Off;
                    None
                }
            },
            other => {
                *ring = other;
                None
            }
        }
    })
}

/// Returns a ring with nothing in flight to this thread.
fn give_back(uring: Box<IoUring>, buf: Vec<u8>) {
    RING.with(|ring| *ring.borrow_mut() = Ring::Idle(uring, buf));
}

/// Keeps a ring and buffer that reads may still land in from ever being freed or reused.
fn leak(uring: Box<IoUring>, buf: Vec<u8>) {
    std::mem::forget(uring);
    std::mem::forget(buf);
    RING.with(|ring| *ring.borrow_mut() = Ring::Off);
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
    /// than a page, a full batch), or reports success without reading.
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
        for _ in 0..120 {
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

    /// Fails if a batch left pending (the reads of one query while the next one walks) can be
    /// joined by a second on the same thread, if dropping one without finishing doesn't give
    /// the ring back, or if a finished batch hands out other bytes than the file holds.
    #[test]
    fn one_batch_pending_at_a_time_and_dropping_it_gives_the_ring_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        let Some(direct) = DirectFile::open(&f) else {
            assert!(
                !direct_io_works(&path),
                "O_DIRECT works here but was refused"
            );
            return;
        };
        if !io_uring_works() {
            assert!(direct.start_many(&[(0, 10)]).is_none());
            return;
        }
        let first = direct.start_many(&[(100, 1000), (5000, 3000)]).unwrap();
        assert!(
            direct.start_many(&[(0, 10)]).is_none(),
            "one pending batch a thread"
        );
        // Another thread has its own ring.
        std::thread::scope(|s| {
            s.spawn(|| assert!(direct.read_many(&[(7, 9)], |_, b| assert_eq!(b, &data[7..16]))));
        });
        drop(first);
        let second = direct.start_many(&[(60_000, 4000), (1, 1)]).unwrap();
        let mut got = Vec::new();
        assert!(second.finish(|i, b| got.push((i, b.to_vec()))));
        assert_eq!(
            got,
            vec![(0, data[60_000..64_000].to_vec()), (1, data[1..2].to_vec())]
        );
        assert!(
            direct.start_many(&vec![(0, 1); MOST_READS + 1]).is_none(),
            "too many"
        );
        assert!(direct.read_many(&vec![(0, 1); MOST_READS], |_, b| assert_eq!(b, &data[..1])));
    }
}

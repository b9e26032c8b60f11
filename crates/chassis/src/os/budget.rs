//! How much memory this process may fill, page cache included, and what that decides about
//! how a file is mapped.
//!
//! A file that fits comfortably (at most half the budget) is mapped for huge pages: fewer TLB
//! misses, and every page is read once. A larger one is not: with `MADV_HUGEPAGE` each page
//! cache miss reads a whole 2 MiB folio (4 MiB with readahead), so a search that touches a
//! few bytes of each of many vectors fills the budget with bytes it never reads and evicts
//! the ones it does. Such a file is mapped `MADV_RANDOM` instead: a miss reads one page and
//! nothing ahead. The budget is the smaller of the machine's memory and every memory cgroup
//! limit over this process (v1 and v2), read once per process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How many bytes a process may lock in memory ([`crate::os::Region::keep_resident`]), and
/// how many it holds. Invariant: `held` never exceeds the `most` passed to a successful
/// [`LockAllowance::take`], and every take is given back once, when its lock ends.
#[derive(Default)]
pub struct LockAllowance {
    held: AtomicU64,
    /// Set once the kernel has refused a lock (RLIMIT_MEMLOCK without CAP_IPC_LOCK): no more
    /// are tried.
    refused: AtomicBool,
}

impl LockAllowance {
    /// Takes `len` bytes if the total held stays within `most` and no lock was refused
    /// before; false (and nothing taken) otherwise.
    pub fn take(&self, len: u64, most: u64) -> bool {
        if self.refused.load(Ordering::Relaxed) {
            return false;
        }
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(len).filter(|&n| n <= most)
            })
            .is_ok()
    }

    /// Gives back `len` bytes taken: their lock ended (unmapped), or the kernel refused it
    /// (`refused`: no more locks are tried).
    pub fn give_back(&self, len: u64, refused: bool) {
        if refused {
            self.refused.store(true, Ordering::Relaxed);
        }
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(len))
            });
    }

    /// Bytes held.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

/// This process's lock allowance: three quarters of the budget, the rest left for the
/// process's own memory and the pages it reads once.
pub fn locks() -> &'static LockAllowance {
    static LOCKS: LockAllowance = LockAllowance {
        held: AtomicU64::new(0),
        refused: AtomicBool::new(false),
    };
    &LOCKS
}

/// Serializes the tests that lock memory (they compare the process's locked total).
#[cfg(test)]
pub(crate) static LOCK_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This process's locked memory (VmLck in /proc/self/status), in bytes.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn vm_locked() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Whether the kernel lets this process lock `len` bytes: root (CAP_IPC_LOCK, assumed) or a
/// soft RLIMIT_MEMLOCK (/proc/self/limits) at least that large, and no lock refused yet.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn may_lock(len: u64) -> bool {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))
        .and_then(|v| v.split_whitespace().next().map(str::to_string));
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false);
    let within = match soft.as_deref() {
        Some("unlimited") => true,
        Some(n) => n.parse::<u64>().is_ok_and(|n| n >= len),
        None => false,
    };
    (root || within) && !locks().refused.load(Ordering::Relaxed)
}

/// The limit [`set_resident_limit`] set; `u64::MAX` for the default.
static RESIDENT_LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the most bytes of index files this process keeps locked in memory (docs/ARCHITECTURE.md,
/// "Keeping the walk resident"): `None` for the default, three quarters of the memory budget
/// ([`budget`]); `Some(0)` turns locking off, so the page cache alone decides what stays.
/// Only files with codes larger than half the budget lock anything. Applies to mappings made
/// after the call (an index opened, a segment added, a reader's next snapshot of a grown
/// file); locks already held stay until their mapping goes. A limit above what the process
/// can spare leaves its own allocations less room under a memory cgroup: locked pages are
/// never reclaimed.
pub fn set_resident_limit(bytes: Option<u64>) {
    let n = bytes.map_or(u64::MAX, |b| b.min(u64::MAX - 1));
    RESIDENT_LIMIT.store(n, Ordering::Relaxed);
}

/// Bytes of index files this process holds locked in memory now ([`set_resident_limit`]).
pub fn resident_bytes() -> u64 {
    locks().held()
}

/// The most bytes [`locks`] lends: [`set_resident_limit`]'s, by default three quarters of the
/// budget.
pub fn lock_most() -> u64 {
    match RESIDENT_LIMIT.load(Ordering::Relaxed) {
        u64::MAX => budget() / 4 * 3,
        n => n,
    }
}

/// Whether a file of `file_len` bytes should be mapped for huge pages.
pub fn fits_in_memory(file_len: u64) -> bool {
    file_len <= budget() / 2
}

/// The memory this process may fill, in bytes (`u64::MAX` where nothing says).
pub fn budget() -> u64 {
    static BUDGET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(read_budget)
}

#[cfg(target_os = "linux")]
fn read_budget() -> u64 {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut least = read("/proc/meminfo")
        .and_then(|m| mem_total(&m))
        .unwrap_or(u64::MAX);
    if let Some(cgroups) = read("/proc/self/cgroup") {
        for (root, file, path) in limit_files(&cgroups) {
            // The limit may be set on any ancestor: take the least on the way up.
            let mut at = path.trim_end_matches('/').to_string();
            loop {
                if let Some(n) = read(&format!("{root}{at}/{file}")).and_then(|t| limit(&t)) {
                    least = least.min(n);
                }
                match at.rfind('/') {
                    Some(i) => at.truncate(i),
                    None => break,
                }
            }
        }
    }
    least
}

#[cfg(not(target_os = "linux"))]
fn read_budget() -> u64 {
    u64::MAX
}

#[cfg(any(target_os = "linux", test))]
/// MemTotal from /proc/meminfo's text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(any(target_os = "linux", test))]
/// The limit files to read for each memory cgroup in /proc/self/cgroup's text: (mount root,
/// file name, cgroup path). v2's line is `0::/path`; v1's names `memory` among its
/// controllers.
fn limit_files(cgroups: &str) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.push(("/sys/fs/cgroup", "memory.max", path.to_string()));
        } else if controllers.split(',').any(|c| c == "memory") {
            out.push((
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                path.to_string(),
            ));
        }
    }
    out
}

#[cfg(any(target_os = "linux", test))]
/// A limit file's value: a number of bytes, or none ("max", or v1's huge "unlimited").
fn limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    // v1 writes "unlimited" as the largest page-aligned i64.
    (n < (1 << 62)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_memtotal_and_cgroup_limits() {
        let meminfo = "MemTotal:       24641492 kB\nMemFree:         1234 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_641_492 * 1024));
        assert_eq!(mem_total("nothing"), None);
        let v1 = "12:memory:/chassis-ltm\n11:cpu,cpuacct:/\n0::/";
        let files = limit_files(v1);
        assert_eq!(
            files,
            vec![
                (
                    "/sys/fs/cgroup/memory",
                    "memory.limit_in_bytes",
                    "/chassis-ltm".to_string()
                ),
                ("/sys/fs/cgroup", "memory.max", "/".to_string()),
            ]
        );
        assert_eq!(limit("1064271872\n"), Some(1_064_271_872));
        assert_eq!(limit("max\n"), None);
        assert_eq!(limit("9223372036854771712\n"), None);
        assert_eq!(limit_files("garbage"), Vec::new());
    }

    /// Fails if the allowance lends past its most, loses track of what was given back, or
    /// keeps lending after the kernel refused a lock.
    #[test]
    fn the_lock_allowance_lends_within_its_most_until_refused() {
        let a = LockAllowance::default();
        assert!(a.take(600, 1000));
        assert!(!a.take(401, 1000), "over the most");
        assert_eq!(a.held(), 600);
        assert!(a.take(400, 1000));
        a.give_back(600, false);
        assert_eq!(a.held(), 400);
        assert!(a.take(600, 1000));
        assert!(!a.take(u64::MAX, u64::MAX), "overflow is over the most");
        a.give_back(100, true);
        assert_eq!(a.held(), 900);
        assert!(!a.take(1, 1000), "refused once: no more locks");
        assert!(lock_most() <= budget());
    }

    #[test]
    fn a_file_fits_in_at_most_half_the_budget() {
        assert!(fits_in_memory(0));
        assert!(fits_in_memory(budget() / 2));
        assert!(!fits_in_memory(u64::MAX));
    }
}

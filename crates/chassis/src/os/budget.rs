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

    #[test]
    fn a_file_fits_in_at_most_half_the_budget() {
        assert!(fits_in_memory(0));
        assert!(fits_in_memory(budget() / 2));
        assert!(!fits_in_memory(u64::MAX));
    }
}

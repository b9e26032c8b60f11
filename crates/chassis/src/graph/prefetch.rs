//! Prefetching for the walk: what a search asks the CPU to load before it reads it, and
//! into which cache, chosen per CPU (docs/decisions/0007).
//!
//! Invariants: every function here is a hint: none faults, whatever the address, and none
//! changes what a search returns; the L1/L2 policy is read once per process.

use super::VectorRef;

/// Asks the CPU to start loading a neighbor list into L1: the lines its words span (two or
/// three for a level-0 list at M 16, wherever it starts), not a fixed count; a line past
/// the list is a miss the core tracks for nothing.
#[inline(always)]
pub(super) fn prefetch_list<T>(words: &[T]) {
    let p = words.as_ptr().cast::<u8>();
    let head = p as usize % 64;
    prefetch_into::<false, u8>(
        p.wrapping_sub(head),
        lines_spanned(head, size_of_val(words)),
    );
}

/// Cache lines that `bytes` bytes starting `head` bytes into a line touch.
fn lines_spanned(head: usize, bytes: usize) -> usize {
    (head + bytes).div_ceil(64)
}

/// Lines prefetched of each vector about to be scored (of the part a search walks by: the
/// high halves of a split vector): all of a 384-d split vector's twelve, the head of a longer
/// one (the hardware streams the rest). On pypi-minilm's split file twelve lines were 4%
/// faster than eight; on f32 vectors four lines were 9% slower than eight at 128 dimensions
/// (docs/performance/experiments.md).
const VECTOR_PREFETCH_LINES: usize = 12;

/// Asks the CPU to start loading the `lines` cache lines from `p` into its nearest cache (L1).
/// A hint only: it never faults and never changes what a search returns.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T, lines: usize) {
    prefetch_into::<false, T>(p, lines);
}

/// [`prefetch`], into L1 or (`L2`) into L2 only.
#[inline(always)]
fn prefetch_into<const L2: bool, T>(p: *const T, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let p = p.cast::<i8>();
        for i in 0..lines {
            // SAFETY: prefetch instructions do not access memory architecturally and never
            // fault, whatever the address; SSE is part of the x86_64 baseline.
            unsafe {
                if L2 {
                    _mm_prefetch(p.wrapping_add(64 * i), _MM_HINT_T1)
                } else {
                    _mm_prefetch(p.wrapping_add(64 * i), _MM_HINT_T0)
                }
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines);
}

/// How many lines of each vector or code a search asks for into L1; the rest of its
/// [`VECTOR_PREFETCH_LINES`] go into L2. A walk asks for up to 32 vectors' lines at once (up
/// to 384), a scan for [`super::SCAN_AHEAD`] groups' worth. A core that tracks few
/// outstanding L1 misses stalls on the hints past them, so there everything goes into L2 but
/// a walked split vector's first line, or all of a short one's high halves (Zen 4,
/// docs/decisions/0007: 1M x 128 f16 vectors at ef 96, 4,500 QPS with each vector's first
/// line into L1, 7,500 with none; int8 codes on pypi-minilm 8,700 and 11,800; the 1M x 128
/// split file 3,760 with one line of four, 4,430 with all four, 300k x 128 7,080 and 7,670,
/// 5,900 with none; pypi-minilm's split file, twelve lines, 7,700 with every line into L1,
/// 8,000 with four, 14,000 with one or none: a split record's high halves lie where reading
/// them through L2 is slow, bench `memory_floor`); a core that tracks many (Zen 5) is faster
/// with every line in L1 (twice as fast as with L2). Planar split vectors (format 6) lie as
/// half-float ones do and go into L2 whole with them (1M x 128 at ef 96: 4,300-5,400 QPS
/// against the same graph side by side's 2,850-3,600, five alternated pairs; decision 0009).
/// Chosen once per process
/// ([`cpu_tracks_many_l1_misses`]); `CHASSIS_PREFETCH_L1_LINES` (a number) overrides all
/// three counts, for measuring a new CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Policy {
    /// A split vector's high halves side by side with its low halves (format 4), walked, when
    /// they take more than [`SHORT_SPLIT_LINES`].
    split: usize,
    /// The same, when they take [`SHORT_SPLIT_LINES`] or fewer (128 dimensions and under).
    short_split: usize,
    /// Anything else a walk scores (planar split vectors' high halves, f16 and f32 vectors,
    /// codes), and all a scan scores.
    rest: usize,
}

fn policy() -> Policy {
    static POLICY: std::sync::OnceLock<Policy> = std::sync::OnceLock::new();
    *POLICY.get_or_init(|| {
        policy_for(
            std::env::var("CHASSIS_PREFETCH_L1_LINES").ok().as_deref(),
            cpu_tracks_many_l1_misses(),
        )
    })
}

/// [`policy`] for an override (used when it is a number) and a CPU that tracks many L1
/// misses or not.
fn policy_for(overridden: Option<&str>, many: bool) -> Policy {
    let (split, short_split, rest) = match overridden.and_then(|v| v.trim().parse().ok()) {
        Some(n) => (n, n, n),
        None if many => (
            VECTOR_PREFETCH_LINES,
            VECTOR_PREFETCH_LINES,
            VECTOR_PREFETCH_LINES,
        ),
        None => (1, SHORT_SPLIT_LINES, 0),
    };
    Policy {
        split,
        short_split,
        rest,
    }
}

/// A split vector whose high halves take this many lines or fewer is walked with all of them
/// into L1 on a core that tracks few misses (see [`Policy`]).
const SHORT_SPLIT_LINES: usize = 4;

/// Whether this CPU keeps many L1 misses in flight: AMD's Zen 5 (family 1Ah) and later.
/// Earlier Zen cores track about two dozen. Any other CPU gets the policy for few (one line
/// into L1): wrong for a core that tracks many, it costs less than the other policy costs a
/// core that tracks few.
fn cpu_tracks_many_l1_misses() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86-64 CPU; leaves 0 and 1 always do.
        #[allow(unused_unsafe)]
        let (vendor, signature) = unsafe { (__cpuid(0), __cpuid(1)) };
        let amd = vendor.ebx == u32::from_le_bytes(*b"Auth")
            && vendor.edx == u32::from_le_bytes(*b"enti")
            && vendor.ecx == u32::from_le_bytes(*b"cAMD");
        amd && cpu_family(signature.eax) >= 0x1a
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The family in CPUID leaf 1's EAX: the base family, plus the extended family where the base
/// is 0Fh (as /proc/cpuinfo's "cpu family" shows it).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn cpu_family(eax: u32) -> u32 {
    let base = (eax >> 8) & 0xf;
    if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    }
}

/// Prefetches the lines of `v` a walk scores, as [`policy`] says.
#[inline(always)]
pub(super) fn prefetch_walk(v: VectorRef<'_>) {
    let p = policy();
    let lines = scored_lines(v);
    // Planar split vectors' high halves lie side by side as half-float vectors do, and are
    // prefetched as they are.
    let l1 = match v {
        VectorRef::Split(h) if h.is_side_by_side() && lines <= SHORT_SPLIT_LINES => p.short_split,
        VectorRef::Split(h) if h.is_side_by_side() => p.split,
        _ => p.rest,
    };
    prefetch_lines(v.as_ptr(), lines, l1);
}

/// Prefetches the lines of `v` a scan scores ([`super::scan`]), as [`policy`] says.
#[inline(always)]
pub(super) fn prefetch_scan(v: VectorRef<'_>) {
    prefetch_lines(v.as_ptr(), scored_lines(v), policy().rest);
}

/// Prefetches the `lines` lines from `p` that exact ranking reads ([`super::rank`]: the low
/// halves of a split vector, the whole vector after a walk by codes), or that neighbor
/// selection decodes ([`super::select_neighbors`]), as [`policy`] says for anything not
/// walked by split vectors.
#[inline(always)]
pub(super) fn prefetch_exact(p: *const u8, lines: usize) {
    prefetch_lines(p, lines, policy().rest);
}

/// The lines of `v` a search scores that it prefetches: all of them up to
/// [`VECTOR_PREFETCH_LINES`]. Codes (384 bytes at 384 dimensions) get all their lines too:
/// prefetching 1, 2 or 3 lines of a code was 16%, 15% and 11% slower than 12 at ef 48
/// (docs/performance/codes.md).
#[inline(always)]
fn scored_lines(v: VectorRef<'_>) -> usize {
    VECTOR_PREFETCH_LINES.min(v.walk_bytes().div_ceil(64))
}

/// The first `l1` of the `lines` lines from `p` into L1, the rest into L2.
#[inline(always)]
fn prefetch_lines(p: *const u8, lines: usize, l1: usize) {
    let near = l1.min(lines);
    prefetch_into::<false, _>(p, near);
    prefetch_into::<true, _>(p.wrapping_add(64 * near), lines - near);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_policy_follows_the_cpu_unless_overridden() {
        // A core that tracks many misses takes every line into L1; any other one line of a
        // walked split vector, all of a short one, and nothing else.
        let all = |n| Policy {
            split: n,
            short_split: n,
            rest: n,
        };
        let few = Policy {
            split: 1,
            short_split: SHORT_SPLIT_LINES,
            rest: 0,
        };
        assert_eq!(policy_for(None, true), all(VECTOR_PREFETCH_LINES));
        assert_eq!(policy_for(None, false), few);
        // A number overrides all three.
        assert_eq!(policy_for(Some(" 0 "), true), all(0));
        assert_eq!(policy_for(Some("4"), false), all(4));
        // Not a number: the CPU's policy.
        assert_eq!(policy_for(Some("l2"), false), few);
        // Family: Zen 4 (19h) and Zen 5 (1Ah) signatures, an Intel family 6 one.
        assert_eq!(cpu_family(0x00a1_0f11), 0x19);
        assert_eq!(cpu_family(0x00b4_0f00), 0x1a);
        assert_eq!(cpu_family(0x0008_06f8), 6);
    }

    #[test]
    fn a_list_is_prefetched_by_the_lines_it_spans() {
        // A level-0 list at M 16 (128 bytes): two lines when it starts a line, three when a
        // record's 8-byte head pushes it across one; M 32 (256 bytes): four or five.
        assert_eq!(lines_spanned(0, 128), 2);
        assert_eq!(lines_spanned(8, 128), 3);
        assert_eq!(lines_spanned(0, 256), 4);
        assert_eq!(lines_spanned(8, 256), 5);
        assert_eq!(lines_spanned(60, 8), 2);
        assert_eq!(lines_spanned(0, 0), 0);
        // A hint: it runs on any slice, empty or not.
        let words = [0u32; 40];
        prefetch_list(&words[1..33]);
        prefetch_list(&words[..0]);
    }

    /// On Linux, CPUID's family is the one /proc/cpuinfo names (the policy's input decoded
    /// right on the CPU that runs the tests).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn cpu_family_agrees_with_proc_cpuinfo() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let Some(named) = info
            .lines()
            .find(|l| l.starts_with("cpu family"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            return;
        };
        // SAFETY: CPUID leaf 1 exists on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let eax = unsafe { std::arch::x86_64::__cpuid(1) }.eax;
        assert_eq!(cpu_family(eax), named);
    }
}

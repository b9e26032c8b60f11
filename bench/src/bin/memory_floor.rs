//! The memory floor: what it costs one core to bring in the bytes one distance reads, by
//! layout, with no graph and no arithmetic beyond touching them.
//!
//! For each data set of the harness and each layout (int4 codes: dims / 2 bytes; int8 codes:
//! dims; format 4's high halves: 2 · dims; f32: 4 · dims), allocates as many rows as the set has vectors (advised
//! for huge pages, as the reader maps its file), visits them in a seeded random order in
//! groups of 16 (about what a walk scores from one neighbor list), prefetching every line of
//! a group's rows before reading any, as a search does, and reads every 8-byte word of each
//! row (a wrapping sum, so nothing is skipped). Prints the median nanoseconds per row over 7
//! rounds (the first a warm-up) beside the row's bytes, and the implied bandwidth.
//! docs/performance/codes.md ("The memory floor") sets these against the harness's time per
//! distance (1 / (QPS × distances per query)).
//!
//! A second table reads 256 of each 512-byte record at different offsets beside 256-byte
//! records, prefetched into L1 or into L2: on Zen 4, into L2, the head of a 512-byte record
//! (where a split file at 128-d keeps its high halves) cost twice what a 256-byte record or
//! a 512-byte record's tail did (docs/decisions/0007, second follow-up).
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin memory_floor
//! ```

use std::time::Instant;

use chassis_bench::advise_huge;

const GROUP: usize = 16;
const VISITS: usize = 2_000_000;

#[inline(always)]
fn prefetch(p: *const u64, lines: usize, l2: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        for i in 0..lines {
            let at = p.wrapping_add(8 * i).cast::<i8>();
            // SAFETY: a prefetch never faults and reads nothing architecturally; SSE is part
            // of the x86_64 baseline.
            unsafe {
                if l2 {
                    _mm_prefetch(at, _MM_HINT_T1)
                } else {
                    _mm_prefetch(at, _MM_HINT_T0)
                }
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines, l2);
}

/// Where a visit reads: `bytes` bytes at `offset` into each record, records `stride` bytes
/// apart (all multiples of 8), prefetched into L1 or (`l2`) into L2.
#[derive(Clone, Copy)]
struct Read {
    stride: usize,
    offset: usize,
    bytes: usize,
    l2: bool,
}

/// Nanoseconds per row visit: `rows` rows of `bytes` bytes, `VISITS` visits.
fn floor(rows: usize, bytes: usize, seed: u64) -> f64 {
    floor_of(
        rows,
        Read {
            stride: bytes,
            offset: 0,
            bytes,
            l2: false,
        },
        seed,
    )
}

/// [`floor`] for records read in part ([`Read`]).
fn floor_of(rows: usize, read: Read, seed: u64) -> f64 {
    let Read {
        stride,
        offset,
        bytes,
        l2,
    } = read;
    let words = stride / 8;
    let (from, to) = (offset / 8, (offset + bytes) / 8);
    // Rows from a 4 KiB boundary, as a segment's vectors are (so every row starts on a cache
    // line, and a record's offset within 512 bytes is what it is in a file).
    let mut data: Vec<u64> = vec![0; rows * words + 512];
    advise_huge(&data);
    let skip = (data.as_ptr() as usize)
        .next_multiple_of(4096)
        .wrapping_sub(data.as_ptr() as usize)
        / 8;
    for (i, w) in data.iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    let rowv = &data[skip..skip + rows * words];
    let mut x = seed | 1;
    let order: Vec<usize> = (0..VISITS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % rows as u64) as usize
        })
        .collect();
    let mut times = Vec::new();
    let mut sink = 0u64;
    for _round in 0..7 {
        let t = Instant::now();
        for group in order.chunks(GROUP) {
            for &r in group {
                prefetch(rowv[r * words + from..].as_ptr(), bytes.div_ceil(64), l2);
            }
            for &r in group {
                for &w in &rowv[r * words + from..r * words + to] {
                    sink = sink.wrapping_add(w);
                }
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1e9 / VISITS as f64);
    }
    std::hint::black_box(sink);
    let mut counted = times[1..].to_vec();
    counted.sort_by(f64::total_cmp);
    counted[counted.len() / 2]
}

fn main() {
    println!("| data set | layout | bytes per distance | ns per row (median) | GB/s |");
    println!("|---|---|---:|---:|---:|");
    for (set, rows, dims) in [
        ("pypi-minilm", 100_000usize, 384usize),
        ("synth-1m-128", 1_000_000, 128),
        ("synth-100k-1536", 100_000, 1536),
    ] {
        for (layout, bytes) in [
            ("int4 codes", dims / 2),
            ("int8 codes", dims),
            ("format 4 high halves", 2 * dims),
            ("f32 (format 3, hnswlib)", 4 * dims),
        ] {
            let ns = floor(rows, bytes, 7 + dims as u64);
            println!(
                "| {set} | {layout} | {bytes} | {ns:.1} | {:.1} |",
                bytes as f64 / ns
            );
        }
    }
    // Where in a record the walked bytes lie (1M x 128: a split record's 256 bytes of high
    // halves at the head of its 512, an f16 vector's 256 bytes alone), prefetched into L1 or
    // into L2 as graph/prefetch.rs does per CPU (docs/decisions/0007, second follow-up).
    println!();
    println!("| 1M records | bytes read | prefetched into | ns per row (median) |");
    println!("|---|---:|---|---:|");
    for (what, stride, offset, bytes) in [
        ("256-byte records (f16 at 128-d)", 256, 0, 256),
        (
            "512-byte records, bytes 0..256 (split high halves)",
            512,
            0,
            256,
        ),
        ("512-byte records, bytes 128..384", 512, 128, 256),
        ("512-byte records, bytes 256..512", 512, 256, 256),
        ("512-byte records, whole (f32)", 512, 0, 512),
    ] {
        for l2 in [false, true] {
            let read = Read {
                stride,
                offset,
                bytes,
                l2,
            };
            let ns = floor_of(1_000_000, read, 135);
            let into = if l2 { "L2" } else { "L1" };
            println!("| {what} | {bytes} | {into} | {ns:.1} |");
        }
    }
}

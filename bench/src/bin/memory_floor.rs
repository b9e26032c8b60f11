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
//! docs/PERFORMANCE.md ("The memory floor") sets these against the harness's time per
//! distance (1 / (QPS × distances per query)).
//!
//! ```text
//! cargo run --release --manifest-path bench/Cargo.toml --bin memory_floor
//! ```

use std::time::Instant;

use chassis_bench::advise_huge;

const GROUP: usize = 16;
const VISITS: usize = 2_000_000;

#[inline(always)]
fn prefetch(p: *const u64, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for i in 0..lines {
            // SAFETY: a prefetch never faults and reads nothing architecturally; SSE is part
            // of the x86_64 baseline.
            unsafe { _mm_prefetch(p.wrapping_add(8 * i).cast::<i8>(), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines);
}

/// Nanoseconds per row visit: `rows` rows of `bytes` bytes, `VISITS` visits.
fn floor(rows: usize, bytes: usize, seed: u64) -> f64 {
    let words = bytes / 8;
    // 64-byte aligned rows: every row starts on a cache line, as a stored vector does.
    let mut data: Vec<u64> = vec![0; rows * words + 8];
    advise_huge(&data);
    let skip = data.as_ptr().align_offset(64);
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
                prefetch(rowv[r * words..].as_ptr(), bytes.div_ceil(64));
            }
            for &r in group {
                for &w in &rowv[r * words..(r + 1) * words] {
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
}

//! Tests of `graph::distance`: every SIMD kernel (one pair, batches, split vectors' halves,
//! half floats, pairs of stored vectors, integer codes) against its scalar reference at every
//! length, lower bounds (codes', high halves') against exact distances, aligned storage, and
//! metric names.

use super::*;

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn every_kernel_matches_the_scalar_reference_at_every_length() {
    let levels = SimdLevel::available();
    assert!(levels.contains(&SimdLevel::Portable));
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for &level in &levels {
            let d = Distance::with_level(metric, level);
            assert_eq!(d.level(), level);
            for n in 0..=300 {
                let a = data(n, n as u64 + 1);
                let b = data(n, n as u64 + 1000);
                let want = reference::distance(metric, &a, &b);
                let got = d.eval(&a, &b);
                let tol = 1e-4 * (1.0 + want.abs()) * (1.0 + n as f32).sqrt();
                assert!(
                    (got - want).abs() <= tol,
                    "{metric:?} {level:?} n={n}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn aligned_vectors_start_a_cache_line_and_keep_every_value() {
    for n in [0usize, 1, 15, 16, 17, 384, 1000] {
        let v = data(n, 7);
        let a = AlignedVector::new(&v);
        assert_eq!(&a[..], &v[..]);
        assert_eq!(a.as_ptr() as usize % 64, 0, "length {n}");
    }
}

#[test]
fn batches_match_the_scalar_reference_at_every_length_and_count() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for level in SimdLevel::available() {
            let d = Distance::with_level(metric, level);
            for n in (0..40).chain([127, 128, 129, 383, 384, 1536]) {
                let a = data(n, 1);
                let vs: Vec<Vec<f32>> = (0..19).map(|j| data(n, 100 + j)).collect();
                for count in 0..vs.len() {
                    let refs: Vec<VectorRef> =
                        vs[..count].iter().map(|v| VectorRef::F32(v)).collect();
                    let mut out = vec![f32::NAN; count + 1];
                    d.walk_many(&a, &refs, &mut out);
                    for (j, v) in vs[..count].iter().enumerate() {
                        let want = reference::distance(metric, &a, v);
                        let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                        assert!(
                            (out[j] - want).abs() <= tol,
                            "{metric:?} {level:?} n={n} count={count} j={j}: {} vs {want}",
                            out[j]
                        );
                    }
                    assert!(out[count].is_nan(), "wrote past the batch");
                }
            }
        }
    }
}

/// `v` stored split in halves: the high halves, then the low ones.
fn split(v: &[f32]) -> Vec<u16> {
    let mut bytes = vec![0u8; 4 * v.len()];
    crate::format::vector::encode(
        crate::format::vector::VectorLayout::SplitHalves,
        v,
        &mut bytes,
    );
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

#[test]
fn walking_split_vectors_scores_their_high_halves_and_exact_joins_them() {
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for level in SimdLevel::available() {
            let d = Distance::with_level(metric, level);
            for n in (0..40).chain([255, 256, 257, 300, 384, 1536]) {
                let a = data(n, 3);
                let vs: Vec<Vec<f32>> = (0..11).map(|j| data(n, 200 + j)).collect();
                let halves: Vec<Vec<u16>> = vs.iter().map(|v| split(v)).collect();
                let refs: Vec<VectorRef> = halves
                    .iter()
                    .map(|h| VectorRef::Split(crate::format::vector::Halves::side_by_side(h)))
                    .collect();
                let mut out = vec![f32::NAN; refs.len() + 1];
                d.walk_many(&a, &refs, &mut out);
                assert!(out[refs.len()].is_nan(), "wrote past the batch");
                let mut buf = Vec::new();
                for (j, (v, r)) in vs.iter().zip(&refs).enumerate() {
                    let truncated: Vec<f32> = v
                        .iter()
                        .map(|x| f32::from_bits(x.to_bits() & 0xFFFF_0000))
                        .collect();
                    let want = reference::distance(metric, &a, &truncated);
                    let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                    let one = d.walk(&a, *r);
                    assert!(
                        (one - want).abs() <= tol && (out[j] - want).abs() <= tol,
                        "{metric:?} {level:?} n={n} j={j}: {one} / {} vs {want}",
                        out[j]
                    );
                    let exact = reference::distance(metric, &a, v);
                    let got = d.exact(&a, *r, &mut buf);
                    assert!((got - exact).abs() <= tol, "exact {got} vs {exact}");
                    assert_eq!(d.exact(&a, VectorRef::F32(v), &mut buf), d.eval(&a, v));
                }
            }
        }
    }
}

/// Fails if a pair kernel (two split vectors' high halves, bfloat16 products included, or
/// two half-float vectors) mislays a value at some length, or if `between` on any other
/// pair differs from decoding one side and walking to the other.
#[test]
fn between_two_stored_vectors_matches_the_reference_at_every_length() {
    use crate::format::vector::{from_f16, to_f16};
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for level in SimdLevel::available() {
            let d = Distance::with_level(metric, level);
            for n in (0..40).chain([63, 64, 65, 127, 128, 129, 255, 256, 384, 1536]) {
                let (a, b) = (data(n, 11), data(n, 12));
                let tol = |want: f32| 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                let high = |v: &[f32]| -> Vec<f32> {
                    v.iter()
                        .map(|x| f32::from_bits(x.to_bits() & 0xFFFF_0000))
                        .collect()
                };
                let (sa, sb) = (split(&a), split(&b));
                let got = d.between(
                    VectorRef::Split(crate::format::vector::Halves::side_by_side(&sa)),
                    VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb)),
                );
                let want = reference::distance(metric, &high(&a), &high(&b));
                let direct = d.pairs_directly(VectorRef::Split(
                    crate::format::vector::Halves::side_by_side(&sa),
                ));
                // Without a pair kernel, one side is decoded exactly.
                let want = if direct {
                    want
                } else {
                    reference::distance(metric, &a, &high(&b))
                };
                assert!(
                    (got - want).abs() <= tol(want),
                    "{metric:?} {level:?} n={n} split: {got} vs {want}"
                );
                let (ha, hb): (Vec<u16>, Vec<u16>) = (
                    a.iter().map(|&x| to_f16(x)).collect(),
                    b.iter().map(|&x| to_f16(x)).collect(),
                );
                let wide = |h: &[u16]| -> Vec<f32> { h.iter().map(|&x| from_f16(x)).collect() };
                let got = d.between(VectorRef::F16(&ha), VectorRef::F16(&hb));
                let want = reference::distance(metric, &wide(&ha), &wide(&hb));
                assert!(
                    (got - want).abs() <= tol(want),
                    "{metric:?} {level:?} n={n} f16: {got} vs {want}"
                );
                let got = d.between(
                    VectorRef::F32(&a),
                    VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb)),
                );
                assert_eq!(
                    got,
                    d.walk(
                        &a,
                        VectorRef::Split(crate::format::vector::Halves::side_by_side(&sb))
                    )
                );
            }
        }
    }
}

/// Fails if a half-float kernel (one vector or a batch) mislays a value at some length:
/// the 64-value steps, the 16-value steps and the scalar tail all meet the reference.
#[test]
fn walking_half_floats_scores_their_values_at_every_length() {
    use crate::format::vector::{from_f16, to_f16};
    for metric in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        for level in SimdLevel::available() {
            let d = Distance::with_level(metric, level);
            for n in (0..40).chain([63, 64, 65, 127, 128, 255, 256, 257, 384, 1536]) {
                let a = data(n, 5);
                let vs: Vec<Vec<u16>> = (0..9)
                    .map(|j| data(n, 300 + j).iter().map(|&x| to_f16(x)).collect())
                    .collect();
                let refs: Vec<VectorRef> = vs.iter().map(|h| VectorRef::F16(h)).collect();
                let mut out = vec![f32::NAN; refs.len()];
                d.walk_many(&a, &refs, &mut out);
                for (j, (h, r)) in vs.iter().zip(&refs).enumerate() {
                    let wide: Vec<f32> = h.iter().map(|&x| from_f16(x)).collect();
                    let want = reference::distance(metric, &a, &wide);
                    let tol = 1e-4 * want.abs().max(1.0) * (n as f32).sqrt().max(1.0);
                    let one = d.walk(&a, *r);
                    assert!(
                        (one - want).abs() <= tol && (out[j] - want).abs() <= tol,
                        "{metric:?} {level:?} n={n} j={j}: {one} / {} vs {want}",
                        out[j]
                    );
                }
            }
        }
    }
}

#[test]
fn identical_vectors_are_at_distance_zero() {
    let a = data(384, 7);
    let d = Distance::new(Metric::L2Squared);
    assert_eq!(d.eval(&a, &a), 0.0);
    let norm = reference::dot(&a, &a).sqrt();
    let u: Vec<f32> = a.iter().map(|x| x / norm).collect();
    assert!(Distance::new(Metric::Cosine).eval(&u, &u).abs() < 1e-5);
}

#[test]
fn metric_names_parse_back() {
    for m in [Metric::L2Squared, Metric::Cosine, Metric::InnerProduct] {
        assert_eq!(Metric::parse(m.name()), Some(m));
    }
    assert_eq!(Metric::parse("manhattan"), None);
}

/// Fails if the integer code kernels read past a code, mislay a dimension (int4's even and
/// odd halves, a short last block or step) or sum other than exactly (AVX2's 16-bit pairs
/// saturating included): at every length, for int8 and int4 codes under both metrics each
/// kernel serves, each of a batch must equal the scalar integer reference; and their error
/// must stay a small part of int8's proved margin ‖q‖·ε (the reason for 13- and 14-bit
/// weights: at 8 bits it was several times the margin). Every code value at its largest
/// (255, 15) meets the largest weights, where AVX2's 16-bit pairs would saturate first; a
/// query far outside the codebook's range gives large terms that cancel.
#[test]
#[cfg(target_arch = "x86_64")]
fn integer_code_kernels_match_their_reference_at_every_length() {
    let mut kernels: Vec<(&str, IntegerKernel)> = Vec::new();
    if Distance::with_level(Metric::Cosine, SimdLevel::Avx2Fma).has_integer_kernels() {
        kernels.push(("avx2", x86::integer_codes_avx2));
    }
    if Distance::with_level(Metric::Cosine, SimdLevel::Avx512).has_integer_kernels()
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
    {
        kernels.push(("avx512 vnni", x86::integer_codes));
    }
    for n in 1..300 {
        for kind in [CodeKind::Int8, CodeKind::Int4] {
            let train: Vec<Vec<f32>> = (0..16).map(|t| data(n, 500 + t)).collect();
            let book = Codebook::train(kind, n, train.iter().map(|t| t.as_slice()));
            // Codes exactly as long as their values (no padding) to catch overreads.
            let mut codes: Vec<Vec<u8>> = (0..BATCH_WIDTH as u64)
                .map(|j| {
                    let mut c = vec![0u8; kind.code_bytes(n as u32) as usize];
                    book.encode(&data(n, 900 + j), &mut c);
                    c.truncate(kind.packed_bytes(n as u32));
                    c
                })
                .collect();
            codes[0].fill(0xff);
            codes[1].fill(0);
            let group: [&[u8]; BATCH_WIDTH] = std::array::from_fn(|j| codes[j].as_slice());
            let far: Vec<f32> = data(n, 78).iter().map(|x| 40.0 * x.signum()).collect();
            for q in [unit(&data(n, 77)), far] {
                for l2 in [false, true] {
                    for &(name, kernel) in &kernels {
                        let mut coded = CodedQuery::default();
                        if !coded.prepare(&q, &book, l2) {
                            assert!(l2 && kind == CodeKind::Int8, "{kind:?} n={n}");
                            continue;
                        }
                        // A short group arrives padded with its last code repeated
                        // (`codes_group`), which a kernel may copy rather than score:
                        // 1, 3 and 5 codes, so the padding starts inside a run of codes
                        // scored together and fills whole runs after it.
                        for real in [1, 3, 5] {
                            let padded: [&[u8]; BATCH_WIDTH] =
                                std::array::from_fn(|j| group[j.min(real - 1)]);
                            let got = kernel(&coded, padded);
                            for (j, g) in got.iter().enumerate() {
                                let want = coded.score_scalar(padded[j]);
                                let size = 1.0 + want.abs() + coded.constant.abs();
                                assert!(
                                    (g - want).abs() <= 1e-5 * size,
                                    "{name} {kind:?} l2={l2} n={n} padded {real}: {j}"
                                );
                            }
                        }
                        let got = kernel(&coded, group);
                        for (g, c) in got.iter().zip(&codes) {
                            let want = coded.score_scalar(c);
                            // f32 rounding of the terms, which the far query makes large
                            // and which cancel to `want`.
                            let size = 1.0 + want.abs() + coded.constant.abs();
                            assert!(
                                (g - want).abs() <= 1e-5 * size,
                                "{name} {kind:?} l2={l2} n={n}: {g} against {want}"
                            );
                        }
                    }
                }
            }
            let q = unit(&data(n, 77));
            let mut coded = CodedQuery::default();
            if kind == CodeKind::Int8 && n >= 32 && coded.prepare(&q, &book, false) {
                let mut c = vec![0u8; kind.code_bytes(n as u32) as usize];
                let (eps, _) = book.encode(&data(n, 901), &mut c);
                let margin = eps; // ‖q‖ = 1
                assert!(
                    coded.error_for(&book) < 0.05 * margin,
                    "n={n}: error {} against margin {margin}",
                    coded.error_for(&book)
                );
            }
        }
    }
    // A non-finite query makes every distance NaN, which no bound is below.
    let book = Codebook::train(CodeKind::Int4, 8, [data(8, 1).as_slice()]);
    let mut coded = CodedQuery::default();
    let mut q = data(8, 2);
    q[3] = f32::NAN;
    assert!(coded.prepare(&q, &book, false));
    assert!(coded.error_for(&book).is_nan());
    for &(name, kernel) in &kernels {
        assert!(
            kernel(&coded, [&[0u8; 4][..]; BATCH_WIDTH])[0].is_nan(),
            "{name}"
        );
    }
}

/// Unit length as the writer makes it for cosine (norm in f64, divided in f32).
fn unit(v: &[f32]) -> Vec<f32> {
    let norm = reference::dot(v, v).sqrt();
    v.iter().map(|x| x / norm).collect()
}

proptest::proptest! {
    /// Fails if a search could skip ranking a vector that belongs among the nearest k by
    /// its code: the bound must stay at or below the exact distance as computed, at every
    /// kernel level (single and batched), for near and far vectors, inside and outside the
    /// codebook's trained range, at any scale and offset, inner product unnormalised too.
    #[test]
    fn code_lower_bound_never_exceeds_the_exact_distance(
        n in 1usize..320,
        seed in 0u64..1_000_000,
        scale_exp in -20i32..20,
        offset in -8.0f32..8.0,
        near in 0.0f32..1.0,
        outside in 0.0f32..4.0,
        int4 in proptest::bool::ANY,
    ) {
        let kind = if int4 { CodeKind::Int4 } else { CodeKind::Int8 };
        let scale = 2f32.powi(scale_exp);
        let q: Vec<f32> = data(n, seed).iter().map(|x| (x + offset) * scale).collect();
        let other = data(n, seed + 7);
        // Trained on vectors around q; v may fall outside the trained range (clamped).
        let train: Vec<Vec<f32>> = (0..8)
            .map(|t| data(n, seed + 100 + t).iter().zip(&q).map(|(a, b)| b + a * scale).collect())
            .collect();
        let v: Vec<f32> = q
            .iter()
            .zip(&other)
            .map(|(a, b)| a + (near * near + outside) * (b + offset) * scale)
            .collect();
        let (qu, vu) = (unit(&q), unit(&v));
        let train_u: Vec<Vec<f32>> = train.iter().map(|t| unit(t)).collect();
        for level in SimdLevel::available() {
            for (metric, q, v, train) in [
                (Metric::L2Squared, &q, &v, &train),
                (Metric::Cosine, &qu, &vu, &train_u),
                (Metric::InnerProduct, &qu, &vu, &train_u),
                (Metric::InnerProduct, &q, &v, &train),
            ] {
                let d = Distance::with_level(metric, level);
                let book = Codebook::train(kind, n, train.iter().map(|t| t.as_slice()));
                let mut code = vec![0u8; kind.code_bytes(n as u32) as usize];
                let (eps, norm) = book.encode(v, &mut code);
                let r = VectorRef::Code(&code, &book);
                let walked = d.walk(q, r);
                let mut walked_many = [0.0f32; 3];
                d.walk_many(q, &[r, r, r], &mut walked_many);
                let exact = d.exact(q, VectorRef::F32(v), &mut Vec::new());
                let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                // Every kernel computes the distance to what the code stands for.
                let decoded = book.decode_code(&code);
                let want = reference::distance(metric, q, &decoded);
                let size = q_norm + decoded.iter().map(|x| x * x).sum::<f32>().sqrt();
                for w in [walked, walked_many[0], walked_many[2]] {
                    proptest::prop_assert!(
                        (w - want).abs() <= 1e-4 * (1.0 + size * size),
                        "{metric:?} {level:?} n={n}: walked {w}, decoded {want}"
                    );
                }
                // A search's batches (the integer kernels where the CPU has them) are
                // within the prepared query's error of the same, and the bound less that
                // error still holds.
                let mut coded = CodedQuery::default();
                let mut walked_batch = [0.0f32; 3];
                d.walk_batch(q, &mut coded, &[r, r, r], &mut walked_batch);
                let q_error = coded.error_for(&book);
                proptest::prop_assert!(d.has_integer_kernels() || q_error == 0.0);
                for w in walked_batch {
                    proptest::prop_assert!(
                        (w - want).abs() <= q_error + 1e-4 * (1.0 + size * size),
                        "{metric:?} {level:?} n={n}: batch {w}, decoded {want}, error {q_error}"
                    );
                }
                // Without the integer kernels (a CPU without AVX2), a search's
                // batches are walk_many's and carry no error.
                let mut plain = CodedQuery::default();
                let mut walked_plain = [0.0f32; 3];
                d.without_integer_kernels()
                    .walk_batch(q, &mut plain, &[r, r, r], &mut walked_plain);
                proptest::prop_assert_eq!(walked_plain, walked_many);
                proptest::prop_assert_eq!(plain.error_for(&book), 0.0);
                let batched = walked_batch.map(|w| w - q_error);
                for w in [walked, walked_many[0], walked_many[2]].into_iter().chain(batched) {
                    let bound = d.code_lower_bound(q_norm, w, eps, norm, book.lo_norm(), n);
                    proptest::prop_assert!(
                        bound <= exact,
                        "{metric:?} {level:?} n={n}: bound {bound} > exact {exact} (walked {w}, eps {eps})"
                    );
                }
            }
        }
    }

    /// Fails if a search could skip ranking a vector that belongs among the nearest k:
    /// the bound must stay at or below the exact distance as computed, at every kernel
    /// level, for near neighbors (where rounding and truncation matter most), at any
    /// scale and offset, and with every value cut as far as truncation can cut it.
    #[test]
    fn exact_lower_bound_never_exceeds_the_exact_distance(
        n in 1usize..320,
        seed in 0u64..1_000_000,
        scale_exp in -30i32..30,
        offset in -8.0f32..8.0,
        near in 0.0f32..1.0,
        cut_most in proptest::bool::ANY,
    ) {
        let scale = 2f32.powi(scale_exp);
        let q: Vec<f32> = data(n, seed).iter().map(|x| (x + offset) * scale).collect();
        let other = data(n, seed + 7);
        let mut v: Vec<f32> = q
            .iter()
            .zip(&other)
            .map(|(a, b)| a + near * near * (b + offset) * scale)
            .collect();
        if cut_most {
            // Low halves all ones: each value as far from its high half as it can be.
            v.iter_mut().for_each(|x| *x = f32::from_bits(x.to_bits() | 0xFFFF));
        }
        let (qu, vu) = (unit(&q), unit(&v));
        for level in SimdLevel::available() {
            for (metric, q, v) in [
                (Metric::L2Squared, &q, &v),
                (Metric::Cosine, &qu, &vu),
                (Metric::InnerProduct, &qu, &vu),
            ] {
                let d = Distance::with_level(metric, level);
                let halves = split(v);
                let r = VectorRef::Split(crate::format::vector::Halves::side_by_side(&halves));
                let walked = d.walk(q, r);
                let mut walked_many = [0.0f32];
                d.walk_many(q, &[r], &mut walked_many);
                let exact = d.exact(q, r, &mut Vec::new());
                let q_norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
                for w in [walked, walked_many[0]] {
                    let bound = d.exact_lower_bound(q_norm, w, n);
                    proptest::prop_assert!(
                        bound <= exact,
                        "{metric:?} {level:?} n={n}: bound {bound} > exact {exact} (walked {w})"
                    );
                }
            }
        }
    }
}

/// Fails if the bound grows so loose that ranking would read every vector found again.
#[test]
fn exact_lower_bound_is_tight_enough_to_skip_ranking() {
    let l2 = Distance::new(Metric::L2Squared);
    // ‖q − v̂‖ = 10 and ‖q‖ = 10: ‖q − v‖ ≥ 10 − 2⁻⁷·20 (less slack).
    let b = l2.exact_lower_bound(10.0, 100.0, 128);
    assert!(b > 96.0 && b < 100.0, "{b}");
    let cos = Distance::new(Metric::Cosine);
    let b = cos.exact_lower_bound(1.0, 0.5, 1536);
    assert!(b > 0.49 && b < 0.5, "{b}");
    let ip = Distance::new(Metric::InnerProduct);
    assert_eq!(ip.exact_lower_bound(1.0, 0.5, 384), f32::NEG_INFINITY);
    // NaN in, and the bound is NaN or 0: never above a distance.
    for d in [&l2, &cos] {
        for b in [
            d.exact_lower_bound(f32::NAN, 1.0, 8),
            d.exact_lower_bound(1.0, f32::NAN, 8),
        ] {
            assert!(b.is_nan() || b == 0.0, "{b}");
        }
    }
}

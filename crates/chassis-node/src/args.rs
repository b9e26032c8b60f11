//! What the JavaScript layer's arguments mean to the core: metric, codes, format and
//! precision names, the options of `create` and `compact`, and 64-bit integers from BigInts.
//! Every unknown name or impossible combination is an `InvalidArgument` error naming the
//! choices.

use chassis::{CompactOptions, Metric, Options, VectorLayout};
use napi::bindgen_prelude::*;

use crate::{invalid, specs_of, CompactArgs, CreateOptions};

pub(crate) fn metric_of(s: &str) -> napi::Result<Metric> {
    Metric::parse(s).ok_or_else(|| {
        invalid(format!(
            "unknown metric {s:?}: use \"cosine\", \"l2\" or \"ip\""
        ))
    })
}

pub(crate) fn codes_of(s: &str) -> napi::Result<chassis::CodeKind> {
    chassis::CodeKind::parse(s).ok_or_else(|| {
        invalid(format!(
            "codes must be one of {:?}, got {s:?}",
            crate::code_kinds()
        ))
    })
}

/// The precision a name means (`f32`, `f16`).
fn precision_of(p: &str) -> napi::Result<chassis::Precision> {
    chassis::Precision::parse(p)
        .ok_or_else(|| invalid(format!("precision must be 'f32' or 'f16', got {p:?}")))
}

/// The vector layout that `format` (3, 4, 5, 6 or 0 for the default) and `precision` name.
pub(crate) fn layout_of(format: u32, precision: &str) -> napi::Result<VectorLayout> {
    let precision = precision_of(precision)?;
    Ok(match (format, precision) {
        (3, chassis::Precision::F16) => {
            return Err(invalid(
                "format 3 stores f32 vectors: half precision is format 5 (leave format out)",
            ))
        }
        (_, chassis::Precision::F16) | (5, _) => VectorLayout::F16,
        (3, _) => VectorLayout::F32,
        (4, _) => VectorLayout::SplitHalves,
        (0 | 6, _) => VectorLayout::SplitPlanar,
        (f, _) => {
            return Err(invalid(format!(
                "format must be 3 (f32 vectors), 4 (split halves side by side), 5 (half \
                 precision) or 6 (planar split halves, the default), got {f}"
            )))
        }
    })
}

pub(crate) fn format_of(layout: VectorLayout) -> u32 {
    match layout {
        VectorLayout::F32 => 3,
        VectorLayout::SplitHalves => 4,
        VectorLayout::F16 => 5,
        VectorLayout::SplitPlanar => 6,
    }
}

pub(crate) fn options_of(o: &CreateOptions) -> napi::Result<Options> {
    let layout = layout_of(
        o.format.unwrap_or(0),
        o.precision.as_deref().unwrap_or("f32"),
    )?;
    Ok(Options::new(
        o.dims as usize,
        metric_of(o.metric.as_deref().unwrap_or("cosine"))?,
    )
    .m(o.m.unwrap_or(16) as usize)
    .ef_construction(o.ef_construction.unwrap_or(200) as usize)
    .vector_layout(layout)
    .codes(codes_of(o.codes.as_deref().unwrap_or("none"))?)
    .text_field_specs(specs_of(o.text_fields.as_deref().unwrap_or_default())))
}

/// `o` as the core's options, for a file now in layout `current`: a precision without a
/// format keeps the file's layout where it already stores that precision.
pub(crate) fn compact_options(
    o: &CompactArgs,
    current: VectorLayout,
) -> napi::Result<CompactOptions> {
    let vector_layout = match (o.format, o.precision.as_deref()) {
        (None, None) => None,
        (None, Some(p)) => Some(precision_of(p)?.layout_from(current)),
        (f, p) => Some(layout_of(f.unwrap_or(0), p.unwrap_or("f32"))?),
    };
    Ok(CompactOptions {
        m: o.m.map(|m| m as usize),
        ef_construction: o.ef_construction.map(|e| e as usize),
        threads: o.threads.unwrap_or(0) as usize,
        vector_layout,
        codes: o.codes.as_deref().map(codes_of).transpose()?,
        keep_graph: o.keep_graph.unwrap_or(false),
    })
}

pub(crate) fn bigint_u64(b: &BigInt, what: &str) -> napi::Result<u64> {
    let (negative, v, lossless) = b.get_u64();
    if negative || !lossless {
        return Err(invalid(format!(
            "{what} must be a non-negative 64-bit integer"
        )));
    }
    Ok(v)
}

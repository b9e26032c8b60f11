//! How to create an index ([`Options`]), the defaults, and the summary [`Index::info`](super::Index::info) gives.
//!
//! Invariant: [`Options::validate`] is the one place a caller's parameters are checked before
//! they reach a header; everything it accepts, `Header::validate` accepts too.

use crate::error::{Error, Result};
use crate::format::codes::CodeKind;
use crate::format::geometry::Geometry;
use crate::format::header;
use crate::format::vector::VectorLayout;
use crate::graph::Metric;
use crate::storage::NewFile;

/// Default M.
pub const DEFAULT_M: usize = 16;
/// Default ef_construction.
pub const DEFAULT_EF_CONSTRUCTION: usize = 200;
/// Default ef for searches that don't name one.
pub const DEFAULT_EF_SEARCH: usize = 64;
/// Default most layers per node.
pub const DEFAULT_MAX_LAYERS: usize = 16;
/// Default seed of the level generator.
pub const DEFAULT_SEED: u64 = 0x00C4_A551_5EED;

/// The precision vectors are stored in ([`Options::precision`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// 32-bit floats, bit for bit as given (formats 3 and 4).
    #[default]
    F32,
    /// IEEE 754 binary16: half the bytes, each value rounded to the nearest half.
    F16,
}

impl Precision {
    /// The name the front ends use: `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }

    /// The precision named `f32` or `f16` (also `full` and `half`).
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "f32" | "full" | "float32" => Some(Precision::F32),
            "f16" | "half" | "float16" => Some(Precision::F16),
            _ => None,
        }
    }

    /// The layout a file now in `current` is rewritten in when this precision and no format
    /// are asked for (compaction): its own where it already stores this precision (a format
    /// 3 or 4 file asked for f32 stays format 3 or 4), else this precision's default layout
    /// (half precision: format 5; f32 from a half precision file: [`VectorLayout::default`],
    /// which a file with codes stores side by side, [`VectorLayout::for_codes`]).
    pub fn layout_from(self, current: VectorLayout) -> VectorLayout {
        match self {
            _ if Precision::of(current) == self => current,
            Precision::F16 => VectorLayout::F16,
            Precision::F32 => VectorLayout::default(),
        }
    }

    /// The precision of a vector layout.
    pub fn of(layout: VectorLayout) -> Precision {
        if layout == VectorLayout::F16 {
            Precision::F16
        } else {
            Precision::F32
        }
    }
}

/// How to create an index.
#[derive(Clone, Debug)]
pub struct Options {
    /// Vector dimensions (1..=65,536).
    pub dims: usize,
    /// Distance metric; fixed for the life of the file.
    pub metric: Metric,
    /// M: neighbors per node on upper layers (2..=32,767); layer 0 keeps 2M.
    pub m: usize,
    /// Beam width while building (≥ 1).
    pub ef_construction: usize,
    /// Seed of the level generator: the same seed and inserts give the same graph.
    pub seed: u64,
    /// Most layers per node (1..=64).
    pub max_layers: usize,
    /// Segment and heap geometry; `None` for the production layout. Tests use
    /// [`Geometry::small_for_tests`] to cross many regions with few vectors.
    pub geometry: Option<Geometry>,
    /// How vectors are stored. The default, [`VectorLayout::SplitPlanar`] (format 6), lets
    /// searches read half of each vector while they walk the graph, and keeps those halves
    /// together (a new file with codes keeps them side by side instead, as format 4:
    /// [`VectorLayout::for_codes`]); [`VectorLayout::SplitHalves`] (format 4) splits each
    /// vector the same way but keeps its halves side by side, which releases before format 6
    /// can open;
    /// [`VectorLayout::F32`] writes a format 3 file, which releases that read only format 3
    /// can open;
    /// [`VectorLayout::F16`] stores half precision (half the vector bytes, each value rounded
    /// to the nearest binary16; read version 5): see [`Options::precision`].
    pub vector_layout: VectorLayout,
    /// Quantized codes kept beside the vectors ([`CodeKind::Int8`]: one byte per dimension)
    /// for searches to walk the graph by, ranking what they find exactly; a file with codes has
    /// write version 6. The default, [`CodeKind::None`], walks by the vectors.
    pub codes: CodeKind,
    /// Metadata fields whose text is indexed for full-text and hybrid search
    /// ([`crate::Index::search_text`]); empty (the default) for none. A file with a full-text
    /// index has write version 9.
    pub text_fields: Vec<crate::text::TextFieldSpec>,
}

impl Options {
    /// Defaults: M = 16, ef_construction = 200, 16 layers, production geometry.
    pub fn new(dims: usize, metric: Metric) -> Options {
        Options {
            dims,
            metric,
            m: DEFAULT_M,
            ef_construction: DEFAULT_EF_CONSTRUCTION,
            seed: DEFAULT_SEED,
            max_layers: DEFAULT_MAX_LAYERS,
            geometry: None,
            vector_layout: VectorLayout::default(),
            codes: CodeKind::None,
            text_fields: Vec::new(),
        }
    }

    /// Sets the metadata fields indexed for full-text search, each with the default analysis
    /// (Unicode words, lowercased); see [`crate::text::TextFieldSpec`] for stemming and stop
    /// words.
    pub fn text_fields<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Options {
        self.text_fields = names
            .into_iter()
            .map(crate::text::TextFieldSpec::new)
            .collect();
        self
    }

    /// Sets the fields indexed for full-text search, with their analysis.
    pub fn text_field_specs(mut self, specs: Vec<crate::text::TextFieldSpec>) -> Options {
        self.text_fields = specs;
        self
    }

    /// Sets the codes kept beside the vectors.
    pub fn codes(mut self, codes: CodeKind) -> Options {
        self.codes = codes;
        self
    }

    /// Sets the vector layout.
    pub fn vector_layout(mut self, layout: VectorLayout) -> Options {
        self.vector_layout = layout;
        self
    }

    /// Sets the precision vectors are stored in: [`Precision::F16`] keeps each value as an
    /// IEEE binary16 (half the vector bytes; every value rounded to the nearest half when it
    /// is added, a magnitude of 65,520 or more refused; distances are exact to the stored
    /// values, and `get` returns them); [`Precision::F32`] the values as given, in the
    /// default layout (format 6).
    pub fn precision(mut self, precision: Precision) -> Options {
        self.vector_layout = match precision {
            Precision::F16 => VectorLayout::F16,
            Precision::F32 if self.vector_layout == VectorLayout::F16 => VectorLayout::default(),
            Precision::F32 => self.vector_layout,
        };
        self
    }

    /// Sets M.
    pub fn m(mut self, m: usize) -> Options {
        self.m = m;
        self
    }

    /// Sets ef_construction.
    pub fn ef_construction(mut self, ef: usize) -> Options {
        self.ef_construction = ef;
        self
    }

    /// Sets the level seed.
    pub fn seed(mut self, seed: u64) -> Options {
        self.seed = seed;
        self
    }

    /// Sets the geometry.
    pub fn geometry(mut self, g: Geometry) -> Options {
        self.geometry = Some(g);
        self
    }

    pub(super) fn validate(&self) -> Result<NewFile> {
        if self.dims == 0 || self.dims > header::MAX_DIMS as usize {
            return Err(Error::InvalidArgument(format!(
                "dims must be 1..=65536, got {}",
                self.dims
            )));
        }
        if self.m < 2 || self.m > header::MAX_M as usize {
            return Err(Error::InvalidArgument(format!(
                "M must be 2..=32767 (M0 = 2M must fit in a u16), got {}",
                self.m
            )));
        }
        if self.ef_construction == 0 || self.ef_construction > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "ef_construction must be at least 1".into(),
            ));
        }
        if self.max_layers == 0 || self.max_layers > header::MAX_LAYERS_LIMIT as usize {
            return Err(Error::InvalidArgument("max_layers must be 1..=64".into()));
        }
        let (dims, m, layers) = (self.dims as u32, self.m as u32, self.max_layers as u32);
        let layout = self.vector_layout.for_codes(self.codes);
        let geometry = self
            .geometry
            .unwrap_or_else(|| Geometry::for_file(dims, m, layers, layout, self.codes));
        if let Some(why) = geometry.validate(m, layers) {
            return Err(Error::InvalidArgument(format!("geometry: {why}")));
        }
        crate::text::fields_of(&self.text_fields)?;
        Ok(NewFile {
            dims,
            metric: self.metric.code(),
            m,
            max_layers: layers,
            ef_construction: self.ef_construction as u32,
            seed: self.seed,
            geometry,
            layout,
            codes: self.codes,
        })
    }
}

/// A summary of an open index, for `chassis info` and bindings.
#[derive(Clone, Debug)]
pub struct Info {
    /// Dimensions.
    pub dims: usize,
    /// Metric.
    pub metric: Metric,
    /// M.
    pub m: usize,
    /// M0.
    pub m0: usize,
    /// ef_construction.
    pub ef_construction: usize,
    /// Live vectors this index sees (pending adds and deletes included).
    pub count: u64,
    /// Deleted slots this index sees (pending deletes included).
    pub deleted: u64,
    /// Committed slot count N.
    pub committed_count: u64,
    /// Committed deleted count.
    pub committed_deleted: u64,
    /// Slots written (N plus pending adds).
    pub slots: u64,
    /// Delete epoch E.
    pub delete_epoch: u64,
    /// Pending delete epoch in the header.
    pub pending_delete_epoch: u64,
    /// Header sequence.
    pub sequence: u64,
    /// The id an add without one would get, as of the last flush (one above every id the
    /// file has stored).
    pub next_id: u64,
    /// Which copy holds the newest header (`A` or `B`).
    pub header_copy: char,
    /// Entry point's top layer.
    pub max_layer: usize,
    /// Segment geometry: β, K, and slots per steady segment C.
    pub geometry: Geometry,
    /// Segments mapped.
    pub segments: u64,
    /// Upper-heap chunks mapped.
    pub upper_heap_chunks: u64,
    /// Table pages mapped.
    pub table_pages: u64,
    /// Whether ids were ever given by the caller.
    pub custom_ids: bool,
    /// Why the index is read-only, if it is.
    pub read_only: Option<&'static str>,
    /// Logical file length in bytes.
    pub file_bytes: u64,
    /// Read and write versions of the file.
    pub versions: (u32, u32),
    /// How the file stores vectors.
    pub vector_layout: VectorLayout,
    /// The codes the file keeps beside its vectors.
    pub codes: CodeKind,
    /// Whether searches walk by those codes (their codebook is trained: the file has held
    /// [`crate::format::codes::TRAIN_MIN`] vectors).
    pub codes_trained: bool,
    /// Whether searches walk this file's split vectors by exact distances (its data proved
    /// too fine for their high halves; see docs/ARCHITECTURE.md).
    pub exact_walk: bool,
    /// Bytes of the metadata heap in use (pending adds included).
    pub metadata_bytes: u64,
    /// Metadata-heap chunks.
    pub metadata_chunks: u64,
    /// Metadata fields this handle has indexed (those its filters named).
    pub indexed_fields: Vec<String>,
    /// The file's identity as 32 lowercase hex digits, or `None` for a file no release with
    /// identities has committed to yet (docs/FORMAT.md, "File identity").
    pub file_id: Option<String>,
    /// The user version the last flush committed ([`crate::Index::set_user_version`]).
    pub user_version: u64,
    /// The fields indexed for full-text search (empty: none).
    pub text_fields: Vec<crate::text::TextFieldSpec>,
    /// Segments of the full-text index (stored, then this handle's in memory).
    pub text_segments: (u64, u64),
}

/// A file identity as 32 lowercase hex digits, `None` when it is all zero (no identity).
pub fn file_id_hex(id: &[u8; 16]) -> Option<String> {
    if *id == [0u8; 16] {
        return None;
    }
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::{Precision, VectorLayout};

    /// Fails if a compaction asked only for a precision rewrites a file that already stores
    /// it in another layout, or doesn't convert one that doesn't.
    #[test]
    fn a_precision_keeps_a_layout_that_already_stores_it() {
        use VectorLayout::*;
        for l in [F32, SplitHalves, SplitPlanar] {
            assert_eq!(Precision::F32.layout_from(l), l);
            assert_eq!(Precision::F16.layout_from(l), F16);
        }
        assert_eq!(Precision::F16.layout_from(F16), F16);
        assert_eq!(Precision::F32.layout_from(F16), VectorLayout::default());
    }
}

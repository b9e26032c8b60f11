//! Chassis: embedded vector search in one crash-safe file.
//!
//! An [`Index`] is an HNSW graph stored in a single file in format 3 (`docs/FORMAT.md`,
//! ADR-0008): append-only segments of slots (id, vector, level-0 neighbor record), upper
//! layers in heap chunks, and two checksummed header copies that commit every change at once.
//!
//! ```
//! use chassis::{Index, Metric, Options};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("docs.chassis");
//! let index = Index::create(&path, Options::new(3, Metric::Cosine))?;
//! let a = index.add(&[1.0, 0.0, 0.0])?;
//! index.add_with_id(42, &[0.0, 1.0, 0.0])?;
//! index.flush()?; // durable from here on
//! let hits = index.search(&[0.9, 0.1, 0.0], 1, 64)?;
//! assert_eq!(hits[0].id, a);
//! # Ok::<(), chassis::Error>(())
//! ```
//!
//! Layers, imports pointing down only: [`os`] (the only code touching the OS), [`format`](mod@format)
//! (pure byte layouts), [`storage`] (regions and the commit protocol), [`graph`] (HNSW over a
//! trait, no files), then [`Index`], [`IndexReader`] and their online backup (`backup`).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod backup;
pub mod collection;
mod error;
pub mod filter;
pub mod format;
pub mod graph;
mod idmap;
mod index;
#[cfg(feature = "mutants")]
#[doc(hidden)]
pub mod mutants;
#[cfg(not(feature = "mutants"))]
mod mutants;
pub mod os;
mod query;
mod reader;
pub mod storage;
pub mod text;

pub use backup::{apply_patch, BackupReport};
pub use collection::Collection;
pub use error::{Error, Result};
pub use filter::Filter;
pub use format::codes::CodeKind;
pub use format::geometry::Geometry;
pub use format::metadata::{Metadata, Value};
pub use format::vector::VectorLayout;
pub use graph::distance::{Metric, SimdLevel};
pub use index::{
    compacting_path, migrating_path, CheckReport, CompactOptions, CompactReport, Index, Info,
    OpenReport, Options, Precision, DEFAULT_EF_CONSTRUCTION, DEFAULT_EF_SEARCH, DEFAULT_M,
    DEFAULT_MAX_LAYERS, DEFAULT_SEED,
};
pub use os::budget::{resident_bytes, set_resident_limit};
pub use query::Neighbor;
pub use reader::{
    FieldSummary, IndexReader, MetadataSummary, ReaderStats, Snapshot, HEADER_REREADS,
};
pub use text::{Fusion, HybridHit, HybridOptions, LegHit, TextFieldSpec, TextHit};

//! `chassis`: create, fill, search and inspect Chassis index files.
//!
//! Exit codes: 0 success; 1 an error (one line on stderr, `chassis: error: ...`); 2 bad
//! arguments (from the argument parser, with usage).

mod data;
mod demo;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use chassis::{Index, IndexReader, Metric, Options};

#[derive(Parser)]
#[command(name = "chassis", version, about = "Embedded vector search in one crash-safe file", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new, empty index file.
    #[command(after_help = "Example:\n  chassis create docs.chassis --dims 384 --metric cosine")]
    Create {
        /// Index file to create (must not exist).
        path: PathBuf,
        /// Vector dimensions.
        #[arg(long)]
        dims: usize,
        /// Distance: cosine, l2 (squared Euclidean) or ip (inner product).
        #[arg(long, value_parser = parse_metric)]
        metric: Metric,
        /// Neighbors per node (2..=32767); layer 0 keeps 2M.
        #[arg(long, default_value_t = chassis::DEFAULT_M)]
        m: usize,
        /// Beam width while building.
        #[arg(long, default_value_t = chassis::DEFAULT_EF_CONSTRUCTION)]
        ef_construction: usize,
    },
    /// Add vectors from a .fvecs or .npy (2-D float32/float64) file; flushes once at the end.
    #[command(
        after_help = "Example:\n  chassis import docs.chassis embeddings.npy\n\n\
        The index assigns ids consecutively: the first import into an empty index gives ids\n\
        0..n-1 in file order. Nothing is durable until the final flush completes."
    )]
    Import {
        /// Index file (opened as the writer).
        path: PathBuf,
        /// Vectors: .fvecs or .npy.
        file: PathBuf,
    },
    /// Search with every vector of a query file.
    #[command(
        after_help = "Example:\n  chassis search docs.chassis --query-file queries.fvecs -k 10 --json"
    )]
    Search {
        /// Index file. Search always goes through the lock-free reader: it works while a
        /// writer holds the file and sees what is committed when each query runs.
        path: PathBuf,
        /// Read without the writer lock (always the case for search; accepted for scripts
        /// that say so explicitly).
        #[arg(long)]
        read_only: bool,
        /// Queries: .fvecs or .npy.
        #[arg(long)]
        query_file: PathBuf,
        /// Results per query.
        #[arg(short, long, default_value_t = 10)]
        k: usize,
        /// Search beam width (raised to k if smaller).
        #[arg(long, default_value_t = chassis::DEFAULT_EF_SEARCH)]
        ef: usize,
        /// One JSON line per query: {"ids": [...], "distances": [...]}, nearest first.
        #[arg(long)]
        json: bool,
    },
    /// Describe an index file.
    #[command(after_help = "Example:\n  chassis info docs.chassis --json")]
    Info {
        /// Index file. Info never takes the writer lock: it works while a writer holds the
        /// file and describes what is committed, plus the writer's routing count.
        path: PathBuf,
        /// Read without the writer lock (always the case for info; accepted for scripts that
        /// say so explicitly).
        #[arg(long)]
        read_only: bool,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite the index into a new file with only its live vectors and a rebuilt graph
    /// (reclaims deleted space; the only way to change M). Every id is kept.
    #[command(after_help = "Example:\n  chassis compact docs.chassis --m 24\n\n\
        Needs free space for a second copy beside the file. Pending work of other writers is\n\
        not affected: compact takes the writer lock. Readers move to the new file by themselves.")]
    Compact {
        /// Index file (opened as the writer).
        path: PathBuf,
        /// New M (default: keep).
        #[arg(long)]
        m: Option<usize>,
        /// New ef_construction for the rebuilt graph (default: keep).
        #[arg(long)]
        ef_construction: Option<usize>,
    },
    /// Convert an index from another library into a new Chassis file.
    #[command(
        after_help = "Example:\n  chassis migrate hnswlib index.bin docs.chassis --metric cosine\n\n\
        Converts the graph of an hnswlib file (save_index, hnswlib 0.7 or 0.8) instead of\n\
        rebuilding it: labels become ids, deleted marks become deletes. hnswlib does not store\n\
        its space, so name it: l2, ip or cosine."
    )]
    Migrate {
        /// Source format (only `hnswlib` so far).
        #[arg(value_parser = ["hnswlib"])]
        from: String,
        /// Source file.
        src: PathBuf,
        /// New Chassis file to write (must not exist).
        dst: PathBuf,
        /// The hnswlib space the index was built with: l2, ip or cosine.
        #[arg(long, value_parser = parse_metric)]
        metric: Metric,
    },
    /// Build and search an index on built-in synthetic data; reports recall, QPS, build time
    /// and file size.
    #[command(after_help = "Example:\n  chassis demo --n 20000 --dims 128")]
    Demo {
        /// Base vectors.
        #[arg(long, default_value_t = 20_000)]
        n: usize,
        /// Dimensions.
        #[arg(long, default_value_t = 128)]
        dims: usize,
        /// Queries (held out from the base set).
        #[arg(long, default_value_t = 500)]
        queries: usize,
        /// Results per query.
        #[arg(short, long, default_value_t = 10)]
        k: usize,
        /// Search beam width.
        #[arg(long, default_value_t = chassis::DEFAULT_EF_SEARCH)]
        ef: usize,
        /// Keep the index at this path (replaced if it exists) instead of a temporary file.
        #[arg(long)]
        path: Option<PathBuf>,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    Metric::parse(s).ok_or_else(|| format!("unknown metric '{s}' (use cosine, l2 or ip)"))
}

pub(crate) fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Create {
            path,
            dims,
            metric,
            m,
            ef_construction,
        } => {
            let opts = Options::new(dims, metric)
                .m(m)
                .ef_construction(ef_construction);
            Index::create(&path, opts)
                .with_context(|| format!("cannot create {}", path.display()))?;
            println!(
                "created {} ({dims} dims, {}, M={m})",
                path.display(),
                metric.name()
            );
        }
        Command::Import { path, file } => {
            let mut index =
                Index::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            let m = data::read_vectors_for(&file, index.dims())?;
            let t = Instant::now();
            let bar = progress(m.rows as u64, "importing");
            let mut first = None;
            for i in 0..m.rows {
                let id = index
                    .add(m.row(i))
                    .with_context(|| format!("vector {i} of {}", file.display()))?;
                first.get_or_insert(id);
                bar.inc(1);
            }
            index
                .flush()
                .context("flush failed; nothing from this import was committed")?;
            bar.finish_and_clear();
            let secs = t.elapsed().as_secs_f64();
            match first {
                Some(f) => println!(
                    "imported {} vectors (ids {}..={}) in {secs:.2} s; index holds {}",
                    m.rows,
                    f,
                    f + m.rows as u64 - 1,
                    index.len()
                ),
                None => println!("imported 0 vectors; index holds {}", index.len()),
            }
        }
        Command::Search {
            path,
            query_file,
            k,
            ef,
            json,
            read_only: _,
        } => {
            let index = IndexReader::open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let q = data::read_vectors_for(&query_file, index.dims())?;
            for i in 0..q.rows {
                let hits = index
                    .search(q.row(i), k, ef)
                    .with_context(|| format!("query {i}"))?;
                if json {
                    let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
                    let d: Vec<f32> = hits.iter().map(|h| h.distance).collect();
                    println!("{}", serde_json::json!({ "ids": ids, "distances": d }));
                } else {
                    println!("query {i}:");
                    println!("  {:>5}  {:>20}  {:>12}", "rank", "id", "distance");
                    for (r, h) in hits.iter().enumerate() {
                        println!("  {:>5}  {:>20}  {:>12.6}", r + 1, h.id, h.distance);
                    }
                }
            }
        }
        Command::Info {
            path,
            json,
            read_only: _,
        } => {
            let index = Index::open_read_only(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let i = index.info()?;
            let routing_count = IndexReader::open(&path)?.snapshot()?.routing_count();
            let allocated = {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&path)?.blocks() * 512
            };
            let g = i.geometry;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "dims": i.dims, "metric": i.metric.name(), "m": i.m, "m0": i.m0,
                        "ef_construction": i.ef_construction,
                        "count": i.count, "deleted": i.deleted, "committed_count": i.committed_count,
                        "delete_epoch": i.delete_epoch, "pending_delete_epoch": i.pending_delete_epoch,
                        "sequence": i.sequence, "header_copy": i.header_copy.to_string(),
                        "read_version": i.versions.0, "write_version": i.versions.1,
                        "segment_base_slots": 1u64 << g.segment_base_log2,
                        "segment_doublings": g.segment_doublings,
                        "segment_slots": 1u64 << (g.segment_base_log2 + g.segment_doublings),
                        "segments": i.segments, "upper_heap_chunks": i.upper_heap_chunks,
                        "table_pages": i.table_pages, "custom_ids": i.custom_ids,
                        "file_bytes": i.file_bytes, "allocated_bytes": allocated,
                        "routing_count": routing_count,
                    })
                );
            } else {
                println!("file:          {}", path.display());
                println!(
                    "format:        read version {}, write version {}",
                    i.versions.0, i.versions.1
                );
                println!(
                    "header:        sequence {} in copy {}",
                    i.sequence, i.header_copy
                );
                println!(
                    "vectors:       {} live, {} deleted, {} committed slots",
                    i.count, i.deleted, i.committed_count
                );
                println!("dims/metric:   {} / {}", i.dims, i.metric.name());
                println!(
                    "graph:         M={} M0={} ef_construction={} top layer {}",
                    i.m, i.m0, i.ef_construction, i.max_layer
                );
                println!(
                    "delete epoch:  {} (pending {})",
                    i.delete_epoch, i.pending_delete_epoch
                );
                println!("routing count: {routing_count} (slots a writer has published)");
                println!(
                    "geometry:      K={} C={} slots; {} segments, {} heap chunks, {} table pages",
                    g.segment_doublings,
                    1u64 << (g.segment_base_log2 + g.segment_doublings),
                    i.segments,
                    i.upper_heap_chunks,
                    i.table_pages
                );
                println!(
                    "ids:           {}",
                    if i.custom_ids {
                        "caller-assigned"
                    } else {
                        "index-assigned"
                    }
                );
                println!(
                    "size:          {} bytes logical, {} allocated",
                    i.file_bytes, allocated
                );
            }
        }
        Command::Compact {
            path,
            m,
            ef_construction,
        } => {
            let mut index =
                Index::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            let bar = progress(index.len() as u64, "compacting");
            let t = Instant::now();
            let r = index
                .compact_with_progress(chassis::CompactOptions { m, ef_construction }, |done, _| {
                    bar.set_position(done as u64)
                })
                .context("compaction failed; the index at the path is unchanged")?;
            bar.finish_and_clear();
            println!(
                "compacted {}: {} live vectors of {} slots, {} -> {} bytes, M = {}, in {:.2} s",
                path.display(),
                r.live,
                r.old_slots,
                r.old_bytes,
                r.new_bytes,
                index.info()?.m,
                t.elapsed().as_secs_f64()
            );
        }
        Command::Migrate {
            from: _,
            src,
            dst,
            metric,
        } => {
            let bar = progress(0, "migrating");
            let t = Instant::now();
            let index = Index::migrate_hnswlib_with_progress(&src, &dst, metric, |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })
            .with_context(|| format!("cannot migrate {}", src.display()))?;
            bar.finish_and_clear();
            let i = index.info()?;
            println!(
                "migrated {} to {}: {} vectors ({} deleted), {} dims, M = {}, in {:.2} s",
                src.display(),
                dst.display(),
                i.count,
                i.deleted,
                i.dims,
                i.m,
                t.elapsed().as_secs_f64()
            );
        }
        Command::Demo {
            n,
            dims,
            queries,
            k,
            ef,
            path,
            json,
        } => {
            if n == 0 || queries == 0 || k == 0 || k > n || dims == 0 {
                bail!("demo needs n ≥ k ≥ 1, queries ≥ 1 and dims ≥ 1");
            }
            demo::run(demo::DemoArgs {
                n,
                dims,
                queries,
                k,
                ef,
                path,
                json,
            })?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chassis: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

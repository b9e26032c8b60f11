//! `chassis`: create, fill, search and inspect Chassis index files.
//!
//! Exit codes: 0 success; 1 an error (one line on stderr, `chassis: error: ...`); 2 bad
//! arguments (from the argument parser, with usage); 3 `check` found problems.

mod commands;
mod data;
mod demo;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use chassis::{Index, Metric, Options};

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
        /// File format: 6 (split halves, walked faster, a segment's high halves together; the
        /// default, stored side by side as format 4 with --codes), 4 (the same halves side by side, for files releases before format 6 must
        /// open) or 3 (f32 vectors, for files that releases reading only format 3 must open).
        #[arg(long, value_parser = parse_format, default_value = "6")]
        format: chassis::VectorLayout,
        /// Quantized codes searches walk by: none (the default), int8 (one byte per dimension
        /// beside each vector, trained once the file holds 1,000 vectors) or int4 (half a byte:
        /// for files larger than memory). Every returned distance stays exact. Files with int8
        /// codes have write version 6, with int4 codes 7.
        #[arg(long, value_parser = parse_codes, default_value = "none")]
        codes: chassis::CodeKind,
        /// Precision of the stored vectors: f32 (the default) or f16 (half the vector bytes,
        /// each value rounded to the nearest half float; format 5, read version 5).
        #[arg(long, value_parser = parse_precision, default_value = "f32")]
        precision: chassis::Precision,
        /// A metadata field whose text is indexed for full-text and hybrid search (repeat it
        /// for several): NAME, or NAME:stem,stop_words (English stemming, English stop words
        /// left out), NAME:case (keep case). A file with text fields has write version 9.
        #[arg(long = "text-field", value_name = "FIELD", value_parser = parse_text_field)]
        text_fields: Vec<chassis::TextFieldSpec>,
    },
    /// Add vectors from a file: .fvecs, .bvecs, .npy (2-D float32/float64) or JSON lines.
    #[command(
        after_help = "Examples:\n  chassis import docs.chassis embeddings.npy\n  \
        chassis import docs.chassis docs.jsonl            # {\"id\": 7, \"vector\": [...], \"metadata\": {...}} per line\n  \
        chassis import docs.chassis emb.npy --ids ids.npy --flush-every 100000\n  \
        chassis import docs.chassis emb.npy --metadata attrs.jsonl   # line i: row i's metadata\n\n\
        Without ids the index assigns them consecutively (the first import into an empty index\n\
        gives 0..n-1 in file order). By default nothing is durable until the one flush at the\n\
        end: an interrupted import commits nothing. --flush-every N commits in pieces instead:\n\
        an interrupted import keeps every piece flushed before it."
    )]
    Import {
        /// Index file (opened as the writer).
        path: PathBuf,
        /// Vectors: .fvecs, .bvecs, .npy or .jsonl.
        file: PathBuf,
        /// Ids for the vectors, in order: a 1-D uint64 .npy or a text file of one id per line.
        #[arg(long)]
        ids: Option<PathBuf>,
        /// Metadata for the vectors: JSON lines, line i for row i (a JSON object; an empty line
        /// or null for none).
        #[arg(long)]
        metadata: Option<PathBuf>,
        /// Vectors added per step (progress granularity).
        #[arg(long, default_value_t = 10_000)]
        batch: usize,
        /// Flush after every N vectors, committing the import in pieces (0: once, at the end).
        #[arg(long, default_value_t = 0)]
        flush_every: usize,
        /// Threads linking each batch into the graph (0: one per CPU; 1: the same graph on
        /// every run).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Search with a vector, a query file, or JSON lines on stdin.
    #[command(
        after_help = "Examples:\n  chassis search docs.chassis --query-file queries.fvecs -k 10 --json\n  \
        chassis search docs.chassis --vector 0.1,0.2,0.3,0.4\n  \
        chassis search docs.chassis --vector 0.1,0.2,0.3,0.4 --where '{\"tags\": {\"$contains\": \"django\"}}'\n  \
        chassis search docs.chassis --text \"crash safe vector search\"             # BM25\n  \
        chassis search docs.chassis --vector 0.1,0.2,0.3,0.4 --text \"vector search\"  # hybrid\n  \
        chassis search docs.chassis --query-file q.npy --text-file q.txt --json    # hybrid, one text per row\n  \
        echo '[0.1, 0.2, 0.3, 0.4]' | chassis search docs.chassis\n\n\
        Search always reads through the lock-free reader: it works while a writer holds the file\n\
        and sees what is committed when each query runs."
    )]
    Search {
        /// Index file.
        path: PathBuf,
        /// Read without the writer lock (always the case for search; accepted for scripts
        /// that say so explicitly).
        #[arg(long)]
        read_only: bool,
        /// One query, as comma-separated numbers.
        #[arg(long, allow_hyphen_values = true)]
        vector: Option<String>,
        /// Only vectors whose metadata passes this filter (JSON: {"tenant": "acme"},
        /// {"year": {"$gte": 2020}}, {"$or": [...]}; see docs/FILTERS.md).
        #[arg(long = "where", value_name = "FILTER")]
        filter: Option<String>,
        /// Queries: .fvecs, .bvecs, .npy or .jsonl.
        #[arg(long)]
        query_file: Option<PathBuf>,
        /// Results per query.
        #[arg(short, long, default_value_t = 10)]
        k: usize,
        /// Search beam width (raised to k if smaller).
        #[arg(long, default_value_t = chassis::DEFAULT_EF_SEARCH)]
        ef: usize,
        /// Full-text search: this text (BM25 over the file's text fields); with a vector or
        /// query file, hybrid search with this text for every query.
        #[arg(long)]
        text: Option<String>,
        /// Query texts, one per line: one per query of --query-file (hybrid), or each a
        /// full-text search of its own.
        #[arg(long)]
        text_file: Option<PathBuf>,
        /// Hybrid fusion: rrf (reciprocal rank fusion, k 60; the default) or relative_score.
        #[arg(long, default_value = "rrf")]
        fusion: String,
        /// Hybrid weights of the vector and the text leg, as V,T.
        #[arg(long, default_value = "1,1")]
        weights: String,
        /// Candidates each hybrid leg returns before fusion (default max(k, 50)).
        #[arg(long)]
        depth: Option<usize>,
        /// One JSON line per query: {"ids": [...], "distances": [...]}, nearest first ("scores"
        /// instead of "distances" for text and hybrid searches, best first).
        #[arg(long)]
        json: bool,
    },
    /// Show or set the metadata fields indexed for full-text search.
    #[command(
        name = "text-fields",
        after_help = "Examples:\n  chassis text-fields docs.chassis\n  \
        chassis text-fields docs.chassis text title:stem,stop_words\n  \
        chassis text-fields docs.chassis --none\n\n\
        Setting indexes every document already stored, then flushes (write version 9)."
    )]
    TextFields {
        /// Index file (opened as the writer when setting).
        path: PathBuf,
        /// Fields to index from now on: NAME or NAME:stem,stop_words,case.
        #[arg(value_parser = parse_text_field)]
        fields: Vec<chassis::TextFieldSpec>,
        /// Drop the full-text index.
        #[arg(long)]
        none: bool,
    },
    /// Print stored vectors by id.
    #[command(after_help = "Example:\n  chassis get docs.chassis 7 42 --json")]
    Get {
        /// Index file (read without the lock).
        path: PathBuf,
        /// Ids.
        #[arg(required = true)]
        ids: Vec<u64>,
        /// One JSON line per id: {"id": 7, "vector": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Delete vectors by id and flush.
    #[command(
        after_help = "Examples:\n  chassis delete docs.chassis 7 42\n  chassis delete docs.chassis --ids-file stale.txt\n\n\
        All the ids are deleted in one flush, or none: an unknown id is an error before anything\n\
        is committed. --no-flush only checks that every id exists and commits nothing."
    )]
    Delete {
        /// Index file (opened as the writer).
        path: PathBuf,
        /// Ids.
        ids: Vec<u64>,
        /// More ids: a 1-D uint64 .npy or one id per line.
        #[arg(long)]
        ids_file: Option<PathBuf>,
        /// Check the ids and commit nothing.
        #[arg(long)]
        no_flush: bool,
    },
    /// Write every live vector to .npy or .fvecs, and their ids to a .npy beside it.
    #[command(
        after_help = "Example:\n  chassis export docs.chassis out.npy     # also writes out.ids.npy (uint64)"
    )]
    Export {
        /// Index file (read without the lock).
        path: PathBuf,
        /// Output: .npy (float32, n x dims) or .fvecs, in slot order.
        out: PathBuf,
        /// Where the ids go (default: the output with extension .ids.npy).
        #[arg(long)]
        ids_out: Option<PathBuf>,
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
    /// Print the user version the last flush committed, or set a new one (committed at once,
    /// alone), like PRAGMA user_version.
    #[command(
        name = "user-version",
        after_help = "Examples:\n  chassis user-version docs.chassis\n  chassis user-version docs.chassis 42\n\n\
        The user version is the application's own number (a transaction id, a log position),\n\
        committed by a flush together with the data, so a reader always sees the one that was\n\
        flushed with the state it reads, after any crash. Libraries set it before a flush\n\
        (Rust Index::set_user_version, Python index.user_version = n, C chassis_set_user_version)."
    )]
    UserVersion {
        /// Index file (opened as the writer when setting).
        path: PathBuf,
        /// The version to commit (a u64); omit it to print the committed one.
        version: Option<u64>,
    },
    /// Check the file's integrity, like PRAGMA integrity_check.
    #[command(after_help = "Example:\n  chassis check docs.chassis --recall 200\n\n\
        Checks both header copies, table pages and region offsets, every slot header, every\n\
        neighbor id, upper-layer references and layer counts, the entry point, reachability of\n\
        every live vector, live-id uniqueness, codes against their vectors and the full-text\n\
        index against the documents. Prints one line per problem and exits 3 if\n\
        there is any; 0 and \"ok\" when all is well. Reads without the lock.")]
    Check {
        /// Index file.
        path: PathBuf,
        /// Also measure recall@10 on this many sampled stored vectors against brute force.
        #[arg(long, default_value_t = 0)]
        recall: usize,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measure recall and queries per second over an ef sweep.
    #[command(
        after_help = "Example:\n  chassis bench docs.chassis --queries q.fvecs --groundtruth gt.ivecs --ef 16,32,64,128\n\n\
        Without --groundtruth the exact answers come from brute force over the live vectors.\n\
        Reports recall@k, QPS on one thread and on --threads threads, and p50/p99 latency."
    )]
    Bench {
        /// Index file (read without the lock).
        path: PathBuf,
        /// Queries: .fvecs, .bvecs or .npy.
        #[arg(long)]
        queries: PathBuf,
        /// Exact neighbor ids per query (.ivecs), as the index's ids.
        #[arg(long)]
        groundtruth: Option<PathBuf>,
        /// Results per query.
        #[arg(short, long, default_value_t = 10)]
        k: usize,
        /// Beam widths to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [16usize, 32, 64, 128, 256])]
        ef: Vec<usize>,
        /// Threads for the multi-thread pass (0: every core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// One JSON line per ef.
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
        /// Threads linking the rebuilt graph (0: every core; 1: the same graph every run).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Format of the new file: 3 (f32 vectors, readable by releases that read only
        /// format 3), 4 (split halves side by side) or 6 (planar split halves). Default: keep
        /// the file's.
        #[arg(long, value_parser = parse_format)]
        format: Option<chassis::VectorLayout>,
        /// Codes of the new file: none, int8 or int4. Default: keep the file's.
        #[arg(long, value_parser = parse_codes)]
        codes: Option<chassis::CodeKind>,
        /// Precision of the new file's vectors: f32 or f16. Default: keep the file's. Without
        /// --format, a file already in that precision keeps its format; f32 from a half
        /// precision file is format 6 (4 with codes).
        #[arg(long, value_parser = parse_precision)]
        precision: Option<chassis::Precision>,
        /// Keep the graph instead of rebuilding it, its slots renumbered so that neighbors sit
        /// near each other in the file (faster searches, same answers). Needs no deleted
        /// vectors and the same M and ef_construction.
        #[arg(long)]
        keep_graph: bool,
    },
    /// Copy the last committed state of an index to another file while its writer keeps
    /// working (an online backup); repeat into the same file to ship only what changed.
    #[command(
        after_help = "Example:\n  chassis backup docs.chassis /mnt/backup/docs.chassis\n\n\
        Reads SRC as a reader (no lock: a writer in another process keeps adding and\n\
        flushing). DST, if it holds an earlier backup of SRC, gets only what changed; if it is\n\
        missing or holds another index, a full copy is written beside it and renamed over it.\n\
        Unflushed writes are not in the copy. DST always opens, even after a crash."
    )]
    Backup {
        /// Index file to copy.
        src: PathBuf,
        /// Backup file (an earlier backup of SRC is brought up to date).
        dst: PathBuf,
        /// One JSON line instead of text.
        #[arg(long)]
        json: bool,
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

fn parse_format(s: &str) -> Result<chassis::VectorLayout, String> {
    match s {
        "3" => Ok(chassis::VectorLayout::F32),
        "4" => Ok(chassis::VectorLayout::SplitHalves),
        "5" => Ok(chassis::VectorLayout::F16),
        "6" => Ok(chassis::VectorLayout::SplitPlanar),
        _ => Err(format!(
            "unknown format '{s}' (3: f32 vectors; 4: split halves side by side; 5: half \
             precision; 6: planar split halves, the default)"
        )),
    }
}

fn parse_precision(s: &str) -> Result<chassis::Precision, String> {
    chassis::Precision::parse(s)
        .ok_or_else(|| format!("unknown precision '{s}' (f32, the default, or f16)"))
}

/// The layout a `--format` and a `--precision` name together (f16 is format 5).
fn layout_with(
    format: Option<chassis::VectorLayout>,
    precision: Option<chassis::Precision>,
) -> Result<Option<chassis::VectorLayout>> {
    use chassis::{Precision, VectorLayout};
    Ok(match (format, precision) {
        (Some(VectorLayout::F32), Some(Precision::F16)) => {
            anyhow::bail!("--format 3 stores f32 vectors; --precision f16 is format 5")
        }
        (_, Some(Precision::F16)) => Some(VectorLayout::F16),
        (Some(VectorLayout::F16) | None, Some(Precision::F32)) => Some(VectorLayout::default()),
        (f, _) => f,
    })
}

fn parse_codes(s: &str) -> Result<chassis::CodeKind, String> {
    chassis::CodeKind::parse(s)
        .ok_or_else(|| format!("unknown codes '{s}' (none, the default, int8 or int4)"))
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

/// A text field: NAME, or NAME:opt,opt with opts stem, stop_words and case.
fn parse_text_field(s: &str) -> Result<chassis::TextFieldSpec, String> {
    let (name, opts) = s.split_once(':').unwrap_or((s, ""));
    let mut spec = chassis::TextFieldSpec::new(name);
    for o in opts.split(',').filter(|o| !o.is_empty()) {
        spec = match o {
            "stem" => spec.stem(true),
            "stop_words" | "stop" => spec.stop_words(true),
            "case" => spec.lowercase(false),
            _ => {
                return Err(format!(
                    "unknown text field option {o:?}: stem, stop_words or case"
                ))
            }
        };
    }
    Ok(spec)
}

fn hybrid_options(
    fusion: &str,
    weights: &str,
    depth: Option<usize>,
) -> Result<chassis::HybridOptions> {
    let w: Vec<f32> = weights
        .split(',')
        .map(|x| x.trim().parse::<f32>())
        .collect::<std::result::Result<_, _>>()
        .ok()
        .filter(|w: &Vec<f32>| w.len() == 2)
        .context("--weights: two numbers, V,T")?;
    Ok(chassis::HybridOptions {
        fusion: match fusion {
            "rrf" => chassis::Fusion::default(),
            "relative_score" | "relative" => chassis::Fusion::RelativeScore,
            f => bail!("--fusion: rrf or relative_score, not {f:?}"),
        },
        vector_weight: w[0],
        text_weight: w[1],
        depth: depth.unwrap_or(0),
    })
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Create {
            path,
            dims,
            metric,
            m,
            ef_construction,
            format,
            codes,
            precision,
            text_fields,
        } => {
            let layout = layout_with(Some(format), Some(precision))?.unwrap_or(format);
            let opts = Options::new(dims, metric)
                .m(m)
                .ef_construction(ef_construction)
                .vector_layout(layout)
                .codes(codes)
                .text_field_specs(text_fields);
            Index::create(&path, opts)
                .with_context(|| format!("cannot create {}", path.display()))?;
            println!(
                "created {} ({dims} dims, {}, M={m})",
                path.display(),
                metric.name()
            );
        }
        Command::Import {
            path,
            file,
            ids,
            metadata,
            batch,
            flush_every,
            threads,
        } => commands::import(commands::ImportArgs {
            path,
            file,
            ids,
            metadata,
            batch,
            flush_every,
            threads,
        })?,
        Command::Search {
            path,
            vector,
            filter,
            query_file,
            k,
            ef,
            json,
            read_only: _,
            text,
            text_file,
            fusion,
            weights,
            depth,
        } => commands::search(commands::SearchArgs {
            path,
            filter,
            vector,
            query_file,
            k,
            ef,
            json,
            text,
            text_file,
            hybrid: hybrid_options(&fusion, &weights, depth)?,
        })?,
        Command::TextFields { path, fields, none } => commands::text_fields(&path, fields, none)?,
        Command::Get { path, ids, json } => commands::get(&path, &ids, json)?,
        Command::Delete {
            path,
            ids,
            ids_file,
            no_flush,
        } => commands::delete(&path, ids, ids_file.as_deref(), no_flush)?,
        Command::Export { path, out, ids_out } => commands::export(&path, &out, ids_out)?,
        Command::Info {
            path,
            json,
            read_only: _,
        } => commands::info(&path, json)?,
        Command::Check { path, recall, json } => commands::check(&path, recall, json)?,
        Command::UserVersion { path, version } => commands::user_version(&path, version)?,
        Command::Bench {
            path,
            queries,
            groundtruth,
            k,
            ef,
            threads,
            json,
        } => commands::bench(commands::BenchArgs {
            path,
            queries,
            groundtruth,
            k,
            efs: ef,
            threads,
            json,
        })?,
        Command::Backup { src, dst, json } => {
            let reader = chassis::IndexReader::open(&src)
                .with_context(|| format!("cannot open {}", src.display()))?;
            let t = Instant::now();
            let r = reader
                .backup(&dst)
                .with_context(|| format!("cannot back up to {}", dst.display()))?;
            let secs = t.elapsed().as_secs_f64();
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "sequence": r.sync.sequence,
                        "previous_sequence": r.sync.previous_sequence,
                        "live": r.sync.live,
                        "bytes_shipped": r.sync.bytes_shipped,
                        "bytes_compared": r.sync.bytes_compared,
                        "committed_bytes": r.sync.committed_bytes,
                        "unchanged": r.sync.unchanged,
                        "full_copy": r.full_copy,
                        "replaced_because": r.replaced_because,
                        "repaired_lists": r.repaired_lists,
                        "seconds": secs,
                    })
                );
            } else {
                let how = if r.sync.unchanged {
                    "already current".to_string()
                } else if r.full_copy {
                    match &r.replaced_because {
                        Some(why) => format!("full copy (replaced: {why})"),
                        None => "full copy".to_string(),
                    }
                } else {
                    format!(
                        "incremental from sequence {}",
                        r.sync.previous_sequence.unwrap_or(0)
                    )
                };
                println!(
                    "backed up {} to {}: sequence {}, {} live vectors, {}; shipped {} of {} bytes in {:.2} s",
                    src.display(),
                    dst.display(),
                    r.sync.sequence,
                    r.sync.live,
                    how,
                    r.sync.bytes_shipped,
                    r.sync.committed_bytes,
                    secs
                );
            }
        }
        Command::Compact {
            path,
            m,
            ef_construction,
            threads,
            format,
            codes,
            precision,
            keep_graph,
        } => {
            let index =
                Index::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            // --precision without --format keeps the file's layout where it already stores
            // that precision (a format 3 or 4 file asked for f32 stays as it is).
            let format = match (format, precision) {
                (None, Some(p)) => Some(p.layout_from(index.info()?.vector_layout)),
                (f, p) => layout_with(f, p)?,
            };
            let bar = progress(index.len() as u64, "compacting");
            let t = Instant::now();
            let r = index
                .compact_with_progress(
                    chassis::CompactOptions {
                        m,
                        ef_construction,
                        threads,
                        vector_layout: format,
                        codes,
                        keep_graph,
                    },
                    |done, _| bar.set_position(done as u64),
                )
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
        Err(e) => match e.downcast_ref::<commands::ProblemsFound>() {
            Some(p) => {
                eprintln!("chassis: check: {p}");
                ExitCode::from(3)
            }
            None => {
                eprintln!("chassis: error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

//! The commands beyond create and demo: import, search, get, delete, export, info, check, bench.

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use chassis::format::metadata;
use chassis::graph::distance::reference;
use chassis::os::FileStorage;
use chassis::{Index, IndexReader, Metric};

use crate::data::{self, Matrix};
use crate::progress;

/// What `chassis check` found wrong: the process exits with code 3.
#[derive(Debug)]
pub struct ProblemsFound(pub usize);

impl std::fmt::Display for ProblemsFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} problem(s) found", self.0)
    }
}

impl std::error::Error for ProblemsFound {}

pub struct ImportArgs {
    pub path: PathBuf,
    pub file: PathBuf,
    pub ids: Option<PathBuf>,
    pub metadata: Option<PathBuf>,
    pub batch: usize,
    pub flush_every: usize,
    pub threads: usize,
}

pub fn import(a: ImportArgs) -> Result<()> {
    let index =
        Index::open(&a.path).with_context(|| format!("cannot open {}", a.path.display()))?;
    let data::Rows {
        matrix: m,
        ids: line_ids,
        metadata: line_docs,
    } = data::read_rows(&a.file)?;
    let docs = match (&a.metadata, line_docs) {
        (Some(_), Some(_)) => bail!("the JSON lines carry metadata; don't also pass --metadata"),
        (Some(p), None) => Some(data::read_metadata_lines(p)?),
        (None, docs) => docs,
    };
    if let Some(docs) = &docs {
        if docs.len() != m.rows {
            bail!("{} metadata lines for {} vectors", docs.len(), m.rows);
        }
    }
    if m.dims != index.dims() {
        bail!(
            "{} has {} dims, the index has {}",
            a.file.display(),
            m.dims,
            index.dims()
        );
    }
    let ids = match (&a.ids, line_ids) {
        (Some(_), Some(_)) => bail!("the JSON lines carry ids; don't also pass --ids"),
        (Some(p), None) => Some(data::read_ids(p)?),
        (None, ids) => ids,
    };
    if let Some(ids) = &ids {
        if ids.len() != m.rows {
            bail!("{} ids for {} vectors", ids.len(), m.rows);
        }
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let t = Instant::now();
    let bar = progress(m.rows as u64, "importing");
    let (mut first, mut last) = (None, None);
    let mut since_flush = 0;
    let mut flushes = 0;
    let mut start = 0;
    while start < m.rows {
        let mut end = (start + a.batch).min(m.rows);
        if a.flush_every > 0 {
            end = end.min(start + (a.flush_every - since_flush));
        }
        let rows = &m.data[start * m.dims..end * m.dims];
        let added = match (&ids, &docs) {
            (ids, Some(docs)) => index.add_batch_with_metadata(
                ids.as_ref().map(|ids| &ids[start..end]),
                rows,
                &docs[start..end],
                a.threads,
            ),
            (Some(ids), None) => index
                .add_batch_with_ids(&ids[start..end], rows, a.threads)
                .map(|()| ids[start..end].to_vec()),
            (None, None) => index.add_batch(rows, a.threads),
        }
        .with_context(|| {
            format!(
                "vectors {start}..{end} of {}; nothing since the last flush was committed",
                a.file.display()
            )
        })?;
        if let (Some(&f), Some(&l)) = (added.first(), added.last()) {
            first.get_or_insert(f);
            last = Some(l);
        }
        since_flush += end - start;
        if a.flush_every > 0 && since_flush >= a.flush_every {
            index.flush().context("flush failed")?;
            flushes += 1;
            since_flush = 0;
        }
        bar.set_position(end as u64);
        start = end;
    }
    index
        .flush()
        .context("the final flush failed; vectors after the last flush were not committed")?;
    flushes += 1;
    bar.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    match (first, last) {
        (Some(f), Some(l)) => println!(
            "imported {} vectors (ids {f}..={l}) in {secs:.2} s ({:.0}/s, {flushes} flush(es)); index holds {}",
            m.rows,
            m.rows as f64 / secs.max(1e-9),
            index.len()
        ),
        _ => println!("imported 0 vectors; index holds {}", index.len()),
    }
    Ok(())
}

pub struct SearchArgs {
    pub path: PathBuf,
    pub filter: Option<String>,
    pub vector: Option<String>,
    pub query_file: Option<PathBuf>,
    pub k: usize,
    pub ef: usize,
    pub json: bool,
    pub text: Option<String>,
    pub text_file: Option<PathBuf>,
    pub hybrid: chassis::HybridOptions,
}

fn parse_vector(s: &str) -> Result<Vec<f32>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<f32>()
                .with_context(|| format!("--vector: {x:?} is not a number"))
        })
        .collect()
}

pub fn search(a: SearchArgs) -> Result<()> {
    let index =
        IndexReader::open(&a.path).with_context(|| format!("cannot open {}", a.path.display()))?;
    let filter = a
        .filter
        .as_deref()
        .map(chassis::Filter::parse)
        .transpose()
        .context("--where")?;
    let texts: Option<Vec<String>> = match (&a.text, &a.text_file) {
        (Some(_), Some(_)) => bail!("give --text or --text-file, not both"),
        (Some(t), None) => Some(vec![t.clone()]),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {}", f.display()))?
                .lines()
                .map(str::to_string)
                .collect(),
        ),
        (None, None) => None,
    };
    if let (Some(texts), None, None) = (&texts, &a.vector, &a.query_file) {
        return search_text(&index, texts, filter.as_ref(), &a);
    }
    let queries: Matrix = match (&a.vector, &a.query_file) {
        (Some(_), Some(_)) => bail!("give --vector or --query-file, not both"),
        (Some(v), None) => {
            let data = parse_vector(v)?;
            Matrix {
                rows: 1,
                dims: data.len(),
                data,
            }
        }
        (None, Some(f)) => data::read_vectors(f)?,
        (None, None) => {
            let mut text = String::new();
            for line in std::io::stdin().lock().lines() {
                text.push_str(&line.context("reading queries from stdin")?);
                text.push('\n');
            }
            data::parse_jsonl(&text)
                .context("queries on stdin (JSON lines: [..] or {\"vector\": [..]})")?
                .0
        }
    };
    if queries.dims != index.dims() {
        bail!(
            "queries have {} dims, the index has {}",
            queries.dims,
            index.dims()
        );
    }
    if let Some(texts) = &texts {
        if texts.len() != 1 && texts.len() != queries.rows {
            bail!(
                "{} texts for {} queries: one text for all, or one per query",
                texts.len(),
                queries.rows
            );
        }
        let out = std::io::stdout();
        let mut out = out.lock();
        for i in 0..queries.rows {
            let t = &texts[if texts.len() == 1 { 0 } else { i }];
            let hits = index
                .search_hybrid(queries.row(i), t, a.k, a.ef, filter.as_ref(), &a.hybrid)
                .with_context(|| format!("query {i}"))?;
            let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
            let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
            let vr: Vec<u32> = hits
                .iter()
                .map(|h| h.vector.map_or(0, |l| l.rank))
                .collect();
            let tr: Vec<u32> = hits.iter().map(|h| h.text.map_or(0, |l| l.rank)).collect();
            if a.json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({ "ids": ids, "scores": scores, "vector_ranks": vr, "text_ranks": tr })
                )?;
            } else {
                writeln!(out, "query {i}:")?;
                writeln!(
                    out,
                    "  {:>5}  {:>20}  {:>12}  {:>11}  {:>9}",
                    "rank", "id", "score", "vector rank", "text rank"
                )?;
                let rank = |r: u32| {
                    if r == 0 {
                        "-".to_string()
                    } else {
                        r.to_string()
                    }
                };
                for (r, h) in hits.iter().enumerate() {
                    writeln!(
                        out,
                        "  {:>5}  {:>20}  {:>12.6}  {:>11}  {:>9}",
                        r + 1,
                        h.id,
                        h.score,
                        rank(vr[r]),
                        rank(tr[r])
                    )?;
                }
            }
        }
        return Ok(());
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    for i in 0..queries.rows {
        let hits = match &filter {
            Some(f) => index.search_filtered(queries.row(i), a.k, a.ef, f),
            None => index.search(queries.row(i), a.k, a.ef),
        }
        .with_context(|| format!("query {i}"))?;
        if a.json {
            let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
            let d: Vec<f32> = hits.iter().map(|h| h.distance).collect();
            writeln!(out, "{}", serde_json::json!({ "ids": ids, "distances": d }))?;
        } else {
            writeln!(out, "query {i}:")?;
            writeln!(out, "  {:>5}  {:>20}  {:>12}", "rank", "id", "distance")?;
            for (r, h) in hits.iter().enumerate() {
                writeln!(out, "  {:>5}  {:>20}  {:>12.6}", r + 1, h.id, h.distance)?;
            }
        }
    }
    Ok(())
}

fn search_text(
    index: &IndexReader,
    texts: &[String],
    filter: Option<&chassis::Filter>,
    a: &SearchArgs,
) -> Result<()> {
    let out = std::io::stdout();
    let mut out = out.lock();
    for (i, t) in texts.iter().enumerate() {
        let hits = index
            .search_text(t, a.k, filter)
            .with_context(|| format!("query {i}"))?;
        if a.json {
            let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
            let s: Vec<f32> = hits.iter().map(|h| h.score).collect();
            writeln!(out, "{}", serde_json::json!({ "ids": ids, "scores": s }))?;
        } else {
            writeln!(out, "query {i}: {t}")?;
            writeln!(out, "  {:>5}  {:>20}  {:>12}", "rank", "id", "BM25")?;
            for (r, h) in hits.iter().enumerate() {
                writeln!(out, "  {:>5}  {:>20}  {:>12.6}", r + 1, h.id, h.score)?;
            }
        }
    }
    Ok(())
}

pub fn text_fields(path: &Path, fields: Vec<chassis::TextFieldSpec>, none: bool) -> Result<()> {
    let describe = |specs: &[chassis::TextFieldSpec]| -> String {
        if specs.is_empty() {
            return "none".into();
        }
        specs
            .iter()
            .map(|s| {
                let mut o = Vec::new();
                if s.stem {
                    o.push("stem");
                }
                if s.stop_words {
                    o.push("stop_words");
                }
                if !s.lowercase {
                    o.push("case");
                }
                if o.is_empty() {
                    s.name.clone()
                } else {
                    format!("{}:{}", s.name, o.join(","))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    if fields.is_empty() && !none {
        let r =
            IndexReader::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        println!("{}", describe(&r.text_fields()?));
        return Ok(());
    }
    if none && !fields.is_empty() {
        bail!("give fields or --none, not both");
    }
    let index = Index::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    index.set_text_fields(&fields)?;
    index
        .flush()
        .context("flush failed; the text fields are unchanged")?;
    println!("text fields: {}", describe(&index.text_fields()));
    Ok(())
}

pub fn get(path: &Path, ids: &[u64], json: bool) -> Result<()> {
    let index =
        IndexReader::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for &id in ids {
        let v = index.get(id).with_context(|| format!("id {id}"))?;
        let m = index.get_metadata(id).with_context(|| format!("id {id}"))?;
        if json {
            println!(
                "{}",
                serde_json::json!({ "id": id, "vector": v, "metadata": metadata::to_json(&m) })
            );
        } else {
            let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            println!("{id}: {}", s.join(","));
            if !m.is_empty() {
                println!("  metadata: {}", metadata::to_json(&m));
            }
        }
    }
    Ok(())
}

pub fn delete(path: &Path, mut ids: Vec<u64>, file: Option<&Path>, no_flush: bool) -> Result<()> {
    if let Some(f) = file {
        ids.extend(data::read_ids(f)?);
    }
    if ids.is_empty() {
        bail!("no ids to delete (give them as arguments or with --ids-file)");
    }
    let index = Index::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for &id in &ids {
        index
            .delete(id)
            .with_context(|| format!("id {id}; nothing was deleted"))?;
    }
    if no_flush {
        println!(
            "{} ids exist and would be deleted; --no-flush: nothing was committed",
            ids.len()
        );
        return Ok(());
    }
    index.flush().context("flush failed; nothing was deleted")?;
    println!("deleted {} ids; index holds {}", ids.len(), index.len());
    Ok(())
}

pub fn export(path: &Path, out: &Path, ids_out: Option<PathBuf>) -> Result<()> {
    let index =
        IndexReader::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let snap = index.snapshot()?;
    let ids = index.ids_in(&snap)?;
    let bar = progress(ids.len() as u64, "exporting");
    let mut rows = Vec::with_capacity(ids.len());
    let mut docs = Vec::with_capacity(ids.len());
    for &id in &ids {
        rows.push(index.get(id)?);
        docs.push(index.get_metadata(id)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "npy" => {
            let flat: Vec<f32> = rows.iter().flatten().copied().collect();
            data::write_npy(out, rows.len(), index.dims(), &flat)?
        }
        "fvecs" => data::write_fvecs(out, &rows)?,
        _ => bail!("{}: export writes .npy or .fvecs", out.display()),
    }
    let ids_out = ids_out.unwrap_or_else(|| out.with_extension("ids.npy"));
    data::write_npy_u64(&ids_out, &ids)?;
    println!(
        "exported {} vectors to {} and their ids to {}",
        ids.len(),
        out.display(),
        ids_out.display()
    );
    if docs.iter().any(|d| !d.is_empty()) {
        // Line i: the metadata of row i (what `import --metadata` reads back).
        let meta_out = out.with_extension("metadata.jsonl");
        let mut text = String::new();
        for d in &docs {
            text.push_str(&metadata::to_json(d).to_string());
            text.push('\n');
        }
        std::fs::write(&meta_out, text)
            .with_context(|| format!("cannot write {}", meta_out.display()))?;
        println!("and their metadata to {}", meta_out.display());
    }
    Ok(())
}

fn header_copy_json(h: &chassis::Result<chassis::format::header::Header>) -> serde_json::Value {
    match h {
        Ok(h) => serde_json::json!({ "valid": true, "sequence": h.sequence,
            "pending_delete_epoch": h.pending_delete_epoch }),
        Err(e) => serde_json::json!({ "valid": false, "error": e.to_string() }),
    }
}

pub fn info(path: &Path, json: bool) -> Result<()> {
    let storage = FileStorage::open(path, false)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let copies = chassis::storage::read_header_copies(&storage)?;
    let index =
        Index::open_read_only(path).with_context(|| format!("cannot open {}", path.display()))?;
    let i = index.info()?;
    let reader = IndexReader::open(path)?;
    let snap = reader.snapshot()?;
    let routing_count = snap.routing_count();
    let meta = reader.metadata_summary(&snap)?;
    let fields_json: Vec<serde_json::Value> = meta
        .fields
        .iter()
        .map(|f| serde_json::json!({ "name": f.name, "vectors": f.vectors, "types": f.types }))
        .collect();
    let allocated = storage.allocated_bytes()?;
    let g = i.geometry;
    let per_live = if i.count > 0 {
        Some(allocated as f64 / i.count as f64)
    } else {
        None
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "dims": i.dims, "metric": i.metric.name(), "m": i.m, "m0": i.m0,
                "ef_construction": i.ef_construction,
                "count": i.count, "deleted": i.deleted, "committed_count": i.committed_count,
                "delete_epoch": i.delete_epoch, "pending_delete_epoch": i.pending_delete_epoch,
                "sequence": i.sequence, "header_copy": i.header_copy.to_string(),
                "header_a": header_copy_json(&copies.a), "header_b": header_copy_json(&copies.b),
                "read_version": i.versions.0, "write_version": i.versions.1,
                "segment_base_slots": 1u64 << g.segment_base_log2,
                "segment_doublings": g.segment_doublings,
                "segment_slots": 1u64 << (g.segment_base_log2 + g.segment_doublings),
                "segments": i.segments, "upper_heap_chunks": i.upper_heap_chunks,
                "table_pages": i.table_pages, "custom_ids": i.custom_ids,
                "file_bytes": i.file_bytes, "allocated_bytes": allocated,
                "bytes_per_live_vector": per_live,
                "routing_count": routing_count,
                "metadata_bytes": meta.bytes, "metadata_vectors": meta.vectors,
                "metadata_fields": fields_json, "indexed_fields": meta.indexed,
                "codes": i.codes.name(), "codes_trained": i.codes_trained,
                "precision": chassis::Precision::of(i.vector_layout).name(),
                "vector_layout": i.vector_layout.name(),
                "file_id": i.file_id, "user_version": i.user_version,
                "text_fields": i.text_fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                "text_segments": i.text_segments.0,
            })
        );
        return Ok(());
    }
    let copy = |h: &chassis::Result<chassis::format::header::Header>| match h {
        Ok(h) => format!("valid, sequence {}", h.sequence),
        Err(e) => format!("INVALID ({e})"),
    };
    println!("file:          {}", path.display());
    println!(
        "format:        read version {}, write version {}; vectors {}",
        i.versions.0,
        i.versions.1,
        match (i.vector_layout, i.exact_walk) {
            (chassis::VectorLayout::F32, _) => "f32 (format 3)",
            (chassis::VectorLayout::F16, _) =>
                "half precision (format 5): f16 values, distances exact to them",
            (chassis::VectorLayout::SplitHalves, false) =>
                "split halves side by side (format 4), walked by high halves",
            (chassis::VectorLayout::SplitHalves, true) =>
                "split halves side by side (format 4), walked exactly (inner product, or data too fine for halves)",
            (chassis::VectorLayout::SplitPlanar, false) =>
                "planar split halves (format 6), walked by high halves",
            (chassis::VectorLayout::SplitPlanar, true) =>
                "planar split halves (format 6), walked exactly (inner product, or data too fine for halves)",
        }
    );
    if i.codes != chassis::CodeKind::None {
        println!(
            "codes:         {}, {}",
            i.codes.name(),
            if i.codes_trained {
                "trained: searches walk by them and rank exactly"
            } else {
                "untrained until the file holds 1,000 vectors"
            }
        );
    }
    println!(
        "identity:      {}; user version {}",
        i.file_id
            .as_deref()
            .unwrap_or("none (written before file identities; its next flush gives it one)"),
        i.user_version
    );
    if !i.text_fields.is_empty() {
        let names: Vec<&str> = i.text_fields.iter().map(|f| f.name.as_str()).collect();
        println!(
            "full text:     fields {} ({} segments)",
            names.join(", "),
            i.text_segments.0
        );
    }
    println!(
        "header:        sequence {} in copy {}; A: {}; B: {}",
        i.sequence,
        i.header_copy,
        copy(&copies.a),
        copy(&copies.b)
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
    if meta.vectors == 0 {
        println!("metadata:      none");
    } else {
        println!(
            "metadata:      {} bytes, {} live vectors with metadata",
            meta.bytes, meta.vectors
        );
        let fields: Vec<String> = meta
            .fields
            .iter()
            .map(|f| format!("{} ({}, {})", f.name, f.types.join("/"), f.vectors))
            .collect();
        println!("fields:        {}", fields.join(", "));
        println!(
            "indexed:       fields are indexed by each process as its filters name them \
             (none yet in this one)"
        );
    }
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
    match per_live {
        Some(b) => println!(
            "size:          {} bytes logical, {allocated} allocated, {b:.0} per live vector",
            i.file_bytes
        ),
        None => println!(
            "size:          {} bytes logical, {allocated} allocated",
            i.file_bytes
        ),
    }
    Ok(())
}

pub fn check(path: &Path, recall: usize, json: bool) -> Result<()> {
    let storage = FileStorage::open(path, false)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let copies = chassis::storage::read_header_copies(&storage)?;
    for (name, c) in [("A", &copies.a), ("B", &copies.b)] {
        match c {
            Ok(h) if h.pending_delete_epoch != 0 => notes.push(format!(
                "header copy {name} (sequence {}) is the intent of an interrupted delete flush; \
                 the next writer recovers it",
                h.sequence
            )),
            Ok(_) => {}
            Err(e) => problems.push(format!("header copy {name} is invalid: {e}")),
        }
    }
    let report = match Index::open_read_only(path) {
        Ok(index) => match index.check(recall) {
            Ok(r) => Some(r),
            Err(e) => {
                problems.push(format!("checking failed: {e}"));
                None
            }
        },
        Err(e) => {
            problems.push(format!("the index does not open: {e}"));
            None
        }
    };
    if let Some(r) = &report {
        problems.extend(r.problems.iter().cloned());
        if r.hints > 0 {
            notes.push(format!(
                "{} neighbor words name slots past N that an unflushed writer added \
                 (routing hints, harmless)",
                r.hints
            ));
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "ok": problems.is_empty(),
                "problems": problems,
                "notes": notes,
                "slots": report.as_ref().map(|r| r.slots),
                "edges": report.as_ref().map(|r| r.edges),
                "unreachable": report.as_ref().map(|r| r.unreachable),
                "recall": report.as_ref().and_then(|r| r.recall),
            })
        );
    } else {
        for p in &problems {
            println!("problem: {p}");
        }
        for n in &notes {
            println!("note: {n}");
        }
        if let Some(r) = &report {
            println!(
                "checked {} slots and {} edges; {} unreachable",
                r.slots, r.edges, r.unreachable
            );
            if let Some(rc) = r.recall {
                println!("recall@10 on {recall} stored vectors at ef 64: {rc:.4}");
            }
        }
        if problems.is_empty() {
            println!("ok");
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ProblemsFound(problems.len()).into())
    }
}

pub struct BenchArgs {
    pub path: PathBuf,
    pub queries: PathBuf,
    pub groundtruth: Option<PathBuf>,
    pub k: usize,
    pub efs: Vec<usize>,
    pub threads: usize,
    pub json: bool,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let index =
        IndexReader::open(&a.path).with_context(|| format!("cannot open {}", a.path.display()))?;
    let q = data::read_vectors_for(&a.queries, index.dims())?;
    if a.k == 0 || a.efs.is_empty() || a.efs.contains(&0) {
        bail!("-k and every --ef must be at least 1");
    }
    let truth: Vec<Vec<u64>> = match &a.groundtruth {
        Some(g) => {
            let gt = data::read_ivecs(g)?;
            if gt.len() < q.rows || gt.iter().any(|r| r.len() < a.k) {
                bail!(
                    "{} needs at least {} rows of at least k = {} ids",
                    g.display(),
                    q.rows,
                    a.k
                );
            }
            gt.into_iter().map(|r| r[..a.k].to_vec()).collect()
        }
        None => brute_force(&index, &q, a.k)?,
    };
    let threads = if a.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        a.threads
    };
    // Warm-up: one pass at the largest ef.
    let top = *a.efs.iter().max().unwrap_or(&64);
    for i in 0..q.rows {
        index.search(q.row(i), a.k, top)?;
    }
    if !a.json {
        println!(
            "{:>6}  {:>9}  {:>10}  {:>12}  {:>10}  {:>10}",
            "ef",
            format!("recall@{}", a.k),
            "QPS 1 thr",
            format!("QPS {threads} thr"),
            "p50 ms",
            "p99 ms"
        );
    }
    for &ef in &a.efs {
        let mut lat = Vec::with_capacity(q.rows);
        let mut found = 0usize;
        let t = Instant::now();
        for (i, exact) in truth.iter().enumerate().take(q.rows) {
            let s = Instant::now();
            let hits = index.search(q.row(i), a.k, ef)?;
            lat.push(s.elapsed().as_secs_f64() * 1e3);
            let want: HashSet<u64> = exact.iter().copied().collect();
            found += hits.iter().filter(|h| want.contains(&h.id)).count();
        }
        let qps1 = q.rows as f64 / t.elapsed().as_secs_f64();
        let next = AtomicUsize::new(0);
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= q.rows {
                        break;
                    }
                    let _ = index.search(q.row(i), a.k, ef);
                });
            }
        });
        let qpsn = q.rows as f64 / t.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        let recall = found as f64 / (q.rows * a.k) as f64;
        let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
        if a.json {
            println!(
                "{}",
                serde_json::json!({ "ef": ef, "k": a.k, "recall": recall, "qps_1": qps1,
                    "threads": threads, "qps_n": qpsn, "p50_ms": p50, "p99_ms": p99,
                    "queries": q.rows })
            );
        } else {
            println!(
                "{ef:>6}  {recall:>9.4}  {qps1:>10.0}  {qpsn:>12.0}  {p50:>10.3}  {p99:>10.3}"
            );
        }
    }
    Ok(())
}

/// Exact top k of every query over the index's live vectors (ids).
fn brute_force(index: &IndexReader, q: &Matrix, k: usize) -> Result<Vec<Vec<u64>>> {
    let snap = index.snapshot()?;
    let ids = index.ids_in(&snap)?;
    let vectors: Vec<Vec<f32>> = ids
        .iter()
        .map(|&id| index.get(id))
        .collect::<Result<_, _>>()?;
    let metric = index.metric();
    let prep = |v: &[f32]| -> Vec<f32> {
        if metric == Metric::Cosine {
            let n = reference::dot(v, v).sqrt();
            v.iter().map(|x| x / n.max(f32::MIN_POSITIVE)).collect()
        } else {
            v.to_vec()
        }
    };
    Ok((0..q.rows)
        .map(|i| {
            let qv = prep(q.row(i));
            let mut d: Vec<(f32, u64)> = vectors
                .iter()
                .zip(&ids)
                .map(|(v, &id)| (reference::distance(metric, &qv, v), id))
                .collect();
            d.sort_by(|a, b| a.0.total_cmp(&b.0));
            d.into_iter().take(k).map(|(_, id)| id).collect()
        })
        .collect())
}

/// Prints the user version the last flush committed, or sets one and flushes it.
pub fn user_version(path: &Path, set: Option<u64>) -> Result<()> {
    match set {
        None => {
            let reader = IndexReader::open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            println!("{}", reader.user_version()?);
        }
        Some(v) => {
            let index = Index::open(path)
                .with_context(|| format!("cannot open {} as its writer", path.display()))?;
            index.set_user_version(v)?;
            index.close()?;
            println!("{v}");
        }
    }
    Ok(())
}

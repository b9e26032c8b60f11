//! Collections: many index files searched as one ([`Collection`]; docs/SCALING.md).
//!
//! A collection is a directory of shard files (plain Chassis files, `shard-NNNN.chassis`) and
//! a manifest, `collection.json`, that names them with the sequence each shard committed at
//! the collection's last flush. Ids are global u64s; a row lives in shard
//! `mix(id) mod S` (a fixed bit mixer, so custom ids that share low bits still spread), so an
//! id is always looked up, deleted and replaced in one shard. A search asks every shard for
//! its exact top k (every returned distance is exact, as in one file) and merges them by
//! distance: the merged top k of exact per-shard top k lists is the exact top k of their union.
//!
//! Invariants:
//! * The manifest is only ever replaced whole: written to a temporary file, fsynced, renamed
//!   over `collection.json`, then the directory fsynced. A reader sees the old manifest or
//!   the new one.
//! * A flush makes every shard durable (each by its own commit) before it publishes the
//!   manifest naming their new sequences. A crash between shard flushes leaves each shard at
//!   its own last flush and the manifest at the previous collection flush; the writer that
//!   opens the collection next takes each shard's newest state (every one is a state its own
//!   commit made durable) and publishes a manifest for it.
//! * A read-only collection pins one consistent set: it takes a snapshot of every shard and
//!   keeps it only when each snapshot's sequence is the one the manifest names; a shard that
//!   moved past the manifest means a collection flush is under way, and it reads the manifest
//!   again (bounded; after that it reports the set as not consistent and serves the newest).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::format::metadata::Metadata;
use crate::graph::Metric;
use crate::query::Neighbor;
use crate::{Index, IndexReader, Options, Snapshot};

/// The manifest's file name inside a collection directory.
pub const MANIFEST: &str = "collection.json";

/// The manifest's format version (a later release that changes it refuses older readers).
const MANIFEST_VERSION: u64 = 1;

/// How many times a read-only collection re-reads the manifest to pin a consistent set.
const PIN_TRIES: usize = 40;

/// One shard as the manifest names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEntry {
    /// File name inside the collection directory.
    pub file: String,
    /// The header sequence the shard committed at the collection's last flush.
    pub sequence: u64,
}

/// What `collection.json` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Vector dimensions (every shard's).
    pub dims: usize,
    /// Distance metric (every shard's).
    pub metric: Metric,
    /// Counts the manifests published; each flush publishes the next.
    pub generation: u64,
    /// The shards, in routing order.
    pub shards: Vec<ShardEntry>,
}

impl Manifest {
    fn to_json(&self) -> String {
        let shards: Vec<serde_json::Value> = self
            .shards
            .iter()
            .map(|s| serde_json::json!({"file": s.file, "sequence": s.sequence}))
            .collect();
        let v = serde_json::json!({
            "chassis_collection": MANIFEST_VERSION,
            "dims": self.dims,
            "metric": self.metric.name(),
            "generation": self.generation,
            "shards": shards,
        });
        format!("{v:#}\n")
    }

    fn parse(text: &str) -> Result<Manifest> {
        let bad = |what: &str| Error::InvalidArgument(format!("collection manifest: {what}"));
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(&format!("not JSON ({e})")))?;
        match v["chassis_collection"].as_u64() {
            Some(MANIFEST_VERSION) => {}
            Some(n) => return Err(bad(&format!("version {n} needs a newer release"))),
            None => return Err(bad("no chassis_collection version")),
        }
        let dims = v["dims"].as_u64().ok_or_else(|| bad("no dims"))? as usize;
        let metric = v["metric"]
            .as_str()
            .and_then(Metric::parse)
            .ok_or_else(|| bad("no metric"))?;
        let generation = v["generation"]
            .as_u64()
            .ok_or_else(|| bad("no generation"))?;
        let shards = v["shards"]
            .as_array()
            .ok_or_else(|| bad("no shards"))?
            .iter()
            .map(|s| {
                let file = s["file"]
                    .as_str()
                    .ok_or_else(|| bad("a shard without file"))?;
                if file.contains(['/', '\\']) || file.starts_with('.') {
                    return Err(bad("a shard file outside the directory"));
                }
                Ok(ShardEntry {
                    file: file.to_string(),
                    sequence: s["sequence"].as_u64().ok_or_else(|| bad("no sequence"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if shards.is_empty() {
            return Err(bad("no shards"));
        }
        Ok(Manifest {
            dims,
            metric,
            generation,
            shards,
        })
    }

    /// Reads the manifest of the collection in `dir`.
    pub fn read_from(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::InvalidArgument(format!(
                "{} is not a collection (no {MANIFEST})",
                dir.display()
            )),
            _ => e.into(),
        })?;
        Manifest::parse(&text)
    }

    /// Write, fsync, rename over the manifest, fsync the directory.
    fn publish(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!(".{MANIFEST}.tmp"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(self.to_json().as_bytes())?;
            f.sync_all()?;
        }
        crate::os::rename_durably(&tmp, &dir.join(MANIFEST))
    }
}

/// The shard an id lives in: splitmix64's finalizer, then modulo the shard count.
pub fn shard_of(id: u64, shards: usize) -> usize {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % shards.max(1) as u64) as usize
}

enum Shards {
    Writers(Vec<Index>),
    Readers {
        readers: Vec<IndexReader>,
        pinned: Mutex<Pinned>,
    },
}

/// A read-only collection's consistent set of shard snapshots.
struct Pinned {
    snaps: Vec<Snapshot>,
    generation: u64,
    consistent: bool,
}

/// Many index files searched as one (see the module doc).
pub struct Collection {
    dir: PathBuf,
    shards: Shards,
    manifest: Mutex<Manifest>,
    /// The id the next row added without one gets (one above every id stored).
    next_id: AtomicU64,
    /// Writes that span shards (adds, flush) run one at a time.
    writing: Mutex<()>,
    /// Tests only: the shard whose next write reports an I/O error after it succeeded.
    #[cfg(feature = "mutants")]
    fail_shard: Mutex<Option<usize>>,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("dir", &self.dir)
            .field("shards", &self.shard_count())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn shard_file(i: usize) -> String {
    format!("shard-{i:04}.chassis")
}

impl Collection {
    /// Creates a collection of `shards` empty shard files in `dir` (created if missing; it
    /// must not hold a collection already), every shard with `options`.
    pub fn create(dir: impl AsRef<Path>, options: Options, shards: usize) -> Result<Collection> {
        let dir = dir.as_ref();
        if shards == 0 || shards > 4096 {
            return Err(Error::InvalidArgument(format!(
                "a collection has 1 to 4096 shards, not {shards}"
            )));
        }
        std::fs::create_dir_all(dir)?;
        if dir.join(MANIFEST).exists() {
            return Err(Error::InvalidArgument(format!(
                "{} already holds a collection",
                dir.display()
            )));
        }
        let mut indexes = Vec::with_capacity(shards);
        let mut entries = Vec::with_capacity(shards);
        for i in 0..shards {
            let ix = Index::create(dir.join(shard_file(i)), options.clone())?;
            entries.push(ShardEntry {
                file: shard_file(i),
                sequence: ix.info()?.sequence,
            });
            indexes.push(ix);
        }
        let manifest = Manifest {
            dims: options.dims,
            metric: options.metric,
            generation: 1,
            shards: entries,
        };
        manifest.publish(dir)?;
        Ok(Collection {
            dir: dir.to_path_buf(),
            shards: Shards::Writers(indexes),
            manifest: Mutex::new(manifest),
            next_id: AtomicU64::new(0),
            writing: Mutex::new(()),
            #[cfg(feature = "mutants")]
            fail_shard: Mutex::new(None),
        })
    }

    /// Opens a collection as its writer: every shard's writer lock ([`Error::Locked`] if
    /// another writer has one). Shards that moved past the manifest (a flush that stopped
    /// between shards) are taken at their newest state, and a manifest naming it is
    /// published.
    pub fn open(dir: impl AsRef<Path>) -> Result<Collection> {
        let dir = dir.as_ref();
        let mut manifest = Manifest::read_from(dir)?;
        let want = (manifest.dims, manifest.metric);
        let mut indexes = Vec::with_capacity(manifest.shards.len());
        let mut next_id = 0;
        let mut moved = false;
        for s in &mut manifest.shards {
            let ix = Index::open(dir.join(&s.file))?;
            check_shard(&want, ix.dims(), ix.metric())?;
            let info = ix.info()?;
            next_id = next_id.max(info.next_id);
            if info.sequence != s.sequence {
                moved = true;
                s.sequence = info.sequence;
            }
            indexes.push(ix);
        }
        if moved {
            manifest.generation += 1;
            manifest.publish(dir)?;
        }
        Ok(Collection {
            dir: dir.to_path_buf(),
            shards: Shards::Writers(indexes),
            manifest: Mutex::new(manifest),
            next_id: AtomicU64::new(next_id),
            writing: Mutex::new(()),
            #[cfg(feature = "mutants")]
            fail_shard: Mutex::new(None),
        })
    }

    /// Opens a collection read-only, with lock-free readers on every shard (works while a
    /// writer in another process holds the collection). Searches see one consistent set of
    /// shard states: the last collection flush (see [`Collection::refresh`]).
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Collection> {
        let dir = dir.as_ref();
        let manifest = Manifest::read_from(dir)?;
        let readers = manifest
            .shards
            .iter()
            .map(|s| IndexReader::open(dir.join(&s.file)))
            .collect::<Result<Vec<_>>>()?;
        for r in &readers {
            check_shard(&(manifest.dims, manifest.metric), r.dims(), r.metric())?;
        }
        let pinned = pin(dir, &readers)?;
        let next_id = 0;
        Ok(Collection {
            dir: dir.to_path_buf(),
            manifest: Mutex::new(Manifest::read_from(dir)?),
            shards: Shards::Readers {
                readers,
                pinned: Mutex::new(pinned),
            },
            next_id: AtomicU64::new(next_id),
            writing: Mutex::new(()),
            #[cfg(feature = "mutants")]
            fail_shard: Mutex::new(None),
        })
    }

    /// A read-only collection moves to the newest collection flush (a writer's does
    /// nothing). Returns whether the set it now serves is consistent (every shard at the
    /// sequence the manifest names).
    pub fn refresh(&self) -> Result<bool> {
        match &self.shards {
            Shards::Writers(_) => Ok(true),
            Shards::Readers { readers, pinned } => {
                let p = pin(&self.dir, readers)?;
                *lock(&self.manifest) = Manifest::read_from(&self.dir)?;
                let consistent = p.consistent;
                *lock(pinned) = p;
                Ok(consistent)
            }
        }
    }

    /// The collection directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        match &self.shards {
            Shards::Writers(w) => w.len(),
            Shards::Readers { readers, .. } => readers.len(),
        }
    }

    /// Vector dimensions.
    pub fn dims(&self) -> usize {
        lock(&self.manifest).dims
    }

    /// Distance metric.
    pub fn metric(&self) -> Metric {
        lock(&self.manifest).metric
    }

    /// The manifest as last read or published.
    pub fn manifest(&self) -> Manifest {
        lock(&self.manifest).clone()
    }

    /// Whether this handle is read-only.
    pub fn read_only(&self) -> bool {
        matches!(self.shards, Shards::Readers { .. })
    }

    /// The shard writers (empty for a read-only collection).
    pub fn shard_indexes(&self) -> &[Index] {
        match &self.shards {
            Shards::Writers(w) => w,
            Shards::Readers { .. } => &[],
        }
    }

    fn writers(&self) -> Result<&[Index]> {
        match &self.shards {
            Shards::Writers(w) => Ok(w),
            Shards::Readers { .. } => Err(Error::ReadOnly {
                reason: "the collection was opened read-only",
            }),
        }
    }

    /// Live vectors in every shard (a read-only collection: in its pinned set).
    pub fn len(&self) -> Result<u64> {
        match &self.shards {
            Shards::Writers(w) => Ok(w.iter().map(|ix| ix.len() as u64).sum()),
            Shards::Readers { pinned, .. } => Ok(lock(pinned).snaps.iter().map(|s| s.len()).sum()),
        }
    }

    /// Whether the collection holds no live vector.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Adds rows (`vectors` is rows × dims, row-major) under `ids`, or under ids the
    /// collection assigns (one above every id stored, in order), with optional metadata (one
    /// document per row). Durable at the next [`Collection::flush`].
    ///
    /// All or nothing: every row is checked first (dimensions, finite values, metadata
    /// limits, an id given twice or already live, automatic ids past 2^64 − 1), before any
    /// shard is written; a failure after that (an I/O error in one shard) takes back what
    /// the other shards added, so searches see the collection as before the call and the
    /// next flush publishes nothing of it. The automatic id counter moves past the ids of
    /// every call, failed ones included, so an id is never handed out twice.
    pub fn add(
        &self,
        ids: Option<&[u64]>,
        vectors: &[f32],
        metadata: Option<&[Metadata]>,
    ) -> Result<Vec<u64>> {
        let writers = self.writers()?;
        let rows = self.check_rows(vectors, ids.map(<[u64]>::len), metadata)?;
        let _w = lock(&self.writing);
        let ids: Vec<u64> = match ids {
            Some(i) => i.to_vec(),
            None => {
                let first = self.next_id.load(Ordering::Relaxed);
                let last = (rows as u64)
                    .checked_sub(1)
                    .map(|n| first.checked_add(n))
                    .unwrap_or(Some(first))
                    .ok_or(Error::IdsExhausted {
                        next: first,
                        count: rows as u64,
                    })?;
                if rows > 0 && last == u64::MAX && self.contains(u64::MAX)? {
                    return Err(Error::IdsExhausted {
                        next: first,
                        count: rows as u64,
                    });
                }
                (0..rows as u64).map(|i| first + i).collect()
            }
        };
        self.check_ids_new(&ids)?;
        let s = writers.len();
        let mut parts: Vec<(Vec<u64>, Vec<f32>, Vec<Metadata>)> = vec![Default::default(); s];
        let dims = self.dims();
        for (row, &id) in ids.iter().enumerate() {
            let p = &mut parts[shard_of(id, s)];
            p.0.push(id);
            p.1.extend_from_slice(&vectors[row * dims..(row + 1) * dims]);
            p.2.push(metadata.map_or_else(Metadata::new, |m| m[row].clone()));
        }
        // Never hand these ids out again, whatever happens below.
        if let Some(&max) = ids.iter().max() {
            self.next_id
                .fetch_max(max.saturating_add(1), Ordering::Relaxed);
        }
        self.on_every_shard(
            &parts,
            |p| !p.0.is_empty(),
            |ix, p| {
                ix.add_batch_with_metadata(Some(&p.0), &p.1, &p.2, 1)
                    .map(drop)
            },
        )?;
        Ok(ids)
    }

    /// Stores each row under its id: an add where the id is not live, a replacement of the
    /// vector and metadata where it is. All or nothing, as [`Collection::add`] (an id given
    /// twice in one call is refused).
    pub fn upsert(
        &self,
        ids: &[u64],
        vectors: &[f32],
        metadata: Option<&[Metadata]>,
    ) -> Result<()> {
        let writers = self.writers()?;
        self.check_rows(vectors, Some(ids.len()), metadata)?;
        let _w = lock(&self.writing);
        check_distinct(ids)?;
        let s = writers.len();
        let dims = self.dims();
        let mut parts: Vec<(Vec<u64>, Vec<f32>, Vec<Metadata>)> = vec![Default::default(); s];
        for (row, &id) in ids.iter().enumerate() {
            let p = &mut parts[shard_of(id, s)];
            p.0.push(id);
            p.1.extend_from_slice(&vectors[row * dims..(row + 1) * dims]);
            p.2.push(metadata.map_or_else(Metadata::new, |m| m[row].clone()));
        }
        if let Some(&max) = ids.iter().max() {
            self.next_id
                .fetch_max(max.saturating_add(1), Ordering::Relaxed);
        }
        self.on_every_shard(
            &parts,
            |p| !p.0.is_empty(),
            |ix, p| ix.upsert_many(&p.0, &p.1, &p.2),
        )
    }

    /// Replaces the metadata of each id (its vector kept bit for bit). All or nothing: every
    /// id must be live ([`Error::NotFound`]) and every document within the limits before any
    /// shard changes.
    pub fn set_metadata(&self, ids: &[u64], metadata: &[Metadata]) -> Result<()> {
        let writers = self.writers()?;
        if ids.len() != metadata.len() {
            return Err(Error::InvalidArgument(format!(
                "{} metadata documents for {} ids",
                metadata.len(),
                ids.len()
            )));
        }
        check_documents(metadata)?;
        let _w = lock(&self.writing);
        check_distinct(ids)?;
        for &id in ids {
            if !self.contains(id)? {
                return Err(Error::NotFound { id });
            }
        }
        let s = writers.len();
        let mut parts: Vec<(Vec<u64>, Vec<Metadata>)> = vec![Default::default(); s];
        for (&id, m) in ids.iter().zip(metadata) {
            let p = &mut parts[shard_of(id, s)];
            p.0.push(id);
            p.1.push(m.clone());
        }
        self.on_every_shard(
            &parts,
            |p| !p.0.is_empty(),
            |ix, p| ix.set_metadata_many(&p.0, &p.1),
        )
    }

    /// Deletes `ids` (each from its shard), all or nothing: [`Error::NotFound`], with nothing
    /// deleted, if one is not live (an id given twice is deleted once).
    pub fn delete(&self, ids: &[u64]) -> Result<()> {
        let writers = self.writers()?;
        let _w = lock(&self.writing);
        for &id in ids {
            if !self.contains(id)? {
                return Err(Error::NotFound { id });
            }
        }
        let s = writers.len();
        let mut parts = vec![Vec::new(); s];
        for &id in ids {
            parts[shard_of(id, s)].push(id);
        }
        self.on_every_shard(&parts, |p| !p.is_empty(), |ix, p| ix.delete_many(p))
    }

    /// Runs `write` on every shard whose part `wanted` says has work, the shards in parallel,
    /// after taking a savepoint of each; if any fails, every shard goes back to its savepoint
    /// (the caller holds `writing`, so no flush runs in between) and the first error is
    /// returned.
    fn on_every_shard<P: Sync>(
        &self,
        parts: &[P],
        wanted: impl Fn(&P) -> bool,
        write: impl Fn(&Index, &P) -> Result<()> + Sync,
    ) -> Result<()> {
        let writers = self.writers()?;
        let savepoints: Vec<_> = writers.iter().map(Index::savepoint).collect();
        let write = &write;
        #[cfg(feature = "mutants")]
        let fail = lock(&self.fail_shard).take();
        #[cfg(not(feature = "mutants"))]
        let fail: Option<usize> = None;
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = writers
                .iter()
                .zip(parts)
                .filter(|(_, p)| wanted(p))
                .map(|(ix, p)| scope.spawn(move || write(ix, p)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument("a shard write panicked".into()))
                    })
                })
                .collect()
        });
        let failed = results.into_iter().find_map(Result::err);
        let Some(err) = failed.or_else(|| {
            fail.map(|s| {
                Error::Io(std::io::Error::other(format!(
                    "injected failure in shard {s} after its part was written"
                )))
            })
        }) else {
            return Ok(());
        };
        let mut back = Vec::new();
        for (ix, sp) in writers.iter().zip(savepoints) {
            if let Err(e) = ix.rollback_to(sp) {
                back.push(e.to_string());
            }
        }
        if back.is_empty() {
            return Err(err);
        }
        Err(Error::Io(std::io::Error::other(format!(
            "{err}; taking the other shards' part back also failed: {}",
            back.join("; ")
        ))))
    }

    /// Tests only: the next call that passes its checks and writes shards reports an I/O
    /// error (naming `shard`) after every shard's part succeeded, as if that shard's disk
    /// failed at the end of it: the collection must take back every shard's part.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn fail_next_write_in_shard(&self, shard: usize) {
        *lock(&self.fail_shard) = Some(shard);
    }

    /// Checks a call's rows before any shard sees them: whole rows of the collection's
    /// dimensions, finite values (and not zero under cosine), one id and one document per
    /// row, every document within the metadata limits. Returns the row count.
    fn check_rows(
        &self,
        vectors: &[f32],
        ids: Option<usize>,
        metadata: Option<&[Metadata]>,
    ) -> Result<usize> {
        let dims = self.dims();
        if dims == 0 || !vectors.len().is_multiple_of(dims) {
            return Err(Error::DimensionMismatch {
                expected: dims,
                got: vectors.len() % dims.max(1),
            });
        }
        let rows = vectors.len() / dims;
        if ids.is_some_and(|i| i != rows) || metadata.is_some_and(|m| m.len() != rows) {
            return Err(Error::InvalidArgument(
                "ids and metadata need one entry per row".into(),
            ));
        }
        let metric = self.metric();
        for (row, v) in vectors.chunks(dims).enumerate() {
            crate::query::prepare_vector(metric, dims, v).map_err(|e| match e {
                Error::InvalidVector { reason } if rows > 1 => Error::InvalidVector {
                    reason: format!("row {row}: {reason}"),
                },
                e => e,
            })?;
        }
        if let Some(m) = metadata {
            check_documents(m)?;
        }
        Ok(rows)
    }

    /// [`Error::DuplicateId`] for an id given twice or already live in its shard.
    fn check_ids_new(&self, ids: &[u64]) -> Result<()> {
        check_distinct(ids)?;
        for &id in ids {
            if self.contains(id)? {
                return Err(Error::DuplicateId { id });
            }
        }
        Ok(())
    }

    /// Flushes every shard (in parallel), then publishes a manifest naming the sequence each
    /// committed. See the module doc for what a crash in between leaves.
    pub fn flush(&self) -> Result<()> {
        let writers = self.writers()?;
        let _w = lock(&self.writing);
        let results: Vec<Result<u64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = writers
                .iter()
                .map(|ix| {
                    scope.spawn(move || {
                        ix.flush()?;
                        Ok(ix.info()?.sequence)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument("a shard flush panicked".into()))
                    })
                })
                .collect()
        });
        let mut manifest = lock(&self.manifest);
        let mut next = manifest.clone();
        for (entry, r) in next.shards.iter_mut().zip(results) {
            entry.sequence = r?;
        }
        if next.shards != manifest.shards {
            next.generation += 1;
            next.publish(&self.dir)?;
            *manifest = next;
        }
        Ok(())
    }

    /// The `k` nearest live vectors over every shard: each shard's exact top `k` at beam
    /// width `ef`, merged by distance (ties by id). `threads`: shards searched at once (0:
    /// one thread per shard, up to the machine's cores; 1: one after another on this thread).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        threads: usize,
    ) -> Result<Vec<Neighbor>> {
        Ok(self
            .search_many(query, 1, k, ef, filter, threads)?
            .pop()
            .unwrap_or_default())
    }

    /// [`Collection::search`] for `rows` queries (row-major in `queries`): each shard runs
    /// all of them, the shards in parallel, then each query's lists are merged.
    pub fn search_many(
        &self,
        queries: &[f32],
        rows: usize,
        k: usize,
        ef: usize,
        filter: Option<&Filter>,
        threads: usize,
    ) -> Result<Vec<Vec<Neighbor>>> {
        let dims = self.dims();
        if queries.len() != rows * dims {
            return Err(Error::DimensionMismatch {
                expected: dims,
                got: queries.len().checked_div(rows).unwrap_or(0),
            });
        }
        let pinned = match &self.shards {
            Shards::Readers { pinned, .. } => Some(lock(pinned).snaps.clone()),
            Shards::Writers(_) => None,
        };
        let s = self.shard_count();
        let one = |i: usize| -> Result<Vec<Vec<Neighbor>>> {
            (0..rows)
                .map(|r| {
                    let q = &queries[r * dims..(r + 1) * dims];
                    match (&self.shards, filter) {
                        (Shards::Writers(w), None) => w[i].search(q, k, ef),
                        (Shards::Writers(w), Some(f)) => w[i].search_filtered(q, k, ef, f),
                        (Shards::Readers { readers, .. }, f) => {
                            let snap = pinned.as_ref().and_then(|p| p.get(i)).ok_or_else(|| {
                                Error::InvalidArgument("a shard has no snapshot".into())
                            })?;
                            match f {
                                None => readers[i].search_in(snap, q, k, ef),
                                Some(f) => Ok(readers[i].search_in_filtered(snap, q, k, ef, f)?.0),
                            }
                        }
                    }
                })
                .collect()
        };
        let workers = match threads {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(s),
            t => t.min(s),
        };
        let per_shard: Vec<Result<Vec<Vec<Neighbor>>>> = if workers <= 1 {
            (0..s).map(one).collect()
        } else {
            let one = &one;
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|w| {
                        scope.spawn(move || {
                            (w..s)
                                .step_by(workers)
                                .map(|i| (i, one(i)))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                let mut all: Vec<(usize, Result<Vec<Vec<Neighbor>>>)> = handles
                    .into_iter()
                    .flat_map(|h| {
                        h.join().unwrap_or_else(|_| {
                            vec![(
                                0,
                                Err(Error::InvalidArgument("a shard search panicked".into())),
                            )]
                        })
                    })
                    .collect();
                all.sort_by_key(|(i, _)| *i);
                all.into_iter().map(|(_, r)| r).collect()
            })
        };
        let per_shard = per_shard.into_iter().collect::<Result<Vec<_>>>()?;
        Ok((0..rows)
            .map(|r| merge(per_shard.iter().map(|lists| &lists[r][..]), k))
            .collect())
    }

    /// The stored vector of `id` (from its shard).
    pub fn get(&self, id: u64) -> Result<Vec<f32>> {
        let i = shard_of(id, self.shard_count());
        match &self.shards {
            Shards::Writers(w) => w[i].get(id),
            Shards::Readers { readers, .. } => readers[i].get(id),
        }
    }

    /// The metadata of `id`.
    pub fn get_metadata(&self, id: u64) -> Result<Metadata> {
        let i = shard_of(id, self.shard_count());
        match &self.shards {
            Shards::Writers(w) => w[i].get_metadata(id),
            Shards::Readers { readers, .. } => readers[i].get_metadata(id),
        }
    }

    /// Whether `id` is live.
    pub fn contains(&self, id: u64) -> Result<bool> {
        let i = shard_of(id, self.shard_count());
        match &self.shards {
            Shards::Writers(w) => w[i].contains(id),
            Shards::Readers { readers, .. } => readers[i].contains(id),
        }
    }

    /// Flushes (a writer) and closes every shard cleanly.
    pub fn close(self) -> Result<()> {
        if let Shards::Writers(_) = &self.shards {
            self.flush()?;
        }
        if let Shards::Writers(w) = self.shards {
            for ix in w {
                ix.close()?;
            }
        }
        Ok(())
    }
}

/// [`Error::DuplicateId`] for the first id a call gives twice.
fn check_distinct(ids: &[u64]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    for &id in ids {
        if !seen.insert(id) {
            return Err(Error::DuplicateId { id });
        }
    }
    Ok(())
}

/// Every document within the metadata limits (the encoding a shard would store).
fn check_documents(metadata: &[Metadata]) -> Result<()> {
    for (row, m) in metadata.iter().enumerate() {
        crate::format::metadata::encode(m).map_err(|e| match e {
            Error::InvalidArgument(why) => Error::InvalidArgument(format!("row {row}: {why}")),
            e => e,
        })?;
    }
    Ok(())
}

fn check_shard(want: &(usize, Metric), dims: usize, metric: Metric) -> Result<()> {
    if (dims, metric) != *want {
        return Err(Error::InvalidArgument(format!(
            "a shard has {dims} dimensions and metric {}, the manifest {} and {}",
            metric.name(),
            want.0,
            want.1.name()
        )));
    }
    Ok(())
}

/// Takes one snapshot per shard at the sequences the manifest names (see the module doc).
fn pin(dir: &Path, readers: &[IndexReader]) -> Result<Pinned> {
    let mut last = None;
    for _ in 0..PIN_TRIES {
        let manifest = Manifest::read_from(dir)?;
        let snaps = readers
            .iter()
            .map(|r| r.snapshot())
            .collect::<Result<Vec<_>>>()?;
        let consistent = snaps
            .iter()
            .zip(&manifest.shards)
            .all(|(s, e)| s.sequence() == e.sequence);
        if consistent {
            return Ok(Pinned {
                snaps,
                generation: manifest.generation,
                consistent,
            });
        }
        last = Some(Pinned {
            snaps,
            generation: manifest.generation,
            consistent,
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    last.ok_or_else(|| Error::InvalidArgument("no shard snapshot".into()))
}

/// The `k` nearest of several lists each sorted by distance: by distance, then id.
pub fn merge<'a>(lists: impl Iterator<Item = &'a [Neighbor]>, k: usize) -> Vec<Neighbor> {
    let mut all: Vec<Neighbor> = lists.flat_map(|l| l.iter().copied()).collect();
    all.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
    all.truncate(k);
    all
}

impl Collection {
    /// The generation of the manifest a read-only collection serves, and whether its set is
    /// consistent; a writer's: its manifest's generation and `true`.
    pub fn pinned_generation(&self) -> (u64, bool) {
        match &self.shards {
            Shards::Writers(_) => (lock(&self.manifest).generation, true),
            Shards::Readers { pinned, .. } => {
                let p = lock(pinned);
                (p.generation, p.consistent)
            }
        }
    }
}

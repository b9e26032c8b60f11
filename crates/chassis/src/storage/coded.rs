//! The storage side of codes (docs/FORMAT.md, "Codes"): reading a slot's code and aux
//! record, writing them beside the vectors, and training the codebook once.
//!
//! Invariant: codes are read only once a codebook is loaded, which happens only for a header
//! that names it (or right after training, in the writer that trained it); so codes written
//! before the commit that names their codebook are never read by anyone, and a crash before
//! that commit leaves a file that walks by vectors and trains again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::{no_space, Regions, Segment, Store};
use crate::error::{Error, Result};
use crate::format::codes::{self, CodeKind, Codebook};
use crate::format::geometry::SegmentLayout;
use crate::format::vector::VectorRef;
use crate::format::{self, header, table};
use crate::os::{Region, Storage};

/// In a file with codes, everything of a segment but its vectors (slot headers, level-0
/// records, aux records, codes: what a search walks by, and the ids it returns) is kept
/// resident once read where the file is too large for memory ([`Region::keep_resident`]);
/// the vectors, read only for the few nodes a search ranks, are left to the page cache.
pub(crate) fn keep_walk_resident(region: &Region, layout: &SegmentLayout) {
    if layout.code_bytes > 0 {
        region.keep_resident(layout.records_at, layout.bytes - layout.records_at);
        region.keep_resident(layout.headers_at, layout.vectors_at - layout.headers_at);
    }
}

/// Where a slot's vector lies: the region of its segment, and its parts in it as (offset,
/// length) ([`SegmentLayout::vector_parts`]: one, or a planar split vector's two; a part of
/// length 0 is none).
pub(crate) type VectorRanges<'a> = (&'a Region, [(u64, u64); 2]);

/// Calls `f` with the region and (offset, length) of each part of `ranges` that has bytes
/// (for [`Region::will_need`] and [`Region::release`]).
#[inline]
pub(crate) fn each_vector_part(ranges: Option<VectorRanges<'_>>, f: impl Fn(&Region, u64, u64)) {
    if let Some((region, parts)) = ranges {
        for (at, len) in parts.into_iter().filter(|p| p.1 > 0) {
            f(region, at, len);
        }
    }
}

/// Starts reading the vectors at `ranges` (one per vector, in order), stored in `layout`, all
/// at once, past the page cache: the vectors a search ranks in a file too large for memory
/// (os/direct.rs; a read-only mapping on Linux). [`PendingVectors::finish`] waits for them.
/// `None` where any range can't be read that way (a file that fits, another platform, a
/// sandbox without io_uring, too many at once): the caller reads through the mapping.
/// Committed vectors never change, so what comes back is what the mapping holds.
pub(crate) fn start_vectors_direct<'a>(
    ranges: impl ExactSizeIterator<Item = Option<VectorRanges<'a>>>,
    layout: format::vector::VectorLayout,
    dims: u32,
) -> Option<PendingVectors<'a>> {
    #[cfg(target_os = "linux")]
    {
        let mut file: Option<&crate::os::direct::DirectFile> = None;
        let parts = layout.plane_bytes(dims).iter().filter(|&&b| b > 0).count();
        let mut reads = Vec::with_capacity(parts * ranges.len());
        for range in ranges {
            let (region, at_len) = range?;
            for (at, len) in at_len.into_iter().take(parts) {
                let (direct, offset) = region.direct_range(at, len)?;
                // One file: every segment of an index is mapped from it.
                if file.is_some_and(|f| !std::ptr::eq(f, direct)) {
                    return None;
                }
                file = Some(direct);
                reads.push((offset, usize::try_from(len).ok()?));
            }
        }
        Some(PendingVectors {
            pending: file?.start_many(&reads)?,
            layout,
            dims: dims as usize,
            parts,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (ranges, layout, dims);
        None
    }
}

/// Vectors being read past the page cache ([`start_vectors_direct`]).
pub(crate) struct PendingVectors<'a> {
    #[cfg(target_os = "linux")]
    pending: crate::os::direct::Pending<'a>,
    #[cfg(not(target_os = "linux"))]
    pending: std::marker::PhantomData<&'a ()>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    layout: format::vector::VectorLayout,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    dims: usize,
    /// Reads per vector: 1, or 2 for planar split halves (high part, then low).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    parts: usize,
}

impl PendingVectors<'_> {
    /// Waits for the reads and appends the vectors to `out` (cleared first) as f32 values,
    /// `dims` each, in order; `false`, with `out` unspecified, where any read failed.
    pub(crate) fn finish(self, out: &mut Vec<f32>) -> bool {
        out.clear();
        #[cfg(target_os = "linux")]
        {
            let (layout, dims, parts) = (self.layout, self.dims, self.parts);
            // A vector read in parts is joined (high halves, then low) before it is decoded.
            let mut joined = Vec::new();
            self.pending.finish(|i, bytes| {
                if parts == 1 {
                    return format::vector::decode_bytes_of(layout, dims, bytes, out);
                }
                joined.extend_from_slice(bytes);
                if i % parts == parts - 1 {
                    format::vector::decode_bytes_of(layout, dims, &joined, out);
                    joined.clear();
                }
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = self.pending;
            false
        }
    }
}

impl Regions {
    /// The file's code kind (whether or not its codebook is trained yet).
    pub fn code_kind(&self) -> CodeKind {
        self.codes
    }

    /// The trained codebook, if any.
    pub fn codebook(&self) -> Option<&Arc<Codebook>> {
        self.codebook.as_ref()
    }

    /// The code of `slot` as a search walks by it, once the codebook is trained.
    #[inline]
    pub fn code(&self, slot: u32) -> Option<VectorRef<'_>> {
        let book = self.codebook.as_deref()?;
        let (seg, off) = self.slot_place(slot)?;
        let at = seg.layout.codes_at + off * seg.layout.code_bytes;
        seg.region
            .bytes(at, book.packed_bytes())
            .ok()
            .map(|c| VectorRef::Code(c, book))
    }

    /// Where `slot`'s vector lies: its segment's region and its parts in it.
    #[inline]
    fn vector_ranges(&self, slot: u32) -> Option<VectorRanges<'_>> {
        let (seg, off) = self.slot_place(slot)?;
        Some((&seg.region, seg.layout.vector_parts(off)))
    }

    /// Starts reading the vector of `slot` in a file too large for memory, without waiting
    /// ([`crate::os::Region::will_need`]): it is about to be ranked exactly.
    #[inline]
    pub fn will_need_vector(&self, slot: u32) {
        each_vector_part(self.vector_ranges(slot), Region::will_need);
    }

    /// Starts reading the vectors of `slots` all at once, past the page cache, where the file
    /// is too large for memory ([`start_vectors_direct`]); `None` elsewhere.
    pub(crate) fn start_vectors(&self, slots: &[u32]) -> Option<PendingVectors<'_>> {
        start_vectors_direct(
            slots.iter().map(|&s| self.vector_ranges(s)),
            self.layout(),
            self.dims,
        )
    }

    /// Gives the pages of `slot`'s vector back in a file too large for memory
    /// ([`crate::os::Region::release`]): it was just ranked exactly.
    #[inline]
    pub fn release_vector(&self, slot: u32) {
        each_vector_part(self.vector_ranges(slot), Region::release);
    }

    /// The aux record of `slot`: its code's error bound ε and its vector's norm.
    #[inline]
    pub fn code_aux(&self, slot: u32) -> Option<(f32, f32)> {
        let w = self.code_aux_words(slot)?;
        Some((
            f32::from_bits(w[0].load(Ordering::Relaxed)),
            f32::from_bits(w[1].load(Ordering::Relaxed)),
        ))
    }

    /// The two words of `slot`'s aux record, where they lie in the mapping (read by
    /// [`Regions::code_aux`]; their address is what a search prefetches).
    #[inline]
    pub fn code_aux_words(&self, slot: u32) -> Option<&[AtomicU32]> {
        self.codebook.as_ref()?;
        let (seg, off) = self.slot_place(slot)?;
        seg.region
            .u32_words(seg.layout.aux_at + off * codes::AUX_BYTES, 2)
            .ok()
    }
}

/// Writes the aux records and codes of the vectors `vectors` (whole vectors, slots from `off`
/// on in `seg`), one write per array.
pub(super) fn write_codes(
    storage: &dyn Storage,
    seg: &Segment,
    off: u64,
    book: &Codebook,
    vectors: &[f32],
) -> Result<()> {
    let d = book.dims();
    let cb = seg.layout.code_bytes as usize;
    if cb == 0 || d == 0 {
        return Ok(());
    }
    let n = vectors.len() / d;
    let mut aux = vec![0u8; n * codes::AUX_BYTES as usize];
    let mut code = vec![0u8; n * cb];
    for ((v, a), c) in vectors
        .chunks_exact(d)
        .zip(aux.chunks_exact_mut(codes::AUX_BYTES as usize))
        .zip(code.chunks_exact_mut(cb))
    {
        let (eps, norm) = book.encode(v, c);
        a.copy_from_slice(&codes::encode_aux(eps, norm));
    }
    storage.write_at(
        seg.offset + seg.layout.aux_at + off * codes::AUX_BYTES,
        &aux,
    )?;
    storage.write_at(seg.offset + seg.layout.codes_at + off * cb as u64, &code)
}

impl Store {
    /// Reads and checks the codebook the current header names, if any (a file `len` bytes
    /// long): from here on searches walk by codes.
    pub(super) fn load_codebook(&mut self, len: u64) -> Result<()> {
        // A codebook of a kind this release doesn't know is ignored with its codes.
        if self.header.codebook == 0 || self.codes == CodeKind::None {
            return Ok(());
        }
        let off = self.header.codebook;
        let bytes = codes::codebook_bytes(self.dims);
        let at = format::header_offset(self.header_copy) + header::at::CODEBOOK as u64;
        table::check_region(off, bytes, len, at)?;
        let mut b = vec![0u8; bytes as usize];
        self.storage.read_at(off, &mut b)?;
        self.regions.codebook = Some(Arc::new(Codebook::decode(&b, self.codes, self.dims, off)?));
        Ok(())
    }

    /// Trains the codebook from the vectors of slots `0..count` (up to
    /// [`codes::TRAIN_SAMPLE`] of them, evenly spaced), writes it to a new region and the codes
    /// of those slots; every vector written after this gets its code with it. The next commit
    /// names the codebook in the header; until then readers of the file walk by vectors. A
    /// file without codes, or one whose codebook is already trained, is left alone.
    pub fn train_codes(&mut self, count: u32) -> Result<()> {
        self.require_writable()?;
        if self.codes == CodeKind::None || self.regions.codebook.is_some() || count == 0 {
            return Ok(());
        }
        let d = self.dims as usize;
        let step = (u64::from(count) / codes::TRAIN_SAMPLE).max(1) as usize;
        let sample: Vec<Vec<f32>> = (0..count)
            .step_by(step)
            .filter_map(|s| self.regions.vector(s).map(|v| v.to_vec()))
            .collect();
        let book = Codebook::train(self.codes, d, sample.iter().map(|v| v.as_slice()));
        self.install_codebook(book, count)
    }

    /// [`Store::train_codes`] with a codebook trained elsewhere (another file's, of this
    /// file's kind and dimensions): a compaction that keeps the graph keeps its codes too.
    pub fn adopt_codebook(&mut self, book: &Codebook, count: u32) -> Result<()> {
        self.require_writable()?;
        if self.codes == CodeKind::None || self.regions.codebook.is_some() || count == 0 {
            return Ok(());
        }
        if book.kind() != self.codes || book.dims() != self.dims as usize {
            return Err(Error::InvalidArgument(format!(
                "a {:?} codebook of {} dimensions for a {:?} file of {}",
                book.kind(),
                book.dims(),
                self.codes,
                self.dims
            )));
        }
        self.install_codebook(book.clone(), count)
    }

    /// Writes `book` to a new region and the codes of slots `0..count` by it.
    fn install_codebook(&mut self, book: Codebook, count: u32) -> Result<()> {
        let d = self.dims as usize;
        let bytes = book.encode_region();
        let (offset, _region) = self.append_region(bytes.len() as u64)?;
        self.storage
            .allocate(offset, bytes.len() as u64)
            .map_err(no_space)?;
        self.storage.write_at(offset, &bytes)?;
        let book = Arc::new(book);
        let mut buf = Vec::new();
        let mut first = 0u32;
        while first < count {
            let (seg, off) = self
                .slot_place(first)
                .ok_or_else(|| Error::corrupt(format!("slot {first} has no segment"), 0))?;
            let n = (seg.layout.slots - off).min(u64::from(count - first)) as u32;
            let mut vectors = Vec::with_capacity(n as usize * d);
            for s in first..first + n {
                match self.regions.vector(s) {
                    Some(v) => {
                        v.decode_into(&mut buf);
                        vectors.extend_from_slice(&buf);
                    }
                    None => vectors.resize(vectors.len() + d, 0.0),
                }
            }
            write_codes(&*self.storage, seg, off, &book, &vectors)?;
            first += n;
        }
        self.codebook_offset = offset;
        self.regions.codebook = Some(book);
        Ok(())
    }

    /// File offset of the codebook the next commit names (0: none yet).
    pub fn codebook_offset(&self) -> u64 {
        self.codebook_offset
    }
}

#[cfg(test)]
mod tests {
    /// Fails if a segment of a file too large for memory keeps resident anything but the
    /// bytes a search walks and returns (slot headers, level-0 and aux records, codes), or
    /// keeps anything resident without codes.
    #[cfg(target_os = "linux")]
    #[test]
    fn everything_but_the_vectors_is_kept_resident_with_codes() {
        use super::*;
        use crate::os::{budget, FileStorage};
        let _one = budget::LOCK_TESTS.lock();
        let dir = tempfile::tempdir().unwrap();
        let f = FileStorage::create(&dir.path().join("a")).unwrap();
        let (slots, dims, m) = (4096, 64, 16);
        for codes in [CodeKind::Int4, CodeKind::None] {
            let layout = SegmentLayout::with_codes(slots, dims, m, codes);
            let len = layout.bytes.div_ceil(65_536) * 65_536;
            f.grow(len).unwrap();
            let mut region = f.map(0, len, false).unwrap();
            region.set_huge_pages(false);
            let before = (budget::vm_locked(), budget::locks().held());
            keep_walk_resident(&region, &layout);
            let page = rustix::param::page_size() as u64;
            let pages = |from: u64, to: u64| (to.div_ceil(page) - from / page) * page;
            let want = match codes {
                CodeKind::None => 0,
                _ if !budget::may_lock(1 << 20) => 0,
                _ => pages(layout.records_at, layout.bytes) + pages(0, layout.vectors_at),
            };
            assert_eq!(budget::vm_locked() - before.0, want, "{codes:?}");
            assert_eq!(budget::locks().held() - before.1, want, "{codes:?}");
            drop(region);
            assert_eq!((budget::vm_locked(), budget::locks().held()), before);
        }
    }

    /// Fails if vectors read past the page cache (a file larger than memory: os/direct.rs)
    /// differ from what the mapping holds, in either layout, at offsets that straddle pages
    /// and in any order with repeats; or if a region without direct reads claims to read.
    #[cfg(target_os = "linux")]
    #[test]
    fn vectors_read_directly_are_the_mappings() {
        use super::start_vectors_direct;
        use crate::format::codes::CodeKind;
        use crate::format::geometry::SegmentLayout;
        use crate::format::vector::{encode, Halves, VectorLayout, VectorRef};
        use crate::os::{direct, FileStorage, Storage};
        let dir = tempfile::tempdir().unwrap();
        let (n, dims, base) = (64usize, 96usize, 3 * 4096 + 100);
        let vectors: Vec<Vec<f32>> = (0..n)
            .map(|i| {
                (0..dims)
                    .map(|j| ((i * 31 + j * 7) % 97) as f32 * 0.37 - 17.0)
                    .collect()
            })
            .collect();
        for layout in [
            VectorLayout::F32,
            VectorLayout::SplitHalves,
            VectorLayout::SplitPlanar,
        ] {
            let path = dir.path().join(format!("{layout:?}"));
            // One segment of `n` slots at `base`: a planar vector's halves lie apart.
            let seg = SegmentLayout::of(n as u64, dims as u32, 4, layout, CodeKind::None);
            let parts = |s: u32| {
                seg.vector_parts(u64::from(s))
                    .map(|(at, len)| (base as u64 + at, len))
            };
            let mut bytes = vec![0u8; base + seg.bytes as usize];
            let mut encoded = vec![0u8; 4 * dims];
            for (i, v) in vectors.iter().enumerate() {
                encode(layout, v, &mut encoded);
                let mut from = 0;
                for (at, len) in parts(i as u32) {
                    let len = len as usize;
                    bytes[at as usize..][..len].copy_from_slice(&encoded[from..from + len]);
                    from += len;
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            let storage = FileStorage::open(&path, false).unwrap();
            let mut region = storage.map(0, bytes.len() as u64, false).unwrap();
            let slots = [5u32, 0, 63, 17, 17, 40];
            let mut out = Vec::new();
            let refused = start_vectors_direct(
                slots.iter().map(|&s| Some((&region, parts(s)))),
                layout,
                dims as u32,
            )
            .is_none();
            assert!(
                refused,
                "a mapping of a file that fits reads through the page cache"
            );
            let file = std::fs::File::open(&path).unwrap();
            let Some(direct) = direct::DirectFile::open(&file) else {
                assert!(
                    !direct::direct_io_works(&path),
                    "O_DIRECT works here but was refused"
                );
                continue;
            };
            region.set_direct(std::sync::Arc::new(direct), 0);
            let read = start_vectors_direct(
                slots.iter().map(|&s| Some((&region, parts(s)))),
                layout,
                dims as u32,
            )
            .is_some_and(|p| p.finish(&mut out));
            assert_eq!(read, direct::io_uring_works(), "{layout:?}");
            if read {
                let want: Vec<f32> = slots
                    .iter()
                    .flat_map(|&s| vectors[s as usize].clone())
                    .collect();
                assert_eq!(out, want, "{layout:?}");
                // What the mapping lends for the same bytes, decoded.
                if layout.is_split() {
                    let [(high, _), (low, _)] = parts(17);
                    let (high, low) = match layout {
                        VectorLayout::SplitPlanar => (high, low),
                        _ => (high, high + 2 * dims as u64),
                    };
                    let h = Halves {
                        high: region.u16s(high, dims).unwrap(),
                        low: region.u16s(low, dims).unwrap(),
                    };
                    assert_eq!(VectorRef::Split(h).to_vec(), vectors[17]);
                }
            }
        }
    }
}

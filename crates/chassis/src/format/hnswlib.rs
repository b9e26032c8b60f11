//! Reading an hnswlib index file (`Index.save_index` / `HierarchicalNSW::saveIndex` of hnswlib
//! 0.7 and 0.8), for migration into format 3. Pure functions over bytes; every malformed input
//! is `Error::Corrupt` with the offset, never a panic.
//!
//! Layout (little-endian, hnswlib's `saveIndex`): a 96-byte header of `offsetLevel0` u64,
//! `max_elements` u64, `cur_element_count` u64, `size_data_per_element` u64, `label_offset`
//! u64, `offsetData` u64, `maxlevel` i32, `enterpoint_node` u32, `maxM` u64, `maxM0` u64, `M`
//! u64, `mult` f64, `ef_construction` u64; then `cur_element_count` level-0 elements of
//! `size_data_per_element` bytes each (a u32 list head whose low 16 bits are the neighbor
//! count and whose third byte holds the deleted mark, `maxM0` u32 neighbor ids, the vector at
//! `offsetData`, the u64 label at `label_offset`); then per element a u32 byte size of its
//! upper-layer lists followed by the lists, `4 + 4·maxM` bytes per layer, each a u32 head and
//! `maxM` ids. hnswlib stores neither the dimensions nor the space: the dimensions follow from
//! `label_offset - offsetData`, and the caller names the metric.

use crate::error::{Error, Result};

/// Bytes of the fixed header.
pub const HEADER_BYTES: usize = 96;

/// hnswlib's deleted mark, in the third byte of a level-0 list head.
pub const DELETE_MARK: u8 = 0x01;

/// A parsed hnswlib index, borrowing the file's bytes.
#[derive(Debug)]
pub struct HnswlibFile<'a> {
    bytes: &'a [u8],
    /// Elements stored.
    pub count: usize,
    /// Vector dimensions.
    pub dims: usize,
    /// M (upper-layer list capacity).
    pub max_m: usize,
    /// Layer-0 list capacity (2M in hnswlib's defaults).
    pub max_m0: usize,
    /// The M the index was built with.
    pub m: usize,
    /// ef_construction it was built with.
    pub ef_construction: usize,
    /// Top layer of the entry point (−1 for an empty index).
    pub max_level: i32,
    /// The entry point's internal id.
    pub entry_point: u32,
    size_per_element: usize,
    offset_data: usize,
    label_offset: usize,
    /// Where each element's upper-layer lists start, and how many layers it has.
    upper: Vec<(usize, usize)>,
}

fn corrupt(what: impl Into<String>, at: usize) -> Error {
    Error::corrupt(format!("hnswlib file: {}", what.into()), at as u64)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| corrupt("ends inside its header", at))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| corrupt("ends inside a list", at))
}

fn small(v: u64, limit: u64, what: &str, at: usize) -> Result<usize> {
    if v > limit {
        return Err(corrupt(format!("{what} {v} is out of range"), at));
    }
    Ok(v as usize)
}

/// One element: its label, deleted mark, vector and neighbor lists.
#[derive(Debug)]
pub struct Element<'a> {
    /// hnswlib's label (becomes the Chassis id).
    pub label: u64,
    /// Marked deleted in hnswlib.
    pub deleted: bool,
    /// Level-0 neighbors (internal ids).
    pub level0: Vec<u32>,
    /// The vector's bytes (`dims` little-endian f32).
    pub vector: &'a [u8],
    /// Neighbors on layers 1..=levels, each list's internal ids.
    pub upper: Vec<Vec<u32>>,
}

impl<'a> HnswlibFile<'a> {
    /// Parses and checks the whole file (every offset and count) without copying it.
    pub fn parse(bytes: &'a [u8]) -> Result<HnswlibFile<'a>> {
        if bytes.len() < HEADER_BYTES {
            return Err(corrupt("shorter than its 96-byte header", bytes.len()));
        }
        let limit = bytes.len() as u64;
        let offset_level0 = u64_at(bytes, 0)?;
        let max_elements = u64_at(bytes, 8)?;
        let count = small(u64_at(bytes, 16)?, limit, "element count", 16)?;
        let size_per_element = small(u64_at(bytes, 24)?, limit, "element size", 24)?;
        let label_offset = small(u64_at(bytes, 32)?, limit, "label offset", 32)?;
        let offset_data = small(u64_at(bytes, 40)?, limit, "data offset", 40)?;
        let max_level = i32::from_le_bytes(
            bytes[48..52]
                .try_into()
                .map_err(|_| corrupt("header", 48))?,
        );
        let entry_point = u32_at(bytes, 52)?;
        let max_m = small(u64_at(bytes, 56)?, 65_535, "maxM", 56)?;
        let max_m0 = small(u64_at(bytes, 64)?, 65_535, "maxM0", 64)?;
        let m = small(u64_at(bytes, 72)?, 65_535, "M", 72)?;
        let ef_construction = small(
            u64_at(bytes, 88)?,
            u64::from(u32::MAX),
            "ef_construction",
            88,
        )?;
        if offset_level0 != 0 {
            return Err(corrupt("level-0 offset is not 0", 0));
        }
        if count as u64 > max_elements {
            return Err(corrupt("more elements than max_elements", 16));
        }
        if offset_data != 4 + 4 * max_m0 {
            return Err(corrupt("data offset does not follow the level-0 list", 40));
        }
        if label_offset < offset_data || !(label_offset - offset_data).is_multiple_of(4) {
            return Err(corrupt("label offset does not follow whole f32 values", 32));
        }
        if label_offset + 8 > size_per_element {
            return Err(corrupt("label does not fit in an element", 24));
        }
        if max_m == 0 || max_m0 == 0 {
            return Err(corrupt("zero list capacity", 56));
        }
        let dims = (label_offset - offset_data) / 4;
        let level0_end = count
            .checked_mul(size_per_element)
            .and_then(|b| b.checked_add(HEADER_BYTES))
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| corrupt("ends inside its level-0 elements", bytes.len()))?;
        let per_layer = 4 + 4 * max_m;
        let mut upper = Vec::with_capacity(count);
        let mut at = level0_end;
        for _ in 0..count {
            let size = u32_at(bytes, at)? as usize;
            if !size.is_multiple_of(per_layer) {
                return Err(corrupt("upper-layer lists of a partial layer", at));
            }
            let start = at + 4;
            let end = start
                .checked_add(size)
                .filter(|&e| e <= bytes.len())
                .ok_or_else(|| corrupt("ends inside upper-layer lists", at))?;
            upper.push((start, size / per_layer));
            at = end;
        }
        if count > 0 && (entry_point as usize >= count || max_level < 0) {
            return Err(corrupt("entry point outside the elements", 52));
        }
        if count > 0 && upper[entry_point as usize].1 != max_level as usize {
            return Err(corrupt("entry point's layers differ from maxlevel", 48));
        }
        Ok(HnswlibFile {
            bytes,
            count,
            dims,
            max_m,
            max_m0,
            m,
            ef_construction,
            max_level,
            entry_point,
            size_per_element,
            offset_data,
            label_offset,
            upper,
        })
    }

    fn list(&self, at: usize, capacity: usize) -> Result<Vec<u32>> {
        let n = usize::from(u16::from_le_bytes(
            self.bytes
                .get(at..at + 2)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| corrupt("list head", at))?,
        ));
        if n > capacity {
            return Err(corrupt(
                format!("list of {n} beyond capacity {capacity}"),
                at,
            ));
        }
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let id = u32_at(self.bytes, at + 4 + 4 * i)?;
            if id as usize >= self.count {
                return Err(corrupt(
                    format!("neighbor {id} outside the elements"),
                    at + 4 + 4 * i,
                ));
            }
            out.push(id);
        }
        Ok(out)
    }

    /// Element `i` (internal id), checked.
    pub fn element(&self, i: usize) -> Result<Element<'a>> {
        if i >= self.count {
            return Err(corrupt(format!("no element {i}"), 16));
        }
        let base = HEADER_BYTES + i * self.size_per_element;
        let deleted = self.bytes[base + 2] & DELETE_MARK != 0;
        let level0 = self.list(base, self.max_m0)?;
        let vector = &self.bytes[base + self.offset_data..base + self.label_offset];
        let label = u64_at(self.bytes, base + self.label_offset)?;
        let (start, layers) = self.upper[i];
        let per_layer = 4 + 4 * self.max_m;
        let upper = (0..layers)
            .map(|l| self.list(start + l * per_layer, self.max_m))
            .collect::<Result<Vec<_>>>()?;
        Ok(Element {
            label,
            deleted,
            level0,
            vector,
            upper,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_inconsistent_files_are_corrupt_never_a_panic() {
        assert!(HnswlibFile::parse(&[]).is_err());
        assert!(HnswlibFile::parse(&[0u8; 95]).is_err());
        let mut h = vec![0u8; HEADER_BYTES];
        // count 1 with element size 0: the label cannot fit.
        h[16] = 1;
        assert!(HnswlibFile::parse(&h).is_err());
        // Every truncation and every byte flip of a small valid file errs or parses; no panic.
        let valid = tiny();
        for n in 0..valid.len() {
            let _ = HnswlibFile::parse(&valid[..n])
                .map(|f| (0..f.count).filter(|&i| f.element(i).is_ok()).count());
        }
        for i in 0..valid.len() {
            let mut b = valid.clone();
            b[i] ^= 0xff;
            let _ = HnswlibFile::parse(&b)
                .map(|f| (0..f.count).filter(|&i| f.element(i).is_ok()).count());
        }
        let f = HnswlibFile::parse(&valid).unwrap();
        assert_eq!((f.count, f.dims, f.max_m, f.max_m0), (2, 2, 2, 4));
        let e = f.element(1).unwrap();
        assert_eq!(
            (e.label, e.deleted, e.level0.clone(), e.upper.len()),
            (7, true, vec![0], 0)
        );
    }

    /// Two 2-d elements, M = 2, M0 = 4; element 1 deleted; element 0 on layer 1.
    fn tiny() -> Vec<u8> {
        let (m, m0, dims) = (2usize, 4usize, 2usize);
        let offset_data = 4 + 4 * m0;
        let label_offset = offset_data + 4 * dims;
        let size = label_offset + 8;
        let mut b = Vec::new();
        for v in [
            0u64,
            10,
            2,
            size as u64,
            label_offset as u64,
            offset_data as u64,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&1i32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [m as u64, m0 as u64, m as u64] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0.5f64.to_le_bytes());
        b.extend_from_slice(&10u64.to_le_bytes());
        for (i, (label, other)) in [(5u64, 1u32), (7, 0)].into_iter().enumerate() {
            let mut e = vec![0u8; size];
            e[0] = 1;
            e[2] = if i == 1 { DELETE_MARK } else { 0 };
            e[4..8].copy_from_slice(&other.to_le_bytes());
            e[offset_data..offset_data + 4].copy_from_slice(&(i as f32).to_le_bytes());
            e[label_offset..].copy_from_slice(&label.to_le_bytes());
            b.extend_from_slice(&e);
        }
        let per_layer = 4 + 4 * m;
        b.extend_from_slice(&(per_layer as u32).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    }
}

//! (b) The pure decoders: header copies (alone and chosen between two), table page heads,
//! heap chunk heads, hnswlib files, and metadata documents and heap entries (a document that
//! decodes re-encodes to the same bytes), sync patches (likewise canonical), and codebook
//! regions (one that decodes re-encodes to the same bytes), and the full-text index's blobs:
//! a blob head, a root, a segment head and a dictionary block (each canonical).
#![no_main]

use chassis::format::{codes, header, hnswlib::HnswlibFile, metadata, patch, table, text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = header::Header::decode(data, 0);
    let (a, b) = data.split_at(data.len() / 2);
    let _ = header::choose(a, b);
    for cap in [4u32, 512] {
        let _ = table::decode_head(data, 0, cap);
    }
    if let Ok(doc) = metadata::decode(data, 0) {
        assert_eq!(
            metadata::encode(&doc).expect("a decoded document encodes"),
            data,
            "documents are canonical"
        );
    }
    if data.len() >= 16 {
        let (head, rest) = data.split_at(16);
        if let Ok(len) = metadata::entry_len(head, rest.len() as u64, 0) {
            let _ = metadata::check_entry(head, &rest[..len], 7, 0);
        }
    }
    if data.len() >= 16 {
        let dims = u32::from_le_bytes([data[12], data[13], data[14], data[15]]);
        for kind in [codes::CodeKind::Int8, codes::CodeKind::Int4] {
            if let Ok(book) = codes::Codebook::decode(data, kind, dims, 0) {
                let region = book.encode_region();
                assert_eq!(
                    &data[..region.len()],
                    &region[..],
                    "codebooks are canonical"
                );
            }
        }
    }
    if let Ok(p) = patch::Patch::decode(data) {
        assert_eq!(p.encode(), data, "patches are canonical");
    }
    let _ = text::decode_head(data, 0);
    if let Ok(root) = text::Root::decode(data, 0) {
        assert_eq!(root.encode(), data, "text roots are canonical");
    }
    if let Ok(head) = text::SegmentHead::decode(data, 0) {
        assert_eq!(head.encode(), data, "segment heads are canonical");
    }
    if let Ok(entries) = text::decode_dict(data, 0) {
        assert_eq!(
            text::encode_dict(&entries),
            data,
            "dictionary blocks are canonical"
        );
    }
    if let Ok(f) = HnswlibFile::parse(data) {
        for i in 0..f.count.min(10_000) {
            let _ = f.element(i);
        }
    }
});

//! docs/FORMAT.md is the byte-level truth of the file: every `<!-- layout: NAME -->` table in it
//! must list exactly the offsets and sizes the code uses.

use chassis::format::{self, header, live, metadata, record, table, text};

type Row = (String, u64, u64);

fn doc_tables() -> Vec<(String, Vec<Row>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md");
    let text = std::fs::read_to_string(path).expect("docs/FORMAT.md exists");
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<Row>)> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line
            .strip_prefix("<!-- layout: ")
            .and_then(|r| r.strip_suffix(" -->"))
        {
            current = Some((name.to_string(), Vec::new()));
        } else if line == "<!-- end -->" {
            out.push(current.take().expect("end without layout"));
        } else if let Some((_, rows)) = current.as_mut() {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            if cells.len() >= 3 {
                if let (Ok(off), Ok(size)) = (cells[0].parse::<u64>(), cells[1].parse::<u64>()) {
                    rows.push((cells[2].to_string(), off, size));
                }
            }
        }
    }
    assert!(current.is_none(), "unterminated layout table");
    out
}

fn rows(v: &[(&str, u64, u64)]) -> Vec<Row> {
    v.iter().map(|(n, o, s)| (n.to_string(), *o, *s)).collect()
}

fn code_tables() -> Vec<(String, Vec<Row>)> {
    let mut header_rows: Vec<Row> = header::FIELDS
        .iter()
        .map(|(n, o, s)| (n.to_string(), *o as u64, *s as u64))
        .collect();
    header_rows.push((
        "table_page_offsets".into(),
        header::at::TABLE_PAGE_OFFSETS as u64,
        0,
    ));
    vec![
        (
            "file".into(),
            rows(&[
                (
                    "header_a",
                    format::HEADER_A_OFFSET,
                    format::HEADER_COPY_BYTES,
                ),
                (
                    "header_b",
                    format::HEADER_B_OFFSET,
                    format::HEADER_COPY_BYTES,
                ),
                (
                    "live_page",
                    format::LIVE_PAGE_OFFSET,
                    format::LIVE_PAGE_BYTES,
                ),
                ("data_start", format::DATA_START, 0),
            ]),
        ),
        ("header".into(), header_rows),
        (
            "slot_header".into(),
            rows(&[
                ("id", record::SLOT_ID_AT, 8),
                ("deleted_epoch", record::SLOT_DELETED_EPOCH_AT, 8),
                ("metadata_ref", record::SLOT_METADATA_REF_AT, 8),
            ]),
        ),
        (
            "level0_record".into(),
            rows(&[
                ("upper_ref", record::RECORD_UPPER_REF_AT, 8),
                ("neighbors", record::RECORD_NEIGHBORS_AT, 4),
            ]),
        ),
        (
            "heap_chunk_head".into(),
            rows(&[
                ("magic", 0, 8),
                ("kind", 8, 4),
                ("reserved", 12, record::HEAP_CHUNK_HEAD_BYTES - 12),
            ]),
        ),
        (
            "upper_entry".into(),
            rows(&[
                ("layers", record::UPPER_LAYERS_AT, 4),
                (
                    "reserved",
                    record::UPPER_LAYERS_AT + 4,
                    record::UPPER_LISTS_AT - 4,
                ),
                ("lists", record::UPPER_LISTS_AT, 4),
            ]),
        ),
        (
            "metadata_entry".into(),
            rows(&[
                ("length", metadata::ENTRY_LENGTH_AT, 4),
                ("checksum", metadata::ENTRY_CHECKSUM_AT, 4),
                ("id", metadata::ENTRY_ID_AT, 8),
                ("document", metadata::ENTRY_DOCUMENT_AT, 1),
            ]),
        ),
        (
            "text_blob".into(),
            rows(&[
                ("magic", 0, 4),
                ("kind", text::KIND_AT as u64, 4),
                ("length", text::LENGTH_AT as u64, 4),
                ("checksum", text::CHECKSUM_AT as u64, 4),
                ("payload", text::HEAD_BYTES as u64, 1),
            ]),
        ),
        (
            "table_page".into(),
            rows(&[
                ("magic", 0, 8),
                ("kind", table::KIND_AT, 4),
                ("capacity", table::CAPACITY_AT, 4),
                ("entries", table::HEAD_BYTES, 8),
            ]),
        ),
        (
            "live_page".into(),
            rows(&[
                ("magic", 0, 8),
                ("routing_count", live::ROUTING_COUNT_AT, 8),
                ("segment_count", live::SEGMENT_COUNT_AT, 8),
                ("upper_heap_chunk_count", live::UPPER_HEAP_CHUNK_COUNT_AT, 8),
                (
                    "metadata_heap_chunk_count",
                    live::METADATA_HEAP_CHUNK_COUNT_AT,
                    8,
                ),
                ("table_page_count", live::TABLE_PAGE_COUNT_AT, 4),
                ("reserved", live::TABLE_PAGE_COUNT_AT + 4, 4),
                ("table_page_offsets", live::TABLE_PAGE_OFFSETS_AT, 8),
            ]),
        ),
    ]
}

#[test]
fn format_md_matches_the_code() {
    let doc = doc_tables();
    let code = code_tables();
    let doc_names: Vec<&String> = doc.iter().map(|(n, _)| n).collect();
    let code_names: Vec<&String> = code.iter().map(|(n, _)| n).collect();
    assert_eq!(
        doc_names, code_names,
        "FORMAT.md documents exactly these layouts"
    );
    for ((name, d), (_, c)) in doc.iter().zip(&code) {
        assert_eq!(
            d, c,
            "layout `{name}` in docs/FORMAT.md differs from the code"
        );
    }
}

#[test]
fn header_fields_tile_the_fixed_part_without_gaps() {
    let mut at = 0;
    for (name, off, size) in header::FIELDS {
        assert_eq!(*off, at, "field {name} does not follow the previous one");
        at += size;
    }
    assert_eq!(at, header::FIXED_BYTES);
    assert_eq!(header::at::READ_VERSION, 8, "decision 7: forever at 8");
    assert_eq!(header::at::WRITE_VERSION, 12, "decision 7: forever at 12");
}

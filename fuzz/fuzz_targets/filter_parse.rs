//! (e) The filter language: arbitrary text parsed as a filter; any filter that parses is
//! evaluated on a fixed set of documents both ways, by [`Filter::matches`] document by
//! document and through the filter index (its slot test and its collected set), which must
//! agree exactly.
#![no_main]

use chassis::filter::index::{DocSource, FilterIndex};
use chassis::format::metadata::{encode, parse_json, DocRef};
use chassis::{Filter, Result};
use libfuzzer_sys::fuzz_target;

const DOCS: &[&str] = &[
    r#"{}"#,
    r#"{"a": 1, "b": "x", "t": ["x", "y", 3]}"#,
    r#"{"a": 2.5, "b": "y", "n": null, "f": false}"#,
    r#"{"a": -7, "t": [], "f": true, "b": ""}"#,
    r#"{"a": [1, 2.5, "z"], "b": ["x", null]}"#,
    r#"{"a": 9223372036854775807, "n": 0}"#,
    r#"{"a": -1e300, "b": "éè", "t": [true, false]}"#,
    r#"{"c": {"$not": 1}}"#,
];

struct Docs(Vec<Vec<u8>>);

impl DocSource for Docs {
    fn doc(&self, slot: u32) -> Result<DocRef<'_>> {
        DocRef::new(&self.0[slot as usize], 0)
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(filter) = Filter::parse(text) else {
        return;
    };
    let docs = Docs(
        DOCS.iter()
            .filter_map(|d| parse_json(d).ok())
            .map(|m| encode(&m).expect("fixed documents encode"))
            .collect(),
    );
    let n = docs.0.len() as u32;
    let mut index = FilterIndex::new();
    index
        .prepare(&filter.fields(), n, &docs)
        .expect("fixed documents index");
    let compiled = index.compile(&filter);
    let collected = compiled.collect();
    for slot in 0..n {
        let want = filter.matches(&docs.doc(slot).expect("fixed documents decode"));
        assert_eq!(compiled.test(slot), want, "test of slot {slot} for {text}");
        assert_eq!(
            collected.contains(slot),
            want,
            "collect of slot {slot} for {text}"
        );
    }
});

//! (b) The pure decoders: header copies (alone and chosen between two), table page heads,
//! heap chunk heads and hnswlib files.
#![no_main]

use chassis::format::{header, hnswlib::HnswlibFile, table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = header::Header::decode(data, 0);
    let (a, b) = data.split_at(data.len() / 2);
    let _ = header::choose(a, b);
    for cap in [4u32, 512] {
        let _ = table::decode_head(data, 0, cap);
    }
    if let Ok(f) = HnswlibFile::parse(data) {
        for i in 0..f.count.min(10_000) {
            let _ = f.element(i);
        }
    }
});

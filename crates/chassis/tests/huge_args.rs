//! Arguments a caller controls never size an allocation before they are bounded: absurd `k`
//! and `ef` answer (clamped to the live count), never abort.

mod common;

use chassis::{Filter, Index, IndexReader, Metric};
use common::clustered;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn huge_k_and_ef_are_clamped_to_the_live_count(
        k in prop_oneof![1usize..64, Just(usize::MAX), Just(1usize << 40), Just(100_000_000_000usize)],
        ef in prop_oneof![1usize..64, Just(usize::MAX), Just(1usize << 40), Just(0usize)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.chassis");
        let data = clustered(60, 4, 3, 1);
        let ix = Index::create(&path, common::small(4, Metric::L2Squared, 8, 32)).unwrap();
        ix.add_batch(&data.concat(), 1).unwrap();
        ix.flush().unwrap();
        let want = k.min(60);
        let hits = ix.search(&data[0], k, ef).unwrap();
        prop_assert_eq!(hits.len(), want);
        let many = ix.search_many(&[&data[1][..], &data[2][..]], k, ef).unwrap();
        prop_assert!(many.iter().all(|h| h.len() == want));
        let f = Filter::parse(r#"{}"#).unwrap();
        prop_assert_eq!(ix.search_filtered(&data[0], k, ef, &f).unwrap().len(), want);
        let r = IndexReader::open(&path).unwrap();
        prop_assert_eq!(r.search(&data[0], k, ef).unwrap().len(), want);
        prop_assert!(r.search_many(&[&data[1][..]], k, ef).unwrap().iter().all(|h| h.len() == want));
        prop_assert_eq!(r.search_filtered(&data[0], k, ef, &f).unwrap().len(), want);
    }
}

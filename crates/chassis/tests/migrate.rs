//! Migrating hnswlib files: fixtures made by the real hnswlib package
//! (`tests/fixtures/hnswlib/make_fixtures.py`, hnswlib 0.8.0), with hnswlib's own answers to
//! 50 queries at ef 16 and 64. The graph is converted, not rebuilt, so Chassis must return the
//! same labels with the same distances.

use std::path::Path;

use chassis::{migrating_path, Error, Index, IndexReader, Metric};

fn fixture(space: &str) -> (std::path::PathBuf, serde_json::Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hnswlib");
    let json = std::fs::read_to_string(dir.join(format!("{space}.json"))).unwrap();
    (
        dir.join(format!("{space}.bin")),
        serde_json::from_str(&json).unwrap(),
    )
}

fn metric(space: &str) -> Metric {
    match space {
        "l2" => Metric::L2Squared,
        "ip" => Metric::InnerProduct,
        _ => Metric::Cosine,
    }
}

#[test]
fn migrated_hnswlib_indexes_answer_exactly_as_hnswlib_does() {
    for space in ["l2", "ip", "cosine"] {
        let (bin, want) = fixture(space);
        let dir = tempfile::tempdir().unwrap();
        let dst = dir.path().join(format!("{space}.chassis"));
        let ix = Index::migrate_hnswlib(&bin, &dst, metric(space)).unwrap();
        assert!(!migrating_path(&dst).exists());
        let deleted: Vec<u64> = want["deleted"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ix.len(), 600 - deleted.len(), "{space}");
        for &d in &deleted {
            assert!(!ix.contains(d).unwrap(), "{space}: deleted label {d}");
        }
        assert!(ix.contains(1000).unwrap() && ix.contains(1000 + 3 * 599).unwrap());
        let queries: Vec<Vec<f32>> = want["queries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                q.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect();
        let mut compared = 0;
        for ef in [16usize, 64] {
            let res = &want["results"][ef.to_string()];
            for (qi, q) in queries.iter().enumerate() {
                let hits = ix.search(q, 10, ef).unwrap();
                let labels: Vec<u64> = res["labels"][qi]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap())
                    .collect();
                let dists: Vec<f64> = res["distances"][qi]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                let got: Vec<u64> = hits.iter().map(|h| h.id).collect();
                assert_eq!(got, labels, "{space} ef {ef} query {qi}");
                for (h, d) in hits.iter().zip(&dists) {
                    let tol = 1e-4 * d.abs().max(1.0);
                    assert!(
                        (f64::from(h.distance) - d).abs() <= tol,
                        "{space} ef {ef} query {qi}: {} vs {d}",
                        h.distance
                    );
                }
                compared += 1;
            }
        }
        assert_eq!(compared, 100);
        // The migrated file is a normal Chassis file: reopen, read, write.
        drop(ix);
        let r = IndexReader::open(&dst).unwrap();
        assert_eq!(r.len().unwrap(), 590);
        let mut ix = Index::open(&dst).unwrap();
        let id = ix.add(&queries[0]).unwrap();
        assert_eq!(id, 1000 + 3 * 599 + 1, "new ids continue above every label");
        ix.flush().unwrap();
    }
}

#[test]
fn migrate_refuses_an_existing_destination_and_bad_files() {
    let (bin, _) = fixture("l2");
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("x.chassis");
    std::fs::write(&dst, b"keep me").unwrap();
    assert!(matches!(
        Index::migrate_hnswlib(&bin, &dst, Metric::L2Squared),
        Err(Error::Io(_))
    ));
    assert_eq!(std::fs::read(&dst).unwrap(), b"keep me");
    let bad = dir.path().join("bad.bin");
    let mut b = std::fs::read(&bin).unwrap();
    b.truncate(b.len() - 10);
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(
        Index::migrate_hnswlib(&bad, dir.path().join("y.chassis"), Metric::L2Squared),
        Err(Error::Corrupt { .. })
    ));
    // A leftover .migrating file is replaced.
    let dst = dir.path().join("z.chassis");
    std::fs::write(migrating_path(&dst), b"leftover").unwrap();
    let ix = Index::migrate_hnswlib(&bin, &dst, Metric::L2Squared).unwrap();
    assert_eq!(ix.len(), 590);
}

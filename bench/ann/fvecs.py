"""Writes one of the harness's data sets as fvecs/ivecs files, for the Rust benches that read
them (`build_search`, `walk_codes --base --queries --gt`): `base.fvecs`, `queries.fvecs` and
`gt.ivecs` (the 100 nearest) in OUT. `--metric` recomputes the ground truth under another
metric than the set's own (synth-1m-128 is L2; `walk_codes` walks by cosine).

    bench/.venv/bin/python bench/ann/fvecs.py synth-1m-128 /tmp/w/synth-1m [--metric cosine]
"""

import argparse
from pathlib import Path

import numpy as np

import data


def write_vecs(path, rows, dtype):
    rows = np.ascontiguousarray(rows, dtype=dtype)
    out = np.empty((len(rows), rows.shape[1] + 1), dtype=np.int32)
    out[:, 0] = rows.shape[1]
    out[:, 1:] = rows.view(np.int32)
    out.tofile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", choices=sorted(data.DATASETS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--metric", choices=["l2", "cosine", "ip"])
    a = ap.parse_args()
    base, queries, gt, metric = data.load(a.dataset)
    if a.metric and a.metric != metric:
        gt = data.exact_neighbors(base, queries, a.metric)
    a.out.mkdir(parents=True, exist_ok=True)
    write_vecs(a.out / "base.fvecs", base, np.float32)
    write_vecs(a.out / "queries.fvecs", queries, np.float32)
    write_vecs(a.out / "gt.ivecs", gt, np.int32)
    print(f"{a.dataset}: {len(base)} x {base.shape[1]}, {len(queries)} queries, "
          f"ground truth by {a.metric or metric}, in {a.out}")


if __name__ == "__main__":
    main()

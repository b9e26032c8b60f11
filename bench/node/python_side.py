"""The Node benchmark's Python side: the same file and searches through the Python package,
one query per call and one batch call, per ef; prints JSON (found ids and median QPS)."""
import json
import statistics
import sys
import time

import numpy as np

import chassis

path, efs, reps = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3])
DATA = __import__("pathlib").Path(__file__).resolve().parents[3] / "shared/data/pypi-minilm"
a = np.fromfile(DATA / "pypi-minilm_query.fvecs", dtype="<i4")
q = a.reshape(-1, a[0] + 1)[:, 1:].view("<f4").copy()
ix = chassis.Index.open(path, read_only=True)
out = {"chassis (Python, one call per query)": [], "chassis (Python, one batch call)": []}
for ef in efs:
    runs = {
        "chassis (Python, one call per query)": lambda: [ix.search(x, k=10, ef=ef)[0][0] for x in q],
        "chassis (Python, one batch call)": lambda: list(ix.search(q, k=10, ef=ef, threads=1)[0]),
    }
    rates = {k: [] for k in runs}
    found = {}
    for rep in range(reps + 1):
        for name, f in runs.items():
            t = time.perf_counter()
            got = f()
            rate = len(q) / (time.perf_counter() - t)
            if rep == 0:
                found[name] = [[int(i) for i in row] for row in got]
            else:
                rates[name].append(rate)
    for name in runs:
        out[name].append({"ef": ef, "qps": statistics.median(rates[name]), "found": found[name]})
print(json.dumps(out))

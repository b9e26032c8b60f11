"""Turns bench/target/ann/results-*.json into docs/PERFORMANCE.md and docs/performance.png.

Figures at recall@10 = 0.95 are interpolated between the two ef values that bracket it
(linearly in recall, geometrically in QPS and distance computations); where the lowest ef
already exceeds 0.95, that ef's figures are used.
"""

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "target" / "ann"
DOC = ROOT / "docs" / "PERFORMANCE.md"
PLOT = ROOT / "docs" / "performance.png"
TARGET = 0.95
ORDER = [
    "chassis",
    "chassis-f16",
    "chassis-int8",
    "chassis-int4",
    "chassis-f16-int4",
    "chassisdb",
    "chassisdb-half",
    "hnswlib",
    "faiss",
    "usearch",
    "usearch-i8",
]
# Chassis's modes: the default file and the ones a user can choose (codes, half precision).
CHASSIS_MODES = ["chassis", "chassis-f16", "chassis-int8", "chassis-int4", "chassis-f16-int4"]
PREAMBLE = ROOT / "bench" / "ann" / "preamble.md"
EPILOGUE = ROOT / "bench" / "ann" / "epilogue.md"
# The hand-written experiment log, one page per topic under docs/performance/, listed (not
# copied) at the end of the page, in this order, each by its title.
LOG = ["where-we-lose.md", "codes.md", "experiments.md", "filtered.md", "hardening-and-node.md"]


def at_recall(rows, key, target=TARGET):
    rows = sorted(rows, key=lambda r: r["ef"])
    prev = None
    for r in rows:
        if r[key] is None:
            return None
        if r["recall"] >= target:
            if prev is None or prev["recall"] >= r["recall"]:
                return r[key]
            f = (target - prev["recall"]) / (r["recall"] - prev["recall"])
            return math.exp(math.log(prev[key]) + f * (math.log(r[key]) - math.log(prev[key])))
        prev = r
    return None


def fmt(x, digits=0):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"


def ratio(a, b, digits=2):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.{digits}f}x"


def mib(b):
    return f"{b / 2**20:,.1f}"


def dataset_section(r):
    names = [n for n in ORDER if n in r["search"]]
    s = r["search"]
    lines = [f"## {r['dataset']}: {r['description']}", ""]
    lines.append(
        f"{r['n']:,} vectors x {r['dims']} dims, {r['queries']:,} queries, k = {r['k']}, metric "
        f"{r['metric']}; run {r['date']}, median of {r['reps']} repetitions after a warm-up."
    )
    lines.append("")
    lines.append("### At recall@10 = 0.95 (one search thread)")
    lines.append("")
    lines.append("| system | QPS | Chassis / system | distances per query | Chassis / system |")
    lines.append("|---|---:|---:|---:|---:|")
    ours_q = at_recall(s["chassis"], "qps") if "chassis" in s else None
    ours_d = at_recall(s["chassis"], "distances") if "chassis" in s else None
    for n in names:
        q = at_recall(s[n], "qps")
        d = at_recall(s[n], "distances")
        lines.append(
            f"| {n} | {fmt(q)} | {ratio(ours_q, q)} | {fmt(d)} | {ratio(ours_d, d)} |"
        )
    lines.append("")
    lines.append("### Build, size and memory")
    lines.append("")
    threads = sorted({int(t) for n in names for t in r["build"][n]})
    head = "| system | " + " | ".join(f"build {t} thr (s)" for t in threads)
    head += " | file (MiB) | allocated (MiB) | build peak RSS (MiB) |"
    lines.append(head)
    lines.append("|---|" + "---:|" * (len(threads) + 3))
    for n in names:
        b = r["build"][n]
        cells = []
        for t in threads:
            v = b.get(str(t), b.get(t))
            if v:
                cells.append(fmt(v["build_s"], 1))
            else:
                cells.append("not run")
        first = b[str(min(int(k) for k in b))] if b else None
        lines.append(
            f"| {n} | " + " | ".join(cells) + f" | {mib(first['file_bytes'])} | "
            f"{mib(first['allocated_bytes'])} | {fmt(first['peak_rss_mb'] - first['rss_before_build_mb'])} "
            f"(+{fmt(first['rss_before_build_mb'])} data) |"
        )
    lines.append("")
    lines.append("Build peak RSS is the high-water mark of the build process above what it held")
    lines.append("after loading the vectors (shown in brackets).")
    lines.append("")
    lines.append("### Cold open (file evicted from the page cache, fresh process, ef = 64)")
    lines.append("")
    lines.append("Medians of fresh processes, the systems taking turns; the range is of the cold opens.")
    lines.append("")
    lines.append(
        "| system | open, cold (ms) | cold range (ms) | open again, warm (ms) | first pass QPS "
        "| second pass QPS | peak RSS (MiB) |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for n in names:
        c = r["cold"][n]
        every = c.get("open_ms_all") or [c["open_ms"]]
        spread = f"{min(every):.2f} to {max(every):.2f} ({len(every)})"
        lines.append(
            f"| {n} | {fmt(c['open_ms'], 2)} | {spread} | {fmt(c.get('open_warm_ms'), 2)} | "
            f"{fmt(c['first_pass_qps'])} | {fmt(c['second_pass_qps'])} | "
            f"{fmt(c['peak_rss_mb'] - c['rss_before_open_mb'])} |"
        )
    lines.append("")
    lines.append("### The ef sweep")
    lines.append("")
    lines.append("recall@10 / QPS / p50 us / p99 us / distances per query")
    lines.append("")
    lines.append("| ef | " + " | ".join(names) + " |")
    lines.append("|---:|" + "---|" * len(names))
    efs = [row["ef"] for row in s[names[0]]]
    for i, ef in enumerate(efs):
        cells = []
        for n in names:
            row = s[n][i]
            cells.append(
                f"{row['recall']:.3f} / {fmt(row['qps'])} / {fmt(row['p50_us'])} / "
                f"{fmt(row['p99_us'])} / {fmt(row['distances'])}"
            )
        lines.append(f"| {ef} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def build1(r, n):
    """System n's one-thread build, or its build with the fewest threads."""
    b = r["build"].get(n) or {}
    if not b:
        return None
    return b.get("1") or b[str(min(int(k) for k in b))]


def build_cell(r, n, b):
    """System n's build time for the glance table: one thread, else its fewest threads."""
    if not b:
        return "n/a"
    if "1" in r["build"][n]:
        return fmt(b["build_s"], 1)
    t = min(int(k) for k in r["build"][n])
    return f"{fmt(b['build_s'], 1)} ({t} threads)"


def glance(results):
    """The table the page opens with: per dataset and system, QPS at recall 0.95, build time
    (one thread, or the fewest threads the set was built with, said so) and allocated file
    size."""
    lines = [
        "| data set | system | QPS at recall 0.95 (1 core) | build (s), 1 thread unless said | file, allocated (MiB) |",
        "|---|---|---:|---:|---:|",
    ]
    for r in results:
        names = [n for n in ORDER if n in r["search"]]
        for i, n in enumerate(names):
            b = build1(r, n)
            q = at_recall(r["search"][n], "qps")
            lines.append(
                f"| {r['dataset'] if i == 0 else ''} | {n} | {fmt(q)} | "
                f"{build_cell(r, n, b)} | "
                f"{mib(b['allocated_bytes']) if b else 'n/a'} |"
            )
    return lines


def speed_lead(results):
    """The goals of issue 37 (the speed lead over chassisdb) one harness run can decide."""
    rows = []

    def verdict(ok):
        return "n/a" if ok is None else ("met" if ok else "**not met**")

    for r in results:
        s = r["search"]
        ds = r["dataset"]
        if "chassis" not in s:
            continue
        ours = at_recall(s["chassis"], "qps")
        if "chassisdb" in s:
            q = at_recall(s["chassisdb"], "qps")
            ok = None if ours is None or q is None else ours / q >= 1.2
            rows.append((f"{ds}: default file QPS at 0.95 >= 1.2x chassisdb full", ratio(ours, q), verdict(ok)))
            # The build with the fewest threads both systems ran (one where they did).
            common = set(r["build"].get("chassis", {})) & set(r["build"].get("chassisdb", {}))
            if common:
                t = min(common, key=int)
                a, c = r["build"]["chassis"][t], r["build"]["chassisdb"][t]
                label = "1 thread" if t == "1" else f"{t} threads"
                rows.append((f"{ds}: default build ({label}) <= chassisdb's", ratio(a["build_s"], c["build_s"]), verdict(a["build_s"] <= c["build_s"])))
        modes = {n: at_recall(s[n], "qps") for n in CHASSIS_MODES if n in s}
        modes = {n: q for n, q in modes.items() if q is not None}
        if modes:
            best = max(modes, key=modes.get)
            if "chassisdb-half" in s:
                q = at_recall(s["chassisdb-half"], "qps")
                ok = None if q is None else modes[best] / q >= 1.3
                rows.append((f"{ds}: best mode ({best}) QPS at 0.95 >= 1.3x chassisdb half", ratio(modes[best], q), verdict(ok)))
            if "hnswlib" in s:
                q = at_recall(s["hnswlib"], "qps")
                ok = None if q is None else modes[best] / q >= 3.0
                rows.append((f"{ds}: best mode ({best}) QPS at 0.95 >= 3x hnswlib", ratio(modes[best], q), verdict(ok)))
        half = build1(r, "chassisdb-half")
        for n in ["chassis-f16", "chassis-f16-int4"]:
            ours_b = build1(r, n)
            if half and ours_b:
                ok = ours_b["allocated_bytes"] <= 1.1 * half["allocated_bytes"]
                rows.append((f"{ds}: {n} file <= 1.1x chassisdb half's (allocated)", ratio(ours_b["allocated_bytes"], half["allocated_bytes"]), verdict(ok)))
        for n in ["chassis-int4", "chassis-int8"]:
            ours_b, plain = build1(r, n), build1(r, "chassis")
            if ours_b and plain:
                extra = (ours_b["allocated_bytes"] - plain["allocated_bytes"]) / r["n"]
                rows.append((f"{ds}: {n}: extra bytes per vector over the default file", f"{extra:.0f} B", "reported"))
    lines = ["| goal | measured (Chassis / peer) | |", "|---|---:|---|"]
    lines += [f"| {g} | {m} | {v} |" for g, m, v in rows]
    return lines


def goals(results):
    """The goals of issue 8 that one harness run can decide, with the measured ratios."""
    rows = []

    def verdict(ok):
        return "n/a" if ok is None else ("met" if ok else "**not met**")

    for r in results:
        s = r["search"]
        if "chassis" not in s:
            continue
        ds = r["dataset"]
        ours_q = at_recall(s["chassis"], "qps")
        for peer, want in [("hnswlib", 1.2), ("faiss", 1.0), ("usearch", 1.0)]:
            if peer in s and ds != "synth-100k-1536":
                q = at_recall(s[peer], "qps")
                ok = None if ours_q is None or q is None else ours_q / q >= want
                rows.append((f"{ds}: QPS at recall 0.95 >= {want}x {peer}", ratio(ours_q, q), verdict(ok)))
        if "hnswlib" in s:
            a, b = at_recall(s["chassis"], "distances"), at_recall(s["hnswlib"], "distances")
            ok = None if a is None or b is None else a / b <= 1.05
            rows.append((f"{ds}: distances per query at 0.95 <= 1.05x hnswlib", ratio(a, b), verdict(ok)))
        b = r["build"]
        ours1, ours2 = b["chassis"].get("1"), b["chassis"].get("2")
        if "hnswlib" in b and "1" in b["hnswlib"] and ours1:
            h1 = b["hnswlib"]["1"]
            ok = ours1["build_s"] <= h1["build_s"]
            rows.append((f"{ds}: 1-thread build time <= 1.0x hnswlib", ratio(ours1["build_s"], h1["build_s"]), verdict(ok)))
        if ours1 and ours2:
            speedup = ours1["build_s"] / ours2["build_s"]
            rows.append((f"{ds}: 2-thread build >= 1.8x faster than 1 thread", f"{speedup:.2f}x", verdict(speedup >= 1.8)))
        # Sizes and the cold open: the graph that was searched (the build with fewest threads).
        ours = b["chassis"][min(b["chassis"], key=int)] if b.get("chassis") else None
        if "hnswlib" in b and ours:
            h = b["hnswlib"][min(b["hnswlib"], key=int)]
            ok = ours["allocated_bytes"] <= 1.05 * h["file_bytes"]
            rows.append((f"{ds}: allocated bytes <= 1.05x hnswlib's file", ratio(ours["allocated_bytes"], h["file_bytes"]), verdict(ok)))
            rows.append((f"{ds}: logical file length / hnswlib's file (allocation ahead included)", ratio(ours["file_bytes"], h["file_bytes"]), "reported"))
        c = r["cold"].get("chassis")
        if c and ours:
            gib = ours["file_bytes"] / 2**30
            if c.get("open_warm_ms") is not None:
                rows.append((f"{ds}: open of a {gib:.2f} GiB file < 10 ms, page cache warm", f"{c['open_warm_ms']:.2f} ms", verdict(c["open_warm_ms"] < 10)))
            n_cold = len(c.get("open_ms_all") or [c["open_ms"]])
            procs = f"{n_cold} process" if n_cold == 1 else f"{n_cold} processes"
            rows.append((f"{ds}: open of a {gib:.2f} GiB file < 10 ms, page cache cold (median of {procs})", f"{c['open_ms']:.2f} ms", verdict(c["open_ms"] < 10)))
    lines = ["| goal | measured (Chassis / peer) | |", "|---|---:|---|"]
    lines += [f"| {g} | {m} | {v} |" for g, m, v in rows]
    return lines


def plot(results):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, r in zip(axes[0], results):
        for n in ORDER:
            if n not in r["search"]:
                continue
            rows = r["search"][n]
            ax.plot([x["recall"] for x in rows], [x["qps"] for x in rows], marker="o", ms=3, label=n)
        ax.set_yscale("log")
        ax.set_xlabel("recall@10")
        ax.set_ylabel("queries per second (1 thread)")
        ax.set_title(f"{r['dataset']} ({r['n']:,} x {r['dims']})")
        ax.axvline(TARGET, color="grey", lw=0.5, ls="--")
        ax.grid(True, which="both", lw=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def log_pages():
    """The page's last section: a link to each page of the experiment log, by its title."""
    out = [
        "## The experiment log",
        "",
        "Every measurement behind the tables above and the decisions under docs/decisions/, "
        "dated, including the runs on other CPUs and what was tried and dropped, one page per "
        "topic:",
        "",
    ]
    for name in LOG:
        title = (DOC.parent / "performance" / name).read_text().splitlines()[0]
        title = title.removeprefix("# ").removeprefix("Performance log: ")
        out.append(f"- [{title[0].upper() + title[1:]}](performance/{name})")
    return out


def main():
    files = sorted(OUT.glob("results-*.json"))
    order = ["pypi-minilm", "synth-1m-128", "synth-100k-1536"]
    results = [json.loads(f.read_text()) for f in files]
    # results-filtered.json (bench/ann/filtered.py) lives beside these and is reported apart.
    results = [
        r for r in results
        if r.get("dataset") in order and "first" not in r.get("description", "first")
    ]
    results.sort(key=lambda r: order.index(r["dataset"]))
    if not results:
        raise SystemExit("no full-size results under bench/target/ann/ (run bench/ann/run)")
    m = results[0]["machine"]
    preamble = PREAMBLE.read_text().rstrip().splitlines()
    lines = preamble[:1] + [""]
    lines.append(
        "Every system side by side in one run of the harness (`bench/ann`), same data and "
        "parameters (M 16, ef_construction 200, k 10), each pinned to the same one core for "
        "search; QPS at recall@10 = 0.95 interpolated along each system's ef sweep. Where "
        "Chassis loses, the table says so; the method, the details and the experiment log "
        "follow."
    )
    lines.append("")
    lines.append("## At a glance")
    lines.append("")
    lines += glance(results)
    lines.append("")
    pin = results[0].get("pinning")
    if pin:
        lines.append(
            f"Searches ran on core {pin['search_cpu']} (every system the same core); a "
            f"T-thread build on T cores (1 thread: core {pin['build_cpus'].get('1', ['?'])[0]})."
        )
        lines.append("")
    lines.append("### The speed lead over chassisdb (issue 37), from this run")
    lines.append("")
    lines += speed_lead(results)
    lines.append("")
    lines += preamble[1:] + [""]
    lines.append("## Machine and versions")
    lines.append("")
    lines.append(
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, SIMD {'/'.join(m['simd'])}, "
        f"kernel {m['kernel']}, transparent huge pages `{m['thp']}`, Python {m['python']}."
    )
    vers = results[0]["versions"]
    lines.append("Versions: " + ", ".join(f"{n} {vers[n]}" for n in ORDER if n in vers) + ".")
    lines.append("")
    lines.append("![recall against QPS](performance.png)")
    lines.append("")
    lines.append("## The goals, from this run")
    lines.append("")
    lines += goals(results)
    lines.append("")
    lines.append("The snapshot fast path and the id table at 10M slots are measured by their own")
    lines.append("programs (below, \"Experiments\").")
    lines.append("")
    for r in results:
        lines += dataset_section(r)
    # The filtered mode's section (bench/ann/filtered.py writes it; kept across reports).
    filtered = ROOT / "bench" / "ann" / "filtered.md"
    if filtered.exists():
        lines += filtered.read_text().rstrip().splitlines() + [""]
    lines += EPILOGUE.read_text().rstrip().splitlines() + [""]
    lines += log_pages()
    DOC.write_text("\n".join(lines) + "\n")
    plot(results)
    print(f"wrote {DOC} and {PLOT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Markdown tables from benchmarks/results/*.json: our stages, the TFX anchor's, and the
ratio between them on the same workload.

  python benchmarks/compare.py [--results_dir benchmarks/results] [--all]
      [--since YYYYMMDD-HHMMSS]
  python benchmarks/compare.py --sittings [--workload taxi_1000000] [--mode in_memory]
  python benchmarks/compare.py --pairs tfx_penguin [--since YYYYMMDD-HHMM]
  python benchmarks/compare.py --pairs bundled_first_run_vs_cb43dda [--since ...]

--sittings pairs every TFX anchor result with our first result of the same workload and
Beam mode started after it (within --within_min minutes: a sitting runs TFX, then ours),
prints each sitting's ratios and their median with the range: the headline figures.

Takes the latest successful result of each (system, workload, Beam mode) unless --all.
Ratios are "TFX seconds / our seconds" (above 1: we are faster), per stage and for the
whole process wall time; they only mean something when both runs were taken in the same
sitting on a quiet machine (see the "others' CPU" column and the results' loadavg).
--since keeps only results started at or after that stamp (one sitting).

--pairs NAME reads the results files NAME_*.json of a benchmark that alternates two
commands in each sitting (bench_tfx_penguin.py: TFX against ours; bench_bundled_run.py:
before against after) and prints each sitting's ratios and the median of every pair
with the range: the headline figure over the sittings kept (--since).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_data_stages import MARKDOWN_HEAD, ROW_STAGES, _mib, markdown_row  # noqa: E402

STAGES = ("ExampleGen", "Statistics", "Schema", "Validation", "Transform")


def load(results_dir: str, everything: bool, since: str | None) -> list[dict]:
    rs = []
    for fn in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(fn) as f:
            r = json.load(f)
        if "system" not in r or (since and r.get("started", "") < since):
            continue
        r["_file"] = os.path.basename(fn)
        rs.append(r)
    if everything:
        return rs
    latest: dict = {}
    for r in sorted(rs, key=lambda r: r.get("started", "")):
        if r.get("ok"):
            latest[(r["system"], r["workload"], r.get("mode", r.get("beam", "")))] = r
    return sorted(
        latest.values(), key=lambda r: (r["system"], r["workload"].rstrip("0123456789"), r["rows"])
    )


def tfx_row(r: dict) -> str:
    cells = [r["workload"], f"{r['rows']:,}"]
    for s in STAGES:
        sec, rps = r["stages_s"].get(s), r["rows_per_s"].get(s)
        cells.append(
            "-"
            if sec is None
            else (f"{sec:.1f} s ({rps:,}/s)" if s in ROW_STAGES and rps else f"{sec:.1f} s")
        )
    cells += [
        f"{r['anchor_total_s']:.1f} s",
        f"{r['wall_s']:.1f} s",
        f"{r['peak_tree_rss_mib']:,.0f}",
        _mib(r.get("peak_tree_uss_mib")),
        f"{r['max_process_rss_mib']:,.0f}",
        f"{r['machine']['other_cpu_share_of_one_core']:.2f}",
        " ".join(map(str, r["machine"]["loadavg_before"])),
    ]
    return "| " + " | ".join(cells) + " |"


def ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--since", default=None)
    ap.add_argument("--sittings", action="store_true")
    ap.add_argument("--workload", default="taxi_1000000")
    ap.add_argument("--mode", default="in_memory")
    ap.add_argument("--within_min", type=float, default=30.0)
    ap.add_argument("--pairs", default=None)
    a = ap.parse_args()
    if a.pairs:
        print_pairs(a.results_dir, a.pairs, a.since)
        return
    if a.sittings:
        print_sittings(load(a.results_dir, True, a.since), a.workload, a.mode, a.within_min)
        return
    rs = load(a.results_dir, a.all, a.since)
    ours = [r for r in rs if r["system"] == "beam_pipeline"]
    tfx = [r for r in rs if r["system"].startswith("tfx")]
    if ours:
        print("### beam_pipeline\n")
        print(MARKDOWN_HEAD)
        for r in ours:
            print(markdown_row(r))
        print()
    if tfx:
        title = "TFX 1.16 anchor: LocalDagRunner, DirectRunner multi_processing"
        print(f"### {title}\n")
        print(
            "| workload | rows | CsvExampleGen | StatisticsGen | SchemaGen | ExampleValidator "
            "| Transform | LocalDagRunner total | process wall | peak tree RSS MiB "
            "| peak tree USS MiB | max process RSS MiB | others' CPU (cores) | load before |"
        )
        print("|---" * 14 + "|")
        for r in tfx:
            print(tfx_row(r))
        print()
    pairs = [
        (o, t)
        for o in ours
        for t in tfx
        if o["workload"] == t["workload"]
        and o["rows"] == t["rows"]
        # A --train run's stages include the model's: the anchor runs the data stages only.
        and not o.get("mode", "").endswith("+train")
    ]
    if pairs:
        print("### Ratio: TFX seconds / our seconds, same data (>1: faster than TFX)\n")
        print(
            "Our ExampleGen and Statistics are one Beam job (one read of the data) and the "
            "summary books both under ExampleGen, so they are compared together with TFX's "
            "CsvExampleGen + StatisticsGen.\n"
        )
        print(
            "| workload | rows | our Beam mode | ExampleGen+Statistics | Transform "
            "| data stages sum | process wall | peak tree RSS MiB (ours / TFX) "
            "| started (ours / TFX) |"
        )
        print("|---" * 9 + "|")
        for o, t in pairs:

            def both(r, keys):
                v = [r["stages_s"].get(k) for k in keys]
                return sum(x for x in v if x is not None) if any(x is not None for x in v) else None

            cells = [o["workload"], f"{o['rows']:,}", o["mode"]]
            for keys in (("ExampleGen", "Statistics"), ("Transform",)):
                tv, ov = both(t, keys), both(o, keys)
                cells.append(f"{tv:.1f} / {ov:.1f} s = {ratio(tv, ov)}" if tv and ov else "-")
            for key in ("stages_sum_s", "wall_s"):
                tv, ov = t[key], o[key]
                cells.append(f"{tv:.1f} / {ov:.1f} s = {ratio(tv, ov)}")
            cells += [
                f"{o['peak_tree_rss_mib']:,.0f} / {t['peak_tree_rss_mib']:,.0f}",
                f"{o['started']} / {t['started']}",
            ]
            print("| " + " | ".join(cells) + " |")

    print_memory_scaling(rs)


def print_sittings(rs: list[dict], workload: str, mode: str, within_min: float) -> None:
    """Each sitting's TFX / our ratios (data stages, Transform, peak tree RSS), then the
    median of the sittings with the range."""
    import datetime
    import statistics

    def when(r: dict) -> datetime.datetime:
        return datetime.datetime.strptime(r["started"], "%Y%m%d-%H%M%S")

    def seconds(r: dict, keys) -> float:
        return sum(r["stages_s"].get(k) or 0.0 for k in keys)

    ours = [
        r
        for r in rs
        if r["system"] == "beam_pipeline"
        and r["workload"] == workload
        and r.get("mode") == mode
        and r.get("ok")
    ]
    tfx = [r for r in rs if r["system"].startswith("tfx") and r["workload"] == workload]
    rows = []
    for t in sorted(tfx, key=when):
        # A sitting runs TFX first, then ours (run_sitting.sh): the first of ours that
        # started after this TFX run, not the nearest, which may be the sitting before's.
        near = [o for o in ours if 0 <= (when(o) - when(t)).total_seconds() <= within_min * 60]
        if not near:
            continue
        o = min(near, key=when)
        data_t, data_o = seconds(t, STAGES), seconds(o, STAGES)
        tr_t, tr_o = seconds(t, ("Transform",)), seconds(o, ("Transform",))
        read = ("ExampleGen", "Statistics")
        eg = seconds(t, read) / seconds(o, read)
        rows.append((t, o, data_t / data_o, tr_t / tr_o, data_t, data_o, tr_t, tr_o, eg))
    print(
        "| sitting (TFX / ours) | data stages TFX / ours | Transform TFX / ours "
        "| peak tree RSS MiB TFX / ours |"
    )
    print("|---|---|---|---|")
    for t, o, dr, trr, dt, do, tt, to, _ in rows:
        print(
            f"| {t['started']} / {o['started']} | {dt:.1f} / {do:.1f} s = {dr:.2f}x "
            f"| {tt:.1f} / {to:.1f} s = {trr:.2f}x "
            f"| {t['peak_tree_rss_mib']:,.0f} / {o['peak_tree_rss_mib']:,.0f} |"
        )
    if rows:
        print()
        for name, i in (("data stages", 2), ("Transform", 3), ("ExampleGen+Statistics", 8)):
            values = [r[i] for r in rows]
            print(
                f"{name}: median {statistics.median(values):.2f}x over {len(values)} "
                f"sittings (range {min(values):.2f}-{max(values):.2f}x)"
            )
        for name, key in (("TFX", 0), ("ours", 1)):
            rss = [r[key]["peak_tree_rss_mib"] for r in rows]
            print(
                f"peak tree RSS, {name}: median {statistics.median(rss):,.0f} MiB "
                f"(range {min(rss):,.0f}-{max(rss):,.0f})"
            )


def print_pairs(results_dir: str, name: str, since: str | None) -> None:
    """Each sitting of an alternating benchmark and the median over all its pairs: TFX's
    wall over ours (``tfx_wall_s``/``ours_wall_s``), or after's wall over before's
    (``runs``: ``{"before": [{"wall_s": ...}, ...], "after": [...]}``, in the order they
    ran, alternated)."""
    import statistics

    pairs = []
    for path in sorted(glob.glob(os.path.join(results_dir, f"{name}_*.json"))):
        stamp = os.path.basename(path)[len(name) + 1 : -len(".json")].split("_")[-1]
        if since and stamp < since:
            continue
        with open(path) as f:
            r = json.load(f)
        if "tfx_wall_s" in r:
            ratios = [t / o for t, o in zip(r["tfx_wall_s"], r["ours_wall_s"])]
        else:
            before = [x["wall_s"] for x in r["runs"]["before"]]
            after = [x["wall_s"] for x in r["runs"]["after"]]
            ratios = [a_ / b for b, a_ in zip(before, after)]
        pairs += ratios
        shown = ", ".join(f"{x:.3f}" for x in ratios)
        print(f"{os.path.basename(path)}: {shown} (median {statistics.median(ratios):.3f})")
    if pairs:
        print(
            f"median of {len(pairs)} pairs: {statistics.median(pairs):.3f} "
            f"(range {min(pairs):.3f}-{max(pairs):.3f})"
        )


def print_memory_scaling(rs: list[dict]) -> None:
    """Peak tree RSS (USS) by row count, per system, dataset and Beam mode: flat is the goal."""
    groups: dict = {}
    for r in rs:
        family = r["workload"].rstrip("0123456789").rstrip("_")
        key = (r["system"], family, r.get("mode", "multi_processing/workers=0"))
        groups.setdefault(key, {})[r["rows"]] = r
    sizes = sorted({n for g in groups.values() for n in g})
    if len(sizes) < 2:
        return
    print("\n### Peak memory by rows: tree RSS MiB (tree USS MiB)\n")
    print("| system | data | Beam mode | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---" * (3 + len(sizes)) + "|")
    for (system, family, mode), g in sorted(groups.items()):
        cells = [system, family, mode]
        for n in sizes:
            r = g.get(n)
            cells.append(
                f"{r['peak_tree_rss_mib']:,.0f} ({_mib(r.get('peak_tree_uss_mib'))})" if r else "-"
            )
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

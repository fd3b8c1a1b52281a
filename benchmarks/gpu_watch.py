#!/usr/bin/env python3
"""GPU memory of each process of a run, by kind: samples ``nvidia-smi`` until a process ends.

  python benchmarks/gpu_watch.py --pid LAUNCHER_PID --out samples.jsonl [--interval 1]

Every ``--interval`` seconds, while process ``--pid`` (a ``python -m beam_pipeline``
launcher, or a ``timeout`` that runs one) lives:
``nvidia-smi --query-compute-apps=pid,used_memory`` and
``--query-gpu=utilization.gpu,memory.used``, and the launcher's process tree from
``/proc``, each GPU process given a kind (launcher, fork server, fork-server child: a
tuner pool worker or a forked Beam SDK worker, Beam SDK worker, InfraValidator sandbox,
or "not this run"). One JSON object per sample goes to ``--out``; at the end a table of
the largest memory each process held, and whether the launcher stayed under
``--launcher_limit_mib``, is printed (and written to ``--out`` + ``.summary.json``).
Standard library only. Without ``nvidia-smi`` it says so and waits for the process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def _ppid_and_cmdline(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError, ValueError):
        return None
    return ppid, cmdline


def process_tree(root: int) -> dict[int, tuple[int, str]]:
    """{pid: (ppid, cmdline)} of ``root`` and its descendants."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _ppid_and_cmdline(int(name))
            if found is not None:
                table[int(name)] = found
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid]
            todo.extend(p for p, (ppid, _) in table.items() if ppid == pid)
    return tree


def _is_timeout(cmdline: str) -> bool:
    return os.path.basename(cmdline.split(" ", 1)[0]) == "timeout"


def kind(pid: int, root: int, tree: dict[int, tuple[int, str]]) -> str:
    """A process's kind by its place in the tree, not by its command line alone: the
    launcher forks the fork server from itself (``beam_pipeline.core.forked``), and the
    server's children are its forks, so all three show the launcher's command line."""
    if pid not in tree:
        return "not this run"
    ppid, cmdline = tree[pid]
    if _is_timeout(cmdline):
        return "timeout (the launcher's wrapper)"
    if "multiprocessing.resource_tracker" in cmdline:
        return "resource tracker"
    if "infra_validator/sandbox.py" in cmdline:
        return "InfraValidator sandbox"
    if "sdk_worker_main" in cmdline:
        return "Beam SDK worker"
    if " -m beam_pipeline" in cmdline or "multiprocessing.forkserver" in cmdline:
        # The launcher: the run's root, or the root's child where the root is a timeout.
        launcher = root
        if _is_timeout(tree.get(root, (0, ""))[1]):
            launcher = next((p for p, (up, _) in tree.items() if up == root), root)
        if pid == launcher:
            return "launcher"
        if ppid == launcher:
            return "fork server"
        return "fork-server child (tuner pool worker, trainer or forked SDK worker)"
    return cmdline.split(" ", 1)[0] or "?"


def _query(tool: str, what: str) -> list[list[str]]:
    try:
        done = subprocess.run(
            [tool, what, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--launcher_limit_mib", type=float, default=1024)
    args = p.parse_args(argv)

    tool = shutil.which("nvidia-smi")
    if tool is None:
        print("gpu_watch: nvidia-smi not found: no GPU memory to sample on this machine.")
    peak: dict[int, dict] = {}
    kinds_seen: dict[int, str] = {}
    utilization: list[float] = []
    samples = 0
    start = time.time()
    with open(args.out, "w") as out:
        while _alive(args.pid):
            tree = process_tree(args.pid)
            for pid in tree:
                kinds_seen.setdefault(pid, kind(pid, args.pid, tree))
            if tool is not None:
                apps = _query(tool, "--query-compute-apps=pid,used_memory")
                gpus = _query(tool, "--query-gpu=utilization.gpu,memory.used")
                record = {"t": round(time.time() - start, 1), "apps": [], "gpus": gpus}
                for row in apps:
                    if len(row) < 2 or not row[0].isdigit():
                        continue
                    pid, mib = (
                        int(row[0]),
                        float(row[1]) if row[1].replace(".", "").isdigit() else 0.0,
                    )
                    k = kinds_seen.get(pid) or kind(pid, args.pid, tree)
                    record["apps"].append({"pid": pid, "mib": mib, "kind": k})
                    entry = peak.setdefault(pid, {"kind": k, "max_mib": 0.0, "samples": 0})
                    entry["max_mib"] = max(entry["max_mib"], mib)
                    entry["samples"] += 1
                for row in gpus:
                    if row and row[0].replace(".", "").isdigit():
                        utilization.append(float(row[0]))
                out.write(json.dumps(record) + "\n")
                out.flush()
                samples += 1
            time.sleep(args.interval)

    launcher = [e["max_mib"] for e in peak.values() if e["kind"] == "launcher"]
    summary = {
        "samples": samples,
        "seconds": round(time.time() - start, 1),
        "nvidia_smi": tool is not None,
        "processes": {str(pid): e for pid, e in sorted(peak.items())},
        "process_kinds_seen": sorted(set(kinds_seen.values())),
        "launcher_max_mib": max(launcher) if launcher else 0.0,
        "launcher_under_limit": (max(launcher) if launcher else 0.0) < args.launcher_limit_mib,
        "mean_gpu_utilization_pct": (
            round(sum(utilization) / len(utilization), 1) if utilization else None
        ),
    }
    verdict = "yes" if summary["launcher_under_limit"] else "NO"
    if tool is None:
        verdict = "not measured"
    elif peak and all(e["kind"] == "not this run" for e in peak.values()):
        verdict = "unknown (nvidia-smi lists no pid of this run: another PID namespace?)"
    if tool is None or verdict.startswith("unknown"):
        summary["launcher_under_limit"] = None
    with open(args.out + ".summary.json", "w") as f:
        json.dump(summary, f, indent=2)
    print(f"GPU memory per process ({samples} samples of nvidia-smi over {summary['seconds']} s):")
    if tool is None:
        print("  (not measured: nvidia-smi not found)")
    elif not peak:
        print("  no process held GPU memory (or nvidia-smi lists another PID namespace's pids)")
    for pid, e in sorted(peak.items(), key=lambda item: -item[1]["max_mib"]):
        print(f"  {e['max_mib']:>9.0f} MiB  pid {pid:<8} {e['kind']}")
    print(f"process kinds in the run's tree: {', '.join(summary['process_kinds_seen'])}")
    print(
        f"launcher peak {summary['launcher_max_mib']:.0f} MiB; under "
        f"{args.launcher_limit_mib:.0f} MiB: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

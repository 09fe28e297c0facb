#!/usr/bin/env python3
"""Two shaledb source trees beside RocksDB in one run, interleaved: is a change slower?

    .venv/bin/python bench/ab_suite.py run --base-src /path/to/old/src --out bench/out/ab.jsonl
        [--workloads fillrandom,readrandom,scan] [--repeats 5] [--n 200000]
    .venv/bin/python bench/ab_suite.py report --out bench/out/ab.jsonl

A before/after comparison on a shared machine only means something when both sides run in
the same minutes, so each repeat runs every workload for the three variants back to back:
``shaledb-base`` (``--base-src`` put first on ``PYTHONPATH``), ``shaledb`` (this tree's
``src``) and ``rocksdict`` (the anchor interpreter, as ``run.py suite`` picks it). The order of
the three rotates every repeat, so no variant always runs first after an idle gap. Every run is
``run.py single`` from this tree (the same harness for both trees, only the engine differs) in
a fresh process, appended to ``--out`` with its variant, repeat and position; runs already in
``--out`` are skipped, so a larger ``--repeats`` adds repeats to an earlier run.

``report`` prints the median ops/s per variant and workload, and the ratios after/before,
after/rocksdict and before/rocksdict, each the median (and quartiles) of the per-repeat ratios: a
noisy minute hits the three runs of one repeat alike, so per-repeat ratios are steadier than
ratios of medians. ``--max-other-cores C`` leaves out a workload's repeat when any of its runs
had other processes keep more than C cores busy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import run

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("shaledb-base", "shaledb", "rocksdict")


def variant_cmd(variant: str, a: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The interpreter and PYTHONPATH of one variant (the interpreters as ``run.py suite``)."""
    engine = "rocksdict" if variant == "rocksdict" else "shaledb"
    python = run.interpreter(engine, a)
    src = os.path.abspath(a.base_src) if variant == "shaledb-base" else os.path.join(run.REPO, "src")
    env = dict(os.environ, PYTHONPATH=src)
    return [python, os.path.join(HERE, "run.py"), "single", "--engine", engine], env


def do_run(a: argparse.Namespace) -> None:
    workloads = a.workloads.split(",")
    done = set()
    if os.path.exists(a.out):  # resume: runs already in the file are kept, not repeated
        with open(a.out) as f:
            done = {(r["repeat"], r["workload"], r["variant"]) for r in map(json.loads, f) if r}
    for rep in range(a.repeats):
        order = VARIANTS[rep % 3 :] + VARIANTS[: rep % 3]
        for wl in workloads:
            for pos, variant in enumerate(order):
                if (rep, wl, variant) in done:
                    continue
                cmd, env = variant_cmd(variant, a)
                cmd += ["--workload", wl, "--n", str(a.n), "--value-size", str(a.value_size)]
                t0 = time.time()
                cp = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if cp.returncode:
                    print(f"FAIL {variant} {wl}: {cp.stderr.strip()[-500:]}", file=sys.stderr)
                    continue
                res = json.loads(cp.stdout.strip().splitlines()[-1])
                res.update(variant=variant, repeat=rep, position=pos, pythonpath=env["PYTHONPATH"])
                with open(a.out, "a") as f:
                    f.write(json.dumps(res) + "\n")
                print(
                    f"rep {rep} {wl:10s} {variant:13s} {res['ops_per_s']:>12,.0f}/s "
                    f"others {res.get('other_cpu_cores', 0):.2f} cores  {time.time() - t0:.0f}s",
                    flush=True,
                )


def quartiles(xs: list[float]) -> str:
    """``median [p25-p75]`` of per-repeat ratios."""
    if len(xs) < 4:
        return f"{statistics.median(xs):.2f}"
    q = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):.2f} [{q[0]:.2f}-{q[2]:.2f}]"


def do_report(a: argparse.Namespace) -> None:
    with open(a.out) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    by: dict[tuple[str, int], dict[str, float]] = {}
    noisy: set[tuple[str, int]] = set()
    for r in rows:
        by.setdefault((r["workload"], r["repeat"]), {})[r["variant"]] = r["ops_per_s"]
        if r.get("other_cpu_cores", 0.0) > a.max_other_cores:
            noisy.add((r["workload"], r["repeat"]))
    print(
        "| workload | "
        + " | ".join(VARIANTS)
        + " | after/before | after/rocksdict | before/rocksdict | repeats |"
    )
    print("|---|" + "---:|" * (len(VARIANTS) + 4))
    for wl in dict.fromkeys(r["workload"] for r in rows):
        reps = [v for k, v in sorted(by.items()) if k[0] == wl and k not in noisy and len(v) == len(VARIANTS)]
        if not reps:
            continue
        meds = [statistics.median([x[v] for x in reps]) for v in VARIANTS]
        ab = quartiles([x["shaledb"] / x["shaledb-base"] for x in reps])
        ar = quartiles([x["shaledb"] / x["rocksdict"] for x in reps])
        br = quartiles([x["shaledb-base"] / x["rocksdict"] for x in reps])
        cells = " | ".join(f"{m:,.0f}" for m in meds)
        print(f"| {wl} | {cells} | {ab} | {ar} | {br} | {len(reps)} |")
    others = [r.get("other_cpu_cores", 0.0) for r in rows]
    print(
        f"\n{len(rows)} runs; other processes kept {statistics.median(others):.2f} cores busy (median); "
        f"{len(noisy)} workload repeats left out (a run with others above {a.max_other_cores} cores)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=("run", "report"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--base-src", help="the old tree's src directory (run)")
    ap.add_argument("--workloads", default="fillrandom,readrandom,scan")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--max-other-cores", type=float, default=2.0, help="report: leave out noisier repeats")
    ap.add_argument("--python-shaledb", default=run.SHALEDB_PYTHON)
    ap.add_argument("--python-anchors", default=run.ANCHOR_PYTHON)
    a = ap.parse_args()
    if a.cmd == "run":
        if not a.base_src:
            ap.error("run needs --base-src")
        do_run(a)
    do_report(a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""shaledb's benchmark harness: shaledb beside RocksDB, LevelDB, LMDB, SlateDB and a dict.

    python bench/run.py single --engine E --workload W [--store S] [--n N] [--value-size V]
                               [--batch 100|1] [--durable] [--max-seconds S] [--threads T]
                               [--setting name=value ...] [--dir DIR]
    python bench/run.py suite  --out bench/out/results.jsonl [--only REGEX] [--repeats K]
                               [--quick] [--max-seconds S] [--list]
    python bench/run.py report --out bench/out/results.jsonl [--full]

``single`` runs one configuration in this process and prints one JSON line. ``suite`` runs
the matrix, each configuration in a fresh subprocess with its own scratch directory, the
repeats round-robin over the whole matrix (so a noisy minute hits every engine a little,
not one engine a lot), and appends one JSON line per run; runs already in the file are
skipped, so an interrupted suite resumes. ``report`` prints markdown median tables.

Interpreters: shaledb runs on the project venv (``.venv/bin/python``); the anchors and the
dict run on ``bench/.venv-anchors/bin/python`` (made by ``bench/setup_anchors.sh``, which
also installs shaledb there, so ``single`` can run any engine under that one interpreter).
Workloads are described in ``bench/README.md`` and ``workloads.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import engines
import workloads

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHALEDB_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
ANCHOR_PYTHON = os.path.join(HERE, ".venv-anchors", "bin", "python")
MiB = 1 << 20
BUDGET_FACTOR = 1.5  # the memory check: peak RSS <= 1.5 x budgets + interpreter baseline


# --------------------------------------------------------------------------- single


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "kernel": platform.release()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def memory_check(eng: Any, res: dict[str, Any]) -> dict[str, Any]:
    """shaledb only: peak RSS against 1.5 x (max_unflushed_bytes + block_cache_bytes) + interpreter.

    The interpreter is measured twice: with the workload's data but before the engine's
    module is imported (``rss_base_mb``), and after that import (``rss_import_mb``: the
    engine's code, 11-12 MiB for shaledb, before any database opens). The check counts the
    engine's code as part of the interpreter (``rss_limit_mb``); the stricter form that
    charges it to the budgets is kept beside it (``*_pre_import``).
    """
    if not hasattr(eng, "budget_bytes"):
        return {}
    budgets = eng.budget_bytes()
    budget_mb = sum(budgets.values()) / MiB
    limit = BUDGET_FACTOR * budget_mb + res["rss_import_mb"]
    strict = BUDGET_FACTOR * budget_mb + res["rss_base_mb"]
    return {
        "budgets": budgets,
        "budget_mb": budget_mb,
        "rss_limit_mb": limit,
        "peak_over_base_mb": res["peak_rss_mb"] - res["rss_import_mb"],
        "rss_within_limit": res["peak_rss_mb"] <= limit,
        "rss_limit_pre_import_mb": strict,
        "rss_within_limit_pre_import": res["peak_rss_mb"] <= strict,
    }


def single(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="run.py single", description="one configuration, one JSON line")
    p.add_argument("--engine", required=True, choices=sorted(engines.ENGINES))
    p.add_argument("--workload", required=True, choices=workloads.WORKLOADS)
    p.add_argument("--store", default="file", help="shaledb: file|memory|s3; slatedb: file|memory")
    p.add_argument("--n", type=int, default=200_000, help="number of keys")
    p.add_argument("--value-size", type=int, default=100, help="value bytes")
    p.add_argument("--batch", type=int, default=100, help="keys per write batch; 1 = single puts")
    p.add_argument("--durable", action="store_true", help="timed writes wait for durability")
    p.add_argument("--max-seconds", type=float, default=0, help="cap on the timed write phase (0: none)")
    p.add_argument("--threads", type=int, default=workloads.MT_THREADS, help="durable_mt writers")
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="engine setting, repeatable. shaledb: any Settings field, dotted for nested "
        "(compactor.min_l0_ssts=8, garbage_collector=none, block_cache_bytes=8MiB); "
        "slatedb: a Settings key (flush_interval=10ms); rocksdict/plyvel: bloom_bits=10",
    )
    p.add_argument("--dir", default=None, help="scratch directory (default: a temporary one, removed)")
    a = p.parse_args(argv)

    plan = workloads.make_plan(a.workload, a.n, a.value_size)
    rss_base = workloads.rss_mb()  # interpreter + workload data, before any engine import
    meter = workloads.CpuMeter()
    load_start = os.getloadavg()[0]
    scratch = a.dir or tempfile.mkdtemp(prefix="shaledb-bench-")
    os.makedirs(scratch, exist_ok=True)
    eng = engines.ENGINES[a.engine](scratch, engines.parse_settings(a.setting), a.store)
    if eng.module:
        importlib.import_module(eng.module)
    rss_import = workloads.rss_mb()  # ... plus the engine's own code, before any database opens
    if (a.durable or a.workload == "durable_mt") and not eng.supports_durable:
        raise SystemExit(f"{a.engine} has no durable writes")
    res: dict[str, Any] = {
        "engine": eng.name,
        "engine_kind": a.engine,
        "store": a.store,
        "workload": a.workload,
        "n": a.n,
        "value_size": a.value_size,
        "batch": a.batch,
        "durable": a.durable or a.workload == "durable_mt",
        "max_seconds": a.max_seconds,
        "rss_base_mb": rss_base,
        "rss_import_mb": rss_import,
    }
    try:
        res.update(asyncio.run(workloads.run_workload(eng, a.workload, plan, a)))
        res["peak_rss_mb"] = workloads.peak_rss_mb()
        res["end_rss_mb"] = workloads.rss_mb()
        if eng.has_disk:
            res["disk_bytes"], res["disk_alloc_bytes"] = workloads.disk_usage(scratch)
        res.update(eng.after_close())
        res.update(memory_check(eng, res))
        res["other_cpu_cores"] = meter.other_cores()
        res["loadavg_1m"] = [load_start, os.getloadavg()[0]]
        res["version"] = eng.version()
        res["settings"] = eng.describe()
    finally:
        eng.shutdown()
        if a.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    res.update(
        python=platform.python_version(),
        executable=sys.executable,
        machine=machine_info(),
        ts=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    print(json.dumps(res), flush=True)


# --------------------------------------------------------------------------- suite

SIZES = [(200_000, 100), (50_000, 4096)]
QUICK_SIZES = [(20_000, 100), (5_000, 4096)]
DURABLE_CAP_S = 15.0
TIGHT = ["max_unflushed_bytes=16MiB", "l0_sst_size_bytes=8MiB", "block_cache_bytes=8MiB"]

# display name -> (engine, extra argv). Order = column order in the report.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "shaledb-file": ("shaledb", ["--store", "file"]),
    "rocksdict": ("rocksdict", []),
    "plyvel": ("plyvel", []),
    "lmdb": ("lmdb", []),
    "slatedb-file": ("slatedb", ["--store", "file"]),
    "pydict": ("pydict", []),
    "shaledb-memory": ("shaledb", ["--store", "memory"]),
    "slatedb-memory": ("slatedb", ["--store", "memory"]),
    "shaledb-s3": ("shaledb", ["--store", "s3"]),
}


@dataclass
class Config:
    label: str  # variant|workload|batch|durability|n|value_size, as the anchor harness
    engine: str
    argv: list[str]


def skip(variant: str, wl: str, v: int) -> bool:
    """Configurations left out of the suite, to keep it near an hour on 2 cores.

    The SlateDB binding copies values byte by byte in Python (RESULTS.md: ~0.9 ms per 4 KiB
    put), so at V=4096 each of its runs takes minutes; RESULTS.md already has them all.
    We keep its batch fill, durable writes and readrandom at 4 KiB and drop the rest, and
    run its memory store at V=100 only without single puts (RESULTS.md: same as file).
    shaledb on moto S3 gets a few workloads at V=100 only: it shows request overhead, not S3.
    """
    if variant == "slatedb-memory":
        return v != 100 or wl in ("fillseq|b1|nd", "fillrandom|b1|nd", "fillseq|b100|dur", "fillseq|b1|dur")
    if variant == "slatedb-file" and v != 100:
        return wl not in ("fillrandom|b100|nd", "fillseq|b1|dur", "fillseq|b100|dur", "readrandom|-|-")
    if variant == "shaledb-s3":
        return v != 100 or wl not in ("fillrandom|b100|nd", "fillseq|b1|dur", "readrandom|-|-", "scan|-|-")
    if variant == "pydict":
        return "|dur" in wl
    return False


def suite_configs(quick: bool, max_seconds: float) -> list[Config]:
    """The matrix, ordered so that consecutive runs are different engines."""
    cap = ["--max-seconds", str(max_seconds)]
    shapes: list[tuple[str, list[str]]] = []  # (workload|batch|durability, argv)
    for wl in ("fillseq", "fillrandom"):
        for b in (100, 1):
            shapes.append((f"{wl}|b{b}|nd", ["--workload", wl, "--batch", str(b)]))
    shapes.append(("overwrite|b100|nd", ["--workload", "overwrite", "--batch", "100"]))
    for b in (100, 1):
        shapes.append((f"fillseq|b{b}|dur", ["--workload", "fillseq", "--batch", str(b), "--durable", *cap]))
    for wl in ("readrandom", "readmissing", "scan"):
        shapes.append((f"{wl}|-|-", ["--workload", wl]))

    cfgs: list[Config] = []
    for n, v in QUICK_SIZES if quick else SIZES:
        size = ["--n", str(n), "--value-size", str(v)]
        for shape, wl_argv in shapes:
            for variant, (eng, eng_argv) in VARIANTS.items():
                if not skip(variant, shape, v):
                    label = f"{variant}|{shape}|{n}|{v}"
                    cfgs.append(Config(label, eng, ["--engine", eng, *eng_argv, *size, *wl_argv]))
        # 16 concurrent durable writers (shaledb: group commit with a 10 ms flush interval)
        mt = [*size, "--workload", "durable_mt", "--threads", str(workloads.MT_THREADS), *cap]
        mt_variants = [
            ("shaledb-file@fi10ms", "shaledb", ["--store", "file", "--setting", "flush_interval_s=0.010"]),
            ("rocksdict", "rocksdict", []),
            ("plyvel", "plyvel", []),
            ("lmdb", "lmdb", []),
            ("slatedb-file@10ms", "slatedb", ["--store", "file", "--setting", "flush_interval=10ms"]),
        ]
        for variant, eng, eng_argv in mt_variants:
            if variant.startswith("slatedb") and v != 100:
                continue
            label = f"{variant}|durable_mt|t{workloads.MT_THREADS}|dur|{n}|{v}"
            cfgs.append(Config(label, eng, ["--engine", eng, *eng_argv, *mt]))
        # memory check: default budgets, tight budgets, and RocksDB for scale
        mem_variants = [
            ("shaledb-file", "shaledb", ["--store", "file"]),
            (
                "shaledb-file@tight",
                "shaledb",
                ["--store", "file"] + [x for s in TIGHT for x in ("--setting", s)],
            ),
            ("rocksdict", "rocksdict", []),
        ]
        for variant, eng, eng_argv in mem_variants:
            label = f"{variant}|memcheck|-|-|{n}|{v}"
            cfgs.append(Config(label, eng, ["--engine", eng, *eng_argv, *size, "--workload", "memcheck"]))
    return cfgs


def interpreter(engine: str, a: argparse.Namespace) -> str:
    if engine == "shaledb":
        return a.python_shaledb
    return a.python_anchors if os.path.exists(a.python_anchors) else sys.executable


def probe(python: str, engine: str) -> str | None:
    """None if ``engine`` can run under ``python``, else why not (checked once per suite)."""
    check = (
        "import shaledb; shaledb.Db.open"
        if engine == "shaledb"
        else f"import {engines.ENGINE_MODULES[engine]}"
    )
    if not os.path.exists(python):
        return f"{python} does not exist"
    cp = subprocess.run([python, "-c", check], check=False, capture_output=True, text=True, timeout=120)
    if cp.returncode:
        return (cp.stderr.strip().splitlines() or ["import failed"])[-1]
    return None


def load_done(path: str) -> dict[str, int]:
    done: dict[str, int] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                done[r["label"]] = done.get(r["label"], 0) + 1
    return done


def suite(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="run.py suite", description="the matrix, fresh process per run")
    p.add_argument("--out", required=True, help="JSONL file results are appended to")
    p.add_argument("--only", default=None, help="regex on the label (variant|workload|batch|dur|n|v)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small N, 3 s caps: checks the harness")
    p.add_argument("--max-seconds", type=float, default=None, help="cap for durable runs (default 15)")
    p.add_argument("--timeout", type=int, default=1200, help="seconds before a run is killed")
    p.add_argument("--scratch", default=None, help="parent of the per-run data directories")
    p.add_argument("--python-shaledb", default=SHALEDB_PYTHON)
    p.add_argument("--python-anchors", default=ANCHOR_PYTHON)
    p.add_argument(
        "--quiet-cores",
        type=float,
        default=0,
        help="before each run, wait until other processes use fewer than this many cores "
        "(sampled over 1 s; 0 = don't wait)",
    )
    p.add_argument("--max-wait", type=float, default=60, help="give up waiting for quiet after this many s")
    p.add_argument("--list", action="store_true", help="print the configurations and exit")
    a = p.parse_args(argv)
    cap = a.max_seconds if a.max_seconds is not None else (3.0 if a.quick else DURABLE_CAP_S)
    cfgs = suite_configs(a.quick, cap)
    if a.only:
        cfgs = [c for c in cfgs if re.search(a.only, c.label)]
    if a.list:
        for c in cfgs:
            print(f"{c.label:60s} {interpreter(c.engine, a)} bench/run.py single {' '.join(c.argv)}")
        return
    unavailable = {}
    for eng in sorted({c.engine for c in cfgs}):
        why = probe(interpreter(eng, a), eng)
        if why:
            unavailable[eng] = why
            print(f"SKIP {eng}: {why}", file=sys.stderr, flush=True)
    cfgs = [c for c in cfgs if c.engine not in unavailable]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    done = load_done(a.out)
    todo = sum(max(0, a.repeats - done.get(c.label, 0)) for c in cfgs)
    print(f"{len(cfgs)} configurations x {a.repeats} repeats: {todo} runs to do", file=sys.stderr, flush=True)
    t_suite = time.time()
    for rep in range(a.repeats):
        for c in cfgs:
            if done.get(c.label, 0) > rep:
                continue
            run_one(c, rep, a)
            done[c.label] = done.get(c.label, 0) + 1
    print(f"suite done in {time.time() - t_suite:.0f} s", file=sys.stderr, flush=True)


def wait_for_quiet(cores: float, max_wait: float) -> tuple[float, float | None]:
    """Sleep while other processes keep more than ``cores`` CPUs busy; (waited s, last load)."""
    t0 = time.monotonic()
    while True:
        meter = workloads.CpuMeter()
        time.sleep(1.0)
        busy = meter.other_cores()
        waited = time.monotonic() - t0
        if busy is None or busy < cores or waited >= max_wait:
            return waited, busy
        time.sleep(4.0)


def run_one(c: Config, rep: int, a: argparse.Namespace) -> None:
    waited, busy_before = wait_for_quiet(a.quiet_cores, a.max_wait) if a.quiet_cores else (0.0, None)
    scratch = tempfile.mkdtemp(prefix="run-", dir=a.scratch)
    cmd = [interpreter(c.engine, a), os.path.join(HERE, "run.py"), "single", *c.argv, "--dir", scratch]
    t = time.time()
    try:
        cp = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=a.timeout)
        out, err, rc = cp.stdout, cp.stderr, cp.returncode
    except subprocess.TimeoutExpired as exc:
        out, err, rc = "", f"timeout after {a.timeout} s: {exc}", -1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = out.strip().splitlines()
    if rc != 0 or not lines or not lines[-1].startswith("{"):
        print(f"FAIL {c.label} rc={rc}\n{err[-3000:]}", file=sys.stderr, flush=True)
        with open(a.out + ".failures", "a") as f:
            f.write(json.dumps({"label": c.label, "rc": rc, "stderr": err[-3000:], "ts": time.time()}) + "\n")
        return
    r = json.loads(lines[-1])
    r.update(label=c.label, rep=rep, wall_s=time.time() - t, argv=c.argv)
    r.update(quiet_wait_s=waited, other_cpu_cores_before=busy_before)
    with open(a.out, "a") as f:
        f.write(json.dumps(r) + "\n")
    p50 = r.get("lat_p50_us")
    print(
        f"{c.label:58s} rep{rep} {r['ops_per_s']:12,.0f} ops/s  p50 {p50 if p50 is None else f'{p50:,.1f}'} us"
        f"  ({r['wall_s']:.1f} s, others {r.get('other_cpu_cores') or 0:.2f} cores)",
        flush=True,
    )


def main() -> None:
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "single":
        single(sys.argv[2:])
    elif cmd == "suite":
        suite(sys.argv[2:])
    elif cmd == "report":
        import report

        report.main(sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(0 if cmd in ("-h", "--help") else 2)


if __name__ == "__main__":
    main()

"""Run a bench script once per engine, each under its engine's interpreter, interleaved.

The feature benchmarks (``txn.py``, ``merge_operator.py``, ``range_delete.py``) measure one
engine in-process with ``--engine shaledb|rocksdict``. With ``--engines shaledb,rocksdict
--rounds R`` they call :func:`interleave` instead, which runs the script again once per engine
and round in a fresh process: shaledb on the project venv and RocksDB on the anchor venv
(``bench/.venv-anchors``), picked by ``run.interpreter`` exactly as ``run.py suite`` does. The
order of the engines rotates every round, so a noisy minute on the shared machine hits each
engine alike; compare engines as ratios within a round.

Every JSON line a run prints is tagged with its ``engine`` and ``round`` and appended to
``--out`` (if given); :func:`summary` prints the median of each number over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import run

DRIVER_OPTIONS = ("--engines", "--rounds", "--out")


def python_for(engine: str) -> str:
    """The interpreter ``run.py suite`` would use for ``engine``."""
    return run.interpreter(
        engine, argparse.Namespace(python_shaledb=run.SHALEDB_PYTHON, python_anchors=run.ANCHOR_PYTHON)
    )


def add_options(ap: argparse.ArgumentParser, engines: tuple[str, ...]) -> None:
    ap.add_argument("--engine", default="shaledb", choices=engines, help="measure this engine in-process")
    ap.add_argument("--engines", help="comma-separated: run each in its own interpreter, interleaved")
    ap.add_argument("--rounds", type=int, default=3, help="with --engines: rounds of every engine")
    ap.add_argument("--out", help="with --engines: append the tagged JSON lines here")


def own_argv(argv: list[str]) -> list[str]:
    """``argv`` without the driver's options (what each per-engine run gets)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DRIVER_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(o + "=" for o in DRIVER_OPTIONS)):
            out.append(arg)
    return out


def interleave(script: str, args: argparse.Namespace, case_keys: tuple[str, ...]) -> list[dict[str, Any]]:
    engines = args.engines.split(",")
    argv = own_argv(sys.argv[1:])
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        k = rnd % len(engines)
        for eng in engines[k:] + engines[:k]:
            cmd = [python_for(eng), os.path.abspath(script), *argv, "--engine", eng]
            load = os.getloadavg()[0]
            cp = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if cp.returncode:
                print(f"FAIL {eng} round {rnd}: {cp.stderr.strip()[-800:]}", file=sys.stderr, flush=True)
                continue
            for line in cp.stdout.splitlines():
                if not line.startswith("{"):
                    continue
                r = {
                    "engine": eng,
                    "round": rnd,
                    **json.loads(line),
                    "loadavg_1m": [load, os.getloadavg()[0]],
                }
                r["executable"] = cmd[0]
                rows.append(r)
                print(json.dumps(r), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")
    summary(rows, ("engine", *case_keys))
    return rows


def summary(rows: list[dict[str, Any]], case_keys: tuple[str, ...]) -> None:
    """Median of every other number over the rounds, per case (the values of ``case_keys``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    skip = {"round", "loadavg_1m", "executable", *case_keys}
    for r in rows:
        groups.setdefault(json.dumps({k: r.get(k) for k in case_keys}), []).append(r)
    print("# medians over rounds", flush=True)
    for case, rs in groups.items():
        nums = {
            k: statistics.median(r[k] for r in rs if k in r)
            for k in rs[0]
            if k not in skip and isinstance(rs[0][k], float | int) and not isinstance(rs[0][k], bool)
        }
        print(
            json.dumps({**json.loads(case), "rounds": len(rs), **{k: round(v, 2) for k, v in nums.items()}})
        )

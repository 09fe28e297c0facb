#!/usr/bin/env python3
"""Merge benchmark: one standalone compaction of overlapping L0 SSTs, timed.

    .venv/bin/python bench/merge.py [--l0 4] [--puts-per-l0 250000] [--keys 300000] [--value-size 100]

Writes ``--l0`` memtables of ``--puts-per-l0`` random overwrites of ``--keys``
16-byte keys into a local directory (no embedded compactor), flushing each to
an L0 SST; then, ``--repeat`` times, copies the directory and runs one
``Compactor.run_once()`` on the copy (the scheduler merges the L0s into one
sorted run). Prints the best and every time, and MB/s of input SSTs. This is
the CPU cost of a merge in one process (block decode, merge, block encode,
bloom filter), with the local directory's writes in it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from shaledb import Compactor, Db, Settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--l0", type=int, default=4)
    ap.add_argument("--puts-per-l0", type=int, default=250_000)
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shaledb-bench-merge-"))
    try:
        src = work / "src"
        rng = random.Random(args.seed)
        settings = Settings(
            compactor=None, garbage_collector=None, l0_sst_size_bytes=1 << 30, max_unflushed_bytes=1 << 31
        )
        pool = [rng.randbytes(args.value_size) for _ in range(64)]
        with Db.open(str(src), settings=settings) as db:
            for _ in range(args.l0):
                for i in range(args.puts_per_l0):
                    db.put(b"key%013d" % rng.randrange(args.keys), pool[i & 63], durable=False)
                db.flush(memtable=True)
        times, input_bytes, jobs = [], 0, []
        for r in range(args.repeat):
            copy = work / f"copy-{r}"
            shutil.copytree(src, copy)
            with Compactor.open(str(copy)) as c:
                t = time.perf_counter()
                report = c.run_once()
                times.append(time.perf_counter() - t)
            input_bytes, jobs = report.input_bytes, report.jobs
            shutil.rmtree(copy)
        best = min(times)
        print(
            json.dumps(
                {
                    "jobs": jobs,
                    "input_bytes": input_bytes,
                    "merge_s": [round(t, 3) for t in times],
                    "best_mb_per_s": round(input_bytes / best / 1e6, 1),
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

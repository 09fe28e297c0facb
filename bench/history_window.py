#!/usr/bin/env python3
"""The space cost of a time-travel window under an overwrite workload.

    PYTHONPATH=src .venv/bin/python bench/history_window.py [--keys 10000] [--per-minute 2000]
        [--minutes 120] [--every 15] [--retention-s 3600]

A local-directory database of ``--keys`` keys (``--value-size`` random bytes each), then
``--per-minute`` random overwrites per simulated minute for ``--minutes`` minutes, once with
``history_retention_s=0`` and once with ``--retention-s``. Time is a manual clock given to the
writer and the compactor, advanced 60 s per minute of writes, so two simulated hours take
seconds, not hours. Every ``--every`` minutes: flush, compact until the compactor has nothing
left to do, collect garbage (obsolete SSTs and WALs, no minimum age), and record the bytes of
the live SSTs (the manifest) and of every file in the directory. With a window of R seconds the
database keeps every version written in the last R seconds plus the newest one below, so its
size grows for R seconds and then levels off; with 0 it stays at one version per key.

RocksDB has no equivalent (its closest, user-defined timestamps with ``full_history_ts_low``,
is not exposed by ``rocksdict``), so this runs shaledb alone. Prints one JSON line per point.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time

from shaledb import Compactor, CompactorOptions, Db, GarbageCollector, Settings, WriteBatch
from shaledb.testing.clock import ManualClock


def key(i: int) -> bytes:
    return b"key/%08d" % i


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def settle(path: str, clock: ManualClock, settings: Settings) -> None:
    """Compact until nothing is left to do, then delete what no manifest references."""
    comp = Compactor.open(path, CompactorOptions(min_l0_ssts=1), clock=clock, settings=settings)
    try:
        while comp.run_once().did_work:
            pass
    finally:
        comp.close()
    # the same clock: SST ids carry their (simulated) birth time; the clock started at the real time
    gc = GarbageCollector.open(path, settings=settings, clock=clock)
    try:
        gc.run_once(min_age_s=0)
    finally:
        gc.close()


def run(retention_s: float, args: argparse.Namespace) -> None:
    tmp = tempfile.mkdtemp(prefix="shaledb-bench-history-")
    path = os.path.join(tmp, "db")
    clock = ManualClock(start=time.time())
    settings = Settings(compactor=None, garbage_collector=None, history_retention_s=retention_s)
    rng = random.Random(args.seed)
    try:
        db = Db.open(path, settings=settings, clock=clock)
        for lo in range(0, args.keys, 1000):
            b = WriteBatch()
            for i in range(lo, min(args.keys, lo + 1000)):
                b.put(key(i), rng.randbytes(args.value_size))
            db.write(b, durable=False)
        overwrites = 0
        for minute in range(1, args.minutes + 1):
            for lo in range(0, args.per_minute, 100):
                b = WriteBatch()
                for _ in range(min(100, args.per_minute - lo)):
                    b.put(key(rng.randrange(args.keys)), rng.randbytes(args.value_size))
                db.write(b, durable=False)
            overwrites += args.per_minute
            clock.advance(60.0)
            if minute % args.every == 0:
                t0 = time.perf_counter()
                db.flush(memtable=True)
                db.close()  # closed while compacting and collecting: nothing pins old objects
                settle(path, clock, settings)
                db = Db.open(path, settings=settings, clock=clock)
                m = db.manifest
                sst_bytes = sum(s.size for s in m.all_ssts())
                print(
                    json.dumps(
                        {
                            "history_retention_s": retention_s,
                            "minute": minute,
                            "overwrites": overwrites,
                            "keys": args.keys,
                            "value_size": args.value_size,
                            "sst_bytes": sst_bytes,
                            "dir_bytes": dir_bytes(path),
                            "l0_ssts": len(m.data.l0),
                            "sorted_runs": len(m.data.runs),
                            "settle_s": round(time.perf_counter() - t0, 2),
                        }
                    ),
                    flush=True,
                )
        db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--per-minute", type=int, default=2000, help="overwrites per simulated minute")
    ap.add_argument("--minutes", type=int, default=120)
    ap.add_argument("--every", type=int, default=15, help="measure every this many minutes")
    ap.add_argument("--retention-s", type=float, default=3600.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    for retention in (0.0, args.retention_s):
        run(retention, args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Scan and get speed with 0, 10 and 1,000 range tombstones over the range read.

    PYTHONPATH=src .venv/bin/python bench/range_delete.py [--keys 100000] [--scan 20000] [--repeat 5]

A local-directory database of ``--keys`` keys (100-byte values; even numbers
only). The tombstones each delete one *absent* odd key, spread evenly over the
scanned range, so every variant returns the same rows and the difference is
the cost of honouring the tombstones. Each variant is measured with the
tombstones still in the memtable and after a flush (an L0 SST's range-del
block, the data in a compacted run below it). Best of ``--repeat``: a forward
scan of ``--scan`` keys, the same scan reversed, and 2,000 random ``get``s
inside the range. Prints one JSON line per case.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time

from shaledb import CompactorOptions, Db, Settings, WriteBatch
from shaledb.compaction import Compactor

QUIET = Settings(compactor=None, garbage_collector=None)


def key(i: int) -> bytes:
    return b"k%09d" % i


def load(path: str, n: int) -> None:
    with Db.open(path, settings=QUIET) as db:
        for lo in range(0, n, 10_000):
            b = WriteBatch()
            for i in range(lo, min(n, lo + 10_000)):
                b.put(key(2 * i), b"v" * 100)
            db.write(b, durable=False)
        db.flush(memtable=True)
    c = Compactor.open(path, CompactorOptions(min_l0_ssts=1), settings=QUIET)
    c.run_once()
    c.close()


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def case(path: str, tombstones: int, flushed: bool, args: argparse.Namespace) -> dict[str, object]:
    lo_i = args.keys // 4
    start, end = key(2 * lo_i), key(2 * (lo_i + args.scan))
    with Db.open(path, settings=QUIET) as db:
        step = max(1, args.scan // max(1, tombstones))
        for j in range(tombstones):
            odd = key(2 * (lo_i + j * step) + 1)
            db.delete_range(odd, odd + b"\0", durable=False)
        if flushed:
            db.flush(memtable=True)
        rows = sum(1 for _ in db.scan(start, end))
        assert rows == args.scan, rows
        rng = random.Random(1)
        probes = [key(2 * (lo_i + rng.randrange(args.scan))) for _ in range(2000)]
        fwd = best(lambda: sum(1 for _ in db.scan(start, end)), args.repeat)
        rev = best(lambda: sum(1 for _ in db.scan(start, end, reverse=True)), args.repeat)
        gets = best(lambda: [db.get(k) for k in probes], args.repeat)
    return {
        "tombstones": tombstones,
        "where": "L0 range-del block" if flushed else "memtable",
        "rows": rows,
        "scan_ms": round(fwd * 1000, 2),
        "scan_rows_per_s": int(rows / fwd),
        "reverse_scan_ms": round(rev * 1000, 2),
        "get_us": round(gets / len(probes) * 1e6, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--scan", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for flushed in (False, True):
        for n in (0, 10, 1000):
            tmp = tempfile.mkdtemp(prefix="shaledb-rangedel-bench-")
            try:
                load(tmp + "/db", args.keys)
                print(json.dumps(case(tmp + "/db", n, flushed, args)), flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Scan and get speed with 0, 10 and 1,000 range tombstones over the range read.

    PYTHONPATH=src .venv/bin/python bench/range_delete.py [--keys 100000] [--scan 20000] [--repeat 5]
    PYTHONPATH=src .venv/bin/python bench/range_delete.py --engines shaledb,rocksdict --rounds 3 [--out FILE]

A local-directory database of ``--keys`` keys (100-byte values; even numbers
only). The tombstones each delete one *absent* odd key, spread evenly over the
scanned range, so every variant returns the same rows and the difference is
the cost of honouring the tombstones. Each variant is measured with the
tombstones still in the memtable and after a flush (an L0 SST's range-del
block, the data in a compacted run below it). Best of ``--repeat``: a forward
scan of ``--scan`` keys, the same scan reversed, and 2,000 random ``get``s
inside the range. Prints one JSON line per case.

``--engine rocksdict`` does the same on RocksDB through ``rocksdict`` (the options of
``run.py``'s RocksDB adapter): the keys compacted into one level by ``compact_range``, the
tombstones written with ``Rdict.delete_range`` and left in the memtable or flushed to an L0
SST; scans are ``items(from_key=...)`` cut at ``--scan`` rows, as ``run.py``'s scan workload.
``--engines shaledb,rocksdict`` runs both, each under its own interpreter, interleaved
(``beside.py``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import tempfile
import time
from typing import Any

import beside


def key(i: int) -> bytes:
    return b"k%09d" % i


def load(path: str, n: int) -> None:
    from shaledb import CompactorOptions, Db, Settings, WriteBatch
    from shaledb.compaction import Compactor

    QUIET = Settings(compactor=None, garbage_collector=None)
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


def rocksdb_case(path: str, tombstones: int, flushed: bool, args: argparse.Namespace) -> dict[str, object]:
    """The same case on rocksdict: load, ``compact_range``, tombstones, then the timed reads."""
    import rocksdict as rd

    db = rd.Rdict(path, rd.Options(raw_mode=True))  # run.py's RocksDB adapter
    try:
        for lo in range(0, args.keys, 10_000):
            wb = rd.WriteBatch(raw_mode=True)
            for i in range(lo, min(args.keys, lo + 10_000)):
                wb.put(key(2 * i), b"v" * 100)
            db.write(wb)
        db.flush()
        db.compact_range(None, None)
        lo_i = args.keys // 4
        start, last = key(2 * lo_i), key(2 * (lo_i + args.scan - 1))
        step = max(1, args.scan // max(1, tombstones))
        for j in range(tombstones):
            odd = key(2 * (lo_i + j * step) + 1)
            db.delete_range(odd, odd + b"\0")
        if flushed:
            db.flush()

        def fwd_scan() -> int:
            return sum(1 for _ in itertools.islice(db.items(from_key=start), args.scan))

        def rev_scan() -> int:
            return sum(1 for _ in itertools.islice(db.items(backwards=True, from_key=last), args.scan))

        rows = fwd_scan()
        assert rows == args.scan and rev_scan() == args.scan, rows
        got = list(itertools.islice(db.keys(from_key=start), args.scan))
        assert got[-1] == last and all(int(k[1:]) % 2 == 0 for k in got), "a tombstone was not honoured"
        return timings(db.get, fwd_scan, rev_scan, tombstones, flushed, args)
    finally:
        db.close()


def timings(
    get: Any, fwd_scan: Any, rev_scan: Any, tombstones: int, flushed: bool, args: argparse.Namespace
) -> dict[str, object]:
    """Best of ``--repeat``: the forward scan, the reverse scan and 2,000 gets in the range."""
    lo_i = args.keys // 4
    rng = random.Random(1)
    probes = [key(2 * (lo_i + rng.randrange(args.scan))) for _ in range(2000)]
    fwd = best(fwd_scan, args.repeat)
    rev = best(rev_scan, args.repeat)
    gets = best(lambda: [get(k) for k in probes], args.repeat)
    return {
        "tombstones": tombstones,
        "where": "L0 range-del block" if flushed else "memtable",
        "rows": args.scan,
        "scan_ms": round(fwd * 1000, 2),
        "scan_rows_per_s": int(args.scan / fwd),
        "reverse_scan_ms": round(rev * 1000, 2),
        "get_us": round(gets / len(probes) * 1e6, 2),
    }


def case(path: str, tombstones: int, flushed: bool, args: argparse.Namespace) -> dict[str, object]:
    from shaledb import Db, Settings

    QUIET = Settings(compactor=None, garbage_collector=None)
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
        return timings(
            db.get,
            lambda: sum(1 for _ in db.scan(start, end)),
            lambda: sum(1 for _ in db.scan(start, end, reverse=True)),
            tombstones,
            flushed,
            args,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--scan", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    beside.add_options(ap, ("shaledb", "rocksdict"))
    args = ap.parse_args()
    if args.engines:
        beside.interleave(__file__, args, ("tombstones", "where"))
        return
    for flushed in (False, True):
        for n in (0, 10, 1000):
            tmp = tempfile.mkdtemp(prefix="shaledb-rangedel-bench-")
            try:
                if args.engine == "rocksdict":
                    res = rocksdb_case(tmp + "/db", n, flushed, args)
                else:
                    load(tmp + "/db", args.keys)
                    res = case(tmp + "/db", n, flushed, args)
                print(json.dumps({"engine": args.engine, **res}), flush=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

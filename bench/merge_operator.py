#!/usr/bin/env python3
"""Merge-operator counters beside read-modify-write, on a local directory.

    .venv/bin/python bench/merge_operator.py [--ops 100000] [--keys 1000] [--repeat 3]

``--keys`` 8-byte counters, incremented ``--ops`` times at random keys (one thread,
``durable=False`` so the WAL's group commit is not what is measured):

* ``merge``: ``db.merge(key, add 1)`` with the ready ``add_u64`` operator (no read);
* ``get+put``: ``db.get(key)`` then ``db.put(key, value + 1)``: what a counter
  costs without a merge operator (and is only correct with one writer thread);
* ``merge hot``: every increment on one key (the memtable stack folds every
  64 operands).

Then the reads of the merged database: ``get`` of every counter with the operands
still unfolded in memtables and L0 SSTs, and again after a compaction folded them.
Best of ``--repeat`` runs; prints operations per second as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import struct
import tempfile
import time
from collections.abc import Callable

from shaledb import Compactor, CompactorOptions, Db, Settings

U = struct.Struct("<Q")
ONE = U.pack(1)
QUIET = Settings(compactor=None, garbage_collector=None, merge_operator="add_u64")


def key(i: int) -> bytes:
    return b"ctr/%08d" % i


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(kind: str, ops: int, keys: int, seed: int) -> dict[str, float]:
    d = tempfile.mkdtemp(prefix="shaledb-bench-merge-")
    try:
        db = Db.open(d, settings=QUIET)
        rng = random.Random(seed)
        picks = [key(rng.randrange(keys)) for _ in range(ops)] if kind != "merge hot" else [key(0)] * ops
        for i in range(keys):
            db.put(key(i), U.pack(0), durable=False)
        db.flush(memtable=True)

        def merges() -> None:
            merge = db.merge
            for k in picks:
                merge(k, ONE, durable=False)
            db.flush()

        def rmw() -> None:
            get, put, unpack, pack = db.get, db.put, U.unpack, U.pack
            for k in picks:
                put(k, pack(unpack(get(k))[0] + 1), durable=False)
            db.flush()

        s = timed(rmw if kind == "get+put" else merges)
        out = {"ops_per_s": ops / s}
        total = sum(U.unpack(db.get(key(i)) or U.pack(0))[0] for i in range(keys))
        assert total == ops, (total, ops)
        if kind == "merge":
            names = [key(i) for i in range(keys)]
            out["gets_per_s_unfolded"] = keys / timed(lambda: [db.get(k) for k in names])
            db.close()
            comp = Compactor.open(d, CompactorOptions(min_l0_ssts=1), seed=seed)
            while comp.run_once().did_work:
                pass
            comp.close()
            db = Db.open(d, settings=QUIET)
            out["gets_per_s_folded"] = keys / timed(lambda: [db.get(k) for k in names])
        db.close()
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for kind in ("merge", "get+put", "merge hot"):
        runs = [run(kind, args.ops, args.keys, seed) for seed in range(args.repeat)]
        best = {m: max(r[m] for r in runs) for m in runs[0]}
        print(
            json.dumps(
                {
                    "workload": kind,
                    "ops": args.ops,
                    "keys": args.keys,
                    **{m: round(v) for m, v in best.items()},
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

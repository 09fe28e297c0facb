#!/usr/bin/env python3
"""Flush benchmark: writes that fit in the memtable, then one ``flush(memtable=True)``, timed.

    .venv/bin/python bench/flush.py [--keys 50000] [--value-size 4096] [--repeat 3]

Writes ``--keys`` random 16-byte keys with ``--value-size``-byte values in
batches of 100 (``durable=False``, no compactor, an unflushed budget large
enough that nothing flushes early) into a fresh local directory, then times
``flush(memtable=True)``: the WAL writer finishing its objects and the memtables
becoming L0 SSTs. Prints MB/s of keys and values, best of ``--repeat`` fresh
databases. This is the write path a burst of large values waits on.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from shaledb import Db, Settings, WriteBatch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pool = [rng.randbytes(args.value_size) for _ in range(64)]
    keys = [rng.randbytes(16) for _ in range(args.keys)]
    put_bytes = args.keys * (16 + args.value_size)
    settings = Settings(
        compactor=None, garbage_collector=None, max_unflushed_bytes=4 * put_bytes + (64 << 20)
    )
    work = Path(tempfile.mkdtemp(prefix="shaledb-bench-flush-"))
    times, l0 = [], 0
    try:
        for r in range(args.repeat):
            with Db.open(str(work / f"db-{r}"), settings=settings) as db:
                for s in range(0, args.keys, 100):
                    b = WriteBatch()
                    for j, k in enumerate(keys[s : s + 100]):
                        b.put(k, pool[(s + j) & 63])
                    db.write(b, durable=False)
                t = time.perf_counter()
                db.flush(memtable=True)
                times.append(time.perf_counter() - t)
                l0 = len(db.manifest.data.l0)
            shutil.rmtree(work / f"db-{r}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = min(times)
    result = {
        "bytes_put": put_bytes,
        "l0_ssts": l0,
        "flush_s": [round(t, 3) for t in times],
        "best_mb_per_s": round(put_bytes / best / 1e6, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

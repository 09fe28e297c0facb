#!/usr/bin/env python3
"""Bytes a cold get reads from the store, with key/value separation on.

    PYTHONPATH=src .venv/bin/python bench/separated_get_bytes.py [--n 50000] [--value-size 4096]
        [--batch 100] [--threshold 1024] [--gets 2000] [--dir DIR]

Loads ``--n`` random values in write batches of ``--batch`` into a local
directory (``value_separation_threshold = --threshold``), flushes, closes,
reopens and reads ``--gets`` random keys, each once, with the block cache
cleared before each get so every get is cold. Prints one JSON line: store
bytes read and requests per get (``Db.metrics()``, the store's own counters).
A WAL object never cuts a batch across blocks, so with version 1 value
pointers a cold get read its whole batch (``--batch`` x ``--value-size``
bytes); version 2 pointers read the value's own bytes. Run it with another
tree's ``src`` on ``PYTHONPATH`` to compare.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--threshold", type=int, default=1024)
    ap.add_argument("--gets", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    from shaledb import Db, Settings, WriteBatch

    rng = random.Random(args.seed)
    pool = [rng.randbytes(args.value_size) for _ in range(64)]
    keys = [b"k%015d" % i for i in range(args.n)]
    d = args.dir or tempfile.mkdtemp(prefix="shaledb-getbytes-")
    url = f"file://{d}"
    settings = Settings(compactor=None, garbage_collector=None, value_separation_threshold=args.threshold)
    try:
        with Db.open(url, settings=settings) as db:
            for i in range(0, args.n, args.batch):
                b = WriteBatch()
                for j in range(i, min(i + args.batch, args.n)):
                    b.put(keys[j], pool[j % len(pool)])
                db.write(b, durable=False)
            db.flush(memtable=True)
        with Db.open(url, settings=settings) as db:
            picks = [rng.randrange(args.n) for _ in range(args.gets)]
            m0 = db.metrics()
            t0 = time.perf_counter()
            for j in picks:
                db.cache.clear()
                if db.get(keys[j]) != pool[j % len(pool)]:
                    raise AssertionError(f"wrong value for key {j}")
            secs = time.perf_counter() - t0
            m1 = db.metrics()
        reqs = sum(m1["store_requests_total"].values()) - sum(m0["store_requests_total"].values())
        print(
            json.dumps(
                {
                    "n": args.n,
                    "value_size": args.value_size,
                    "batch": args.batch,
                    "threshold": args.threshold,
                    "gets": args.gets,
                    "bytes_read_per_get": (m1["store_bytes_read_total"] - m0["store_bytes_read_total"])
                    / args.gets,
                    "requests_per_get": reqs / args.gets,
                    "cold_gets_per_s": args.gets / secs,
                }
            )
        )
    finally:
        if args.dir is None:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

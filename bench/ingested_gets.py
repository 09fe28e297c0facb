#!/usr/bin/env python3
"""Point gets on bulk-loaded data against the same rows written through the engine.

    .venv/bin/python bench/ingested_gets.py [--keys 200000] [--gets 50000] [--repeat 3]

The same ``--keys`` rows (16-byte keys, 100-byte values) go into two fresh
local-directory databases: one bulk-loaded with ``shaledb.bulk.ingest.ingest_columns``
(one sorted run, a version-2 "wordmix" bloom filter, docs/format/bloom.md) and
one written with ``Db.write`` in batches of 1,000 and flushed (an L0 SST with a
version-1 BLAKE2b filter). Then ``--gets`` gets of present keys and as many of
absent keys, on each database after a warm-up, best of ``--repeat``: what a
point lookup pays for the filter a bulk load writes (its hash runs in pure
Python per lookup, BLAKE2b is one C call). Prints microseconds per get.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from shaledb import Db, Settings, WriteBatch, admin
from shaledb.bulk.ingest import ingest_columns

QUIET = Settings(compactor=None, garbage_collector=None)


def rows(n: int) -> tuple[list[bytes], list[bytes]]:
    keys = sorted(hashlib.sha256(b"%d" % i).digest()[:16] for i in range(n))
    return keys, [hashlib.sha512(k).digest() + hashlib.sha256(k).digest() + k[:4] for k in keys]


def per_get_us(url: str, keys: list[bytes], repeat: int) -> float:
    with Db.open(url, settings=QUIET) as db:
        get = db.get
        for k in keys[:5000]:
            get(k)
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            for k in keys:
                get(k)
            best = min(best, time.perf_counter() - t)
    return best / len(keys) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--gets", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    keys, values = rows(args.keys)
    work = Path(tempfile.mkdtemp(prefix="shaledb-ingested-gets-"))
    try:
        ingested, written = str(work / "ingested"), str(work / "written")
        ingest_columns(ingested, keys, values)
        with Db.open(written, settings=QUIET) as db:
            order = list(range(args.keys))
            random.Random(args.seed).shuffle(order)
            for s in range(0, args.keys, 1000):
                b = WriteBatch()
                for i in order[s : s + 1000]:
                    b.put(keys[i], values[i])
                db.write(b)
            db.flush(memtable=True)
        rng = random.Random(args.seed)
        present = [keys[rng.randrange(args.keys)] for _ in range(args.gets)]
        absent = [hashlib.sha1(b"absent %d" % i).digest()[:16] for i in range(args.gets)]
        res: dict[str, object] = {"keys": args.keys, "gets": args.gets}
        for name, url in (("ingested", ingested), ("written", written)):
            m = admin.read_manifest(url)
            res[f"{name}_shape"] = {"l0": len(m.data.l0), "runs": len(m.data.runs)}
            res[f"{name}_present_us"] = per_get_us(url, present, args.repeat)
            res[f"{name}_absent_us"] = per_get_us(url, absent, args.repeat)
        print(json.dumps(res, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""``Db.get_many`` against a loop of ``Db.get``: on a local directory and on S3 with latency.

    .venv/bin/python bench/get_many.py [--keys 200000] [--batch 2000] [--cold-batch 200]
                                       [--latency-ms 20] [--repeat 3]

1. A local directory holding ``--keys`` rows (16-byte keys, 100-byte values,
   flushed and compacted into one sorted run), warm: ``--batch`` random keys
   (sorted, half of them absent) by a loop of ``get``, and by ``get_many``
   with 1 and 8 workers. What the threads cost when nothing waits.
2. The same rows on a moto S3 server with ``--latency-ms`` added before every
   request (``LatencyStore``, an S3-like round trip), cold (a new handle per
   repeat): ``--cold-batch`` random present keys by a loop of ``get`` and by
   ``get_many`` with 8 workers. What overlapping the round trips saves.

Best of ``--repeat``; prints microseconds per key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engines import MotoServer
from shaledb import Db, Settings, WriteBatch
from shaledb.clock import SystemClock
from shaledb.compaction import Compactor
from shaledb.store import LatencyStore, open_store

QUIET = Settings(compactor=None, garbage_collector=None)


def load(url: str, n: int) -> list[bytes]:
    keys = [hashlib.sha256(b"%d" % i).digest()[:16] for i in range(n)]
    with Db.open(url, settings=QUIET) as db:
        for i in range(0, n, 1000):
            b = WriteBatch()
            for k in keys[i : i + 1000]:
                b.put(k, hashlib.sha512(k).digest() + hashlib.sha256(k).digest() + k[:4])
            db.write(b, durable=False)
        db.flush(memtable=True)
    Compactor.open(url).run_once()
    return keys


def best_us(fn: Callable[[], object], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best / n * 1e6, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--cold-batch", type=int, default=200)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    print(f"seed={args.seed}")
    rng = random.Random(args.seed)
    out: dict[str, object] = {"keys": args.keys, "batch": args.batch, "cold_batch": args.cold_batch}
    work = Path(tempfile.mkdtemp(prefix="shaledb-get-many-"))
    try:
        url = str(work / "db")
        keys = load(url, args.keys)
        batch = sorted(
            rng.sample(keys, args.batch // 2) + [rng.randbytes(16) for _ in range(args.batch // 2)]
        )
        with Db.open(url, settings=QUIET) as db:
            want = [db.get(k) for k in batch]
            assert db.get_many(batch) == want
            out["local_get_loop_us"] = best_us(lambda: [db.get(k) for k in batch], len(batch), args.repeat)
            for w in (1, 8):
                out[f"local_get_many_{w}_us"] = best_us(
                    lambda: db.get_many(batch, workers=w),  # noqa: B023
                    len(batch),
                    args.repeat,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    moto = MotoServer("get-many")
    try:
        url = f"s3://{moto.bucket}/db"
        keys = load(url, args.keys)
        clock = SystemClock()
        latency = args.latency_ms / 1000
        times: dict[str, list[float]] = {"s3_get_loop_us": [], "s3_get_many_8_us": []}
        for _ in range(args.repeat):
            cold = sorted(rng.sample(keys, args.cold_batch))
            for label, runs in times.items():  # alternate; each run opens a new handle: a cold cache
                store = LatencyStore(open_store(url), clock, latency)
                with Db.open(store=store, settings=QUIET) as db:
                    t = time.perf_counter()
                    got = [db.get(k) for k in cold] if label == "s3_get_loop_us" else db.get_many(cold)
                    runs.append((time.perf_counter() - t) / len(cold) * 1e6)
                    assert all(v is not None for v in got)
        out.update({k: round(min(v), 1) for k, v in times.items()})
        out["latency_ms"] = args.latency_ms
    finally:
        moto.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

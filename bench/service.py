#!/usr/bin/env python3
"""shaledb inside a service: the asyncio API beside the sync one, and change-feed throughput.

    .venv/bin/python bench/service.py [--keys 4000] [--latency-ms 20] [--feed-keys 200000] [--out FILE]

Async vs sync, on a local directory and on a moto S3 server on loopback with
``--latency-ms`` added before every request (``LatencyStore``), 100-byte values:

* durable puts: sync from one thread, sync from 64 threads, async from one
  task (``await`` each), async from 64 tasks, async with every put in flight
  at once (``asyncio.gather``);
* gets of keys flushed to an L0 SST, from a freshly opened database (cold
  block cache, so each first read of a block is a store round trip): sync
  from one thread, sync from 64 threads, async from 64 tasks.

Change feed: a writer process runs fillrandom (``--feed-keys`` puts in
random key order, ``durable=False``, 100-byte values) while one reader
process follows ``changes.open_changes`` from the start; reports changes/s
consumed and how long after the writer's last write the reader saw it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engines import MotoServer
from shaledb import Db, Settings, aio
from shaledb.clock import SYSTEM_CLOCK
from shaledb.store import ObjectStore, open_store
from shaledb.store.wrappers import LatencyStore

QUIET = Settings(compactor=None, garbage_collector=None)
VALUE = b"v" * 100


def keys(n: int, tag: str) -> list[bytes]:
    out = [b"%s:%08d" % (tag.encode(), i) for i in range(n)]
    random.Random(1).shuffle(out)
    return out


def rate(n: int, fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def threads(n_threads: int, items: list[bytes], op: Callable[[bytes], Any]) -> None:
    chunks = [items[i::n_threads] for i in range(n_threads)]
    with ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(lambda ch: [op(k) for k in ch], chunks))


async def tasks(n_tasks: int, items: list[bytes], op: Callable[[bytes], Any]) -> None:
    chunks = [items[i::n_tasks] for i in range(n_tasks)]

    async def run(ch: list[bytes]) -> None:
        for k in ch:
            await op(k)

    await asyncio.gather(*(run(ch) for ch in chunks))


def api_round(open_store_fn: Callable[[], ObjectStore], n: int, n_seq: int) -> dict[str, float]:
    """Puts and gets per second, sync and async, on one store."""
    r: dict[str, float] = {}
    with Db.open(store=open_store_fn(), settings=QUIET) as db:
        ks = keys(n_seq, "s1")
        r["sync_put_1_thread"] = rate(len(ks), lambda: [db.put(k, VALUE) for k in ks])
        ks = keys(n, "s64")
        r["sync_put_64_threads"] = rate(len(ks), lambda: threads(64, ks, lambda k: db.put(k, VALUE)))

    async def async_puts() -> None:
        adb = await aio.Db.open(store=open_store_fn(), settings=QUIET)
        async with adb:
            ks = keys(n_seq, "a1")
            t = time.perf_counter()
            for k in ks:
                await adb.put(k, VALUE)
            r["async_put_1_task"] = len(ks) / (time.perf_counter() - t)
            ks = keys(n, "a64")
            t = time.perf_counter()
            await tasks(64, ks, lambda k: adb.put(k, VALUE))
            r["async_put_64_tasks"] = len(ks) / (time.perf_counter() - t)
            ks = keys(n, "aall")
            t = time.perf_counter()
            await asyncio.gather(*(adb.put(k, VALUE) for k in ks))
            r["async_put_all_at_once"] = len(ks) / (time.perf_counter() - t)
            await adb.flush(memtable=True)

    asyncio.run(async_puts())
    ks = keys(n, "s64")
    with Db.open(store=open_store_fn(), settings=QUIET) as db:  # cold cache
        r["sync_get_1_thread"] = rate(n_seq, lambda: [db.get(k) for k in ks[:n_seq]])
    with Db.open(store=open_store_fn(), settings=QUIET) as db:
        r["sync_get_64_threads"] = rate(len(ks), lambda: threads(64, ks, db.get))

    async def async_gets() -> None:
        adb = await aio.Db.open(store=open_store_fn(), settings=QUIET)
        async with adb:
            t = time.perf_counter()
            await tasks(64, ks, adb.get)
            r["async_get_64_tasks"] = len(ks) / (time.perf_counter() - t)

    asyncio.run(async_gets())
    return {k: round(v) for k, v in r.items()}


def feed_round(url: str, n: int, env: dict[str, str]) -> dict[str, float]:
    """fillrandom in a writer process while a reader process follows the change feed."""
    with Db.open(url, settings=QUIET):
        pass  # the database exists before the reader starts
    reader = subprocess.Popen(
        [sys.executable, __file__, "--follow", url, "--expect", str(n)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    writer = subprocess.Popen(
        [sys.executable, __file__, "--fill", url, "--expect", str(n)], text=True, env=env
    )
    writer.wait()
    out, _ = reader.communicate(timeout=3600)
    got = json.loads(out.strip().splitlines()[-1])
    return got


def fill(url: str, n: int) -> None:
    rng = random.Random(2)
    order = list(range(n))
    rng.shuffle(order)
    settings = QUIET.replace(flush_interval_s=0.01)
    with Db.open(url, settings=settings) as db:
        for i in order:
            db.put(b"key%010d" % i, VALUE, durable=False)
        db.flush()
        print(json.dumps({"writer_done_at": time.time()}), file=sys.stderr)


def follow(url: str, n: int) -> None:
    from shaledb.engine.changes import open_changes

    seen = 0
    first = None
    with open_changes(url, poll_interval_s=0.01) as feed:
        for _ in feed:
            if first is None:
                first = time.perf_counter()
            seen += 1
            if seen >= n:
                break
        took = time.perf_counter() - (first or time.perf_counter())
        print(
            json.dumps(
                {
                    "changes": seen,
                    "seconds_from_first_change": round(took, 2),
                    "changes_per_s": round(seen / took) if took else None,
                    "wal_objects_read": feed.objects_read,
                    "last_seen_at": time.time(),
                }
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=4000)
    ap.add_argument("--seq-keys", type=int, default=300, help="puts/gets of the one-thread and one-task rows")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--feed-keys", type=int, default=200_000)
    ap.add_argument("--only", choices=["api", "feed"], default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--follow", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fill", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.follow:
        follow(args.follow, args.expect)
        return
    if args.fill:
        fill(args.fill, args.expect)
        return
    results: dict[str, Any] = {
        "argv": sys.argv[1:],
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "loadavg_at_start": os.getloadavg(),  # this machine is shared: figures move with it
    }
    tmp = tempfile.mkdtemp(prefix="shaledb-bench-service-")
    moto = MotoServer()
    try:
        s3 = f"s3://{moto.bucket}"
        if args.only in (None, "api"):
            counter = iter(range(1_000_000))
            local_root = os.path.join(tmp, "api")

            def local() -> ObjectStore:
                return open_store(local_root)

            results["local_dir"] = api_round(local, args.keys, args.seq_keys)
            print(json.dumps({"local_dir": results["local_dir"]}), flush=True)
            prefix = f"{s3}/api{next(counter)}"

            def slow() -> ObjectStore:
                return LatencyStore(open_store(prefix), SYSTEM_CLOCK, args.latency_ms / 1000)

            results[f"s3_{args.latency_ms:g}ms"] = api_round(slow, args.keys, args.seq_keys)
            print(json.dumps({f"s3_{args.latency_ms:g}ms": results[f"s3_{args.latency_ms:g}ms"]}), flush=True)
        if args.only in (None, "feed"):
            env = dict(os.environ)
            results["feed_local_dir"] = feed_round(os.path.join(tmp, "feed"), args.feed_keys, env)
            print(json.dumps({"feed_local_dir": results["feed_local_dir"]}), flush=True)
            results["feed_s3_loopback"] = feed_round(f"{s3}/feed", args.feed_keys, env)
            print(json.dumps({"feed_s3_loopback": results["feed_s3_loopback"]}), flush=True)
    finally:
        moto.stop()
    results["loadavg_at_end"] = os.getloadavg()
    results["threads_alive_at_end"] = threading.active_count()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

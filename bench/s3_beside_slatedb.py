#!/usr/bin/env python3
"""shaledb beside SlateDB's binding on the local S3 server, both behind one delay proxy.

    .venv/bin/python bench/s3_beside_slatedb.py [--latency-ms 20] [--repeat 3] [--keys 50000]
                                                [--only REGEX]

``s3_profile.py`` adds its delay inside shaledb's store stack (``LatencyStore``); SlateDB's
Rust object store cannot be wrapped that way, so here both engines talk to the moto server
through ``delay_proxy.DelayProxy``, which waits ``--latency-ms`` before forwarding each
request and counts requests by method. Both see the same injected delay and are counted by
the same code. shaledb runs on the project venv, SlateDB on the anchor venv (the
interpreter ``run.py suite`` picks, via ``beside.python_for``); each workload in its own
process, the engines interleaved (order rotating each repeat). 16-byte keys, 100-byte values.

Workloads:

* ``puts_<w>``: ``w`` writers (1, 4, 16, 64) of durable single puts into an empty database for
  ``--put-seconds`` (shaledb: threads; SlateDB: asyncio tasks, its binding is async):
  puts/s, p50 in ms and in round trips, requests per put. Both engines at their default
  settings (SlateDB's default ``flush_interval`` batches WAL writes every 100 ms;
  ``--slatedb-settings '{"flush_interval": "10ms"}'`` shortens it; ``--wal-max-in-flight N``
  sets shaledb's WAL pipeline).
* ``gets``: reopen a database of ``--keys`` rows (loaded straight to moto, flushed), then
  ``--gets`` random present keys one by one, cold: gets/s, p50, requests per get.
* ``scans``: reopen, ``--scans`` 100-key scans from random present keys, cold: scans/s,
  requests per scan.

Medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENGINES = ("shaledb", "slatedb")
WRITERS = (1, 4, 16, 64)


def workloads() -> list[str]:
    return [f"puts_{w}" for w in WRITERS] + ["gets", "scans"]


def key_of(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest()[:16]


def value_of(k: bytes) -> bytes:
    return (hashlib.sha512(k).digest() + hashlib.sha256(k).digest())[:100]


# ------------------------------------------------------------------ the child side


class Meter:
    """Request counts (from the proxy) and latencies, into one result dict."""

    def __init__(self, endpoint: str, latency_s: float) -> None:
        from delay_proxy import read_stats

        self.read = lambda: read_stats(endpoint)
        self.latency_s = latency_s
        self.out: dict[str, float] = {}
        self.before: dict[str, int] = {}

    def mark(self) -> None:
        self.before = self.read()

    def requests(self, label: str, n: int) -> None:
        after = self.read()
        d = {m: after[m] - self.before.get(m, 0) for m in after}
        self.out[f"{label}_requests_per_op"] = sum(d.values()) / n
        for m, c in sorted(d.items()):
            if c:
                self.out[f"{label}_{m}_per_op"] = c / n

    def lat(self, label: str, xs: list[float]) -> None:
        xs = sorted(xs)
        p50 = xs[len(xs) // 2]
        self.out[f"{label}_p50_ms"] = p50 * 1000
        self.out[f"{label}_p50_round_trips"] = p50 / self.latency_s


def shaledb_child(args: argparse.Namespace, meter: Meter) -> None:
    from shaledb import Db, Settings, WriteBatch
    from shaledb.compaction import Compactor

    quiet = Settings(compactor=None, garbage_collector=None)
    if args.wal_max_in_flight:
        quiet = dataclasses.replace(quiet, wal_max_in_flight=args.wal_max_in_flight)
    w = args.child
    if w == "load":
        with Db.open(args.url, settings=quiet) as db:
            for i in range(0, args.keys, 1000):
                b = WriteBatch()
                for j in range(i, min(i + 1000, args.keys)):
                    b.put(key_of(j), value_of(key_of(j)))
                db.write(b, durable=False)
            db.flush(memtable=True)
        Compactor.open(args.url).run_once()
        return
    if w.startswith("puts_"):
        threads = int(w.split("_")[1])
        db = Db.open(args.url, settings=quiet)
        lats: list[list[float]] = [[] for _ in range(threads)]
        start = threading.Barrier(threads + 1)
        stop_at = [0.0]

        def writer(t: int) -> None:
            n = 0
            start.wait()
            while time.perf_counter() < stop_at[0]:
                k = b"w%03d-%011d" % (t, n)
                t0 = time.perf_counter()
                db.put(k, value_of(k))
                lats[t].append(time.perf_counter() - t0)
                n += 1

        ts = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        meter.mark()
        t0 = time.perf_counter()
        stop_at[0] = t0 + args.put_seconds
        start.wait()
        for t in ts:
            t.join()
        record_puts(meter, [x for xs in lats for x in xs], time.perf_counter() - t0)
        db.close()
        return
    present = [
        key_of(i) for i in random.Random(args.seed).sample(range(args.keys), max(args.gets, args.scans))
    ]
    db = Db.open(args.url, settings=quiet)
    if w == "gets":
        meter.mark()
        xs = []
        t1 = time.perf_counter()
        for k in present[: args.gets]:
            t2 = time.perf_counter()
            v = db.get(k)
            xs.append(time.perf_counter() - t2)
            assert v == value_of(k), k
        meter.out["cold_gets_per_s"] = args.gets / (time.perf_counter() - t1)
        meter.lat("cold_get", xs)
        meter.requests("cold_get", args.gets)
    elif w == "scans":
        meter.mark()
        t1 = time.perf_counter()
        for k in present[: args.scans]:
            rows = list(db.scan(k, limit=100))
            assert rows[0] == (k, value_of(k)) and len(rows) == 100, k
        meter.out["cold_scans_per_s"] = args.scans / (time.perf_counter() - t1)
        meter.requests("cold_scan", args.scans)
    db.close()


def record_puts(meter: Meter, flat: list[float], secs: float) -> None:
    meter.out["puts_per_s"] = len(flat) / secs
    meter.lat("put", flat)
    meter.requests("put", len(flat))


async def slatedb_child(args: argparse.Namespace, meter: Meter) -> None:
    from slatedb import uniffi as sdb

    bucket, _, path = args.url.removeprefix("s3://").partition("/")
    store = sdb.ObjectStore.resolve(f"s3://{bucket}")
    w = args.child

    async def open_db() -> Any:
        b = sdb.DbBuilder(path, store)
        if args.slatedb_settings:
            settings = sdb.Settings.default()
            for name, value in json.loads(args.slatedb_settings).items():
                settings.set(name, json.dumps(value))
            b.with_settings(settings)
        return await b.build()

    if w == "load":
        db = await open_db()
        for i in range(0, args.keys, 1000):
            b = sdb.WriteBatch()
            for j in range(i, min(i + 1000, args.keys)):
                b.put(key_of(j), value_of(key_of(j)))
            await db.write(b)
        await db.flush_with_options(sdb.FlushOptions(flush_type=sdb.FlushType.MEM_TABLE))
        await db.shutdown()
        return
    if w.startswith("puts_"):
        tasks = int(w.split("_")[1])
        db = await open_db()
        lats: list[list[float]] = [[] for _ in range(tasks)]
        stop_at = 0.0

        async def writer(t: int) -> None:
            n = 0
            while time.perf_counter() < stop_at:
                k = b"w%03d-%011d" % (t, n)
                t0 = time.perf_counter()
                h = await db.put(k, value_of(k))
                await h.await_durable()
                lats[t].append(time.perf_counter() - t0)
                n += 1

        meter.mark()
        t0 = time.perf_counter()
        stop_at = t0 + args.put_seconds
        await asyncio.gather(*(writer(t) for t in range(tasks)))
        record_puts(meter, [x for xs in lats for x in xs], time.perf_counter() - t0)
        await db.shutdown()
        return
    present = [
        key_of(i) for i in random.Random(args.seed).sample(range(args.keys), max(args.gets, args.scans))
    ]
    db = await open_db()
    if w == "gets":
        meter.mark()
        xs = []
        t1 = time.perf_counter()
        for k in present[: args.gets]:
            t2 = time.perf_counter()
            v = await db.get(k)
            xs.append(time.perf_counter() - t2)
            assert v == value_of(k), k
        meter.out["cold_gets_per_s"] = args.gets / (time.perf_counter() - t1)
        meter.lat("cold_get", xs)
        meter.requests("cold_get", args.gets)
    elif w == "scans":
        meter.mark()
        t1 = time.perf_counter()
        for k in present[: args.scans]:
            it = await db.scan(sdb.KeyRange(start=k, start_inclusive=True, end=None, end_inclusive=False))
            rows: list[Any] = []
            while len(rows) < 100 and (batch := await it.next_batch(100 - len(rows))):
                rows.extend(batch)
            assert rows[0].key == k and rows[0].value == value_of(k) and len(rows) == 100, k
        meter.out["cold_scans_per_s"] = args.scans / (time.perf_counter() - t1)
        meter.requests("cold_scan", args.scans)
    await db.shutdown()


def child(args: argparse.Namespace) -> dict[str, float]:
    meter = Meter(args.proxy, args.latency_ms / 1000)
    if args.engine == "slatedb":
        asyncio.run(slatedb_child(args, meter))
    else:
        shaledb_child(args, meter)
    return meter.out


# ----------------------------------------------------------------- the parent side


def run_child(
    engine: str, workload: str, url: str, endpoint: str, args: argparse.Namespace
) -> dict[str, float]:
    from beside import python_for

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(HERE.parent / "src"), str(HERE)]),
        AWS_ENDPOINT_URL=endpoint,  # shaledb (obstore) reads this one
        AWS_ENDPOINT=endpoint,  # SlateDB's object_store reads this one
    )
    cmd = [python_for(engine), str(Path(__file__).resolve()), "--child", workload, "--engine", engine]
    cmd += ["--url", url, "--proxy", args.proxy_endpoint, "--latency-ms", str(args.latency_ms)]
    cmd += ["--keys", str(args.keys), "--gets", str(args.gets), "--scans", str(args.scans)]
    cmd += ["--put-seconds", str(args.put_seconds), "--seed", str(args.seed)]
    cmd += ["--slatedb-settings", args.slatedb_settings, "--wal-max-in-flight", str(args.wal_max_in_flight)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{engine} {workload} failed:\n{res.stderr[-4000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def medians(runs: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    med: dict[str, dict[str, float]] = {}
    for eng, by_w in runs.items():
        for w, rs in by_w.items():
            for k in sorted({k for r in rs for k in r}):
                med.setdefault(eng, {})[f"{w}.{k}"] = round(statistics.median(r.get(k, 0.0) for r in rs), 3)
    return med


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--gets", type=int, default=200)
    ap.add_argument("--scans", type=int, default=100)
    ap.add_argument("--put-seconds", type=float, default=3.0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--only", default=None, help="regex: run only the workloads it matches")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--wal-max-in-flight",
        type=int,
        default=0,
        help="shaledb's Settings.wal_max_in_flight (0: its default)",
    )
    ap.add_argument(
        "--slatedb-settings",
        default="",
        help='JSON object of SlateDB Settings over its defaults, e.g. \'{"flush_interval": "10ms"}\'',
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="shaledb", help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--proxy", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    print(f"seed={args.seed} load={os.getloadavg()}", flush=True)
    from delay_proxy import DelayProxy
    from engines import MotoServer

    engines = args.engines.split(",")
    names = [w for w in workloads() if args.only is None or re.search(args.only, w)]
    moto = MotoServer("s3-beside-slatedb")
    proxy = DelayProxy(moto.endpoint, args.latency_ms / 1000)
    args.proxy_endpoint = proxy.start()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {e: {} for e in engines}
    loaded = {e: f"s3://{moto.bucket}/{e}-loaded" for e in engines}
    say: Callable[[str], None] = lambda s: print(s, flush=True)  # noqa: E731
    try:
        if any(not w.startswith("puts_") for w in names):
            for e in engines:  # straight to moto: loading is not measured
                run_child(e, "load", loaded[e], moto.endpoint, args)
        for r in range(args.repeat):
            for w in names:
                k = r % len(engines)
                for e in engines[k:] + engines[:k]:
                    url = f"s3://{moto.bucket}/{e}-{w}-{r}" if w.startswith("puts_") else loaded[e]
                    res = run_child(e, w, url, args.proxy_endpoint, args)
                    runs[e].setdefault(w, []).append(res)
                    say(f"repeat {r} {e} {w}: {json.dumps({k: round(v, 3) for k, v in res.items()})}")
    finally:
        proxy.stop()
        moto.stop()
    report = {
        "latency_ms": args.latency_ms,
        "keys": args.keys,
        "repeat": args.repeat,
        "slatedb_settings": args.slatedb_settings,
        "wal_max_in_flight": args.wal_max_in_flight,
        "load_after": os.getloadavg(),
        "median": medians(runs),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

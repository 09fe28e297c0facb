#!/usr/bin/env python3
"""An S3-like profile: shaledb on the local S3 server with a fixed delay on every request.

    .venv/bin/python bench/s3_profile.py [--baseline REV] [--latency-ms 20] [--repeat 3]
                                         [--keys 50000] [--only REGEX] [--set NAME=INT]

A moto S3 server on loopback answers in about a millisecond; S3 answers in
tens. Every store call here goes through ``LatencyStore`` (``--latency-ms``,
default 20, before each request) over ``InstrumentedStore`` (which counts
requests), so the figures show what round trips cost and how many a workload
makes. 16-byte keys, 100-byte values.

Workloads (each in its own process, on its own prefix):

* ``puts_<w>``: ``w`` threads (1, 4, 16, 64) of durable single puts into an
  empty database for ``--put-seconds``: puts per second, p50 and p99 latency
  (also in round trips), store requests per put. With one writer, then
  ``--floor-pairs`` pairs, interleaved, of a bare create-if-absent PUT of an
  object the size of its WAL objects through the same ``LatencyStore`` and
  server (the rig's floor: what one PUT per durable write costs any engine
  here) and a durable put: ``floor_put_p50_ms``, ``paired_put_p50_ms`` and
  ``put_over_floor_ms``, the engine's own share.
* ``open``: ``Db.open`` of a database of ``--keys`` rows (one compacted sorted
  run): seconds and requests.
* ``gets``: after that open, ``--gets`` random present keys one by one, cold
  (nothing cached), then the same keys again, warm: per second, p50, requests
  and bytes read per get.
* ``scans``: a new handle, ``--scans`` 100-key scans from random present keys,
  cold: per second, requests per scan.
* ``get_many``: a new handle, one ``get_many`` of 1,000 random present keys,
  cold: seconds, round trips of wall time, requests.
* ``long_scan`` / ``long_scan_reverse``: a new handle, one scan of
  ``--long-scan-rows`` rows from the first key (from the last), cold: rows per
  second, seconds, round trips of wall time, requests.

Costs in dollars per million operations use S3 Standard list prices, stated as
assumptions (us-east-1, 2026): PUT, COPY, POST, LIST $0.005 per 1,000 requests;
GET, HEAD and other reads $0.0004 per 1,000; DELETE free.

``--server local`` puts the databases in a local directory instead, under the
same ``LatencyStore``: every request costs the delay and almost nothing else,
and requests in flight together overlap fully (S3's behaviour, where the moto
server serves one request at a time in Python, about 10 ms each for ranged
GETs of a 13 MB object). It separates round trips from the server's own cost.

``--baseline REV`` also runs every workload with the source tree of git
revision ``REV`` (``git archive`` into a temporary directory), interleaved with
this tree (base, this, base, this...) on the same server, and prints each
figure's ratio this/base, so a change is measured beside its baseline in one
run. Medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

PUT_PRICE = 0.005 / 1000
"""Dollars per PUT, COPY, POST or LIST request (S3 Standard list price, an assumption)."""
GET_PRICE = 0.0004 / 1000
"""Dollars per GET, HEAD or other read request (S3 Standard list price, an assumption)."""
PUT_KINDS = ("put", "put_create", "copy", "copy_create", "list")
GET_KINDS = ("get", "get_range", "get_ranges", "head", "attributes")

WRITERS = (1, 4, 16, 64)


def workloads() -> list[str]:
    return [f"puts_{w}" for w in WRITERS] + [
        "open",
        "gets",
        "scans",
        "get_many",
        "long_scan",
        "long_scan_reverse",
    ]


# ------------------------------------------------------------------ the child side


def key_of(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest()[:16]


def value_of(k: bytes) -> bytes:
    return (hashlib.sha512(k).digest() + hashlib.sha256(k).digest())[:100]


def child(args: argparse.Namespace) -> dict[str, float]:
    """One workload against ``args.url``, in this process (the tree on its PYTHONPATH)."""
    from shaledb import Db, Settings, WriteBatch
    from shaledb.clock import SystemClock
    from shaledb.store import open_store
    from shaledb.store.wrappers import InstrumentedStore, LatencyStore

    quiet = Settings(compactor=None, garbage_collector=None)
    if args.wal_max_in_flight and "wal_max_in_flight" in {f.name for f in dataclasses.fields(Settings)}:
        quiet = dataclasses.replace(
            quiet, wal_max_in_flight=args.wal_max_in_flight
        )  # a tree without it: its one
    names = {f.name for f in dataclasses.fields(Settings)}
    chosen = dict(kv.split("=", 1) for kv in args.set)
    quiet = dataclasses.replace(quiet, **{k: int(v) for k, v in chosen.items() if k in names})
    latency = args.latency_ms / 1000
    rng = random.Random(args.seed)
    if args.child == "load":
        from shaledb.compaction import Compactor

        with Db.open(args.url, settings=quiet) as db:
            for i in range(0, args.keys, 1000):
                b = WriteBatch()
                for j in range(i, min(i + 1000, args.keys)):
                    k = key_of(j)
                    b.put(k, value_of(k))
                db.write(b, durable=False)
            db.flush(memtable=True)
        Compactor.open(args.url).run_once()
        return {}
    counted = InstrumentedStore(open_store(args.url))
    store = LatencyStore(counted, SystemClock(), latency)
    out: dict[str, float] = {}

    def requests() -> dict[str, int]:
        return dict(counted.snapshot().requests)

    def cost(before: dict[str, int], n: int, label: str, bytes_before: int | None = None) -> None:
        if bytes_before is not None:
            out[f"{label}_bytes_read_per_op"] = (counted.snapshot().bytes_read - bytes_before) / n
        after = requests()
        d = {k: after[k] - before.get(k, 0) for k in after}
        total = sum(d.values())
        out[f"{label}_requests_per_op"] = total / n
        dollars = sum(d[k] for k in PUT_KINDS) * PUT_PRICE + sum(d[k] for k in GET_KINDS) * GET_PRICE
        out[f"{label}_dollars_per_million"] = dollars / n * 1e6

    def lat(label: str, xs: list[float]) -> None:
        xs = sorted(xs)
        p50 = xs[len(xs) // 2]
        out[f"{label}_p50_ms"] = p50 * 1000
        out[f"{label}_p99_ms"] = xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000
        if latency:
            out[f"{label}_p50_round_trips"] = p50 / latency

    w = args.child
    if w.startswith("puts_"):
        threads = int(w.split("_")[1])
        db = Db.open(store=store, settings=quiet)
        lats: list[list[float]] = [[] for _ in range(threads)]
        start = threading.Barrier(threads + 1)
        stop_at = [0.0]

        def writer(t: int) -> None:
            mine = lats[t]
            n = 0
            start.wait()
            while time.perf_counter() < stop_at[0]:
                k = b"w%03d-%011d" % (t, n)
                t0 = time.perf_counter()
                db.put(k, value_of(k))
                mine.append(time.perf_counter() - t0)
                n += 1

        ts = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        before = requests()
        t0 = time.perf_counter()
        stop_at[0] = t0 + args.put_seconds
        start.wait()
        for t in ts:
            t.join()
        secs = time.perf_counter() - t0
        flat = [x for xs in lats for x in xs]
        out["puts_per_s"] = len(flat) / secs
        lat("put", flat)
        cost(before, len(flat), "put")
        if threads == 1 and args.floor_pairs:
            floor_pairs(db, store, args.floor_pairs, latency, out)
        db.close()
        return out
    present = [key_of(i) for i in rng.sample(range(args.keys), max(args.gets, args.scans, 1000))]
    before = requests()
    t0 = time.perf_counter()
    db = Db.open(store=store, settings=quiet)
    if w == "open":
        out["open_s"] = time.perf_counter() - t0
        out["open_requests"] = sum(requests().values()) - sum(before.values())
        out["open_round_trips"] = out["open_s"] / latency if latency else 0.0
    elif w == "gets":
        for phase in ("cold", "warm"):
            keys = present[: args.gets]
            xs = []
            before = requests()
            bytes_before = counted.snapshot().bytes_read
            t1 = time.perf_counter()
            for k in keys:
                t2 = time.perf_counter()
                v = db.get(k)
                xs.append(time.perf_counter() - t2)
                assert v == value_of(k), k
            out[f"{phase}_gets_per_s"] = len(keys) / (time.perf_counter() - t1)
            lat(f"{phase}_get", xs)
            cost(before, len(keys), f"{phase}_get", bytes_before)
    elif w == "scans":
        before = requests()
        t1 = time.perf_counter()
        for k in present[: args.scans]:
            rows = list(db.scan(k, limit=100))
            assert rows[0] == (k, value_of(k)), k
        out["cold_scans_per_s"] = args.scans / (time.perf_counter() - t1)
        time.sleep(3 * latency)  # read-ahead GETs still on the wire count too
        cost(before, args.scans, "cold_scan")
    elif w == "get_many":
        keys = present[:1000]
        before = requests()
        t1 = time.perf_counter()
        got = db.get_many(keys)
        secs = time.perf_counter() - t1
        assert got == [value_of(k) for k in keys]
        out["get_many_1000_s"] = secs
        out["get_many_1000_round_trips"] = secs / latency if latency else 0.0
        out["get_many_1000_requests"] = sum(requests().values()) - sum(before.values())
    elif w.startswith("long_scan"):
        reverse = w.endswith("_reverse")
        before = requests()
        t1 = time.perf_counter()
        got = list(db.scan(limit=args.long_scan_rows, reverse=reverse))  # checked after the clock stops
        secs = time.perf_counter() - t1
        n = len(got)
        assert n == min(args.long_scan_rows, args.keys), n
        keys = [k for k, _ in got]
        assert keys == sorted(keys, reverse=reverse) and len(set(keys)) == n
        assert all(v == value_of(k) for k, v in got[:: max(1, n // 1000)])
        out["long_scan_rows_per_s"] = n / secs
        out["long_scan_s"] = secs
        out["long_scan_round_trips"] = secs / latency if latency else 0.0
        time.sleep(3 * latency)  # read-ahead GETs still on the wire when the scan ended count too
        out["long_scan_requests"] = sum(requests().values()) - sum(before.values())
    db.close()
    return out


def floor_pairs(db: Any, store: Any, n: int, latency: float, out: dict[str, float]) -> None:
    """The rig's floor beside one writer's durable put: ``n`` pairs, interleaved, of a
    bare create-if-absent PUT of an object the size of the database's last WAL object
    through the same ``LatencyStore`` and server, and a durable ``db.put``.

    What the put costs above the bare PUT is the engine's (and what any engine
    making one PUT per durable write pays at least is the floor), so round trips
    read against the nominal delay and against the measured PUT both."""
    last = max(store.list("wal/"), key=lambda m: m.path)
    blob = os.urandom(last.size)
    bare: list[float] = []
    puts: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        store.put(f"floor/{i:020d}", blob, create=True)
        bare.append(time.perf_counter() - t0)
        k = b"f%015d" % i
        t0 = time.perf_counter()
        db.put(k, value_of(k))
        puts.append(time.perf_counter() - t0)
    floor = statistics.median(bare)
    paired = statistics.median(puts)
    out["floor_put_bytes"] = float(last.size)
    out["floor_put_p50_ms"] = floor * 1000
    out["paired_put_p50_ms"] = paired * 1000
    out["put_over_floor_ms"] = (paired - floor) * 1000
    if latency:
        out["floor_put_round_trips"] = floor / latency
        out["paired_put_round_trips"] = paired / latency
    out["paired_put_over_floor"] = paired / floor


# ----------------------------------------------------------------- the parent side


def run_child(src: Path, workload: str, url: str, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        workload,
        "--url",
        url,
        "--latency-ms",
        str(args.latency_ms),
        "--keys",
        str(args.keys),
        "--gets",
        str(args.gets),
        "--scans",
        str(args.scans),
        "--put-seconds",
        str(args.put_seconds),
        "--seed",
        str(args.seed),
        "--wal-max-in-flight",
        str(args.wal_max_in_flight),
        "--long-scan-rows",
        str(args.long_scan_rows),
        "--floor-pairs",
        str(args.floor_pairs),
    ]
    for kv in args.set:
        cmd += ["--set", kv]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{workload} ({src}) failed:\n{res.stderr[-4000:]}")
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def export_tree(rev: str, into: Path) -> Path:
    """``src`` of git revision ``rev``, unpacked under ``into``."""
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=HERE, capture_output=True, text=True, check=True
    ).stdout.strip()
    arch = subprocess.run(["git", "archive", rev, "src"], cwd=top, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=arch, check=True)
    return into / "src"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=None, help="git revision to run beside this tree")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--gets", type=int, default=200)
    ap.add_argument("--scans", type=int, default=100)
    ap.add_argument("--put-seconds", type=float, default=3.0)
    ap.add_argument("--only", default=None, help="regex: run only the workloads it matches")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--wal-max-in-flight",
        type=int,
        default=0,
        help="Settings.wal_max_in_flight for trees that have it (0: the tree's default, 1 since the review)",
    )
    ap.add_argument("--long-scan-rows", type=int, default=50_000)
    ap.add_argument(
        "--floor-pairs",
        type=int,
        default=100,
        help="puts_1: pairs of (bare PUT of a WAL-object-sized object, durable put), interleaved (0: none)",
    )
    ap.add_argument(
        "--server",
        choices=("moto", "local"),
        default="moto",
        help="local: a local directory under the same LatencyStore (requests overlap fully; no server cost)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="an integer Settings field for trees that have it (repeatable), e.g. scan_warm_sst_max_bytes=0",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    print(f"seed={args.seed}", flush=True)
    from engines import MotoServer

    tmp = Path(tempfile.mkdtemp(prefix="shaledb-s3-profile-"))
    trees: dict[str, Path] = {}
    if args.baseline:
        trees["base"] = export_tree(args.baseline, tmp)
    trees["this"] = HERE.parent / "src"
    names = [w for w in workloads() if args.only is None or re.search(args.only, w)]
    moto = MotoServer("s3-profile") if args.server == "moto" else None
    base_url = f"s3://{moto.bucket}" if moto is not None else f"file://{tmp}/db"
    runs: dict[str, dict[str, list[dict[str, float]]]] = {t: {} for t in trees}
    try:
        loaded: dict[str, str] = {}
        for t, src in trees.items():
            loaded[t] = f"{base_url}/{t}-loaded"
            if any(not w.startswith("puts_") for w in names):
                run_child(src, "load", loaded[t], args)
        for r in range(args.repeat):
            for w in names:
                for t, src in trees.items():  # interleaved: the machine's load hits both alike
                    url = f"{base_url}/{t}-{w}-{r}" if w.startswith("puts_") else loaded[t]
                    res = run_child(src, w, url, args)
                    runs[t].setdefault(w, []).append(res)
                    print(
                        f"repeat {r} {t} {w}: {json.dumps({k: round(v, 3) for k, v in res.items()})}",
                        flush=True,
                    )
    finally:
        if moto is not None:
            moto.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med: dict[str, dict[str, float]] = {}
    for t, by_w in runs.items():
        for w, rs in by_w.items():
            for k in rs[0]:
                med.setdefault(t, {})[f"{w}.{k}"] = round(statistics.median(x[k] for x in rs), 3)
    report: dict[str, object] = {
        "latency_ms": args.latency_ms,
        "server": args.server,
        "keys": args.keys,
        "repeat": args.repeat,
        "baseline": args.baseline,
        "median": med,
    }
    if "base" in med:

        def ratio(k: str) -> float:
            return round(med["this"][k] / med["base"][k], 2) if med["base"][k] else 0.0

        report["ratio_this_over_base"] = {k: ratio(k) for k in med["this"]}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

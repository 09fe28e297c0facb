#!/usr/bin/env python3
"""Maintenance work on S3 that touches many objects: GC deletes, backup, verify.

    .venv/bin/python bench/maintenance_s3.py [--objects 3000] [--ssts 300] [--repeat 3]

On a moto S3 server on loopback (started here):

* gc: a small database plus ``--objects`` orphaned SSTs (unreferenced, a day
  old: garbage); one GC pass deletes them, timed, with the store's requests
  counted; once with bulk deletes (``ObjectStore.delete_many``, S3
  DeleteObjects: up to 1,000 objects a request) and once through a wrapper that
  deletes one object per request, as the collector did before.
* backup, verify: a database of ``--ssts`` L0 SSTs is backed up (a GET and a
  PUT per object) to a new prefix and verified deeply (every object read and
  decoded), with 1 worker and with 8 (``workers=``). moto answers on loopback
  in about a millisecond of its own CPU, far below S3's round trips, so these
  two also run with ``--latency-ms`` (default 20) added before every request
  (``LatencyStore``): the waiting that workers overlap on real S3.

Each pair alternates, best of ``--repeat``. Loopback round trips are far
shorter than real S3's, so the time saved here is a lower bound; the request
counts are what S3 bills.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from engines import MotoServer
from shaledb import Db, GarbageCollector, GcOptions, Settings
from shaledb.admin.verify import verify
from shaledb.clock import SystemClock
from shaledb.format import paths
from shaledb.journal.backup import backup_version
from shaledb.manifest import ManifestStore
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.store.wrappers import InstrumentedStore, LatencyStore


class OneByOne(StoreWrapper):
    """Deletes one object per request (the collector's behaviour before bulk deletes)."""

    def delete_many(self, names: Sequence[str]) -> None:
        for name in names:
            self.inner.delete(name)


def plant_orphans(store: ObjectStore, n: int, rng: random.Random) -> None:
    day_ago = time.time() - 86_400
    names = [paths.sst_path(paths.new_ulid(day_ago, rng)) for _ in range(n)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda name: store.put(name, b"orphan"), names))


def one_pass(url: str, n: int, bulk: bool, rng: random.Random) -> dict[str, float]:
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v" * 100, durable=False)
        db.flush(memtable=True)
    base = open_store(url)
    plant_orphans(base, n, rng)
    counted = InstrumentedStore(base)
    t = time.perf_counter()
    gc_store = counted if bulk else OneByOne(counted)
    report = GarbageCollector.open(store=gc_store, options=GcOptions(min_age_s=0)).run_once()
    seconds = time.perf_counter() - t
    requests = counted.snapshot().requests
    assert report.counts()["sst"] == n, report.counts()
    assert not any(True for _ in base.list(paths.SST_DIR) if _.size == len(b"orphan"))
    return {
        "seconds": seconds,
        "delete_requests": requests["delete"] + requests["delete_many"],
        "objects_deleted": report.total,
    }


def many_ssts(url: str, n: int) -> None:
    quiet = Settings(compactor=None, garbage_collector=None, l0_max_ssts=n + 10)
    with Db.open(url, settings=quiet) as db:
        for i in range(n):
            for j in range(20):
                db.put(b"k%06d" % (i * 20 + j), b"v" * 200, durable=False)
            db.flush(memtable=True)


def backup_and_verify(src: str, dest: str, workers: int, latency_s: float) -> tuple[float, float]:
    """Seconds for a full backup (GET + PUT per object) and a deep verify of ``src``."""
    clock = SystemClock()

    def slow(url: str) -> ObjectStore:
        return LatencyStore(open_store(url), clock, latency_s) if latency_s else open_store(url)

    source, target = slow(src), slow(dest)
    m = ManifestStore(source, clock, random.Random(1), author="bench").require_latest()
    t = time.perf_counter()
    rep = backup_version(
        m, source, lambda _db: source, target, clock=clock, rng=random.Random(2), workers=workers
    )
    backup_s = time.perf_counter() - t
    assert rep.copied == rep.objects and rep.manifest_written
    t = time.perf_counter()
    report = verify(store=source, workers=workers)
    verify_s = time.perf_counter() - t
    assert report.ok and report.ssts >= 1, report.problems
    return backup_s, verify_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=3000)
    ap.add_argument("--ssts", type=int, default=300)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    print(f"seed={args.seed}")
    rng = random.Random(args.seed)
    moto = MotoServer()
    try:
        runs: dict[str, list[dict[str, float]]] = {"bulk": [], "one_by_one": []}
        for r in range(args.repeat):
            for mode in ("bulk", "one_by_one"):  # alternate, so the machine's load hits both alike
                url = f"s3://{moto.bucket}/gc-{mode}-{r}"
                runs[mode].append(one_pass(url, args.objects, mode == "bulk", rng))
        src = f"s3://{moto.bucket}/source"
        many_ssts(src, args.ssts)
        io: dict[str, list[float]] = {}
        for r in range(args.repeat):
            for latency in (0.0, args.latency_ms / 1000):
                for w in (1, 8):
                    label = f"{'latency' if latency else 'loopback'}_workers_{w}"
                    dest = f"s3://{moto.bucket}/backup-{label}-{r}"
                    backup_s, verify_s = backup_and_verify(src, dest, w, latency)
                    io.setdefault(f"backup_{label}", []).append(backup_s)
                    io.setdefault(f"verify_{label}", []).append(verify_s)
    finally:
        moto.stop()
    out = {
        mode: {
            "best_seconds": round(min(x["seconds"] for x in rs), 3),
            "delete_requests": rs[0]["delete_requests"],
            "objects_deleted": rs[0]["objects_deleted"],
        }
        for mode, rs in runs.items()
    }
    print(
        json.dumps(
            {
                "objects": args.objects,
                "ssts": args.ssts,
                "latency_ms": args.latency_ms,
                "gc": out,
                "best_seconds": {k: round(min(v), 3) for k, v in io.items()},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

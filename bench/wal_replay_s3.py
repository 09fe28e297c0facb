#!/usr/bin/env python3
"""Replaying many WAL objects on S3: one GET at a time, or ``wal_read_ahead`` at a time.

    .venv/bin/python bench/wal_replay_s3.py [--objects 300] [--latency-ms 20] [--repeat 3]

On a moto S3 server on loopback (started here), after a bulk load of 20,000
keys in 8 SSTs, a writer makes ``--objects`` WAL objects (durable batches of 20 puts, 100-byte values), takes a checkpoint
and crashes, so nothing reaches L0. Then, each with ``wal_read_ahead`` 1 (one
GET per object, as before) and 16 (the default), alternating, best of
``--repeat``:

* open: ``Db.open`` after the crash (it replays every object; the writer is
  crashed again after, so the next open finds the same WAL);
* reader: ``DbReader.open`` of the checkpoint (it replays them too);
* read part: ``export.read_part`` of a one-part plan of the checkpoint, what
  each task of a Spark checkpoint read does (``export.WAL_READ_AHEAD`` is set
  for the run; it has no option).

Then, with 16 ahead, a four-part read of the checkpoint as a Spark read does it
(``plan_read``, then ``read_part`` of each part, one after the other): each
part reading the WAL itself, against the plan reading it once and handing
each part its entries (``inline_wal_bytes``).

Loopback answers in about a millisecond, far below S3's round trips, so each
runs again with ``--latency-ms`` added before every request
(``LatencyStore``), the waiting that read-ahead overlaps on real S3.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from collections.abc import Callable

from engines import MotoServer
from shaledb import Db, DbReader, Settings, WriteBatch
from shaledb.bulk import read as export
from shaledb.bulk.ingest import ingest_columns
from shaledb.clock import SystemClock
from shaledb.settings import DbReaderOptions
from shaledb.store import ObjectStore, open_store
from shaledb.store.wrappers import LatencyStore
from shaledb.testing import FaultInjectingStore

WRITER = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


def crash(db: Db, faults: FaultInjectingStore) -> None:
    faults.crash()
    try:
        db.close()
    except BaseException:  # the crash is the point: closing joins its threads
        pass


def make_wal(url: str, objects: int, rng: random.Random) -> str:
    """A bulk-loaded run of 8 SSTs, then ``objects`` WAL objects after it and a checkpoint of
    them; returns the checkpoint's id."""
    keys = sorted({b"k%06d" % i for i in rng.sample(range(10**6), 20_000)})
    ingest_columns(url, keys, [bytes(100)] * len(keys), max_sst_size_bytes=300_000)
    faults = FaultInjectingStore(open_store(url), seed=rng.randrange(2**32))
    db = Db.open(store=faults, settings=WRITER)
    for i in range(objects):
        b = WriteBatch()
        for _ in range(20):
            b.put(b"k%06d" % rng.randrange(objects * 20), b"v%05d" % i + bytes(94))
        db.write(b)
    cp = db.create_checkpoint(lifetime=None)
    crash(db, faults)
    return str(cp.id)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=300)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    print(f"seed={args.seed}")
    logging.getLogger("shaledb").setLevel(logging.CRITICAL)  # each crash logs its failed flush
    rng = random.Random(args.seed)
    clock = SystemClock()
    moto = MotoServer()
    times: dict[str, list[float]] = {}
    try:
        url = f"s3://{moto.bucket}/wal-{args.objects}"
        cp = make_wal(url, args.objects, rng)
        plan = export.plan_read(url, checkpoint=cp, partitions=1)
        (part,) = plan.parts
        for _ in range(args.repeat):
            for latency in (0.0, args.latency_ms / 1000):
                for ahead in (1, 16):
                    label = f"{'latency' if latency else 'loopback'}_read_ahead_{ahead}"

                    def store(latency: float = latency) -> ObjectStore:
                        base = open_store(url)
                        return LatencyStore(base, clock, latency) if latency else base

                    def reopen(ahead: int = ahead) -> None:
                        faults = FaultInjectingStore(store(), seed=1)
                        quiet = Settings(compactor=None, garbage_collector=None, wal_read_ahead=ahead)
                        db = Db.open(store=faults, settings=quiet)
                        assert db.get(b"never written") is None
                        crash(db, faults)

                    def reader(ahead: int = ahead) -> None:
                        opts = DbReaderOptions(background_poll=False, wal_read_ahead=ahead)
                        DbReader.open(checkpoint=cp, store=store(), options=opts).close()

                    def read_part(ahead: int = ahead) -> None:
                        export.WAL_READ_AHEAD = ahead
                        rows = sum(len(c[0]) for c in export.read_part(part, store=store()))
                        assert rows > 0

                    for name, fn in (("open", reopen), ("reader", reader), ("read_part", read_part)):
                        times.setdefault(f"{name}_{label}", []).append(timed(fn))
                for inline in (0, export.DEFAULT_INLINE_WAL_BYTES):
                    label = f"{'latency' if latency else 'loopback'}_{'plan_reads_wal' if inline else 'parts_read_wal'}"

                    def four_parts(inline: int = inline, latency: float = latency) -> None:
                        base = open_store(url)
                        st = LatencyStore(base, clock, latency) if latency else base
                        export.WAL_READ_AHEAD = 16
                        p4 = export.plan_read(store=st, checkpoint=cp, partitions=4, inline_wal_bytes=inline)
                        assert len(p4.parts) == 4
                        assert sum(len(c[0]) for p in p4.parts for c in export.read_part(p, store=st)) > 0

                    times.setdefault(f"four_parts_{label}", []).append(timed(four_parts))
    finally:
        moto.stop()
    print(
        json.dumps(
            {
                "objects": args.objects,
                "latency_ms": args.latency_ms,
                "wal_ids": len(part.wal_ids),
                "best_seconds": {k: round(min(v), 3) for k, v in sorted(times.items())},
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

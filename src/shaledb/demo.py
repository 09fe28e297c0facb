"""``make demo``: the main job, end to end on a real store.

Opens a database (a local directory by default, or the URL given), writes,
reads, scans, takes a snapshot, reopens and checks that everything
acknowledged survived, printing what happened and how long each step took.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

from . import Db, Settings, WriteBatch


def _step(name: str, t0: float) -> float:
    t = time.perf_counter()
    print(f"  {name:<48} {1000 * (t - t0):8.1f} ms")
    return t


def run(url: str, n: int) -> None:
    print(f"shaledb demo on {url}")
    rng = random.Random(7)
    keys = [b"user:%08d" % i for i in range(n)]
    rng.shuffle(keys)
    t = time.perf_counter()
    settings = Settings(flush_interval_s=0.01)
    with Db.open(url, settings=settings) as db:
        t = _step("open (claim writer epoch, fence, replay)", t)
        for i in range(0, n, 500):
            b = WriteBatch()
            for k in keys[i : i + 500]:
                b.put(k, b"value-of-" + k)
            db.write(b, durable=False)
        db.flush()
        t = _step(f"write {n} keys in batches of 500, then flush", t)
        db.put(b"user:special", b"durable single put")
        db.delete(keys[0])
        t = _step("one durable put and one durable delete", t)
        assert db.get(keys[1]) == b"value-of-" + keys[1]
        assert db.get(keys[0]) is None
        t = _step("point reads", t)
        first = list(db.scan(prefix=b"user:0000", limit=5))
        t = _step("prefix scan (5 keys)", t)
        print("    first keys:", ", ".join(k.decode() for k, _ in first))
        with db.snapshot() as snap:
            db.put(keys[1], b"changed", durable=False)
            assert snap.get(keys[1]) == b"value-of-" + keys[1]
            assert db.get(keys[1]) == b"changed"
        t = _step("snapshot isolation check", t)
        db.flush(memtable=True)
        t = _step("flush memtable to an L0 SST", t)
        stats = db.stats()
    t = _step("close", t)
    with Db.open(url, settings=settings) as db:
        t = _step("reopen", t)
        count = sum(1 for _ in db.scan(prefix=b"user:"))
        t = _step("full scan after reopen", t)
        assert count == n, (count, n)  # n keys, minus one deleted, plus user:special
        assert db.get(keys[1]) == b"changed"
        assert db.get(b"user:special") == b"durable single put"
        print(f"    {count} live keys; writer epoch {db.epoch}; manifest {db.manifest.id}")
    print(f"  memtable flushes and WAL: next WAL id was {stats['next_wal_id']}, L0 SSTs {stats['l0_ssts']}")
    print("demo ok")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shaledb.demo", description=__doc__)
    p.add_argument("url", nargs="?", help="database URL (default: a fresh local directory)")
    p.add_argument("--keys", type=int, default=50_000)
    args = p.parse_args(argv)
    tmp = None
    url = args.url
    if url is None:
        tmp = tempfile.mkdtemp(prefix="shaledb-demo-")
        url = os.path.join(tmp, "db")
    try:
        run(url, args.keys)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

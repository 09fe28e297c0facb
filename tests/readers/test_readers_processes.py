"""Reader processes read while the writer writes, flushes, compacts and collects garbage.

The writer runs here with an embedded compactor and garbage collector tuned to
work all the time (tiny L0 SSTs, compaction at two L0s, GC every 0.2 s with a
0.5 s minimum age); two reader processes (``readers_worker.py``) check every
read as they go (see there) and report the final state, which must equal the
writer's. On the local-directory store and on the moto S3 server.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from readers_worker import GROUPS, KEYS_PER_GROUP, key

from shaledb import CompactorOptions, Db, GcOptions, Settings, WriteBatch, admin
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.testing.seeds import test_seed

WORKER = Path(__file__).with_name("readers_worker.py")
EMBEDDED_SERVICES = hasattr(Db, "update_manifest")  # compactor and GC run inside the writer
BUSY = Settings(
    flush_interval_s=0.01,
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,  # never stall the writer on L0 (the test must also run without a compactor)
    manifest_poll_interval_s=0.1,
    compactor=CompactorOptions(poll_interval_s=0.1, min_l0_ssts=2, max_sst_size_bytes=8192),
    garbage_collector=GcOptions(interval_s=0.2, min_age_s=0.5),
)


class CountingDeletes(StoreWrapper):
    """Counts the writer's deletes by directory: proof that GC ran while the readers read."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.deleted: Counter[str] = Counter()

    def delete(self, path: str) -> None:
        self.inner.delete(path)
        self.deleted[path.split("/", 1)[0]] += 1

    def delete_many(self, paths: Sequence[str]) -> None:
        self.inner.delete_many(paths)
        self.deleted.update(path.split("/", 1)[0] for path in paths)


def run_readers_against_writer(url: str, store_options: dict[str, Any], seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    store = CountingDeletes(open_store(url, **store_options))
    with Db.open(store=store, settings=BUSY) as db:
        if EMBEDDED_SERVICES:
            # The writer keeps replaced views pinned for a minute by default, which would protect
            # everything the readers read too. Shorten it so the GC deletes replaced SSTs within
            # the test: then only the readers' own checkpoints protect their views.
            db.pins.grace_s = 0.2
        version = 0
        state: dict[int, int] = {}
        for g in range(GROUPS):
            version += 1
            db.write(_group_batch(g, version))
            state[g] = version
        procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), url, json.dumps(store_options), str(seed + i)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        try:
            ready = time.monotonic() + 120  # both readers hold their checkpoints: they are reading
            while time.monotonic() < ready and all(p.poll() is None for p in procs):
                cps = admin.list_checkpoints(url, store_options=store_options or None)
                if sum(dict(c.metadata).get("role") == "reader" for c in cps) >= len(procs):
                    break
                time.sleep(0.05)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                g = rng.randrange(GROUPS)
                version += 1
                db.write(_group_batch(g, version), durable=rng.random() < 0.3)
                state[g] = version
                if rng.random() < 0.02:
                    db.flush(memtable=True)
            db.put(b"done", b"1")
            outs = [p.communicate(timeout=180) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        stats = db.stats()
    print("writer", stats, "deleted", dict(store.deleted))
    for out, err in outs:
        assert out.strip(), err
        report = json.loads(out.strip().splitlines()[-1])
        print("reader", {k: v for k, v in report.items() if k != "final"})
        assert report["errors"] == [], report["errors"]
        assert report["reads"] > 0 and report["scans"] > 0
        assert {int(g): v for g, v in report["final"].items()} == state
    if EMBEDDED_SERVICES:
        assert store.deleted["compacted"] > 0 and store.deleted["manifest"] > 0  # GC was at work


def _group_batch(g: int, version: int) -> WriteBatch:
    b = WriteBatch()
    for i in range(KEYS_PER_GROUP):
        k = key(g, i)
        b.put(k, k + b":%d" % version)
    return b


@pytest.mark.slow
def test_reader_processes_on_a_local_directory(tmp_path: Path) -> None:
    run_readers_against_writer(str(tmp_path / "db"), {}, 4.0, test_seed())


@pytest.mark.slow
def test_reader_processes_on_s3(s3_url_factory: Any) -> None:
    loc = s3_url_factory()
    run_readers_against_writer(loc.url, loc.options, 4.0, test_seed())

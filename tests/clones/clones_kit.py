"""Helpers of the clone and destroy tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from shaledb import Settings
from shaledb.engine.cache import LruCache
from shaledb.engine.parents import ExternalStores, default_factory
from shaledb.engine.sstable import TableCache
from shaledb.format.paths import new_ulid, sst_path
from shaledb.format.sst import SST_TABLE, SstBuilder
from shaledb.manifest.model import Manifest, SortedRun, SstInfo, Tree
from shaledb.manifest.store import ManifestStore
from shaledb.settings import RetryOptions
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing.clock import ManualClock

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
"""A writer without embedded background services: the test controls every manifest write."""


@contextmanager
def memory_urls(n: int) -> Iterator[list[str]]:
    """``n`` fresh memory:// database URLs, dropped afterwards."""
    names = [f"cl-{uuid.uuid4().hex}" for _ in range(n)]
    try:
        yield [f"memory://{name}" for name in names]
    finally:
        for name in names:
            drop_memory_store(name)


def manifest_store(url_or_store: str | ObjectStore) -> ManifestStore:
    store = open_store(url_or_store) if isinstance(url_or_store, str) else url_or_store
    return ManifestStore(store, ManualClock(), random.Random(0), author="test")


def latest(url: str) -> Manifest:
    return manifest_store(url).require_latest()


def all_objects(url: str) -> list[str]:
    return [m.path for m in open_store(url).list("")]


def clone_checkpoints(url: str) -> list:
    return [c for c in latest(url).checkpoints if dict(c.metadata).get("role") == "clone"]


def absorb_ancestors(url: str) -> None:
    """Stand-in for a compaction that rewrites every ancestor SST into the clone's own objects.

    All SSTs with ``db > 0`` (always older than the clone's own L0s) are
    merged, every version kept, into one own SST placed as the oldest
    sorted run.
    """
    store = open_store(url)
    ms = manifest_store(store)
    m = ms.require_latest()
    ext = ExternalStores(default_factory(RetryOptions(), ManualClock(), random.Random(0), None))
    tables = TableCache(lambda i: store if i == 0 else ext.store_for(i, m), LruCache(1 << 24), 1 << 20)
    rows = []
    for s in m.data.ssts():
        if s.db:
            rows.extend(tables.reader(s).all_rows())
    rows.sort(key=lambda r: (r[0], -r[1]))
    b = SstBuilder(kind=SST_TABLE, block_size=4096, codec=0, nonce=random.randbytes(16))
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    data, props = b.finish()
    sid = new_ulid(1.0, random.Random())
    store.put(sst_path(sid), data, create=True)
    info = SstInfo(
        sid, len(data), props.first_key, props.last_key, props.entries, props.min_seq, props.max_seq
    )

    def swap(cur: Manifest) -> Manifest:
        own_l0 = tuple(s for s in cur.data.l0 if s.db == 0)
        own_runs = tuple(r for r in cur.data.runs if all(s.db == 0 for s in r.ssts))
        run = SortedRun(cur.next_run_id, (info,))
        return replace(cur, data=Tree(own_l0, (*own_runs, run)), next_run_id=cur.next_run_id + 1)

    ms.update(swap, timeout_s=10)

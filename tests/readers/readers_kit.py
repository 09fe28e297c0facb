"""Helpers of these tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

from shaledb import Settings

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
"""A writer without embedded background services: the test controls every manifest write."""


def compact_everything(url: str) -> list[str]:
    """Stand-in for a compaction plus an eager GC: merge every SST into one sorted run, commit it,
    and delete the old SST objects at once. Returns the deleted paths."""
    import random
    from dataclasses import replace

    from shaledb.engine.cache import LruCache
    from shaledb.engine.sstable import TableCache
    from shaledb.format.paths import new_ulid, sst_path
    from shaledb.format.sst import SST_TABLE, SstBuilder
    from shaledb.manifest.model import Manifest, SortedRun, SstInfo, Tree
    from shaledb.manifest.store import ManifestStore
    from shaledb.store import open_store
    from shaledb.testing.clock import ManualClock

    store = open_store(url)
    ms = ManifestStore(store, ManualClock(), random.Random(0), author="test-compactor")
    m = ms.require_latest()
    tables = TableCache(lambda i: store, LruCache(1 << 24), 1 << 20)
    old = list(m.data.ssts())
    rows = [row for s in old for row in tables.reader(s).all_rows()]
    rows.sort(key=lambda r: (r[0], -r[1]))
    b = SstBuilder(kind=SST_TABLE, nonce=random.randbytes(16))
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    data, props = b.finish()
    sid = new_ulid(1.0, random.Random())
    store.put(sst_path(sid), data, create=True)
    info = SstInfo(
        sid, len(data), props.first_key, props.last_key, props.entries, props.min_seq, props.max_seq
    )
    gone = {s.id for s in old}

    def swap(cur: Manifest) -> Manifest:
        assert {s.id for s in cur.data.ssts()} == gone, "the writer flushed meanwhile"
        run = SortedRun(cur.next_run_id, (info,))
        return replace(cur, data=Tree((), (run,)), next_run_id=cur.next_run_id + 1)

    ms.update(swap, timeout_s=10)
    paths = [sst_path(s) for s in gone]
    for p in paths:
        store.delete(p)
    return paths

"""A user's script over the public API, type-checked (never run) by test_api_typing.py with
``mypy --strict --disallow-any-expr``: every ``assert_type`` is what a type checker must see,
and no expression may be ``Any``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import assert_type

import shaledb
import shaledb.admin
import shaledb.aio
import shaledb.dbm
from shaledb import (
    Change,
    ChangeFeed,
    Checkpoint,
    CompactionReport,
    Compactor,
    Cursor,
    Db,
    DbReader,
    DestroyStatus,
    GarbageCollector,
    GcReport,
    Head,
    MergeOperator,
    NotFound,
    ReaderSnapshot,
    Scan,
    Settings,
    Snapshot,
    Transaction,
    WriteBatch,
    WriteHandle,
)

URL = "memory://typing"
PATH = Path("typing-db")  # every entry point that takes a URL takes an os.PathLike too


def writer() -> None:
    with Db.open(URL, settings=Settings(compactor=None), store_options={"timeout": "5s"}) as db:
        assert_type(db, Db)
        assert_type(shaledb.open(URL), Db)
        assert_type(db.put(b"k", b"v", ttl=60), WriteHandle)
        assert_type(db.put(b"k", b"v").wait_durable(1.0), bool)
        assert_type(db.get(b"k"), bytes | None)
        assert_type(db.get(b"k", b"default"), bytes)
        assert_type(db[b"k"], bytes)
        assert_type(db.get_many([b"k", bytearray(b"j")]), list[bytes | None])
        assert_type(db.head(b"k"), Head | None)
        with db.scan(b"a", b"z", limit=10) as rows:
            assert_type(rows, Scan[tuple[bytes, bytes]])
            for key, value in rows:
                assert_type(key, bytes)
                assert_type(value, bytes)
        assert_type(db.keys(prefix=b"k"), Iterator[bytes])
        assert_type(db.values(), Iterator[bytes])
        assert_type(db.items(reverse=True), Iterator[tuple[bytes, bytes]])
        assert_type(iter(db), Iterator[bytes])
        assert_type(db.scan_heads(), Scan[tuple[bytes, Head]])
        assert_type(db.fold_keys(), Scan[bytes])
        assert_type(db.index_query("tag", b"a"), list[bytes])
        assert_type(db.index_query("tag", b"a", return_terms=True), list[tuple[bytes, bytes]])
        assert_type(db.fold_objects(), Scan[tuple[bytes, bytes]])
        assert_type(db.fold_objects(order="sqn"), Scan[tuple[int, bytes, bytes]])
        with db.snapshot() as snap:
            assert_type(snap, Snapshot)
            assert_type(snap.get(b"k", b""), bytes)
            assert_type(snap.seq, int)
        batch = WriteBatch().put(b"a", b"1").delete(b"b").delete_range(b"c", b"d")
        assert_type(batch, WriteBatch)
        assert_type(db.write(batch, durable=False), WriteHandle)
        with db.batch() as b:
            assert_type(b, WriteBatch)
        with db.transaction() as txn:
            assert_type(txn, Transaction)
            assert_type(txn.get(b"k"), bytes | None)
            assert_type(txn.get(b"k", b""), bytes)
            assert_type(txn.get(b"k", 0), bytes | int)
            assert_type(txn.commit(), WriteHandle)
        assert_type(db.merge(b"n", b"\x01"), WriteHandle)
        assert_type(db.create_checkpoint(), Checkpoint)
        assert_type(db.stats(), dict[str, int])
        with db.changes(since="latest", follow=False) as feed:
            assert_type(feed, ChangeFeed)
            assert_type(feed.cursor, Cursor)
            for change in feed:
                assert_type(change, Change)
                assert_type(change.value, bytes | None)
            assert_type(feed.read(10), list[Change])
            assert_type(Cursor.parse(str(feed.cursor)), Cursor)


def reader() -> None:
    with DbReader.open(URL) as r:
        assert_type(r, DbReader)
        assert_type(r.get(b"k"), bytes | None)
        assert_type(r.get(b"k", b""), bytes)
        assert_type(r.seq, int)
        assert_type(r.checkpoint, Checkpoint | None)
        with r.snapshot() as rs:
            assert_type(rs, ReaderSnapshot)
            assert_type(rs.index_query("tag"), list[bytes])


def roles() -> None:
    assert_type(Db.open(PATH), Db)
    assert_type(DbReader.open(PATH), DbReader)
    assert_type(Compactor.open(PATH), Compactor)
    assert_type(GarbageCollector.open(PATH), GarbageCollector)
    assert_type(shaledb.admin.create_checkpoint(PATH), Checkpoint)
    assert_type(shaledb.admin.read_manifest(PATH).id, int)
    assert_type(shaledb.dbm.open(PATH), shaledb.dbm.ShaleDbm)
    with Compactor.open(URL) as c:
        assert_type(c, Compactor)
        assert_type(c.run_once(), CompactionReport)
    with GarbageCollector.open(URL) as gc:
        assert_type(gc, GarbageCollector)
        assert_type(gc.run_once(dry_run=True), GcReport)
    cp = shaledb.admin.create_checkpoint(URL, lifetime="1h")
    assert_type(cp, Checkpoint)
    assert_type(shaledb.admin.list_checkpoints(URL), list[Checkpoint])
    assert_type(shaledb.admin.delete_checkpoint(URL, cp.id), bool)
    status = shaledb.admin.collect_lifecycle(URL)
    assert_type(status, DestroyStatus)
    assert_type(status.state, str)
    assert_type(MergeOperator("mine", lambda key, old, ops: b"".join(ops)), MergeOperator)
    try:
        shaledb.admin.read_manifest(URL)
    except NotFound as exc:
        assert_type(exc, NotFound)


def dbm() -> None:
    with shaledb.dbm.open(URL, "c", store_options={"timeout": "5s"}) as d:
        assert_type(d, shaledb.dbm.ShaleDbm)
        assert_type(d[b"k"], bytes)
        assert_type(d.get(b"k"), bytes | None)
        assert_type(d.get("k", b""), bytes)
        assert_type(d.get(b"k", 0), bytes | int)
        assert_type(d.keys(), list[bytes])
        assert_type(d.handle, Db | DbReader)


async def aio() -> None:
    async with await shaledb.aio.Db.open(URL) as db:
        assert_type(db, shaledb.aio.Db)
        assert_type(await db.get(b"k"), bytes | None)
        assert_type(await db.get(b"k", b""), bytes)
        assert_type(await db.get(b"k", 0), bytes | int)
        assert_type(await db.get_many([b"k"]), list[bytes | None])
        assert_type(await db.put(b"k", b"v"), WriteHandle)
        async for key, value in db.scan(prefix=b"k"):
            assert_type(key, bytes)
            assert_type(value, bytes)
        async with db.snapshot() as snap:
            assert_type(snap, shaledb.aio.Snapshot)
            assert_type(await snap.get(b"k"), bytes | None)
            assert_type(await snap.get(b"k", b""), bytes)
        async for change in db.changes(follow=False):
            assert_type(change, Change)
    assert_type(await shaledb.aio.Db.open(PATH), shaledb.aio.Db)
    assert_type(await shaledb.aio.DbReader.open(PATH), shaledb.aio.DbReader)
    async with shaledb.aio.Db.open(PATH) as opened:  # without the await: closed on exit
        assert_type(opened, shaledb.aio.Db)
    async with shaledb.aio.DbReader.open(PATH) as opened_reader:
        assert_type(opened_reader, shaledb.aio.DbReader)
    async with await shaledb.aio.DbReader.open(URL) as r:
        assert_type(r, shaledb.aio.DbReader)
        assert_type(await r.get(b"k"), bytes | None)
        assert_type(await r.get(b"k", b""), bytes)


def operations() -> None:
    from prometheus_client import REGISTRY
    from prometheus_client.metrics_core import Metric

    from shaledb.store.metrics import PrometheusCollector

    settings = Settings(compactor=shaledb.CompactorOptions(), garbage_collector=shaledb.GcOptions())
    assert_type(settings.flush_interval_s, float)
    with Db.open(URL, settings=settings) as db:
        assert_type(db.metrics(), dict[str, object])
        collector = PrometheusCollector(db, labels={"db": "orders"})
        assert_type(collector, PrometheusCollector)
        assert_type(list(collector.collect()), list[Metric])
        REGISTRY.register(collector)  # as docs/service.md does

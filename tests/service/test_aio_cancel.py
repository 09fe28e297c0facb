"""A cancelled step of an async scan or change feed loses nothing, and closing after it is clean.

A step's fetch runs on the executor; cancelling the await (``asyncio.wait_for`` timing
out, a cancelled task) used to drop the fetched chunk while the underlying iterator had
moved past it, so iteration went on silently skipping 256 rows (a scan) or up to 1,000
changes (a feed).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shaledb import Settings, aio
from shaledb.store import open_store
from shaledb.store.wrappers import StoreWrapper

QUIET = Settings(compactor=None, garbage_collector=None)


async def _cancel_one_step(it: AsyncIterator[Any]) -> None:
    step = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0)  # the step's fetch is now on the executor
    step.cancel()
    try:
        await step
    except asyncio.CancelledError:
        pass
    await asyncio.sleep(0.05)


def test_a_cancelled_scan_step_skips_no_rows(mem_url: str) -> None:
    async def main() -> list[bytes]:
        async with await aio.Db.open(mem_url) as db:
            async with db.batch() as b:
                for i in range(1000):
                    b.put(b"k%05d" % i, b"v")
            scan = db.scan(prefix=b"k")
            await _cancel_one_step(scan)
            return [k async for k, _ in scan]

    keys = asyncio.run(main())
    assert keys == [b"k%05d" % i for i in range(1000)]


def test_a_cancelled_change_feed_step_skips_no_changes(mem_url: str) -> None:
    async def main() -> list[bytes]:
        async with await aio.Db.open(mem_url) as db:
            for j in range(4):
                async with db.batch() as b:
                    for i in range(500):
                        b.put(b"k%05d" % (j * 500 + i), b"v")
            async with db.changes(since=None, follow=False) as feed:
                await _cancel_one_step(feed)
                return [c.key async for c in feed]

    keys = asyncio.run(main())
    assert keys == [b"k%05d" % i for i in range(2000)]


def test_a_cancelled_close_still_closes(mem_url: str) -> None:
    async def main() -> tuple[bool, bool]:
        db = await aio.Db.open(mem_url, workers=1)
        reader = await aio.DbReader.open(mem_url, workers=1)
        await db.put(b"k", b"v")
        gate = threading.Event()
        busy = [h._executor.submit(gate.wait, 10) for h in (db, reader)]  # the one worker is busy
        closes = [asyncio.ensure_future(db.close()), asyncio.ensure_future(reader.close())]
        await asyncio.sleep(0)  # each close is queued behind it
        for c in closes:
            c.cancel()
        await asyncio.gather(*closes, return_exceptions=True)
        gate.set()
        await asyncio.gather(*busy)
        await db.close()  # closing again does nothing: it must not leave the handle open
        await reader.close()
        for _ in range(100):
            if db.sync.closed and reader.sync.closed:
                break
            await asyncio.sleep(0.05)
        return db.sync.closed, reader.sync.closed

    assert asyncio.run(main()) == (True, True)


class _GatedReads(StoreWrapper):
    """Reads of SSTs wait at ``gate`` while ``closed_gate`` is set (``entered`` says one does);
    while the class's ``every_read`` is set, every read of every such store waits at
    ``release_all`` (``entered_any`` says one does)."""

    every_read = False
    entered_any = threading.Event()
    release_all = threading.Event()

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.closed_gate = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def _wait(self, path: str) -> None:
        if _GatedReads.every_read:
            _GatedReads.entered_any.set()
            _GatedReads.release_all.wait(60)
        if self.closed_gate and path.endswith(".sst") and not path.startswith("wal/"):
            self.entered.set()
            self.gate.wait(60)

    def get(self, path: str) -> bytes:
        self._wait(path)
        return super().get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._wait(path)
        return super().get_range(path, start, end)

    def get_ranges(self, path: str, ranges: Any) -> list[bytes]:
        self._wait(path)
        return super().get_ranges(path, ranges)


@pytest.fixture(params=["memory", "s3"])
def raw_store(request: pytest.FixtureRequest, mem_url: str) -> Any:
    """A fresh empty store: memory, or a prefix on the moto S3 server."""
    if request.param == "memory":
        return open_store(mem_url)
    return request.getfixturevalue("s3_url_factory")().open()


def test_closing_a_scan_whose_cancelled_fetch_still_runs_keeps_the_cancellation(raw_store: Any) -> None:
    """``async with db.scan()`` cancelled while its fetch waits on the store (a timeout,
    Ctrl-C in ``asyncio.run``): the exit used to close the scan under the running fetch,
    raising ``ValueError: generator already executing`` in place of the cancellation."""
    store = _GatedReads(raw_store)

    async def main() -> tuple[str, bytes | None]:
        async with await aio.Db.open(store=store, settings=QUIET) as db:
            async with db.batch() as b:
                for i in range(1000):
                    b.put(b"k%05d" % i, b"v")
            await db.flush(memtable=True)  # the rows are in an SST: the scan reads the store

            async def consume() -> None:
                async with db.scan(prefix=b"k") as scan:
                    async for _ in scan:
                        pass

            store.closed_gate = True
            task = asyncio.ensure_future(consume())
            await asyncio.get_running_loop().run_in_executor(None, store.entered.wait, 60)
            task.cancel()  # the fetch is inside the store now
            try:
                await task
                outcome = "finished"
            except asyncio.CancelledError:
                outcome = "cancelled"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            store.closed_gate = False
            store.gate.set()
            return outcome, await db.get(b"k00999")

    assert asyncio.run(main()) == ("cancelled", b"v")


def test_a_cancelled_write_waiting_for_a_worker_is_still_applied(raw_store: Any) -> None:
    """Writes that run on the executor (ttl/metadata, every merge, any write under
    backpressure) cancelled while queued behind a busy worker: the docs promise a cancelled
    write is still applied; before, the queued call was cancelled and the write silently lost."""
    store = _GatedReads(raw_store)
    settings = Settings(merge_operator="add_u64", compactor=None, garbage_collector=None)
    one = (1).to_bytes(8, "little")

    async def main() -> list[bytes | None]:
        async with await aio.Db.open(store=store, settings=settings, workers=1) as db:
            await db.put(b"old", b"v")
            await db.flush(memtable=True)
            store.closed_gate = True
            busy = asyncio.ensure_future(db.get(b"old"))  # the one worker waits in the store
            await asyncio.get_running_loop().run_in_executor(None, store.entered.wait, 60)
            writes = [
                asyncio.ensure_future(db.put(b"ttl", b"1", ttl=3600)),
                asyncio.ensure_future(db.put(b"meta", b"1", metadata=b"m")),
                asyncio.ensure_future(db.merge(b"count", one)),
                asyncio.ensure_future(db.merge(b"count", one, durable=False)),
            ]
            await asyncio.sleep(0)  # each is queued behind the busy worker
            for w in writes:
                w.cancel()
            await asyncio.gather(*writes, return_exceptions=True)
            store.closed_gate = False
            store.gate.set()
            assert await busy == b"v"
            await db.flush()
            return await db.get_many([b"ttl", b"meta", b"count"])

    assert asyncio.run(main()) == [b"1", b"1", (2).to_bytes(8, "little")]


def test_a_cancelled_open_closes_the_writer_it_opens(mem_url: str, monkeypatch: Any) -> None:
    """``asyncio.wait_for(aio.Db.open(url), ...)`` timing out (or Ctrl-C) while the open
    waits on the store: the open goes on in its pool and closes what it opens. Before, the
    writer stayed open where nobody could reach it, and the database could not be opened
    again in this process ("already has a writer in this process")."""
    import shaledb.store.stack as stack
    from shaledb.errors import InvalidArgument

    def open_gated(url: str, **options: Any) -> Any:
        return _GatedReads(open_store(url, **options))

    monkeypatch.setattr(stack, "open_store", open_gated)

    async def main() -> bytes | None:
        async with await aio.Db.open(mem_url, settings=QUIET) as db:
            await db.put(b"k", b"v")
            await db.flush(memtable=True)
        _GatedReads.entered_any.clear()
        _GatedReads.release_all.clear()
        _GatedReads.every_read = True
        try:
            opening = asyncio.ensure_future(aio.Db.open(mem_url, settings=QUIET))
            await asyncio.get_running_loop().run_in_executor(None, _GatedReads.entered_any.wait, 60)
            opening.cancel()
            try:
                await opening
                raise AssertionError("the open was not cancelled")
            except asyncio.CancelledError:
                pass
        finally:
            _GatedReads.every_read = False
            _GatedReads.release_all.set()
        for _ in range(1200):  # the abandoned open finishes and closes in the background
            try:
                db = await aio.Db.open(mem_url, settings=QUIET)
            except InvalidArgument as exc:
                assert "already has a writer in this process" in str(exc)
                await asyncio.sleep(0.05)
                continue
            async with db:
                return await db.get(b"k")
        raise AssertionError("the cancelled open left its writer open")

    assert asyncio.run(main()) == b"v"

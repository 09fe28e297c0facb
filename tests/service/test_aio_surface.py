"""The asyncio handles mirror the sync API where users reach for it: closing twice,
time-travel snapshots, ``async with`` over a change feed, and readable reprs."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime

import pytest

import shaledb
from shaledb import Settings, aio

QUIET = {"compactor": None, "garbage_collector": None}


def test_close_twice_is_a_no_op_for_db_and_reader(mem_url: str) -> None:
    async def main() -> tuple[str, str]:
        db = await aio.Db.open(mem_url, settings=Settings(**QUIET))  # type: ignore[arg-type]
        await db.put(b"k", b"v")
        await db.flush(memtable=True)
        reader = await aio.DbReader.open(mem_url)
        assert await reader.get(b"k") == b"v"
        assert "DbReader(" in repr(reader) and not reader.closed
        await reader.close()
        await reader.close()  # before: RuntimeError from the executor already shut down
        await db.close()
        await db.close()
        return repr(db), repr(reader)

    db_repr, reader_repr = asyncio.run(main())
    assert db_repr.startswith("aio.Db(") and db_repr.endswith(", closed)")
    assert reader_repr.startswith("aio.DbReader(") and reader_repr.endswith(", closed)")


def test_time_travel_snapshots_and_their_repr(mem_url: str) -> None:
    settings = Settings(history_retention_s=600, **QUIET)  # type: ignore[arg-type]

    async def main() -> None:
        async with await aio.Db.open(mem_url, settings=settings) as db:
            first = await db.put(b"k", b"1")
            await asyncio.sleep(0.01)
            between = datetime.now(UTC)
            await asyncio.sleep(0.01)
            await db.put(b"k", b"2")
            async with db.snapshot(at_seq=first.seq) as snap:
                assert await snap.get(b"k") == b"1"
                assert repr(snap) == f"aio.Snapshot(seq={first.seq})"
            assert repr(snap).endswith(", closed)")
            async with db.snapshot(at_time=between) as snap:
                assert await snap.get(b"k") == b"1"
            async with db.snapshot() as snap:
                assert await snap.get(b"k") == b"2"

    asyncio.run(main())


def test_changes_as_an_async_context_manager(mem_url: str) -> None:
    async def main() -> list[bytes]:
        async with await aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            for i in range(3):
                await db.put(b"k%d" % i, b"v")
            got = []
            async with db.changes(since=None, poll_interval_s=0.01) as feed:
                assert repr(feed).startswith("aio.ChangeFeed(") and "follow" in repr(feed)
                async for change in feed:
                    got.append(change.key)
                    if len(got) == 3:
                        break
            assert repr(feed).endswith(", closed)")
            async for _ in feed:  # closed: ends at once
                raise AssertionError("a closed feed yielded")
            return got

    assert asyncio.run(main()) == [b"k0", b"k1", b"k2"]


@pytest.mark.parametrize(
    ("sync", "async_"),
    [
        (shaledb.Db.snapshot, aio.Db.snapshot),
        (shaledb.DbReader.snapshot, aio.DbReader.snapshot),
        (shaledb.Db.changes, aio.Db.changes),
        (shaledb.DbReader.changes, aio.DbReader.changes),
        (shaledb.Db.get, aio.Db.get),
        (shaledb.DbReader.get, aio.DbReader.get),
        (shaledb.Snapshot.get, aio.Snapshot.get),
    ],
)
def test_signatures_match_the_sync_api(sync: object, async_: object) -> None:
    assert list(inspect.signature(sync).parameters) == list(inspect.signature(async_).parameters)  # type: ignore[arg-type]


def test_get_takes_a_default_as_the_sync_get_does(mem_url: str) -> None:
    """``await r.get(b"k", b"d")`` raised TypeError: the async ``get`` had no default."""

    async def main() -> list[object]:
        got: list[object] = []
        async with await aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            await db.put(b"k", b"v")
            got += [await db.get(b"k", b"d"), await db.get(b"absent", b"d"), await db.get(b"absent")]
            async with db.snapshot() as snap:
                got += [await snap.get(b"k", 0), await snap.get(b"absent", 0)]
            await db.flush(memtable=True)
            async with await aio.DbReader.open(mem_url) as r:
                got += [await r.get(b"k", b""), await r.get(b"absent", b""), await r.get(b"absent")]
        return got

    assert asyncio.run(main()) == [b"v", b"d", None, b"v", 0, b"v", b"", None]


@pytest.mark.parametrize("where", ["memory", "s3"])
@pytest.mark.parametrize("how", ["aclose", "close the handle"])
def test_a_caught_up_follower_ends_at_once_when_closed(
    mem_url: str, how: str, where: str, request: pytest.FixtureRequest
) -> None:
    """A following ``async for`` over ``db.changes()`` that has caught up sleeps
    ``poll_interval_s``; before, it slept through ``aclose()`` and the handle's close, so the
    consumer hung for the whole interval (here a day) instead of ending."""

    store = None if where == "memory" else request.getfixturevalue("s3_url_factory")().open()
    url = mem_url if store is None else None

    async def main() -> str:
        db = await aio.Db.open(url, store=store, workers=1, settings=Settings(**QUIET))  # type: ignore[arg-type]
        await db.put(b"a", b"1")
        feed = db.changes(since=None, poll_interval_s=86_400)
        seen = asyncio.Event()

        async def consume() -> str:
            try:
                async for _ in feed:
                    seen.set()
            except shaledb.ClosedError:
                return "ClosedError"
            return "ended"

        task = asyncio.ensure_future(consume())
        await seen.wait()
        await db.get(b"a")  # the one worker ran the feed's next (empty) read before this
        for _ in range(20):
            await asyncio.sleep(0)  # the consumer is asleep, caught up
        if how == "aclose":
            await feed.aclose()
        else:
            await db.close()
        try:
            return await asyncio.wait_for(task, timeout=60)  # a guard: it ends at once
        finally:
            await db.close()

    assert asyncio.run(main()) == ("ended" if how == "aclose" else "ClosedError")


def test_tasks_sharing_one_scan_or_feed_get_each_row_once(mem_url: str) -> None:
    """Worker tasks consuming one ``db.scan()`` or one ``db.changes()`` (a fan-out): each
    step that awaited a shared fetch used to take the whole chunk, so rows and changes were
    handed out twice (1,200 of 600 from the feed)."""

    async def main() -> tuple[list[bytes], list[bytes]]:
        async with await aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            async with db.batch() as b:
                for i in range(600):
                    b.put(b"k%04d" % i, b"v")
            scan = db.scan()

            async def rows() -> list[bytes]:
                return [k async for k, _ in scan]

            async with db.changes(since=None, follow=False) as feed:

                async def changes() -> list[bytes]:
                    return [c.key async for c in feed]

                scanned = await asyncio.gather(*(rows() for _ in range(3)))
                fed = await asyncio.gather(*(changes() for _ in range(3)))
        return sorted(k for ks in scanned for k in ks), sorted(k for ks in fed for k in ks)

    scanned, fed = asyncio.run(main())
    everything = [b"k%04d" % i for i in range(600)]
    assert scanned == everything
    assert fed == everything


def test_open_is_an_async_context_manager_without_await(mem_url: str) -> None:
    """``async with aio.Db.open(url) as db`` -- the spelling aiohttp and aiosqlite users
    write -- opens the handle and closes it on exit, also on an exception. It used to raise
    ``TypeError: 'coroutine' object does not support the asynchronous context manager
    protocol``. ``await``, ``asyncio.wait_for`` and ``create_task`` still take the opener."""

    async def main() -> tuple[aio.Db, aio.DbReader, aio.Db]:
        async with aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            await db.put(b"k", b"v")
            async with aio.DbReader.open(mem_url) as reader:
                assert await reader.get(b"k") == b"v"
        with pytest.raises(KeyError):
            async with aio.Db.open(mem_url) as failed:
                raise KeyError("inside")
        again = await asyncio.wait_for(aio.Db.open(mem_url), timeout=30)
        assert await again.get(b"k") == b"v"
        await again.close()
        task = await asyncio.create_task(aio.Db.open(mem_url))
        await task.close()
        return db, reader, failed

    db, reader, failed = asyncio.run(main())
    assert db.closed and reader.closed and failed.closed


def test_an_async_batch_refuses_writes_after_its_block_committed_it(mem_url: str) -> None:
    """As the sync ``db.batch()``: a put after the block used to be lost without a word."""

    async def main() -> None:
        async with aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            async with db.batch() as b:
                b.put(b"k", b"v")
            with pytest.raises(shaledb.ClosedError, match="committed"):
                b.put(b"late", b"x")
            assert await db.get(b"k") == b"v" and await db.get(b"late") is None

    asyncio.run(main())


def test_docs_name_every_method_the_async_handles_lack() -> None:
    """docs/service.md lists what the sync handles have and the async ones do not (a service
    calling e.g. ``db.sync.create_checkpoint`` on the loop blocks it): the list is exact."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "service.md").read_text()
    bullet = text.split("**Not on the async handles either**", 1)[1].split("\n* ", 1)[0]
    bullet += text.split("**Transactions have no async face:**", 1)[1][:40]  # (transaction)
    listed = {name for name in re.findall(r"`(?:Db\.|db\.sync\.)?([a-z_]+)(?:\(\))?`", bullet)}
    lacking = {
        name
        for sync_cls, async_cls in ((shaledb.Db, aio.Db), (shaledb.DbReader, aio.DbReader))
        for name in set(dir(sync_cls)) - set(dir(async_cls))
        if not name.startswith("_") and not isinstance(inspect.getattr_static(sync_cls, name), property)
    }
    assert lacking <= listed, sorted(lacking - listed)


def test_wrapping_a_closed_handle_is_refused_and_starts_no_thread(mem_url: str) -> None:
    """A wrapper of a closed handle started a pool thread on its first call that stayed for
    the rest of the process (the handle's close hooks had run before the wrapper existed)."""
    import threading

    db = shaledb.Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None))
    db.close()
    reader_db = shaledb.Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None))
    reader = shaledb.DbReader.open(mem_url)
    reader.close()
    before = {t.name for t in threading.enumerate() if t.name.startswith("shaledb-aio")}
    with pytest.raises(shaledb.ClosedError, match="is closed: open the database again"):
        aio.Db(db)
    with pytest.raises(shaledb.ClosedError, match="is closed"):
        aio.DbReader(reader)
    after = {t.name for t in threading.enumerate() if t.name.startswith("shaledb-aio")}
    assert after == before
    reader_db.close()


def test_a_method_only_the_sync_handle_has_says_how_to_call_it(mem_url: str) -> None:
    """``await db.transaction()`` or ``db.create_checkpoint()`` on an async handle raised a bare
    "'Db' object has no attribute 'transaction'"; now the error says how to call it off the
    loop. Type checkers still flag the name (the hook is hidden from them)."""

    async def main() -> None:
        async with aio.Db.open(mem_url, settings=Settings(**QUIET)) as db:  # type: ignore[arg-type]
            with pytest.raises(AttributeError, match="no async face") as info:
                db.transaction()  # type: ignore[attr-defined]
            assert "asyncio.to_thread" in str(info.value) and "db.sync.transaction()" in str(info.value)
            with pytest.raises(AttributeError, match=r"asyncio.to_thread\(db.sync.create_checkpoint"):
                db.create_checkpoint  # type: ignore[attr-defined]  # noqa: B018
            with pytest.raises(AttributeError, match="'Db' object has no attribute 'nope'"):
                db.nope  # type: ignore[attr-defined]  # noqa: B018
            assert not hasattr(db, "transaction") and getattr(db, "_nope", None) is None
            assert await db.get(b"k") is None  # (attributes it has are untouched)

    asyncio.run(main())

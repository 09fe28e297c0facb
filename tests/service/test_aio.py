"""shaledb.aio (issue 32 item 1): the event loop never blocks on durability or store round
trips, concurrent awaits share group commits, and the async API behaves as the sync one."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from shaledb import ClosedError, Db, Settings, WriteBatch, aio
from shaledb.clock import SYSTEM_CLOCK
from shaledb.store import InstrumentedStore, LatencyStore
from shaledb.testing.seeds import test_seed

QUIET = Settings(compactor=None, garbage_collector=None)


async def _heartbeat(stop: asyncio.Event, lags: list[float], period_s: float = 0.001) -> None:
    """Sleep ``period_s`` again and again; record how late each wake-up was."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period_s)
        lags.append(time.perf_counter() - t - period_s)


def _slow_s3(loc: Any) -> InstrumentedStore:
    """The S3 server behind 20 ms of added latency per request, counted."""
    return InstrumentedStore(LatencyStore(loc.open(), SYSTEM_CLOCK, 0.020))


def _p99(lags: list[float]) -> float:
    lags = sorted(lags)
    return lags[int(len(lags) * 0.99)]


def test_heartbeat_stays_on_time_while_durable_puts_wait_on_a_slow_store(
    s3_url_factory: Callable[[], Any],
) -> None:
    """1,000 durable puts against S3 with 20 ms latency; a 1 ms heartbeat stays within 5 ms.

    The puts run as 50 tasks of 20 sequential durable puts each, so every one waits
    for a WAL round trip while the heartbeat runs beside them. The bound is absolute:
    the heartbeat's p99 lag stays under 5 ms. Per WAL round trip the loop thread runs
    50 task steps and their puts (about 0.5 ms), and the WAL writer and durability
    waiter threads hold the interpreter lock for well under a millisecond at a time:
    with the process at real-time priority (nothing else on the machine delays it)
    the p99 lag is about 1 ms. Nearly all of a late beat is spent waiting in the
    selector for the operating system to run the loop thread again, which an idle
    loop on a busy machine suffers as much (its p99 is printed beside): hence a few
    attempts. Only when the idle loop itself missed 5 ms in every attempt (a machine
    too busy to keep any 1 ms heartbeat) does the test settle for 5 ms over the idle
    loop's p99 instead.
    """
    store = _slow_s3(s3_url_factory())

    async def main() -> tuple[list[float], list[float], float]:
        idle: list[float] = []
        stop = asyncio.Event()
        beat = asyncio.create_task(_heartbeat(stop, idle))
        await asyncio.sleep(0.5)
        stop.set()
        await beat
        db = await aio.Db.open(store=store, settings=QUIET)
        async with db:
            stop = asyncio.Event()
            lags: list[float] = []
            beat = asyncio.create_task(_heartbeat(stop, lags))

            async def writer(w: int) -> None:
                for i in range(20):
                    await db.put(b"k%02d-%03d" % (w, i), b"v" * 100)

            t = time.perf_counter()
            await asyncio.gather(*(writer(w) for w in range(50)))
            took = time.perf_counter() - t
            stop.set()
            await beat
            assert await db.get(b"k49-019") == b"v" * 100
        return idle, lags, took

    # Five attempts: on a machine shared with other busy processes one run can be
    # descheduled for longer than the bound (the idle loop's p99 shows it); a loop that
    # blocks on the store (the control test below) misses it every time.
    results = []
    for _ in range(5):
        idle, lags, took = asyncio.run(main())
        p99, idle_p99 = _p99(lags), _p99(idle)
        print(
            f"{len(lags)} beats in {took:.2f}s; lag p99 {p99 * 1e3:.2f} ms, max {max(lags) * 1e3:.2f} ms; "
            f"idle loop p99 {idle_p99 * 1e3:.2f} ms"
        )
        assert took > 0.4  # the puts did wait on the slow store (20 rounds of >= 20 ms)
        assert len(lags) > took / 0.01  # the heartbeat kept running throughout
        results.append((round(p99 * 1e3, 2), round(idle_p99 * 1e3, 2)))
        if p99 < 0.005:
            return
    if all(idle_p99 >= 5 for _, idle_p99 in results) and any(p99 < idle_p99 + 5 for p99, idle_p99 in results):
        print("the idle loop missed 5 ms in every attempt: checked 5 ms over its p99 instead")
        return
    pytest.fail(f"the loop stalled: (p99, idle p99) heartbeat lags in ms {results}")


def test_no_store_call_or_durability_wait_runs_on_the_loop_thread(
    mem_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic side of the heartbeat test: every store call and every WAL wait of
    every async operation (open, writes, reads, scans, snapshots, flush, close, a reader)
    runs off the event loop's thread."""
    from shaledb.engine.wal import WalWriter
    from shaledb.store import open_store
    from shaledb.store.wrappers import StoreWrapper

    threads: set[int] = set()

    class Watch(StoreWrapper):
        def __getattribute__(self, name: str) -> Any:
            if name in (
                "get",
                "get_range",
                "get_ranges",
                "head",
                "put",
                "list",
                "delete",
                "delete_many",
                "copy",
            ):
                threads.add(threading.get_ident())
            return super().__getattribute__(name)

    wait = WalWriter.wait_durable

    def watched_wait(self: WalWriter, *a: Any, **k: Any) -> bool:
        threads.add(threading.get_ident())
        return wait(self, *a, **k)

    monkeypatch.setattr(WalWriter, "wait_durable", watched_wait)
    store = Watch(open_store(mem_url))

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with await aio.Db.open(store=store, settings=QUIET) as db:
            await asyncio.gather(*(db.put(b"k%03d" % i, b"v") for i in range(100)))
            await db.delete(b"k000")
            async with db.batch() as b:
                b.put(b"a", b"1")
            await db.flush(memtable=True)
            assert await db.get(b"k001") == b"v"
            assert await db.get_many([b"k002", b"zz"]) == [b"v", None]
            assert len([kv async for kv in db.scan()]) == 100
            async with db.snapshot() as snap:
                assert await snap.get(b"a") == b"1"
        async with await aio.DbReader.open(store=store, checkpoint_lifetime_s=None) as r:
            assert await r.get(b"a") == b"1"
        return loop_thread

    loop_thread = asyncio.run(main())
    assert threads and loop_thread not in threads


def test_concurrent_durable_puts_share_group_commits(s3_url_factory: Callable[[], Any]) -> None:
    """1,000 concurrent durable puts finish in a few WAL writes, not 1,000."""
    store = _slow_s3(s3_url_factory())

    async def main() -> int:
        db = await aio.Db.open(store=store, settings=QUIET)
        async with db:
            before = store.snapshot()
            hs = await asyncio.gather(*(db.put(b"key%04d" % i, b"x" * 64) for i in range(1000)))
            wal_writes = (store.snapshot() - before).requests["put_create"]
            assert all(h.durable for h in hs)
            assert len({h.seq for h in hs}) == 1000
        return wal_writes

    wal_writes = asyncio.run(main())
    print(f"1000 durable puts: {wal_writes} WAL writes")
    assert 1 <= wal_writes <= 10  # a few round trips, not 1,000 (2 on an idle machine)


def test_writers_taking_turns_stay_one_group_commit(
    memory_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 tasks writing 5 rounds of durable puts: one WAL object per round, not two.

    The durability waiter's thread used to start on the first durable write; starting
    a thread lets go of the interpreter lock in the middle of the loop's burst of
    writes, so now and then the WAL thread cut an object holding the first write
    alone, and the writers then took turns in two groups: twice the WAL round trips
    for the rest of the run (and twice the wake-ups competing with the loop). No
    thread may start once the handle is open; the round trips are printed."""
    store = InstrumentedStore(LatencyStore(memory_store, SYSTEM_CLOCK, 0.020))
    started: list[str] = []

    async def main() -> int:
        db = await aio.Db.open(store=store, settings=QUIET)
        async with db:
            start = threading.Thread.start

            def watched_start(self: threading.Thread) -> None:
                started.append(self.name)
                start(self)

            monkeypatch.setattr(threading.Thread, "start", watched_start)
            before = store.snapshot()

            async def writer(w: int) -> None:
                for r in range(5):
                    await db.put(b"k%02d-%d" % (w, r), b"v" * 100)

            await asyncio.gather(*(writer(w) for w in range(50)))
            monkeypatch.undo()
            return (store.snapshot() - before).requests["put_create"]

    wal_writes = asyncio.run(main())
    print(f"5 rounds of 50 durable puts: {wal_writes} WAL writes")
    assert started == []
    assert wal_writes >= 5


def test_blocking_wait_would_stall_the_loop(memory_store: Any) -> None:
    """Control for the heartbeat test: sync durable puts on the loop stall it by the store latency."""
    store = LatencyStore(memory_store, SYSTEM_CLOCK, 0.020)

    async def main() -> list[float]:
        with Db.open(store=store, settings=QUIET) as db:
            stop = asyncio.Event()
            lags: list[float] = []
            beat = asyncio.create_task(_heartbeat(stop, lags))
            await asyncio.sleep(0.01)
            for i in range(5):
                db.put(b"k%d" % i, b"v")
                await asyncio.sleep(0.002)
            stop.set()
            await beat
        return lags

    lags = asyncio.run(main())
    assert sum(lag > 0.015 for lag in lags) >= 4, lags


def test_async_api_matches_the_sync_model(url: str) -> None:
    """A random sequence of async operations against a dict model, checked with get, get_many,
    scan (forward, reverse, prefix, limit), snapshots and a reader."""
    seed = test_seed()
    rng = random.Random(seed)
    keys = [b"k%02d" % i for i in range(40)]

    async def main() -> None:
        model: dict[bytes, bytes] = {}
        async with await aio.Db.open(url, settings=QUIET, seed=seed) as db:
            for step in range(300):
                op = rng.random()
                k = rng.choice(keys)
                if op < 0.45:
                    v = b"v%d" % step
                    await db.put(k, v, durable=rng.random() < 0.5)
                    model[k] = v
                elif op < 0.6:
                    await db.delete(k, durable=rng.random() < 0.5)
                    model.pop(k, None)
                elif op < 0.7:
                    async with db.batch() as b:
                        for kk in rng.sample(keys, 3):
                            if rng.random() < 0.7:
                                b.put(kk, b"b%d" % step)
                                model[kk] = b"b%d" % step
                            else:
                                b.delete(kk)
                                model.pop(kk, None)
                elif op < 0.8:
                    assert await db.get(k) == model.get(k)
                elif op < 0.85:
                    ks = rng.sample(keys, 5)
                    assert await db.get_many(ks) == [model.get(x) for x in ks]
                elif op < 0.9:
                    frozen = dict(model)
                    async with db.snapshot() as snap:
                        await db.put(k, b"after")
                        model[k] = b"after"
                        assert await snap.get(k) == frozen.get(k)
                        assert [kv async for kv in snap.scan()] == sorted(frozen.items())
                elif op < 0.95:
                    rev = rng.random() < 0.5
                    limit = rng.choice([None, 1, 7])
                    got = [kv async for kv in db.scan(prefix=b"k1", reverse=rev, limit=limit)]
                    want = sorted(((a, b) for a, b in model.items() if a.startswith(b"k1")), reverse=rev)
                    assert got == want[:limit]
                else:
                    await db.flush(memtable=rng.random() < 0.3)
            await db.write(WriteBatch().put(b"zz", b"1"))
            model[b"zz"] = b"1"
            assert [kv async for kv in db.scan()] == sorted(model.items())
            await db.flush()
            async with await aio.DbReader.open(url, checkpoint_lifetime_s=None) as reader:
                assert [kv async for kv in reader.scan()] == sorted(model.items())
                assert await reader.get(b"zz") == b"1"

    asyncio.run(main())


def test_scan_in_chunks_and_early_close(mem_url: str) -> None:
    async def main() -> None:
        async with await aio.Db.open(mem_url, settings=QUIET) as db:
            async with db.batch(durable=False) as b:
                for i in range(1000):
                    b.put(b"%04d" % i, b"v")
            rows = [k async for k, _ in db.scan()]
            assert rows == [b"%04d" % i for i in range(1000)]
            async with db.scan(start=b"0500") as sc:
                first = [k async for k, _ in _take(sc, 3)]
            assert first == [b"0500", b"0501", b"0502"]

    asyncio.run(main())


async def _take(it: aio.AsyncScan, n: int) -> Any:
    for _ in range(n):
        yield await it.__anext__()


def test_a_write_after_close_raises(mem_url: str) -> None:
    from shaledb import ClosedError

    async def main() -> None:
        db = await aio.Db.open(mem_url, settings=QUIET)
        await db.close()
        with pytest.raises(ClosedError):
            await db.put(b"k", b"v")

    asyncio.run(main())


def test_close_leaves_no_thread_behind(tmp_path: Any) -> None:
    """A closed handle's threads are gone while the loop still runs (a service that opens a
    database per request must not collect a thread per handle until it exits)."""

    async def main() -> None:
        before = {t.ident for t in threading.enumerate()}
        db = await aio.Db.open(str(tmp_path / "db"), settings=QUIET)
        await db.put(b"a", b"1")
        await db.close()
        reader = await aio.DbReader.open(str(tmp_path / "db"))
        assert await reader.get(b"a") == b"1"
        await reader.close()
        for _ in range(100):
            left = [t.name for t in threading.enumerate() if t.ident not in before]
            if not left:
                break
            await asyncio.sleep(0.02)
        assert left == []

    asyncio.run(main())


def test_closing_the_sync_handle_ends_the_durability_thread(mem_url: str) -> None:
    """``aio.Db(db)`` over a sync handle that is then closed with ``db.close()`` (not the
    aio handle's close): its durability thread used to poll every 0.5 s for ever."""

    async def main() -> list[threading.Thread]:
        before = set(threading.enumerate())
        db = aio.Db(Db.open(mem_url, settings=QUIET))
        await db.put(b"a", b"1")
        ours = [t for t in threading.enumerate() if t not in before and t.name == "shaledb-aio-durable"]
        db.sync.close()
        for t in ours:
            t.join(60)  # (a guard: it ends within one 0.5 s poll)
        return ours

    threads = asyncio.run(main())
    assert len(threads) == 1 and not threads[0].is_alive()


def test_closing_the_sync_handle_ends_the_aio_handles_threads(mem_url: str, tmp_path: Any) -> None:
    """``shaledb.Db.opened(url).close()`` on a writer opened through ``shaledb.aio`` (and
    ``reader.sync.close()``) closed the handle but left the aio wrapper's pool threads
    running for the rest of the process; the wrapper's later calls say it is closed."""

    async def main() -> list[threading.Thread]:
        before = set(threading.enumerate())
        db = await aio.Db.open(mem_url, settings=QUIET)
        await db.put(b"a", b"1")
        assert await db.get(b"a") == b"1"
        reader = await aio.DbReader.open(mem_url)
        assert await reader.get(b"a") == b"1"
        ours = [t for t in threading.enumerate() if t not in before and t.name.startswith("shaledb-aio")]
        opened = Db.opened(mem_url)
        assert opened is db.sync
        opened.close()
        reader.sync.close()
        for t in ours:
            t.join(60)  # (a guard: they end at once, or within the durability thread's poll)
        with pytest.raises(ClosedError):
            await db.get(b"a")
        with pytest.raises(ClosedError):
            await reader.get(b"a")
        await db.close()  # (closing the wrapper too is harmless)
        await reader.close()
        return ours

    threads = asyncio.run(main())
    assert len([t for t in threads if t.name.startswith("shaledb-aio_")]) >= 2  # one pool thread each
    assert [t.name for t in threads if t.is_alive()] == []


def test_sync_and_async_share_the_engine(mem_url: str) -> None:
    async def main() -> None:
        async with await aio.Db.open(mem_url, settings=QUIET) as db:
            db.sync.put(b"a", b"1")
            await db.put(b"b", b"2")
            assert db.sync.get(b"b") == b"2" and await db.get(b"a") == b"1"

    asyncio.run(main())


def test_async_change_feed_follows_new_writes(mem_url: str) -> None:
    async def main() -> None:
        async with await aio.Db.open(mem_url, settings=QUIET) as db:
            await db.put(b"a", b"1")
            feed = db.changes(poll_interval_s=0.01)
            got: list[Any] = []

            async def consume() -> None:
                async for change in feed:
                    got.append((change.kind, change.key))
                    if len(got) == 3:
                        await feed.aclose()

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.05)
            await db.delete(b"a")
            await db.put(b"b", b"2")
            await asyncio.wait_for(task, 10)
            assert got == [("put", b"a"), ("delete", b"a"), ("put", b"b")]
            rest = [c.key async for c in db.changes(str(feed.cursor), follow=False)]
            assert rest == []
            async with await aio.DbReader.open(mem_url, checkpoint_lifetime_s=None) as r:
                assert [c.seq async for c in r.changes(follow=False)] == [1, 2, 3]

    asyncio.run(main())

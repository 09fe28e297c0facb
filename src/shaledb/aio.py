"""asyncio handles over the same engine as the sync API.

    from shaledb import aio
    async with await aio.Db.open("s3://bucket/db") as db:
        await db.put(b"k", b"v")                  # durable when it returns
        await db.get(b"k")
        async for key, value in db.scan(prefix=b"user:"):
            ...

An :class:`aio.Db` wraps a :class:`shaledb.Db` (``.sync`` is that handle: one
writer per database either way) and never blocks the event loop:

* A write is applied to the memtable and WAL buffer on the loop thread (a
  short critical section, as in the sync API) and its durability is awaited,
  not waited for: one waiter thread per database watches the WAL's durable
  sequence number and resolves the futures of every write it covers. So
  concurrent ``await db.put(...)`` calls share group commits exactly as
  threads do, without a thread each. Writes that may block (backpressure,
  index terms, rich entries) run on the handle's executor instead.
* Reads, scans, flush, open and close may make store round trips, so they run
  on the handle's executor (a thread pool of ``workers`` threads); a scan
  fetches its rows in chunks of ``scan_chunk`` per executor call.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NoReturn,
    Self,
    SupportsIndex,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from .db import reader as _db_reader
from .db import writer as _db
from .db import writers as _db_writers
from .db.batch import IndexTerms, WriteBatch, WriteHandle
from .db.mapping import refuse_pickle
from .errors import ClosedError, InvalidArgument
from .keys import BytesLike

if TYPE_CHECKING:
    from .clock import Clock
    from .db.queries import Queries, SnapshotQueries
    from .engine.changes import Change, ChangeFeed, Cursor, FeedOptions
    from .engine.parents import StoreFactory
    from .engine.reads import Scan
    from .manifest.model import Checkpoint
    from .settings import DbReaderOptions, Settings
    from .store.base import ObjectStore

T = TypeVar("T")
D = TypeVar("D")

DEFAULT_WORKERS = 16
"""Executor threads per handle: reads and scans in flight at once (each a store round trip)."""

SCAN_CHUNK = 256
"""Rows a scan fetches per executor call."""


class DbOpenOptions(TypedDict, total=False):
    """The keywords :meth:`Db.open` passes on to :meth:`shaledb.Db.open`."""

    settings: Settings | None
    store: ObjectStore | None
    clock: Clock | None
    seed: int | None
    create_if_missing: bool
    store_options: Mapping[str, object] | None


class PutExtras(TypedDict, total=False):
    """The rich-entry keywords of :meth:`Db.put`, as :meth:`shaledb.Db.put` takes them."""

    ttl: timedelta | float | str | None
    metadata: BytesLike | None
    indexes: IndexTerms | None


class ReaderOpenOptions(TypedDict, total=False):
    """The keywords :meth:`DbReader.open` passes on to :meth:`shaledb.DbReader.open`."""

    options: DbReaderOptions | None
    manifest_poll_interval_s: timedelta | float | str | None
    checkpoint_lifetime_s: timedelta | float | str | None
    manifest_poll_interval: timedelta | float | str | None
    checkpoint_lifetime: timedelta | float | str | None
    max_memtable_bytes: int | None
    store: ObjectStore | None
    clock: Clock | None
    seed: int | None
    store_options: Mapping[str, object] | None
    store_factory: StoreFactory | None


class _DurabilityWaiter:
    """Resolves futures of writes once the WAL's durable sequence number covers them.

    One thread per database: it waits for the smallest pending sequence number,
    then resolves every future it now covers with one ``call_soon_threadsafe``
    per event loop. The thread starts with the handle, not on the first durable
    write: starting a thread waits for it, which lets go of the interpreter
    lock in the middle of the loop's first burst of writes; the WAL thread,
    woken by that burst, then cut a WAL object holding only its first write,
    and the writers stayed split in two groups taking turns, each write
    waiting for two WAL round trips instead of one.
    """

    def __init__(self, wal: Any) -> None:
        self._wal = wal
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, asyncio.Future[None], asyncio.AbstractEventLoop]] = []
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="shaledb-aio-durable", daemon=True)
        self._thread.start()

    def wait(self, seq: int) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self._wal.durable_seq >= seq:
            fut.set_result(None)
            return fut
        with self._lock:
            if self._stopped:
                raise ClosedError("database is closed")
            heapq.heappush(self._heap, (seq, next(self._ids), fut, loop))
        self._wake.set()
        self._wal.request_flush()  # a durable write flushes at once: group commit
        return fut

    def stop(self, *, wait: bool = True) -> None:
        """Stop the thread once no write waits (``wait``: until it has ended)."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        if wait:
            self._thread.join()

    def _wal_ended(self) -> bool:
        """The WAL stopped without this handle's close (``sync.close()`` called directly, or
        the aio handle dropped unclosed): stop too. Before, the thread polled forever."""
        wal = self._wal
        if not (wal._stopping and not wal._thread.is_alive()):
            return False
        with self._lock:
            self._stopped = True  # (a later wait() raises ClosedError instead of hanging)
            return not self._heap

    def _run(self) -> None:
        wal = self._wal
        while True:
            with self._lock:
                target = self._heap[0][0] if self._heap else None
                stopped = self._stopped
            if target is None:
                if stopped or self._wal_ended():
                    return
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            error: BaseException | None = None
            try:
                wal.wait_durable(target, timeout=0.5)
            except BaseException as exc:  # noqa: BLE001 - every waiter gets the WAL's failure
                error = exc
            done = wal.durable_seq
            ready: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            with self._lock:
                while self._heap and (error is not None or self._heap[0][0] <= done):
                    _, _, fut, loop = heapq.heappop(self._heap)
                    ready.setdefault(loop, []).append(fut)
            for loop, futs in ready.items():
                try:
                    loop.call_soon_threadsafe(_settle, futs, error)
                except RuntimeError:
                    pass  # that loop is closed: nobody awaits its futures


def _settle(futs: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for fut in futs:
        if fut.done():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)


class _Executor:
    """The handle's thread pool, shut down with it."""

    def __init__(self, workers: int) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidArgument(f"workers must be an integer >= 1, got {workers!r}")
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="shaledb-aio")
        self.closed = False
        self.closed_message = "the handle is closed"

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.submit(fn, *args, **kwargs)

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        if self.closed:
            raise ClosedError(self.closed_message)
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    def shutdown(self) -> None:
        self.closed = True
        self.pool.shutdown(wait=False)


class AsyncScan(Generic[T]):
    """``async for key, value in scan``: rows fetched in chunks on the executor.

    The scan's snapshot is pinned until the rows run out or :meth:`aclose`
    (``async with`` closes it too).
    """

    def __init__(self, executor: _Executor, start: Callable[[], Scan[T]], chunk: int = SCAN_CHUNK) -> None:
        self._executor = executor
        self._start = start
        self._scan: Scan[T] | None = None
        self._rows: Iterator[T] = iter(())
        self._chunk = chunk
        self._done = False
        self._pending: asyncio.Future[list[T]] | None = None
        """The chunk being fetched; a cancelled step leaves it for the next one."""
        self._mu = threading.Lock()
        """Guards the two flags below between the loop and the executor thread fetching."""
        self._fetching = False
        self._closing = False
        self._close_claimed = False

    def __aiter__(self) -> AsyncScan[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            row = next(self._rows, _END)
            if row is not _END:
                return row  # type: ignore[return-value]  # (not the _END marker)
            if self._done and self._pending is None:
                raise StopAsyncIteration
            if self._pending is None:
                self._pending = self._executor.submit(self._fetch)
            pending = self._pending
            # Shielded: a cancelled step (a timeout, a cancelled task) leaves the fetch running
            # and its rows for the next step. Before, they were dropped and the scan went on
            # after them, silently skipping a chunk.
            rows = await asyncio.shield(pending)
            if self._pending is not pending:
                continue  # another task's step awaited this chunk too and took it: share it
            self._pending = None
            if not rows:
                self._done = True
                raise StopAsyncIteration
            self._rows = iter(rows)

    def _fetch(self) -> list[T]:
        with self._mu:
            if self._closing:
                return []
            self._fetching = True
        rows: list[T] = []
        try:
            if self._scan is None:
                self._scan = self._start()
            rows = list(itertools.islice(self._scan, self._chunk))
        finally:
            with self._mu:
                self._fetching = False
                scan = self._claim_close(self._closing or len(rows) < self._chunk)
            if scan is not None:
                scan.close()
                self._done = True
        return rows

    def _claim_close(self, wanted: bool) -> Scan[T] | None:
        """Under ``_mu``: the scan to close, once, by whichever of the fetch and
        :meth:`aclose` claims it first (two threads closing one generator at once clash)."""
        if not wanted or self._close_claimed or self._scan is None:
            return None
        self._close_claimed = True
        return self._scan

    async def aclose(self) -> None:
        """Release the scan's snapshot. A fetch still running (its step was cancelled: a
        timeout, Ctrl-C in ``asyncio.run``) closes the scan itself when it returns: closing
        it here, under the fetch, raised ``ValueError: generator already executing`` (from
        ``async with``'s exit, in place of the cancellation) and left the snapshot pinned."""
        self._done = True
        self._rows = iter(())
        self._pending = None
        with self._mu:
            self._closing = True
            scan = self._claim_close(not self._fetching)
        if scan is not None:
            scan.close()

    async def __aenter__(self) -> AsyncScan[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_END = object()


class AsyncChanges:
    """``async for change in db.changes(since)``: the change feed (``shaledb.engine.changes``),
    read in chunks on the executor; when caught up it sleeps ``poll_interval_s`` on the
    loop (``follow=False``: stops instead), woken at once by :meth:`aclose` or by its
    handle closing. ``cursor`` is where it stands."""

    def __init__(self, executor: _Executor, feed: ChangeFeed, *, chunk: int = 1000) -> None:
        self._executor = executor
        self._feed = feed
        self._chunk = chunk
        self._buffer: Iterator[Change] = iter(())
        self._closed = False
        self._start: Cursor = feed.cursor
        self._last: Cursor | None = None
        self._pending: asyncio.Future[list[Change]] | None = None
        """The read in flight; a cancelled step leaves its changes for the next one."""
        self._naps: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        """The caught-up followers' sleeps, which closing the feed ends (from any thread)."""
        me = weakref.ref(self)  # (a bound method would tie the feed and this into a cycle)
        feed.on_close(lambda: _wake_changes(me))

    @property
    def cursor(self) -> Cursor:
        """The position after the last change handed out (``str()`` stores it)."""
        return self._last if self._last is not None else self._start

    def __aiter__(self) -> AsyncChanges:
        return self

    async def __anext__(self) -> Change:
        while not self._closed:
            change = next(self._buffer, None)
            if change is not None:
                self._last = change.cursor
                return change
            if self._pending is None:
                self._pending = self._executor.submit(self._feed.read, self._chunk)
            pending = self._pending
            # Shielded, as a scan's fetch: the feed has moved past what the read returns, so
            # a cancelled step that dropped them skipped those changes for good.
            got = await asyncio.shield(pending)
            if self._pending is not pending:
                # Another task's step awaited this read too and took its changes: hand them
                # out from the buffer. (Each step used to take them all: two tasks consuming
                # one feed got every change twice.)
                continue
            self._pending = None
            if got:
                self._buffer = iter(got)
                continue
            if not self._feed.follow:
                break
            await self._sleep(self._feed.poll_interval_s)
        raise StopAsyncIteration

    async def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or until the feed closes. (An ``asyncio.sleep`` slept through
        ``aclose()`` and the handle's close: the consumer hung for ``poll_interval_s``.)"""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        nap = (loop, fut)
        self._naps.add(nap)
        timer = loop.call_later(seconds, _wake_up, fut)
        try:
            if not (self._closed or self._feed._closed.is_set()):  # (closed before the nap began)
                await fut
        finally:
            timer.cancel()
            self._naps.discard(nap)

    def _wake(self) -> None:
        for loop, fut in list(self._naps):
            try:
                loop.call_soon_threadsafe(_wake_up, fut)
            except RuntimeError:
                pass  # that loop is closed: nobody sleeps on it

    async def aclose(self) -> None:
        self._closed = True
        self._pending = None
        self._feed.close()

    async def __aenter__(self) -> AsyncChanges:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"aio.{self._feed.describe(self.cursor)}"


def _wake_changes(ref: weakref.ref[AsyncChanges]) -> None:
    changes = ref()
    if changes is not None:
        changes._wake()


def _wake_up(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Reads:
    """Reads shared by handles and snapshots: every one on the executor."""

    _executor: _Executor
    _target: Queries

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_pickle(self)  # (else the wrapped handle's error, naming the blocking API)

    @overload
    async def get(self, key: BytesLike) -> bytes | None: ...
    @overload
    async def get(self, key: BytesLike, default: D) -> bytes | D: ...
    async def get(self, key: BytesLike, default: D | None = None) -> bytes | D | None:
        """The value of ``key``, or ``default`` (None) when it is absent, as the sync ``get``."""
        value: bytes | None = await self._executor.run(self._target.get, key)
        return default if value is None else value

    async def get_many(self, keys: Iterable[BytesLike]) -> list[bytes | None]:
        """Values of ``keys`` from one view (None for absent keys), read in parallel."""
        keys = list(keys)
        values: list[bytes | None] = await self._executor.run(self._target.get_many, keys)
        return values

    def scan(
        self,
        start: BytesLike | None = None,
        end: BytesLike | None = None,
        *,
        prefix: BytesLike | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> AsyncScan[tuple[bytes, bytes]]:
        """``async for key, value in ...`` over ``start <= key < end`` (one snapshot)."""
        target = self._target
        return AsyncScan(
            self._executor, lambda: target.scan(start, end, prefix=prefix, reverse=reverse, limit=limit)
        )


class Snapshot(_Reads):
    """A consistent view at one sequence number (``async with db.snapshot() as snap``)."""

    def __init__(self, executor: _Executor, snap: SnapshotQueries) -> None:
        self._executor = executor
        self._target = self._snap = snap
        self.seq: int = snap.seq

    async def close(self) -> None:
        self._snap.close()

    def __repr__(self) -> str:
        closed = ", closed" if self._snap._closed else ""
        return f"aio.Snapshot(seq={self.seq}{closed})"


async def _open_in_pool(workers: int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking open on a pool of its own, shut down after it: the handle it opens
    starts its own pool, and an open makes store round trips the loop must not wait on.

    A cancelled open (a timeout, Ctrl-C in ``asyncio.run``) goes on in the pool and closes
    the handle it opens. Before, that handle stayed open where nobody could reach it: its
    threads ran on, and a writer's database could not be opened again in the process
    ("already has a writer in this process")."""
    executor = _Executor(workers)
    lock = threading.Lock()
    state = {"abandoned": False, "delivered": False}
    where = _db_writers.caller()  # (the pool thread's stack has no user frame)

    def open_or_close() -> T:
        with _db_writers.opened_at(where):
            handle = fn(*args, **kwargs)
        with lock:
            if not state["abandoned"]:
                state["delivered"] = True
                return handle
        handle.close()  # type: ignore[attr-defined]  # (a Db or a DbReader)
        return handle

    opening = executor.pool.submit(open_or_close)
    try:
        return await asyncio.shield(asyncio.wrap_future(opening))
    except BaseException:
        with lock:
            state["abandoned"] = True
            delivered = state["delivered"]
        if delivered:  # opened, not yet handed over: close it where the open ran
            opening.add_done_callback(_close_opened)
        raise
    finally:
        executor.shutdown()


H = TypeVar("H", "Db", "DbReader")


class Opening(Coroutine[Any, Any, H]):
    """What :meth:`Db.open` and :meth:`DbReader.open` return: ``await`` it for the handle
    (``async with await aio.Db.open(url) as db``), or enter it directly, as aiohttp's and
    aiosqlite's openers are: ``async with aio.Db.open(url) as db`` opens the handle and
    closes it on exit. Before, ``open`` was a plain coroutine, and that natural spelling
    failed with ``TypeError: 'coroutine' object does not support the asynchronous context
    manager protocol`` and a ``RuntimeWarning`` that it was never awaited.

    It is a coroutine (``asyncio.create_task``, ``asyncio.wait_for`` and ``gather`` take
    it), delegating every step to the open it wraps."""

    __slots__ = ("_coro", "_handle")

    def __init__(self, coro: Coroutine[Any, Any, H]) -> None:
        self._coro: Coroutine[Any, Any, H] = coro
        self._handle: H | None = None

    def __await__(self) -> Generator[Any, None, H]:
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    async def __aenter__(self) -> H:
        self._handle = await self._coro
        return self._handle

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            await self._handle.close()

    def __repr__(self) -> str:
        return f"aio.Opening({self._handle!r})" if self._handle is not None else "aio.Opening(pending)"


def _close_opened(opening: Future[Any]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


_Sync = TypeVar("_Sync", _db.Db, _db_reader.DbReader)


class _Handle(_Reads, Generic[_Sync]):
    """What the writer's and a reader's asyncio handles share over ``sync``, the blocking
    handle they wrap: snapshots, change feeds, metrics, and closing once."""

    sync: _Sync

    def __init__(self, sync: _Sync, workers: int) -> None:
        if sync.closed:  # its close hooks ran already: this wrapper's threads would never stop
            raise ClosedError(f"{sync!r} is closed: open the database again (aio.{type(sync).__name__}.open)")
        self.sync = sync
        self._target = sync
        self._executor = _Executor(workers)
        self._shut = False
        # Closing ``sync`` itself (``shaledb.Db.opened(url).close()``) stops this handle's
        # threads too; before, they ran on for the rest of the process. (Weak: the closed
        # handle's hook must not keep this wrapper alive.)
        me = weakref.ref(self)

        def stop_threads() -> None:
            handle = me()
            if handle is not None:
                handle._executor.closed_message = sync._closed_message  # ("database is closed")
                handle._stop_threads()

        sync._close_hooks.append(stop_threads)

    @asynccontextmanager
    async def snapshot(
        self, *, at_seq: int | None = None, at_time: datetime | None = None
    ) -> AsyncIterator[Snapshot]:
        """``async with handle.snapshot() as snap``: a consistent view, released on exit."""
        snap = Snapshot(self._executor, self.sync.snapshot(at_seq=at_seq, at_time=at_time))
        try:
            yield snap
        finally:
            await snap.close()

    def metrics(self) -> dict[str, object]:
        return self.sync.metrics()

    def changes(self, since: Cursor | str | None = None, **options: Unpack[FeedOptions]) -> AsyncChanges:
        """``async for change in handle.changes(since)`` (see :meth:`shaledb.Db.changes`)."""
        return AsyncChanges(self._executor, self.sync.changes(since, **options))

    async def close(self) -> None:
        """Close ``sync`` on the executor (the writer flushes first), then stop this
        handle's threads; closing again does nothing."""
        if self._shut:
            return
        self._shut = True
        if self._executor.closed:  # ``sync`` was closed directly, which stopped the threads
            self._stop_threads()
            return
        try:
            # Shielded: a cancelled close() still closes (a second call returns at once).
            await asyncio.shield(self._executor.submit(self.sync.close))
        finally:
            self._stop_threads()

    def _stop_threads(self) -> None:
        self._executor.shutdown()

    @property
    def closed(self) -> bool:
        return self.sync.closed

    @property
    def url(self) -> str | None:
        """``sync.url``: the canonical URL opened (None on an explicit ``store=``)."""
        return self.sync.url

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"

    if not TYPE_CHECKING:  # (a type checker must still flag a name the handle lacks)

        def __getattr__(self, name: str) -> NoReturn:
            """Only for names the handle lacks: one the sync handle has (``transaction``,
            ``create_checkpoint``, ...) says how to call it without blocking the loop; it
            raised a bare "'Db' object has no attribute 'transaction'"."""
            sync = self.__dict__.get("sync")
            if sync is not None and not name.startswith("_") and hasattr(type(sync), name):
                if name == "transaction":
                    how = (
                        "transactions have no async face: run the whole transaction in a function on a "
                        "thread, `await asyncio.to_thread(fn)` with fn doing `with db.sync.transaction() "
                        "as txn: ...`, and run it again on TransactionConflict (docs/service.md)"
                    )
                else:
                    how = (
                        f"it makes store round trips: call it on a thread, "
                        f"`await asyncio.to_thread(db.sync.{name}, ...)` (docs/service.md)"
                    )
                raise AttributeError(f"aio.{type(self).__name__} has no {name!r}: {how}", name=name, obj=self)
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
            )


class Db(_Handle[_db.Db]):
    """The writer's asyncio handle; ``sync`` is the :class:`shaledb.Db` it shares the engine with."""

    def __init__(self, db: _db.Db, *, workers: int = DEFAULT_WORKERS) -> None:
        if not isinstance(db, _db.Db):
            raise InvalidArgument(f"aio.Db wraps a shaledb.Db, got {type(db).__name__}")
        super().__init__(db, workers)
        self._waiter = _DurabilityWaiter(db.wal)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        **kwargs: Unpack[DbOpenOptions],
    ) -> Opening[Db]:
        """Open (or create) the database at ``url``; keywords as :meth:`shaledb.Db.open`.

        ``await`` it for the handle, or ``async with aio.Db.open(url) as db:`` (closed on
        exit; :class:`Opening`)."""
        return Opening(cls._open(url, workers, kwargs))

    @classmethod
    async def _open(cls, url: str | os.PathLike[str] | None, workers: int, kwargs: DbOpenOptions) -> Db:
        return cls(await _open_in_pool(workers, _db.Db.open, url, **kwargs), workers=workers)

    # ---------------------------------------------------------------- writes

    def _may_block(self) -> bool:
        """True when a write could wait under the lock (backpressure, index terms, a failure)."""
        d = self.sync
        return bool(d._indexed or d._state or d._unflushed > d.settings.max_unflushed_bytes // 2)

    async def _in_pool(self, write: Callable[..., WriteHandle], *args: Any, **kwargs: Any) -> WriteHandle:
        """Run ``write`` on the executor, shielded: a cancelled write is still applied, as one
        applied on the loop is. (Unshielded, cancelling it while it waited for a worker --
        a busy pool, backpressure, ttl/metadata/indexes, every merge -- cancelled the queued
        call, and the write was silently never applied.)"""
        return await asyncio.shield(self._executor.submit(write, *args, **kwargs))

    async def _durable(self, handle: WriteHandle, durable: bool) -> WriteHandle:
        if durable:
            await self._waiter.wait(handle.seq)
        return handle

    async def put(
        self, key: BytesLike, value: BytesLike, *, durable: bool = True, **extras: Unpack[PutExtras]
    ) -> WriteHandle:
        """Set ``key`` to ``value``; durable when it returns unless ``durable=False``.

        ``extras`` (``ttl``, ``metadata``, ``indexes``) as in :meth:`shaledb.Db.put`.
        """
        if extras or self._may_block():
            h = await self._in_pool(self.sync.put, key, value, durable=False, **extras)
        else:
            h = self.sync.put(key, value, durable=False)
        return await self._durable(h, durable)

    async def delete(self, key: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Remove ``key``."""
        return await self.write(WriteBatch().delete(key), durable=durable)

    async def delete_range(self, start: BytesLike, end: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Remove every key in ``[start, end)`` (one range tombstone, as ``Db.delete_range``)."""
        return await self.write(WriteBatch().delete_range(start, end), durable=durable)

    async def merge(self, key: BytesLike, operand: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Merge ``operand`` into ``key``'s value (:meth:`shaledb.Db.merge`). In the pool:
        a merge may fold a long stack, which reads below the memtable."""
        h = await self._in_pool(self.sync.merge, key, operand, durable=False)
        return await self._durable(h, durable)

    async def write(self, batch: WriteBatch, *, durable: bool = True) -> WriteHandle:
        """Apply ``batch`` atomically under one sequence number."""
        if self._may_block() or (isinstance(batch, WriteBatch) and batch._extras):
            h = await self._in_pool(self.sync.write, batch, durable=False)
        else:
            h = self.sync.write(batch, durable=False)
        return await self._durable(h, durable)

    @asynccontextmanager
    async def batch(self, *, durable: bool = True) -> AsyncIterator[WriteBatch]:
        """``async with db.batch() as b: b.put(...)`` -- committed atomically on clean exit;
        adding to ``b`` after that raises ``ClosedError`` (it would never be written)."""
        b = WriteBatch()
        yield b
        await self.write(b, durable=durable)
        b._seal()

    # ----------------------------------------------------------------- reads

    def stats(self) -> dict[str, int]:
        return self.sync.stats()

    # ------------------------------------------------------ flush and close

    async def flush(self, *, memtable: bool = False) -> None:
        """Make every write so far durable; with ``memtable=True`` also write it to L0."""
        await self._executor.run(self.sync.flush, memtable=memtable)

    def _stop_threads(self) -> None:
        # Told, not joined: it ends within a poll once no write waits. (Joined on the
        # loop's default executor, a thread outlived the handle until the loop ended; on
        # the handle's pool, a cancelled close waited behind the pool's queued calls.)
        self._waiter.stop(wait=False)
        self._executor.shutdown()


class DbReader(_Handle[_db_reader.DbReader]):
    """A reader's asyncio handle; ``sync`` is the :class:`shaledb.DbReader`."""

    def __init__(self, reader: _db_reader.DbReader, *, workers: int = DEFAULT_WORKERS) -> None:
        if not isinstance(reader, _db_reader.DbReader):
            raise InvalidArgument(f"aio.DbReader wraps a shaledb.DbReader, got {type(reader).__name__}")
        super().__init__(reader, workers)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        checkpoint: uuid.UUID | str | Checkpoint | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        **kwargs: Unpack[ReaderOpenOptions],
    ) -> Opening[DbReader]:
        """Open a reader; arguments as :meth:`shaledb.DbReader.open`. ``await`` it, or
        ``async with aio.DbReader.open(url) as reader:`` (:class:`Opening`)."""
        return Opening(cls._open(url, checkpoint, workers, kwargs))

    @classmethod
    async def _open(
        cls,
        url: str | os.PathLike[str] | None,
        checkpoint: uuid.UUID | str | Checkpoint | None,
        workers: int,
        kwargs: ReaderOpenOptions,
    ) -> DbReader:
        reader = await _open_in_pool(workers, _db_reader.DbReader.open, url, checkpoint, **kwargs)
        return cls(reader, workers=workers)

    def stats(self) -> dict[str, int | str]:
        return self.sync.stats()

    async def refresh(self) -> None:
        """Poll for a new manifest and WAL objects now."""
        await self._executor.run(self.sync.refresh)

    @property
    def seq(self) -> int:
        return self.sync.seq


__all__ = [
    "AsyncChanges",
    "AsyncScan",
    "Db",
    "DbOpenOptions",
    "DbReader",
    "Opening",
    "PutExtras",
    "ReaderOpenOptions",
    "Snapshot",
]

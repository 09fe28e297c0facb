"""Many independent store calls at once, with memory held in check.

Copying or checking thousands of objects one request at a time spends nearly
all its time waiting on round trips (tens of milliseconds each on S3); obstore
releases the GIL while it waits, so threads overlap them. Each call may hold a
whole object in memory, so besides the number of threads the bytes of the
calls in flight are capped: a call starts only when its size fits beside the
others (one larger than the cap runs alone).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TypeVar

from ..errors import ObjectNotFound
from ..numbers import check_int
from .base import ObjectStore

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_WORKERS = 8
DEFAULT_MAX_BYTES_IN_FLIGHT = 256 << 20

Progress = Callable[[int, int], None]
"""What long work (a backup, a verify) calls as it advances: (units done, units in all)."""

MAX_WORKERS = 1024
"""Most parallel store calls one operation may run (each is a thread)."""


def check_workers(workers: int) -> int:
    """``workers`` if it is a usable count of parallel calls, else InvalidArgument."""
    return check_int("workers", workers, minimum=1, maximum=MAX_WORKERS)


def run_bounded(
    fn: Callable[[T], R],
    items: Iterable[T],
    size_of: Callable[[T], int],
    *,
    workers: int = DEFAULT_WORKERS,
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    name: str = "shaledb-io",
) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` for every item, in the order they finish.

    The first exception stops new calls, waits for the running ones and is
    raised; closing the iterator early does the same without raising.
    ``workers=1`` runs the calls one by one in the caller's thread.
    """
    if workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    running: dict[Future[R], tuple[T, int]] = {}
    in_flight = 0
    try:
        for item in items:
            size = max(0, size_of(item))
            while running and (len(running) >= workers or in_flight + size > max_bytes_in_flight):
                for fut in _finished(running):
                    done, done_size = running.pop(fut)
                    in_flight -= done_size
                    yield done, fut.result()
            running[pool.submit(fn, item)] = (item, size)
            in_flight += size
        while running:
            for fut in _finished(running):
                done, _ = running.pop(fut)
                yield done, fut.result()
    finally:
        for fut in running:
            fut.cancel()
        pool.shutdown(wait=True)


def get_in_order(
    store: ObjectStore, paths: Sequence[str], *, read_ahead: int, name: str = "shaledb-get"
) -> Generator[tuple[str, bytes | None], None, None]:
    """``(path, data)`` for each of ``paths`` in their order; ``data`` is None for a missing object.

    Replaying a log needs its objects in order, but fetching them one at a time
    waits a round trip each (a thousand WAL objects: twenty seconds on S3). Up
    to ``read_ahead`` GETs run ahead of the consumer, so the cost is about one
    round trip per ``read_ahead`` objects, and at most that many objects wait
    in memory. A failed GET is raised when its turn comes; stopping early (an
    exception or closing the iterator) cancels the GETs not started and waits
    for the running ones. ``read_ahead=1`` fetches in the caller's thread.
    """

    def fetch(path: str) -> bytes | None:
        try:
            return store.get(path)
        except ObjectNotFound:
            return None

    if read_ahead <= 1 or len(paths) <= 1:
        for path in paths:
            yield path, fetch(path)
        return
    pool = ThreadPoolExecutor(min(read_ahead, len(paths)), thread_name_prefix=name)
    ahead: deque[tuple[str, Future[bytes | None]]] = deque()
    todo = iter(paths)
    try:
        for path in todo:
            ahead.append((path, pool.submit(fetch, path)))
            if len(ahead) >= read_ahead:
                break
        while ahead:
            path, fut = ahead.popleft()
            data = fut.result()
            nxt = next(todo, None)
            if nxt is not None:  # keep the window full while the consumer works
                ahead.append((nxt, pool.submit(fetch, nxt)))
            yield path, data
    finally:
        for _, fut in ahead:
            fut.cancel()
        pool.shutdown(wait=True)


def _finished(running: dict[Future[R], tuple[T, int]]) -> set[Future[R]]:
    return wait(running, return_when=FIRST_COMPLETED).done


def in_background(fn: Callable[[], R], *, name: str = "shaledb-io") -> Future[R]:
    """Start ``fn()`` on its own thread now; its result (or exception) is the future's.

    For a request (or a few) that does not depend on what the caller does next,
    so the two round trips overlap instead of adding up (opening a database:
    pinning SST metadata while the WAL is fenced and replayed). The caller must
    wait for the future before it relies on what ``fn`` did.
    """
    pool = ThreadPoolExecutor(1, thread_name_prefix=name)
    try:
        return pool.submit(fn)
    finally:
        pool.shutdown(wait=False)


def completed(value: R) -> Future[R]:
    """A future that already holds ``value``: for a caller that chose not to start
    the work :func:`in_background` would do (so it waits on a future either way)."""
    fut: Future[R] = Future()
    fut.set_result(value)
    return fut


__all__ = [
    "DEFAULT_MAX_BYTES_IN_FLIGHT",
    "DEFAULT_WORKERS",
    "Progress",
    "check_workers",
    "completed",
    "get_in_order",
    "in_background",
    "run_bounded",
]


class SharedPool:
    """A process-wide thread pool, made on first use and made afresh in a forked child.

    A forked child (multiprocessing, Spark's Python workers) inherits the pool
    object but none of its threads: work submitted there would wait forever, so
    the child forgets it and makes its own on first use.

    The handles that use the pool (``Db``, ``DbReader``) hold it from
    :meth:`acquire` (on open) to :meth:`release` (on close): when the last one
    lets go, its threads are shut down -- before, they outlived every handle for
    the life of the process. Work is submitted under :meth:`lease`, so a close in
    another thread never shuts the pool between taking it and submitting to it:
    the last lease out shuts it down instead. A pool used with no handle open (a
    bulk read) stays until a handle's close, or the process, ends it.
    """

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._users = 0
        self._leases = 0
        self._retire = False
        """The last user let go while leases were out: the last lease shuts the pool down."""
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._pool

    @contextmanager
    def lease(self) -> Iterator[ThreadPoolExecutor]:
        """The pool, not shut down before the ``with`` block ends (submit inside it)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            self._leases += 1
            pool = self._pool
        try:
            yield pool
        finally:
            with self._lock:
                self._leases -= 1
                done = self._retire and not self._leases and not self._users
                if done:
                    self._retire = False
                    if self._pool is pool:
                        self._pool = None
            if done:
                pool.shutdown(wait=True)

    def acquire(self) -> None:
        """A handle uses the pool until its :meth:`release`."""
        with self._lock:
            self._users += 1
            self._retire = False

    def release(self) -> None:
        """A handle is done with the pool; the last one shuts its threads down (after
        the calls already submitted)."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users or self._pool is None:
                return
            if self._leases:
                self._retire = True
                return
            pool, self._pool = self._pool, None
        pool.shutdown(wait=True)

    def _forget(self) -> None:
        self._pool, self._lock = None, threading.Lock()
        self._leases, self._retire = 0, False

"""Scans' read-ahead against the shared pool's shutdown when the last handle closes.

``ChunkFetches.submit`` held its lock while leaving its pool lease. When the last
handle had closed while that lease was out, the lease's exit is the last one and
shuts the pool down, waiting for its running fetches; a fetch finishing then runs
its done callback (``_forget``), which takes the same lock: the scan and the pool
thread waited on each other for ever (stress: two threads opening and closing
handles while three scan through them hung within 15 s). Deterministic: the last
handle's release is made at the submit, and a fetch already in flight finishes
while the lease ends.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from shaledb.engine import scan_ahead
from shaledb.engine.cache import LruCache
from shaledb.engine.scan_ahead import ChunkFetches, ScanAheadLimits
from shaledb.store.parallel import SharedPool


def test_a_scan_ending_the_last_lease_does_not_deadlock_with_a_finishing_fetch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = SharedPool(2, "test-scan-ahead")
    pool.acquire()  # one handle open
    monkeypatch.setattr(scan_ahead, "SCAN_AHEAD_POOL", pool)
    release_fetch = threading.Event()
    monkeypatch.setattr(scan_ahead, "fetch_chunk", lambda r, ci: release_fetch.wait(10) and None)

    class ClosingOnSubmit(ThreadPoolExecutor):
        """The last handle closes (another thread) just as the second fetch is submitted."""

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            f = super().submit(fn, *args, **kwargs)
            if args[1] == 1:
                pool.release()  # a lease is out: the lease's end shuts the pool down
                threading.Timer(0.2, release_fetch.set).start()  # chunk 0 finishes meanwhile
            return f

    pool._pool = ClosingOnSubmit(2, thread_name_prefix="test-scan-ahead")
    fetches = ChunkFetches(ScanAheadLimits(), LruCache(1 << 20), lambda sid: True)
    sst: Any = SimpleNamespace(id="sst-1")
    first = fetches.submit(sst, 0)  # in flight: its done callback takes the fetches' lock
    assert first is not None
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(fetches.submit(sst, 1)), daemon=True)
    t.start()
    t.join(5)
    hung = t.is_alive()
    if hung:  # unstick the old code's deadlock so the process can exit
        fetches._lock.release()
        t.join(5)
    assert not hung, "the scan's submit and the pool's finishing fetch waited on each other"
    assert first.done() and len(done) == 1
    assert pool._pool is None  # the last lease out shut the pool down

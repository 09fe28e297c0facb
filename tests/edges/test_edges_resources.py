"""The resource test (issue 26, item 2): many open/write/scan/close cycles of writers and
readers on each store kind -- memory, a local directory, the local S3 server -- leave
open descriptors, threads and resident memory flat.

Each cycle opens a writer on a fresh database (writes, scans, closes; the database is then
dropped) and a reader on one fixed four-SST database (scans, closes) -- the audit's case:
100 such reader cycles used to leave 400 descriptors open. Resources are sampled after a
warm-up (caches, thread pools and the allocator settle) and at the end.

``SHALEDB_RESOURCE_CYCLES`` (default 250) sets the cycles on memory and local stores,
``SHALEDB_RESOURCE_CYCLES_S3`` (default 20) on the S3 server, where a cycle costs round trips.
The default run measures 200 cycles after the warm-up (16 on S3): a descriptor or thread
per cycle shows at once; a slow memory leak needs the longer run (1000 and 50 cycles).
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, DbReader, Settings
from shaledb.settings import DbReaderOptions
from shaledb.store import drop_memory_store

CYCLES = int(os.environ.get("SHALEDB_RESOURCE_CYCLES", "250"))
CYCLES_S3 = int(os.environ.get("SHALEDB_RESOURCE_CYCLES_S3", "20"))
WRITER = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
READER = DbReaderOptions(background_poll=True, manifest_poll_interval_s=0.5, checkpoint_lifetime_s=60.0)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")


def sample() -> tuple[int, int, int]:
    """(open descriptors, threads, resident KiB) of this process."""
    gc.collect()
    fds = len(os.listdir("/proc/self/fd"))
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return fds, threading.active_count(), rss


def run_cycles(
    cycles: int,
    fresh_url: Callable[[int], str],
    drop: Callable[[str], None],
    fixed: str,
    opts: dict[str, Any],
) -> None:
    with Db.open(fixed, settings=WRITER, store_options=opts) as db:
        for s in range(4):
            for i in range(100):
                db.put(b"fixed-%d-%03d" % (s, i), b"v" * 64)
            db.flush(memtable=True)
    warm = max(1, min(50, cycles // 5))
    base: tuple[int, int, int] | None = None
    for c in range(cycles):
        if c == warm:
            base = sample()
        url = fresh_url(c)
        with Db.open(url, settings=WRITER, store_options=opts) as db:
            for i in range(20):
                db.put(b"k%02d" % i, b"x" * 100)
            db.put(b"last", b"y", durable=True)
            assert sum(1 for _ in db.scan()) == 21
        drop(url)
        with DbReader.open(fixed, options=READER, store_options=opts) as r:
            assert sum(1 for _ in r.scan()) == 400
    end = sample()
    assert base is not None
    print(f"resources after {warm} cycles: {base}; after {cycles}: {end} (fds, threads, RSS KiB)")
    assert end[0] <= base[0] + 4, f"descriptors grew from {base[0]} to {end[0]} over {cycles} cycles"
    assert end[1] <= base[1], f"threads grew from {base[1]} to {end[1]} over {cycles} cycles"
    assert end[2] <= base[2] + 48 * 1024, f"RSS grew from {base[2]} KiB to {end[2]} KiB over {cycles} cycles"


def test_memory_store_cycles_leave_resources_flat() -> None:
    names: list[str] = []

    def fresh(c: int) -> str:
        names.append(f"res-{uuid.uuid4().hex}")
        return f"memory://{names[-1]}"

    fixed = f"res-fixed-{uuid.uuid4().hex}"
    try:
        run_cycles(
            CYCLES, fresh, lambda url: drop_memory_store(url[len("memory://") :]), f"memory://{fixed}", {}
        )
    finally:
        drop_memory_store(fixed)


def test_local_store_cycles_leave_resources_flat(tmp_path: Path) -> None:
    run_cycles(
        CYCLES,
        lambda c: str(tmp_path / f"w{c}"),
        shutil.rmtree,
        str(tmp_path / "fixed"),
        {},
    )


def test_s3_store_cycles_leave_resources_flat(s3_url_factory: Callable[[], Any]) -> None:
    fixed = s3_url_factory()
    run_cycles(CYCLES_S3, lambda c: s3_url_factory().url, lambda url: None, fixed.url, fixed.options)

"""Index and filter of every SST are pinned on open, read in parallel, and unpinned when
their SSTs leave the database."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from shaledb import Db
from shaledb.clock import SystemClock
from shaledb.settings import CompactorOptions, Settings
from shaledb.store import LatencyStore, open_store


def _fill(url: str, ssts: int) -> None:
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        for s in range(ssts):
            for i in range(50):
                db.put(b"k%03d-%04d" % (s, i), b"v")
            db.flush(memtable=True)
        assert len(db.manifest.data.l0) == ssts


def test_open_pins_every_sst_with_tail_reads_in_parallel(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    _fill(url, 8)
    latency = 0.2
    inflight = peak = 0
    lock = threading.Lock()

    class Counting(LatencyStore):
        def get_range(self, path: str, start: int, end: int) -> bytes:
            nonlocal inflight, peak
            with lock:
                inflight += 1
                peak = max(peak, inflight)
            try:
                return super().get_range(path, start, end)
            finally:
                with lock:
                    inflight -= 1

    store = Counting(open_store(url), SystemClock(), latency)
    with Db.open(store=store, settings=Settings(compactor=None, garbage_collector=None)) as db:
        assert set(db.tables.pinned) == {i.id for i in db.manifest.data.l0}
        assert peak > 1  # the eight tail reads overlapped
        before = db.metrics()["store_requests_total"]["get_range"]
        for s in range(8):
            assert db.get(b"k%03d-%04d" % (s, 7)) == b"v"
        # One data-block read per SST at most, no tail read: the metadata was pinned on open.
        assert db.metrics()["store_requests_total"]["get_range"] - before <= 8


def test_compaction_unpins_the_ssts_it_replaced(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    _fill(url, 4)
    settings = Settings(
        compactor=CompactorOptions(poll_interval_s=0.05, min_l0_ssts=2, min_merge_runs=2),
        garbage_collector=None,
    )
    with Db.open(url, settings=settings) as db:
        old = set(db.tables.pinned)
        assert len(old) == 4
        deadline = time.monotonic() + 30
        while db.manifest.data.l0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not db.manifest.data.l0
        assert db.get(b"k002-0003") == b"v"
        live = {i.id for i in db.manifest.all_ssts()}
        assert set(db.tables.pinned) <= live
        assert not (set(db.tables.pinned) & old)

"""Audit finding 4: a closed handle leaves the process as it found it. Db.close() and
DbReader.close() (and the standalone compactor and GC, and every admin call) close
the stores they opened -- with them the local store's cached descriptors -- and only
those: a store the caller passed in stays the caller's."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, DbReader, NotFound, Settings, admin
from shaledb.admin.gc import GarbageCollector
from shaledb.compaction import Compactor
from shaledb.settings import DbReaderOptions, GcOptions
from shaledb.store import StoreWrapper, open_store

QUIET = Settings(compactor=None, garbage_collector=None)
READER = DbReaderOptions(background_poll=False, establish_checkpoint=False)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


def make_db(url: str, ssts: int = 4) -> None:
    with Db.open(url, settings=QUIET) as db:
        for s in range(ssts):
            for i in range(50):
                db.put(b"k%03d-%d" % (i, s), b"v" * 100)
            db.flush(memtable=True)
        assert len(db.manifest.data.l0) == ssts


class CountingStore(StoreWrapper):
    """A caller's store that remembers whether anyone closed it."""

    closes = 0

    def close(self) -> None:
        self.closes += 1
        super().close()


def test_open_scan_close_cycles_leave_no_descriptors(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    make_db(url)
    threads = threading.active_count()
    before = open_fds()
    for _ in range(100):
        with Db.open(url, settings=QUIET) as db:
            assert sum(1 for _ in db.scan()) == 200
        with DbReader.open(url, options=READER) as r:
            assert sum(1 for _ in r.scan()) == 200
    assert open_fds() - before <= 2, "descriptors leaked by closed handles"
    assert threading.active_count() <= threads


def test_a_store_passed_in_stays_the_callers(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    make_db(url)
    store = CountingStore(open_store(url))
    with Db.open(store=store, settings=QUIET) as db:
        assert db.get(b"k000-0") == b"v" * 100
    with DbReader.open(store=store, options=READER) as r:
        assert r.get(b"k000-0") == b"v" * 100
    gc = GarbageCollector.open(store=store, options=GcOptions(min_age_s=3600))
    gc.run_once()
    gc.close()
    c = Compactor.open(store=store)
    c.close()
    admin.list_checkpoints(store=store)
    assert store.closes == 0
    assert store.get("manifest/00000000000000000001.manifest")  # still usable


def test_handles_close_the_stores_they_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(tmp_path / "db")
    make_db(url)
    opened: list[Any] = []
    from shaledb.store import stack

    real = stack.open_store

    def counting(u: str, **kw: Any) -> Any:
        st = CountingStore(real(u, **kw))
        opened.append(st)
        return st

    monkeypatch.setattr(stack, "open_store", counting)
    with Db.open(url, settings=QUIET) as db:
        db.get(b"k000-0")
    with DbReader.open(url, options=READER) as r:
        r.get(b"k000-0")
    GarbageCollector.open(url, GcOptions(min_age_s=3600)).close()
    Compactor.open(url).close()
    admin.list_checkpoints(url)
    with pytest.raises(NotFound):
        Db.open(str(tmp_path / "missing"), settings=QUIET, create_if_missing=False)
    with pytest.raises(NotFound):
        DbReader.open(str(tmp_path / "missing"), options=READER)
    assert len(opened) == 7
    assert [s.closes for s in opened] == [1] * 7, [(s.describe(), s.closes) for s in opened]


def test_a_clone_closes_the_parent_store_it_opened(tmp_path: Path) -> None:
    parent = str(tmp_path / "p")
    make_db(parent)
    Db.open_from_checkpoint(str(tmp_path / "c"), parent, settings=QUIET).close()
    before = open_fds()
    for _ in range(30):
        with Db.open(str(tmp_path / "c"), settings=QUIET) as db:
            assert sum(1 for _ in db.scan()) == 200  # the SSTs are read from the parent's store
        with DbReader.open(str(tmp_path / "c"), options=READER) as r:
            assert sum(1 for _ in r.scan()) == 200
    assert open_fds() - before <= 2

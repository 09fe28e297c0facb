"""``shaledb stats`` and ``shaledb get`` read only what they show: neither fetches every
SST's index and filter blocks at open (``DbReaderOptions.pin_metadata_on_open=False``).
Before, ``stats`` on a slow store spent a round trip per 16 SSTs on blocks it never used,
and a ``get`` paid for every SST to read one key."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaledb import Db, DbReader, DbReaderOptions, Settings
from shaledb.format import paths
from shaledb.store import InstrumentedStore, ObjectStore, open_store
from shaledb.store.base import ObjectMeta
from shaledb.store.wrappers import StoreWrapper

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
BASE = [sys.executable, "-m", "shaledb"]


def _db_with_ssts(path: Path, n: int) -> None:
    with Db.open(str(path), settings=QUIET) as db:
        for i in range(n):
            db.put(b"key%04d" % i, b"value%d" % i)
            db.flush(memtable=True)


def _stats(path: Path) -> dict[str, int]:
    p = subprocess.run(
        [*BASE, "--path", str(path), "--json", "stats"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def test_stats_requests_do_not_grow_with_the_ssts(tmp_path: Path) -> None:
    _db_with_ssts(tmp_path / "few", 2)
    _db_with_ssts(tmp_path / "many", 14)
    few, many = _stats(tmp_path / "few"), _stats(tmp_path / "many")
    assert few["l0_ssts"] == 2 and many["l0_ssts"] == 14
    assert many["store_requests"] == few["store_requests"], (few, many)


def test_a_reader_that_does_not_pin_reads_only_what_a_get_needs(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    _db_with_ssts(tmp_path / "db", 12)

    def opened(pin: bool) -> tuple[int, int, bytes | None]:
        store = InstrumentedStore(open_store(url))
        opts = DbReaderOptions(establish_checkpoint=False, background_poll=False, pin_metadata_on_open=pin)
        with DbReader.open(url, options=opts, store=store) as r:
            at_open = store.snapshot().requests.get("get_range", 0)
            value = r.get(b"key0007")
        return at_open, store.snapshot().requests.get("get_range", 0), value

    pinned_open, _, value = opened(True)
    assert value == b"value7" and pinned_open >= 12  # every SST's index and filter
    lazy_open, lazy_total, value = opened(False)
    assert value == b"value7" and lazy_open == 0 and lazy_total < pinned_open


class _ListingFirst(StoreWrapper):
    """Holds the manifest GET until the WAL listing has begun: ``stats`` made its requests one
    after another, the listing after the open's, so on a slow store their round trips added
    up; run one after the other here, the GET waits in vain and fails the command."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.listing = threading.Event()

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        if prefix.startswith(paths.WAL_DIR):
            self.listing.set()
        return self.inner.list(prefix, offset=offset)

    def get(self, path: str) -> bytes:
        if path.startswith(paths.MANIFEST_DIR) and not self.listing.wait(10):
            raise RuntimeError("the manifest GET came first and the WAL listing never started beside it")
        return self.inner.get(path)


def test_stats_lists_the_wal_while_the_reader_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shaledb.cli.app import main
    from shaledb.store import stack

    _db_with_ssts(tmp_path / "db", 2)
    real = stack.open_store
    gates: list[_ListingFirst] = []

    def gated(url: str, **options: object) -> ObjectStore:
        gates.append(_ListingFirst(real(url, **options)))  # type: ignore[arg-type]
        return gates[-1]

    monkeypatch.setattr(stack, "open_store", gated)
    rc = main(["--path", str(tmp_path / "db"), "--json", "stats"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    got = json.loads(out.out)
    assert len(gates) == 1 and got["l0_ssts"] == 2 and got["wal_objects"] >= 2
    # LIST manifest/, GET the manifest, probe the next WAL object, LIST wal/: as many as before.
    assert got["store_requests"] == 4, got

"""``shaledb stats`` and ``shaledb get`` read only what they show: neither fetches every
SST's index and filter blocks at open (``DbReaderOptions.pin_metadata_on_open=False``).
Before, ``stats`` on a slow store spent a round trip per 16 SSTs on blocks it never used,
and a ``get`` paid for every SST to read one key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shaledb import Db, DbReader, DbReaderOptions, Settings
from shaledb.store import InstrumentedStore, open_store

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

"""A scan pins its snapshot exactly as long as someone can still read from it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from shaledb import Db, Settings
from shaledb.store import ObjectStore


@pytest.fixture
def db(memory_store: ObjectStore) -> Iterator[Db]:
    """50 keys in the memtable; closed even when a test fails."""
    with Db.open(store=memory_store, settings=Settings(compactor=None, garbage_collector=None)) as db:
        for i in range(50):
            db.put(b"k%03d" % i, b"v", durable=False)
        yield db


def _pins(db: Db) -> int:
    return sum(db._mem.pins.values())


def test_a_for_loop_over_a_temporary_scan_keeps_its_pin_until_the_end(db: Db) -> None:
    seen = []
    for k, _ in db.scan():
        gc.collect()  # the Scan object itself is garbage by now; the rows must not be
        seen.append(k)
        db.put(b"k000", b"changed", durable=False)  # after the scan started: invisible to it
        assert _pins(db) == 1
    assert len(seen) == 50
    assert _pins(db) == 0


def test_scans_that_never_start_or_stop_early_release_their_pins(db: Db) -> None:
    never = db.scan()
    partial = db.scan()
    assert next(partial)[0] == b"k000"
    assert _pins(db) == 2
    del never, partial
    gc.collect()
    assert _pins(db) == 0
    with db.scan(limit=3) as s:
        assert [k for k, _ in s] == [b"k000", b"k001", b"k002"]
    assert _pins(db) == 0
    closed = db.scan()
    closed.close()
    assert _pins(db) == 0 and list(closed) == []


def test_a_scan_reads_the_state_of_when_it_was_called(db: Db) -> None:
    it = db.scan()
    db.delete(b"k001", durable=False)
    db.put(b"k001x", b"new", durable=False)
    keys = [k for k, _ in it]
    assert b"k001" in keys and b"k001x" not in keys
    assert b"k001" not in [k for k, _ in db.scan()]

"""Scans hand out rows a block at a time (``Scan.of_chunks``: lists of a block's pairs
through ``itertools.chain``), from blocks decoded in place when their shape is known
(``format.block.decode_stored``). Checked against a dict model: forward and reverse,
bounds, prefixes and limits, over one SST and over several sources with overwrites,
deletes and range deletes; snapshots keep their view; closing a scan mid-block (or
dropping it unstarted) stops its rows and releases its pin."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator

import pytest
from engine_support import SMALL_BLOCKS, key, model_scan

from shaledb import Db
from shaledb.format import block as block_mod


@pytest.fixture
def db(mem_url: str) -> Iterator[Db]:
    with Db.open(mem_url, settings=SMALL_BLOCKS) as d:
        yield d


def _check_random_scans(db: Db, model: dict[bytes, bytes], rng: random.Random, n: int, rounds: int) -> None:
    for _ in range(rounds):
        a, b = sorted(rng.randrange(-5, n + 5) for _ in range(2))
        start = None if rng.random() < 0.2 else key(a) + rng.choice((b"", b"\x00"))
        end = None if rng.random() < 0.2 else key(b)
        reverse = rng.random() < 0.5
        limit = rng.choice((None, None, 0, 1, 7, 100, 1000))
        got = list(db.scan(start, end, reverse=reverse, limit=limit))
        assert got == model_scan(model, start, end, reverse, limit), (start, end, reverse, limit)
    prefix = key(rng.randrange(n))[:-2]
    want = sorted((k, v) for k, v in model.items() if k.startswith(prefix))
    assert list(db.scan(prefix=prefix)) == want
    assert list(db.scan(prefix=prefix, reverse=True)) == want[::-1]


def test_scans_of_one_sst_match_the_model(db: Db, seed: int) -> None:
    rng = random.Random(seed)
    n = 3000
    model = {key(i): rng.randbytes(24) for i in range(n)}  # one width: blocks decoded in place
    for k, v in model.items():
        db.put(k, v, durable=False)
    db.flush(memtable=True)
    block_mod._shapes.clear()
    for _ in range(2):  # cold, then from the block cache
        _check_random_scans(db, model, rng, n, 150)
    assert block_mod._shapes  # the full blocks were decoded in place


def test_scans_over_several_sources_match_the_model(db: Db, seed: int) -> None:
    rng = random.Random(seed)
    n = 2000
    model: dict[bytes, bytes] = {}
    for layer in range(4):
        for i in rng.sample(range(n), n // 2):
            if rng.random() < 0.1:
                db.delete(key(i), durable=False)
                model.pop(key(i), None)
            else:
                v = rng.randbytes(16 if layer % 2 else rng.randrange(0, 40))
                db.put(key(i), v, durable=False)
                model[key(i)] = v
        if layer == 2:
            a = rng.randrange(n - 100)
            db.delete_range(key(a), key(a + 80), durable=False)
            for i in range(a, a + 80):
                model.pop(key(i), None)
        if layer < 3:
            db.flush(memtable=True)  # the last layer stays in the memtable
        _check_random_scans(db, model, rng, n, 40)


def test_a_snapshot_scans_its_view_while_the_database_changes(db: Db, seed: int) -> None:
    rng = random.Random(seed)
    n = 1500
    model = {key(i): rng.randbytes(20) for i in range(n)}
    for k, v in model.items():
        db.put(k, v, durable=False)
    db.flush(memtable=True)
    snap = db.snapshot()
    before = dict(model)
    it = iter(snap.scan())
    head = [next(it) for _ in range(10)]
    for i in rng.sample(range(n), 300):
        db.put(key(i), b"new", durable=False)
        model[key(i)] = b"new"
    db.delete_range(key(100), key(400), durable=False)
    for i in range(100, 400):
        model.pop(key(i), None)
    db.flush(memtable=True)
    assert head + list(it) == model_scan(before, None, None, False, None)
    assert list(snap.scan(reverse=True, limit=50)) == model_scan(before, None, None, True, 50)
    assert list(db.scan()) == model_scan(model, None, None, False, None)
    snap.close()


def _pinned(db: Db) -> int:
    """Views pinned on the memtable (a scan pins one until it is closed or collected)."""
    return sum(db._view.mem.pins.values())


def test_closing_a_scan_mid_block_stops_its_rows_and_releases_its_pin(db: Db, seed: int) -> None:
    rng = random.Random(seed)
    n = 2000
    for i in range(n):
        db.put(key(i), b"v%05d" % i, durable=False)
    db.flush(memtable=True)
    idle = _pinned(db)
    for reverse in (False, True):
        s = db.scan(reverse=reverse)
        taken = rng.randrange(1, 40)  # inside the first block (1 KiB: ~60 rows)
        rows = [next(s) for _ in range(taken)]
        assert _pinned(db) > idle
        s.close()
        assert _pinned(db) == idle
        with pytest.raises(StopIteration):
            next(s)
        assert list(s) == []
        assert len(rows) == taken
        with db.scan(reverse=reverse, limit=5) as s2:  # a `with` closes too
            assert len(list(s2)) == 5
        assert _pinned(db) == idle
    s3 = db.scan()
    assert _pinned(db) > idle
    del s3  # dropped before its first row: the pin goes with it
    gc.collect()
    assert _pinned(db) == idle
    s4 = db.scan(key(10), key(20))
    assert next(s4)[0] == key(10)
    del s4  # dropped mid-block
    gc.collect()
    assert _pinned(db) == idle

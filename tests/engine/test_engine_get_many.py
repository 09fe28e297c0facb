"""``get_many``: the values ``get`` would give, in order, from one consistent view, in parallel."""

from __future__ import annotations

import random
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from shaledb import ClosedError, Db, DbReader, InvalidArgument, WriteBatch
from shaledb.store import drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed
from shaledb.testing.strategies import tiny_settings


@pytest.fixture(params=["memory", "local"])
def url(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "local":
        yield str(tmp_path / "db")
        return
    name = f"get-many-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    drop_memory_store(name)


def _fill(db: Db, rng: random.Random) -> None:
    for i in range(600):
        k = b"k%04d" % rng.randrange(400)
        if rng.random() < 0.15:
            db.delete(k, durable=False)
        else:
            db.put(k, k + b"=%d" % i * rng.randrange(1, 30), durable=False)
        if i % 150 == 149:
            db.flush(memtable=True)  # memtable, frozen memtables and L0 SSTs all hold versions


def test_equals_get_in_order_for_every_source_and_worker_count(url: str) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    clock = ManualClock()
    with Db.open(url, settings=tiny_settings(value_separation_threshold=64), clock=clock) as db:
        _fill(db, rng)
        db.put(b"gone-soon", b"x", ttl=timedelta(seconds=1))
        clock.advance(2)  # expired
        keys = [b"k%04d" % rng.randrange(420) for _ in range(300)] + [b"gone-soon", b"k0001", b"k0001"]
        want = [db.get(k) for k in keys]
        assert any(v is None for v in want) and any(v is not None and len(v) > 64 for v in want)
        for workers in (1, 3, 8, 64):
            assert db.get_many(keys, workers=workers) == want
        assert db.get_many([]) == []
        with db.snapshot() as snap:
            db.put(keys[0], b"after the snapshot")
            assert snap.get_many(keys) == want
        want = [b"after the snapshot" if k == keys[0] else v for k, v in zip(keys, want, strict=True)]
    with DbReader.open(url) as r:
        assert r.get_many(keys) == want
        with r.snapshot() as rs:
            assert rs.get_many(iter(keys), workers=2) == want


def test_one_consistent_view_while_a_writer_writes(url: str) -> None:
    keys = [b"key%03d" % i for i in range(64)]  # every batch writes them all, one version
    with Db.open(url, settings=tiny_settings()) as db:
        db.write(_version(keys, 0))
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                db.write(_version(keys, n), durable=False)
                if n % 50 == 0:
                    db.flush(memtable=True)

        t = threading.Thread(target=writer)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # switch threads often: the writer lands between lookups
        t.start()
        try:
            for _ in range(200):
                got = db.get_many(keys, workers=4)
                assert len(set(got)) == 1, sorted(set(got))  # one version, though 4 threads read
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)


def _version(keys: list[bytes], n: int) -> WriteBatch:
    b = WriteBatch()
    for k in keys:
        b.put(k, b"%d" % n)
    return b


def test_bad_input_is_refused_before_anything_is_read(url: str) -> None:
    with Db.open(url, settings=tiny_settings()) as db:
        db.put(b"a", b"1")
        for bad in ([b"a", b""], [b"a", "text"], [b"a", b"x" * 70_000]):
            with pytest.raises(InvalidArgument):
                db.get_many(bad)  # type: ignore[arg-type]
        for workers in (0, -2):
            with pytest.raises(InvalidArgument):
                db.get_many([b"a"], workers=workers)
        assert db.get_many([bytearray(b"a")]) == [b"1"]  # type: ignore[list-item]
        snap = db.snapshot()
        snap.close()
        with pytest.raises(ClosedError):
            snap.get_many([b"a"])
    with pytest.raises(ClosedError):
        db.get_many([b"a"])


def test_a_failing_read_in_one_slice_is_raised_after_every_slice_ends() -> None:
    name = f"get-many-{uuid.uuid4().hex}"
    try:
        with Db.open(f"memory://{name}", settings=tiny_settings()) as db:
            for i in range(300):
                db.put(b"k%04d" % i, b"v" * 40, durable=False)
            db.flush(memtable=True)
        faults = FaultInjectingStore(open_store(f"memory://{name}"), seed=5)
        db = Db.open(store=faults, settings=tiny_settings())
        faults.add_rule("crash", ops="read", path_prefix="compacted/", nth=3)
        with pytest.raises(SimulatedCrash):
            db.get_many([b"k%04d" % i for i in range(0, 300, 7)], workers=4)
        assert not any(t.name.startswith("shaledb-get") and _busy(t) for t in threading.enumerate())
        with pytest.raises(SimulatedCrash):
            db.close()  # the "process" died: its store refuses everything
    finally:
        drop_memory_store(name)


def _busy(t: threading.Thread) -> bool:
    """A pool thread running a lookup right now (idle ones wait on the pool's queue)."""
    frame = sys._current_frames().get(t.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "run" and "reads.py" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


POOL_LIFETIME = r"""
import threading, sys
from shaledb import Db, DbReader, Settings

def pool_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith(("shaledb-get", "shaledb-scan"))]

url = sys.argv[1]
keys = [b"k%04d" % i for i in range(200)]
db = Db.open(url, settings=Settings(compactor=None, garbage_collector=None))
for k in keys:
    db.put(k, k, durable=False)
db.flush(memtable=True)
assert db.get_many(keys, workers=8) == keys
assert pool_threads(), "get_many ran on the pool"
reader = DbReader.open(url)
db.close()
assert pool_threads(), "the reader still holds the pool"
assert reader.get_many(keys, workers=8) == keys
reader.close()
assert not pool_threads(), pool_threads()
with Db.open(url) as db:  # a later handle makes the pool afresh
    assert db.get_many(keys, workers=8) == keys
    assert pool_threads()
assert not pool_threads(), pool_threads()
print("ok")
"""


def test_the_get_many_pool_ends_with_the_last_handle(tmp_path: Path) -> None:
    # The shared pool's threads (shaledb-get...) outlived every Db and DbReader for the life of
    # the process. Run in a child: handles other tests leave open would hold the pool here.
    import subprocess

    argv = [sys.executable, "-c", POOL_LIFETIME, str(tmp_path / "db")]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]

"""The store exchange of a bulk load: staged runs, part bounds, gathers, damage, cleanup, GC."""

from __future__ import annotations

import random
import time

import pytest

from shaledb import Db, GarbageCollector, GcOptions
from shaledb.bulk.ingest import abort_ingest, begin_ingest, open_ingest_store
from shaledb.bulk.ingest.exchange import (
    assign,
    choose_bounds,
    delete_staged,
    gather,
    new_exchange_id,
    stage_run,
)
from shaledb.errors import CorruptionError, InvalidPathError, ObjectNotFound
from shaledb.format import paths
from shaledb.store import open_store
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

# Needs the spark extra (pyarrow, numpy), so it runs with the Spark tests; it starts no JVM.
pytestmark = pytest.mark.spark

EXCHANGE = "01JDZZZZZZZZZZZZZZZZZZZZZZ"


def run_table(rows: list[tuple[bytes, bytes]]) -> pa.Table:
    rows = sorted(rows)
    return pa.table(
        {
            "key": pa.array([k for k, _ in rows], pa.binary()),
            "value": pa.array([v for _, v in rows], pa.binary()),
        }
    )


def random_runs(rng: random.Random, nruns: int) -> list[list[tuple[bytes, bytes]]]:
    """Runs of random sizes whose keys overlap, some keys in several runs (with one value each)."""
    shared = [rng.randbytes(rng.randrange(1, 6)) for _ in range(30)]
    runs = []
    for r in range(nruns):
        keys = {rng.randbytes(rng.randrange(1, 9)) for _ in range(rng.randrange(0, 3000))}
        keys |= set(rng.sample(shared, 5))
        runs.append([(k, k[::-1] + bytes([r])) for k in keys])
    return runs


def stage_all(store, runs, parts, batch_rows):
    staged = [
        stage_run(store, run_table(r), exchange_id=EXCHANGE, parts=parts, batch_rows=batch_rows) for r in runs
    ]
    return [s for s in staged if s is not None]


def test_every_row_reaches_exactly_the_part_of_its_key_range(memory_store):
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(4):
        runs = random_runs(rng, rng.randrange(1, 5))
        parts = rng.randrange(1, 7)
        staged = stage_all(memory_store, runs, parts, batch_rows=rng.choice([1, 7, 100, 8192]))
        bounds = choose_bounds(staged, parts)
        assert bounds == sorted(set(bounds)) and len(bounds) <= parts - 1
        got: list[tuple[bytes, bytes]] = []
        for task in assign(staged, bounds):
            table = gather(memory_store, task)
            if table is None:
                continue
            keys = table.column("key").to_pylist()
            assert all((task.lo is None or k >= task.lo) and (task.hi is None or k < task.hi) for k in keys)
            got += zip(keys, table.column("value").to_pylist())
        assert sorted(got) == sorted(row for r in runs for row in r)  # each row once, shared keys too


def test_bounds_split_rows_evenly_by_run_size(memory_store):
    rng = random.Random(7)
    big = [(rng.randbytes(16), b"v") for _ in range(40_000)]
    small = [(rng.randbytes(16), b"v") for _ in range(2_000)]
    staged = stage_all(memory_store, [big, small], parts=4, batch_rows=1000)
    tasks = assign(staged, choose_bounds(staged, 4))
    sizes = [gather(memory_store, t).num_rows for t in tasks]
    assert len(sizes) == 4 and sum(sizes) == 42_000
    assert max(sizes) < 1.35 * 42_000 / 4, sizes
    assert choose_bounds(staged, 1) == []


def test_a_part_reads_only_the_batches_that_may_hold_its_keys(memory_store):
    rows = [(b"%05d" % i, b"x") for i in range(1000)]
    (run,) = stage_all(memory_store, [rows], parts=4, batch_rows=100)
    (task,) = [t for t in assign([run], [b"00250", b"00500"]) if t.lo == b"00250"]
    ((_, batches),) = task.runs
    assert [b.first_key for b in batches] == [b"00200", b"00300", b"00400"]
    assert gather(memory_store, task).column("key").to_pylist() == [b"%05d" % i for i in range(250, 500)]


def test_a_damaged_staged_batch_is_refused(memory_store):
    rows = [(b"%05d" % i, b"value-%d" % i) for i in range(500)]
    (run,) = stage_all(memory_store, [rows], parts=2, batch_rows=100)
    data = bytearray(memory_store.get(run.path))
    data[run.batches[2].start + 40] ^= 0x01
    memory_store.put(run.path, bytes(data))
    (task,) = assign([run], [])
    with pytest.raises(CorruptionError, match="checksum") as err:
        gather(memory_store, task)
    assert err.value.path == run.path


def test_a_missing_staged_run_and_cleanup(memory_store):
    runs = stage_all(memory_store, [[(b"a", b"1")], [(b"b", b"2")]], parts=2, batch_rows=10)
    assert len(list(memory_store.list(paths.stage_prefix(EXCHANGE)))) == 2
    assert delete_staged(memory_store, EXCHANGE) == 2
    assert list(memory_store.list(paths.STAGE_DIR)) == []
    with pytest.raises(ObjectNotFound):
        gather(memory_store, assign(runs, [])[0])
    assert stage_run(memory_store, run_table([]), exchange_id=EXCHANGE, parts=2) is None


def test_staged_run_names_stay_under_their_prefix():
    run = "01JE0000000000000000000000"
    assert paths.parse_stage_id(paths.stage_path(EXCHANGE, run)) == run
    assert paths.parse_stage_id(f"tmp/stage/{EXCHANGE}/../x.arrows") is None
    assert paths.parse_stage_id(f"tmp/{run}.arrows") is None
    with pytest.raises(InvalidPathError):
        paths.stage_prefix("../../compacted")
    assert new_exchange_id(EXCHANGE) == EXCHANGE
    assert paths.check_ulid(new_exchange_id(None, ManualClock(start=1_700_000_000.0), random.Random(1)))


def test_gc_keeps_staged_runs_while_the_ingest_lease_lives(tmp_path):
    url = str(tmp_path / "db")
    Db.open(url).close()  # not created by the ingest: its abort would delete the database whole
    plan = begin_ingest(url, ingest_id="staged")
    store = open_ingest_store(url)
    assert plan.lease_id is not None
    run = stage_run(store, run_table([(b"k", b"v")]), exchange_id=plan.lease_id, parts=1)
    assert run is not None
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    assert gc.run_once().deleted["tmp"] == []  # the load still holds its lease
    store.head(run.path)
    abort_ingest(plan, [], url)  # the load is gone and left its runs behind
    assert gc.run_once().deleted["tmp"] == [run.path]
    with pytest.raises(ObjectNotFound):
        store.head(run.path)


def test_a_staged_run_is_an_arrow_ipc_stream_as_documented(memory_store):
    """docs/format/staged-run.md: schema, batches of at most batch_rows rows, end-of-stream."""
    rows = [(b"%03d" % i, b"v%d" % i) for i in range(25)]
    (run,) = stage_all(memory_store, [rows], parts=1, batch_rows=10)
    data = memory_store.get(run.path)
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00") and data.startswith(run.schema)
    reader = pa.ipc.open_stream(data)
    assert reader.schema.names == ["key", "value"]
    batches = list(reader)
    assert [b.num_rows for b in batches] == [10, 10, 5]
    assert [(b.first_key, b.last_key) for b in run.batches] == [
        (b"000", b"009"),
        (b"010", b"019"),
        (b"020", b"024"),
    ]
    assert run.batches[0].start == len(run.schema) and run.batches[-1].end == len(data) - 8
    assert pa.Table.from_batches(batches).column("key").to_pylist() == [k for k, _ in rows]


def test_a_run_staged_by_a_task_whose_clock_is_behind_the_lease_is_kept(tmp_path):
    """A task's clock a minute behind the driver's, which named the lease: its run was born
    "before" the lease started, so the lease did not cover it and a pass at ``min_age_s=0``
    deleted it while the load still needed it."""
    url = str(tmp_path / "db")
    Db.open(url).close()
    plan = begin_ingest(url, ingest_id="behind")
    store = open_ingest_store(url)
    assert plan.lease_id is not None
    behind = ManualClock(start=paths.ulid_time_s(plan.lease_id) - 60.0)
    run = stage_run(store, run_table([(b"k", b"v")]), exchange_id=plan.lease_id, parts=1, clock=behind)
    assert run is not None
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    try:
        assert gc.run_once().deleted["tmp"] == []
    finally:
        gc.close()
    store.head(run.path)
    abort_ingest(plan, [], url)


def test_a_load_that_began_during_the_pass_keeps_its_staged_runs(tmp_path):
    """The pass listed the leases (none), then a load began and staged a run before the pass
    listed ``tmp/``; with the collector's clock ahead of the load's, the run was older than
    ``min_age_s=0`` and before every lease the pass knew: deleted under the running load."""
    from shaledb.store.base import ObjectMeta
    from shaledb.store.wrappers import StoreWrapper

    url = str(tmp_path / "db")
    Db.open(url).close()
    staged = []

    class BeginOnTmpListing(StoreWrapper):
        def list(self, prefix, *, offset=None):  # type: ignore[no-untyped-def]
            if prefix.startswith(paths.TMP_DIR) and not staged:
                plan = begin_ingest(url, ingest_id="mid-pass")
                assert plan.lease_id is not None
                run = stage_run(
                    open_ingest_store(url), run_table([(b"k", b"v")]), exchange_id=plan.lease_id, parts=1
                )
                staged.append((plan, run))
            out: list[ObjectMeta] = list(self.inner.list(prefix, offset=offset))
            return iter(out)

    class Ahead:
        def now(self) -> float:
            return time.time() + 10.0

        def monotonic(self) -> float:
            return time.monotonic()

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

        def wait(self, event, timeout):  # type: ignore[no-untyped-def]
            return event.wait(timeout)

    gc = GarbageCollector.open(store=BeginOnTmpListing(open_store(url)), clock=Ahead())
    try:
        assert gc.run_once(min_age_s=0).deleted["tmp"] == []
    finally:
        gc.close()
    plan, run = staged[0]
    open_store(url).head(run.path)
    abort_ingest(plan, [], url)

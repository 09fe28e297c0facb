"""The garbage collector at ``min_age_s=0`` against writes not committed yet.

A writer's flush writes its L0 SST, then the manifest that names it; a compaction writes its
outputs under a job lease, then commits. In between, the objects are in no manifest. The pass is
injected exactly there through store wrappers, so each interleaving happens on every run.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

import pytest
from gc_support import ActOnSstListing, FutureClock, memory_store, sst_ids

from shaledb import CompactorOptions, Db, DbReader, GarbageCollector, GcOptions, Settings
from shaledb.admin.gc import UNCOMMITTED_MIN_AGE_S
from shaledb.compaction import Compactor
from shaledb.errors import ShaleError
from shaledb.format import paths
from shaledb.store import ObjectStore
from shaledb.store.wrappers import StoreWrapper

NO_BG = Settings(l0_max_ssts=1000, compactor=None, garbage_collector=None)


class BeforeManifestPut(StoreWrapper):
    """Runs ``act`` once, when armed, before the next manifest write goes through."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.act: Callable[[], None] | None = None

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if self.act is not None and path.startswith(paths.MANIFEST_DIR):
            act, self.act = self.act, None
            act()
        self.inner.put(path, data, create=create, attributes=attributes)


def _put(db: Db, tag: bytes, n: int = 50) -> dict[bytes, bytes]:
    rows = {b"k%03d" % i: tag + b"%d" % i for i in range(n)}
    for k, v in rows.items():
        db.put(k, v, durable=False)
    return rows


def test_a_pass_at_min_age_zero_between_a_flushs_sst_and_its_manifest_keeps_the_sst(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The L0 SST was unreferenced and "old enough" at ``min_age_s=0``: the pass deleted it and
    the flush then committed a manifest naming a missing SST (every later open failed)."""
    with memory_store() as mem:
        hook = BeforeManifestPut(mem)
        db = Db.open(store=hook, settings=NO_BG)
        model = _put(db, b"a")
        db.flush(memtable=True)
        model.update(_put(db, b"b", 80))
        reports = []

        def collect() -> None:
            gc = GarbageCollector(mem, GcOptions(min_age_s=0), clock=db.clock, rng=db.rng)
            reports.append(gc.run_once())

        hook.act = collect
        with caplog.at_level(logging.INFO, logger="shaledb.gc"):
            db.flush(memtable=True)  # its SST is written; the pass runs; then its manifest
        db.close()
        assert reports and not reports[0].deleted["sst"], reports[0].deleted["sst"]
        assert reports[0].in_flight_kept == 1
        assert any("writes no manifest has committed yet" in r.getMessage() for r in caplog.records)
        with Db.open(store=mem, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


def test_a_dead_writers_uncommitted_sst_is_collected_once_older_than_the_floor() -> None:
    """What the floor keeps is a true orphan when its writer died before the commit: it goes
    once older than ``UNCOMMITTED_MIN_AGE_S``; committed data stays readable."""
    with memory_store() as mem:
        hook = BeforeManifestPut(mem)
        db = Db.open(store=hook, settings=NO_BG)
        model = _put(db, b"a")
        db.flush(memtable=True)
        committed = sst_ids(mem)
        model.update(_put(db, b"b", 30))  # in the WAL, then in the orphan

        class Killed(BaseException):
            pass

        def die() -> None:
            raise Killed

        hook.act = die
        with pytest.raises(ShaleError):  # the writer stops, its flush uploaded and uncommitted
            db.flush(memtable=True)
        orphan = sst_ids(mem) - committed
        assert len(orphan) == 1
        kept = GarbageCollector(mem, GcOptions(), clock=db.clock, rng=db.rng).run_once(min_age_s=0)
        assert not kept.deleted["sst"]
        later = FutureClock(UNCOMMITTED_MIN_AGE_S + 5)
        gc = GarbageCollector(mem, GcOptions(), clock=later, rng=db.rng)
        gone = gc.run_once(min_age_s=0)
        assert gone.deleted["sst"] == [paths.sst_path(next(iter(orphan)))]
        assert sst_ids(mem) == committed
        with DbReader.open(store=mem) as r:
            assert dict(r.scan()) == model


def test_a_compaction_started_after_the_pass_listed_the_leases_keeps_its_outputs() -> None:
    """The pass listed the job leases (none), then a compaction started and wrote its outputs
    before the pass listed ``compacted/``. With the collector's clock ahead of the compactor's
    (skew), the outputs were older than ``min_age_s=0`` and before every lease the pass knew:
    deleted, and the compaction then committed a manifest naming them."""
    with memory_store() as mem:
        db = Db.open(store=mem, settings=NO_BG)
        model = _put(db, b"a")
        db.flush(memtable=True)
        model.update(_put(db, b"b", 70))
        db.flush(memtable=True)
        db.close()
        hook = BeforeManifestPut(mem)
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            assert release.wait(60)

        compactor = Compactor.open(store=hook, options=CompactorOptions(min_l0_ssts=2))
        hook.act = hold  # its commit (the epoch claim at open has been written)
        job = threading.Thread(target=compactor.run_once)

        def start_compaction() -> None:
            job.start()
            assert held.wait(60)  # outputs written, commit held

        gc = GarbageCollector(
            ActOnSstListing(mem, start_compaction), GcOptions(), clock=FutureClock(10), rng=db.rng
        )
        report = gc.run_once(min_age_s=0)
        release.set()
        job.join()
        compactor.close()
        with Db.open(store=mem, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model, report.deleted["sst"]


def test_a_distributed_range_under_a_lease_started_by_a_clock_ahead_keeps_its_outputs() -> None:
    """``Compactor.execute_range`` on another machine (a Spark task of ``shaledb.spark.compact``)
    under the lease of a driver whose clock is a minute ahead: its outputs were born "before"
    the lease started, so the lease did not protect them and a pass at ``min_age_s=0`` deleted
    them before the driver's commit. With ``lease_id`` they are never born before it."""
    with memory_store() as mem:
        db = Db.open(store=mem, settings=NO_BG)
        model = _put(db, b"a")
        db.flush(memtable=True)
        model.update(_put(db, b"b", 70))
        db.flush(memtable=True)
        db.close()
        options = CompactorOptions(min_l0_ssts=2)
        driver = Compactor.open(store=mem, options=options, clock=FutureClock(60))
        task = Compactor(mem, options, settings=NO_BG, clock=db.clock, rng=db.rng)
        (spec,) = driver.schedule()
        with driver.lease(spec.describe()) as lease:
            out = task.execute_range(spec, None, None, lease_id=lease.job_id)
            report = GarbageCollector(mem, GcOptions(), clock=db.clock, rng=db.rng).run_once(min_age_s=0)
            driver.commit(spec, out.ssts)
        driver.close()
        with Db.open(store=mem, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model, report.deleted["sst"]


def test_a_pass_at_min_age_zero_during_a_ledger_rebuild_keeps_the_rebuilt_runs() -> None:
    """``Db.rebuild_ledger`` writes its runs, then the manifest that installs them; their writes
    are old (no floor for writes in flight applies) and it held no lease, so a pass in between
    deleted them and the rebuild installed a ledger of missing SSTs."""
    s = Settings(value_separation_threshold=64, l0_max_ssts=1000, compactor=None, garbage_collector=None)
    with memory_store() as mem:
        with Db.open(store=mem, settings=s) as db:
            model = {b"k%03d" % i: b"v%d" % i * 40 for i in range(40)}
            for k, v in model.items():
                db.put(k, v, durable=False)
            db.flush(memtable=True)
        hook = BeforeManifestPut(mem)
        reports = []
        with Db.open(store=hook, settings=s) as db:
            gc = GarbageCollector(mem, GcOptions(min_age_s=0), clock=db.clock, rng=db.rng)
            hook.act = lambda: reports.append(gc.run_once())
            db.rebuild_ledger()
        assert reports
        with Db.open(store=mem, settings=s) as db2:
            assert dict(db2.scan()) == model, reports[0].deleted["sst"]


def test_run_gc_min_age_zero_keeps_a_flush_in_flight_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``shaledb run-gc --once --min-age 0`` against a local directory while the writer's flush
    is held between its SST and its manifest write: the SST stays and the line says why."""
    import subprocess
    import sys

    from shaledb.store import open_store

    url = str(tmp_path / "db")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        assert release.wait(120)

    hook = BeforeManifestPut(open_store(url))
    db = Db.open(url, store=hook, settings=NO_BG)
    model = _put(db, b"a")
    hook.act = hold
    flush = threading.Thread(target=db.flush, kwargs={"memtable": True})
    flush.start()
    try:
        assert held.wait(60)
        cmd = [sys.executable, "-m", "shaledb.cli", "--path", url, "run-gc", "--once", "--min-age", "0"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    finally:
        release.set()
        flush.join()
        db.close()
    assert p.returncode == 0, p.stderr
    assert "1 SST of a flush in flight kept" in p.stdout, p.stdout
    with Db.open(url, settings=NO_BG) as db2:
        assert dict(db2.scan()) == model


def test_a_killed_ingests_uncommitted_sst_is_not_held_by_the_floor_for_flushes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The floor is for the writer's flushes (their SSTs carry its epoch). A bulk ingest's part
    SST also holds writes above ``last_l0_seq``, but its lease protects it; once a killed
    ingest's lease has lapsed, a pass at ``min_age_s=0`` collects it at once."""
    from shaledb.bulk.ingest import begin_ingest
    from shaledb.bulk.ingest.parts import PartWriter
    from shaledb.store import open_store

    url = str(tmp_path / "db")
    Db.open(url, settings=NO_BG).close()
    store = open_store(url)
    plan = begin_ingest(url, store=store, lease_s=1.0, seed=5)
    part = PartWriter(store, plan, 0)
    part.add([b"k"], [b"v"])
    part.finish()  # the job is killed before its commit
    orphans = sst_ids(store)
    assert orphans
    gc = GarbageCollector(store, GcOptions(), clock=FutureClock(5.0), rng=random.Random(0))
    report = gc.run_once(min_age_s=0)
    assert sorted(report.deleted["sst"]) == sorted(paths.sst_path(i) for i in orphans)
    assert report.in_flight_kept == 0

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


def _fill_rounds(url: str, tag: bytes, rounds: int, model: dict[bytes, bytes]) -> None:
    """``rounds`` L0 SSTs of 30 keys each under ``tag`` (a new writer epoch each call)."""
    with Db.open(url, settings=NO_BG) as db:
        for r in range(rounds):
            for i in range(30):
                k = tag + b"%03d" % (r * 30 + i)
                model[k] = k * 8
                db.put(k, model[k], durable=False)
            db.flush(memtable=True)


@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "after-a-killed-backup"])
def test_a_pass_at_min_age_zero_during_an_incremental_backup_keeps_its_copies(tmp_path, resumed) -> None:  # type: ignore[no-untyped-def]
    """A backup's copies keep their source ids (born long before it started) and are in no
    manifest of the destination until its last write; a pass on the destination at
    ``min_age_s=0`` in between deleted them, and the backup then wrote a manifest naming
    missing SSTs (the backup no longer opened). Resumed: a killed backup's copies, which the
    next one counts as present, went the same way. Both backups hold a lease now."""
    from shaledb.clock import SYSTEM_CLOCK
    from shaledb.journal.backup import backup_version
    from shaledb.manifest import ManifestStore
    from shaledb.store import open_store
    from shaledb.testing import FaultInjectingStore, SimulatedCrash

    src, dest_url = str(tmp_path / "src"), str(tmp_path / "dest")
    model: dict[bytes, bytes] = {}
    _fill_rounds(src, b"a", 2, model)
    source, dest = open_store(src), open_store(dest_url)
    ms = ManifestStore(source, SYSTEM_CLOCK, random.Random(1), author="test")
    rng = random.Random(7)
    backup_version(ms.require_latest(), source, lambda _db: source, dest, clock=SYSTEM_CLOCK, rng=rng)
    _fill_rounds(src, b"b", 6, model)  # a new writer epoch: the in-flight floor keeps none of these
    m = ms.require_latest()
    if resumed:  # a backup killed after copying some of the new SSTs
        faults = FaultInjectingStore(source, seed=3)
        faults.add_rule("crash", ops="get", path_prefix=paths.SST_DIR, nth=4)
        with pytest.raises(SimulatedCrash):
            backup_version(m, faults, lambda _db: faults, dest, clock=SYSTEM_CLOCK, rng=rng, workers=1)
        assert len(sst_ids(dest)) == 2 + 3  # the first backup's and three leftovers
    reports = []

    def collect(done: int, total: int) -> None:
        if not reports:  # after the first copy of this backup
            gc = GarbageCollector(dest, GcOptions(min_age_s=0), clock=SYSTEM_CLOCK, rng=random.Random(2))
            reports.append(gc.run_once())

    rep = backup_version(
        m, source, lambda _db: source, dest, clock=SYSTEM_CLOCK, rng=rng, workers=1, progress=collect
    )
    assert reports and rep.manifest_written
    assert not reports[0].deleted["sst"] and reports[0].backup_in_progress
    assert not list(dest.list(paths.JOB_DIR))  # the lease went with the backup
    with DbReader.open(dest_url) as r:
        assert dict(r.scan()) == model
    # Without a backup in progress the next pass collects as before (nothing is garbage here).
    after = GarbageCollector(
        dest, GcOptions(min_age_s=0), clock=SYSTEM_CLOCK, rng=random.Random(3)
    ).run_once()
    assert not after.backup_in_progress and not after.deleted["sst"]


def test_run_gc_min_age_zero_during_a_backup_keeps_its_copies_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``shaledb run-gc --once --min-age 0`` in its own process against a backup destination
    while ``backup_url`` (server-side copies in one directory tree) is between its copies and
    its manifest: nothing is deleted, the line says why, and the backup opens whole."""
    import subprocess
    import sys

    from shaledb.journal.backup import backup_url

    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    model: dict[bytes, bytes] = {}
    _fill_rounds(src, b"a", 1, model)
    backup_url(src, dest)
    _fill_rounds(src, b"b", 3, model)
    runs: list[subprocess.CompletedProcess[str]] = []

    def collect(done: int, total: int) -> None:
        if not runs:
            cmd = [sys.executable, "-m", "shaledb.cli", "--path", dest, "run-gc", "--once", "--min-age", "0"]
            runs.append(subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False))

    rep = backup_url(src, dest, progress=collect)
    assert runs and rep.server_side and rep.manifest_written
    assert runs[0].returncode == 0, runs[0].stderr
    assert " 0 SSTs," in runs[0].stdout and "a backup is copying into this database" in runs[0].stdout
    with DbReader.open(dest) as r:
        assert dict(r.scan()) == model

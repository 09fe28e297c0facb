"""The writer's view checkpoints: re-established when the SST set changes, kept while a
snapshot reads the old view, released with a grace period, removed by the next writer."""

from __future__ import annotations

from compaction_support import FutureClock, memory_store

from shaledb import CompactorOptions, Db, GarbageCollector, Settings
from shaledb.compaction import Compactor
from shaledb.manifest import Manifest
from shaledb.pins import referenced_objects

NO_BG = Settings(
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)


def writer_cps(m: Manifest) -> list:  # type: ignore[type-arg]
    return [c for c in m.checkpoints if c.writer_epoch is not None]


def write(db: Db, n: int, tag: bytes) -> None:
    for i in range(n):
        db.put(b"k%04d" % (i % 200), tag + b"%d" % i * 10, durable=False)
    db.flush(memtable=True)


def test_view_checkpoints_follow_the_sst_set() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        (cp,) = writer_cps(db.manifest)
        assert cp.writer_epoch == db.epoch and cp.expire_time_s is None
        manifest_writes = db.manifest.id
        write(db, 300, b"a")
        # Flushes only add SSTs: the previous checkpoint protects nothing and is gone.
        (cp2,) = writer_cps(db.manifest)
        assert cp2.id != cp.id
        pinned = db.manifests.read(cp2.manifest_id)
        assert referenced_objects(pinned) == referenced_objects(db.manifest)
        flushes = db.manifest.id - manifest_writes
        assert flushes >= 1  # one manifest write per flush: the checkpoint rides along

        snap = db.snapshot()
        before = dict(snap.scan())
        Compactor.open(store=store, options=CompactorOptions(min_l0_ssts=2)).run_once()
        db.refresh_manifest()  # adopting the compactor's SSTs costs one write that pins them
        cps = writer_cps(db.manifest)
        assert len(cps) == 2
        old = next(c for c in cps if c.id == cp2.id)
        assert old.expire_time_s is None  # the snapshot still reads that view
        # GC from a day in the future: only the reference keeps the old SSTs alive.
        GarbageCollector.open(store=store, clock=FutureClock()).run_once(min_age_s=0)
        assert dict(snap.scan()) == before
        snap.close()
        write(db, 50, b"b")  # the next write gives the released checkpoint its grace period
        old = next(c for c in writer_cps(db.manifest) if c.id == cp2.id)
        assert old.expire_time_s is not None
        report = GarbageCollector.open(store=store, clock=FutureClock()).run_once(min_age_s=0)
        assert str(cp2.id) in report.checkpoints_expired
        db.close()


def test_close_and_the_next_writer_remove_the_old_checkpoints() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        write(db, 300, b"a")
        kept = db.snapshot()  # open across close: its checkpoint is kept
        db.close()
        latest = db.manifests.require_latest()
        (cp,) = writer_cps(latest)
        assert kept.seq > 0
        db2 = Db.open(store=store, settings=NO_BG)
        (cp2,) = writer_cps(db2.manifest)
        assert cp2.writer_epoch == db2.epoch and cp2.id != cp.id
        db2.close()
        assert writer_cps(db2.manifests.require_latest()) == []
        kept.close()

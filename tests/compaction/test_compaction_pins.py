"""The writer's view checkpoints: re-established when the SST set changes, kept while a
snapshot reads the old view, released with a grace period, removed by the next writer."""

from __future__ import annotations

from compaction_support import NO_BG, FutureClock, memory_store

from shaledb import CompactorOptions, Db, GarbageCollector
from shaledb.compaction import Compactor
from shaledb.engine.pins import referenced_objects
from shaledb.manifest import Manifest
from shaledb.store import ObjectStore
from shaledb.store.wrappers import StoreWrapper


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
        # Flushes only add SSTs: a superseded checkpoint protects nothing and is dropped by
        # the write after the one that superseded it (until then a reader may still take it).
        cps = writer_cps(db.manifest)
        assert len(cps) <= 2 and cp.id not in {c.id for c in cps}
        cp2 = next(c for c in cps if c.manifest_id == max(c.manifest_id for c in cps))
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


class SnapshotDuringManifestWrite(StoreWrapper):
    """Takes a snapshot of the writer while its next manifest version is being written:
    after the CAS chose the checkpoints, before the writer switched to the new one."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.db: Db | None = None
        self.snap: object = None

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if self.db is not None and self.snap is None and path.startswith("manifest/"):
            self.snap = self.db.snapshot()
        self.inner.put(path, data, create=create, attributes=attributes)


def test_a_checkpoint_taken_while_a_write_supersedes_it_stays_in_that_write() -> None:
    """A reader that pins the view between the CAS and its confirmation references the
    checkpoint being superseded: the write must not drop it (GC would free its SSTs)."""
    with memory_store() as mem:
        store = SnapshotDuringManifestWrite(mem)
        db = Db.open(store=store, settings=NO_BG)
        write(db, 50, b"a")
        store.db = db
        write(db, 50, b"b")  # the flush's manifest write takes the snapshot mid-way
        snap = store.snap
        assert snap is not None
        refs = db.pins.refs()
        assert len(refs) == 1
        (taken,) = refs
        assert taken in {c.id for c in writer_cps(db.manifests.require_latest())}
        before = dict(snap.scan())  # type: ignore[attr-defined]
        Compactor.open(store=mem, options=CompactorOptions(min_l0_ssts=2)).run_once()
        db.refresh_manifest()
        GarbageCollector.open(store=mem, clock=FutureClock()).run_once(min_age_s=0)
        assert dict(snap.scan()) == before  # type: ignore[attr-defined]
        snap.close()  # type: ignore[attr-defined]
        db.close()

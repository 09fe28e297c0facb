"""What the garbage collector deletes, what it keeps, and its dry run."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from gc_support import FutureClock, listing, manifest_ids, memory_store, sst_ids, wal_ids

from shaledb import CompactorOptions, Db, FencedError, GarbageCollector, GcOptions, Settings
from shaledb.admin.gc import CLASSES
from shaledb.clock import SYSTEM_CLOCK
from shaledb.compaction import Compactor
from shaledb.engine.cache import LruCache
from shaledb.engine.sstable import TableCache
from shaledb.format import paths
from shaledb.format.sst import decode_meta
from shaledb.manifest import Checkpoint, ManifestStore
from shaledb.store import ObjectStore, open_store
from shaledb.store.twophase import TWO_PHASE_TMP_PREFIX, SqliteCasLog, TwoPhaseStore
from shaledb.store.wrappers import InstrumentedStore, NoConditionalStore
from shaledb.testing import FaultInjectingStore, SimulatedCrash

NO_BG = Settings(
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)
OPTS = CompactorOptions(min_l0_ssts=2, max_sst_size_bytes=8192)


def fill(db: Db, n: int, tag: bytes = b"v") -> dict[bytes, bytes]:
    model = {}
    for i in range(n):
        k = b"key%05d" % (i * 7919 % 499)
        v = tag + b"%d" % i * 8
        db.put(k, v, durable=False)
        model[k] = v
        if i % 60 == 59:
            db.flush(memtable=True)
    db.flush(memtable=True)
    return model


def manifests(store: ObjectStore) -> ManifestStore:
    return ManifestStore(store, SYSTEM_CLOCK, random.Random(), author="test")


def add_checkpoint(store: ObjectStore, expire_time_s: float | None = None) -> Checkpoint:
    ms = manifests(store)
    cp: list[Checkpoint] = []

    def add(m):  # type: ignore[no-untyped-def]
        c = Checkpoint(uuid.uuid4(), m.id + 1, SYSTEM_CLOCK.now(), expire_time_s)
        cp[:] = [c]
        return replace(m, checkpoints=(*m.checkpoints, c))

    ms.update(add, timeout_s=30)
    return cp[0]


def readable(store: ObjectStore, manifest_id: int) -> dict[bytes, bytes]:
    """Every (newest) row of a manifest's SSTs, read straight from the store."""
    m = manifests(store).read(manifest_id)
    tables = TableCache(lambda _i: store, LruCache(1 << 20), 1 << 16)
    out: dict[bytes, bytes] = {}
    for s in reversed(list(m.data.ssts())):  # oldest first, newer overwrite
        for k, _seq, _kind, p in tables.reader(s).all_rows():
            out[k] = p
    return out


def test_dry_run_deletes_nothing_and_lists_what_a_real_pass_deletes() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 400)
        Compactor.open(store=store, options=OPTS).run_once()
        db.refresh_manifest()
        db.close()
        (store.put("tmp/leftover", b"x"))
        before = listing(store)
        gc = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0, dry_run=True))
        dry = gc.run_once()
        assert dry.dry_run and dry.counts()["sst"] > 0 and dry.counts()["wal"] > 0
        assert dry.counts()["manifest"] > 0 and dry.counts()["tmp"] == 1
        assert listing(store) == before
        real = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0)).run_once()
        assert real.deleted == dry.deleted
        after = listing(store)
        assert set(before) - set(after) == {p for v in dry.deleted.values() for p in v}
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


@pytest.mark.parametrize("crash_at", [1, 7, 40])
def test_deletes_go_in_bulk_and_a_crash_among_them_is_finished_by_the_next_pass(crash_at: int) -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 400)
        Compactor.open(store=store, options=OPTS).run_once()
        db.close()
        plan = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0, dry_run=True)).run_once()
        faults = FaultInjectingStore(store, seed=crash_at)  # splits a bulk delete into its objects
        rule = faults.add_rule("crash", ops="delete", nth=crash_at)
        counted = InstrumentedStore(faults)
        with pytest.raises(SimulatedCrash):
            GarbageCollector.open(store=counted, options=GcOptions(min_age_s=0)).run_once()
        assert rule.fired == 1 and rule.matched == crash_at
        assert counted.snapshot().requests["delete"] == 0 and counted.snapshot().requests["delete_many"] >= 1
        counted = InstrumentedStore(store)
        done = GarbageCollector.open(store=counted, options=GcOptions(min_age_s=0)).run_once()
        requests = counted.snapshot().requests
        # one bulk request per class of object that still had garbage; never one per object
        assert requests["delete"] == 0 and 1 <= requests["delete_many"] <= len(CLASSES)
        assert set(listing(store)).isdisjoint(p for v in plan.deleted.values() for p in v)
        assert done.total == plan.total - (crash_at - 1)  # the crashed pass deleted the ones before it
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


def test_min_age_protects_young_objects() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 300)
        Compactor.open(store=store, options=OPTS).run_once()
        db.close()
        gc = GarbageCollector.open(store=store, options=GcOptions(min_age_s=3600))
        assert gc.run_once().total == 0
        assert GarbageCollector.open(store=store, clock=FutureClock(7200)).run_once(min_age_s=3600).total > 0


def test_checkpoints_pin_manifests_ssts_and_wal_until_they_expire() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 300)
        db.close()
        soon = SYSTEM_CLOCK.now() + 3600
        cp_forever = add_checkpoint(store)
        cp_expiring = add_checkpoint(store, expire_time_s=soon)
        pinned = readable(store, cp_forever.manifest_id)
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 300, tag=b"w")
        Compactor.open(store=store, options=OPTS).run_once()
        db.refresh_manifest()
        db.close()
        gc = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0))
        report = gc.run_once()
        assert report.checkpoints_expired == []
        assert cp_forever.manifest_id in report.active_manifests
        assert cp_expiring.manifest_id in report.active_manifests
        assert readable(store, cp_forever.manifest_id) == pinned  # every SST is still there
        m = manifests(store).read(cp_forever.manifest_id)
        assert all(i in wal_ids(store) for i in range(m.replay_after_wal_id + 1, m.next_wal_id))
        # An hour later the expiring one is gone (removed from the manifest by CAS).
        later = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0), clock=FutureClock(7200))
        report = later.run_once()
        assert report.checkpoints_expired == [str(cp_expiring.id)]
        assert readable(store, cp_forever.manifest_id) == pinned
        latest = manifests(store).read_latest()
        assert latest is not None and [c.id for c in latest.checkpoints] == [cp_forever.id]
        # Removing the last pin frees its SSTs and manifest.
        manifests(store).update(lambda m: replace(m, checkpoints=()), timeout_s=30)
        report = later.run_once()
        assert cp_forever.manifest_id not in manifest_ids(store)
        latest = manifests(store).read_latest()
        assert latest is not None
        assert sst_ids(store) == {s.id for s in latest.all_ssts()}
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


def test_wal_objects_below_the_replay_point_go_but_fences_stay() -> None:
    with memory_store() as store:
        for round_ in range(3):  # three writer opens: three fences
            with Db.open(store=store, settings=NO_BG) as db:
                fill(db, 120, tag=b"%d" % round_)
        before = wal_ids(store)
        latest = manifests(store).read_latest()
        assert latest is not None
        fences = [w for w in before if decode_meta(*_whole(store, w)).props.entries == 0]
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        after = wal_ids(store)
        assert report.fences_kept == len(fences) == 3
        assert set(after) == set(fences) | {w for w in before if w > latest.replay_after_wal_id}
        assert len(report.deleted["wal"]) == len(before) - len(after) > 0


def _whole(store: ObjectStore, wid: int) -> tuple[bytes, int]:
    data = store.get(paths.wal_path(wid))
    return data, len(data)


def test_temporary_orphans_go_but_pending_two_phase_writes_stay(tmp_path: Path) -> None:
    with memory_store() as inner:
        log = SqliteCasLog(str(tmp_path / "cas.db"))
        store = TwoPhaseStore(NoConditionalStore(inner), log)
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 100)
        db.close()
        # A writer that stopped right after its commit point left a pending record.
        pending_src = f"{TWO_PHASE_TMP_PREFIX}{uuid.uuid4().hex}.00000000"
        inner.put(pending_src, b"pending payload")
        # (an object in a directory GC does not list, so nothing rolls it forward here;
        # journal/ is listed since the value journal exists)
        dest = "exports/01ARZ3NDEKTSV4RRFFQ69G5FAV.bin"
        assert log.insert(store.namespace, dest, pending_src, SYSTEM_CLOCK.now())
        orphan = f"{TWO_PHASE_TMP_PREFIX}{uuid.uuid4().hex}.00000000"
        inner.put(orphan, b"orphan")
        inner.put("tmp/spark/job-1/part-0", b"failed job output")
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        assert sorted(report.deleted["tmp"]) == sorted([orphan, "tmp/spark/job-1/part-0"])
        assert inner.get(pending_src) == b"pending payload"
        # Without the record table the collector cannot tell, so it leaves tmp/2pc/ alone.
        inner.put(orphan, b"orphan")
        plain = GarbageCollector.open(store=inner).run_once(min_age_s=0)
        assert plain.deleted["tmp"] == []


def test_live_job_leases_protect_outputs_and_stale_ones_are_removed() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 200)
        db.close()
        c = Compactor.open(store=store, options=OPTS)
        (spec, *_) = c.schedule()
        with c.lease(spec.describe()):
            res = c.executor.execute(spec)
            # Unreferenced outputs of a running job survive a pass with min_age 0 ...
            report = GarbageCollector.open(store=store).run_once(min_age_s=0)
            assert not {f"compacted/{s.id}.sst" for s in res.ssts} & set(report.deleted["sst"])
            assert {s.id for s in res.ssts} <= sst_ids(store)
            c.commit(spec, res.ssts)
        # ... and the lease goes with the commit (the compactor's role lease stays while it runs).
        assert not [m for m in store.list(paths.JOB_DIR) if paths.parse_job_id(m.path)]
        # A lease left by a killed compactor of an older epoch protects nothing.
        (spec2, *_) = c.schedule() or [None]
        stale = c.lease("killed")
        stale.__enter__()
        orphan = c.executor.execute(spec2).ssts if spec2 else ()
        new = Compactor.open(store=store, options=OPTS, takeover=True)  # restarted: a newer epoch
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        # The killed one's role lease goes too; the live one's stays.
        assert report.deleted["job"] == sorted([stale.path, paths.role_lease_path(c.epoch or 0)])
        assert [m.path for m in store.list(paths.JOB_DIR)] == [paths.role_lease_path(new.epoch or 0)]
        assert {s.id for s in orphan} <= {paths.parse_sst_id(p) for p in report.deleted["sst"]}


def test_a_stalled_writer_cannot_resurrect_a_deleted_manifest_id() -> None:
    """GC deletes the manifest id right after a stalled writer's last known one; the
    stalled writer's create of that id succeeds (ABA) but is detected and fenced."""
    with memory_store() as store:
        stalled = Db.open(store=store, settings=NO_BG.replace(manifest_poll_interval_s=3600))
        stalled.put(b"zombie", b"acked before the fence")  # durable: the next writer replays it
        stale_id = stalled.manifest.id
        with Db.open(store=store, settings=NO_BG) as live:  # fences the stalled writer
            model = fill(live, 300)
            model[b"zombie"] = b"acked before the fence"
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        assert stale_id + 1 not in manifest_ids(store), report.deleted["manifest"]
        latest_before = manifests(store).read_latest()
        with pytest.raises(FencedError):
            stalled.flush(memtable=True)  # builds an L0 SST and tries manifest stale_id + 1
        stalled.close()
        latest = manifests(store).read_latest()
        assert latest is not None and latest_before is not None
        assert latest.id == latest_before.id and latest.writer_epoch == latest_before.writer_epoch
        with Db.open(store=store, settings=NO_BG) as db:
            assert dict(db.scan()) == model
        # The stray version (if the create landed) is not the head and GC removes it.
        GarbageCollector.open(store=store).run_once(min_age_s=0)
        assert stale_id + 1 not in manifest_ids(store)


def test_fences_filling_a_pipelined_writers_window_go_first_fences_stay() -> None:
    """Writers with WAL PUTs in flight fence the slots after their fence at open: those
    further fences of an epoch go like other WAL objects below the replay point; each
    epoch's first fence stays."""
    piped = replace(NO_BG, wal_max_in_flight=4)
    with memory_store() as store:
        model: dict[bytes, bytes] = {}
        for round_ in range(3):
            with Db.open(store=store, settings=piped) as db:
                model = fill(db, 120, tag=b"%d" % round_)
        before = wal_ids(store)
        latest = manifests(store).read_latest()
        assert latest is not None
        fences = {w: decode_meta(*_whole(store, w)).props.writer_epoch for w in before}
        fences = {w: e for w, e in fences.items() if decode_meta(*_whole(store, w)).props.entries == 0}
        firsts = {min(w for w, e in fences.items() if e == ep) for ep in set(fences.values())}
        assert len(fences) == 1 + 2 * 4 and len(firsts) == 3  # epochs 2 and 3 fenced 3 slots more
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        after = wal_ids(store)
        assert report.fences_kept == 3
        assert set(after) == firsts | {w for w in before if w > latest.replay_after_wal_id}
        with Db.open(store=store, settings=piped) as db:
            assert dict(db.scan()) == model


@pytest.mark.parametrize("lease_s", ["Infinity", "NaN", "-1", "0", "1e999", "true", str(10**400)])
def test_a_job_lease_with_no_finite_duration_protects_nothing(lease_s: str) -> None:
    # A tampered lease of "lease_s": Infinity (Python's json reads it) stayed live for ever:
    # the GC then deleted nothing written after the job began. Now it is no lease at all.
    from shaledb.compaction.compactor import read_lease

    assert read_lease(b'{"epoch": 7, "lease_s": %s}' % lease_s.encode()) is None
    assert read_lease(b'{"epoch": 7, "lease_s": 600}') == (7, 600.0)
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 50)
        db.close()
        path = paths.job_path(paths.new_ulid(SYSTEM_CLOCK.now(), random.Random(1)))
        store.put(path, b'{"epoch": 1000000, "lease_s": %s, "job": "tampered"}' % lease_s.encode())
        report = GarbageCollector.open(store=store).run_once(min_age_s=0)
        assert report.deleted["job"] == [path]


def test_a_running_collector_outlives_a_store_outage() -> None:
    """run() (and `run-gc`'s loop) ended with Unavailable when the store was out longer than
    the retry budget; a failed pass is now logged and the next one runs on schedule."""
    import threading
    import time

    from shaledb import RetryOptions, Unavailable
    from shaledb.store import StoreWrapper

    class Outage(StoreWrapper):
        down = False

        def list(self, prefix, *, offset=None):  # type: ignore[no-untyped-def]
            if self.down:
                raise Unavailable("test outage: the store is unreachable, retry later")
            return super().list(prefix, offset=offset)

        def get(self, path):  # type: ignore[no-untyped-def]
            if self.down:
                raise Unavailable("test outage: the store is unreachable, retry later")
            return super().get(path)

    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 300)
        Compactor.open(store=store, options=OPTS).run_once()
        db.close()
        flaky = Outage(store)
        gc = GarbageCollector.open(
            store=flaky,
            options=GcOptions(min_age_s=0, interval_s=0.05),
            settings=Settings(retry=RetryOptions(max_attempts=1)),
        )
        flaky.down = True
        assert gc.run_pass() is None
        t = threading.Thread(target=gc.run, daemon=True)
        t.start()
        time.sleep(0.3)  # several failed passes
        assert t.is_alive()
        before = len(manifest_ids(store))
        flaky.down = False
        deadline = time.monotonic() + 30
        while len(manifest_ids(store)) >= before:
            assert time.monotonic() < deadline, "the collector deletes once the store is back"
            time.sleep(0.02)
        gc.stop()
        t.join(30)
        assert not t.is_alive()


def test_a_long_lived_checkpoint_keeps_its_own_wal_range_not_the_whole_wal_after_it(tmp_path: Path) -> None:
    """A checkpoint's holder reads its version's replay range and nothing past it; the WAL
    written after it, once in the latest manifest's SSTs, goes. Before, every WAL object above
    the lowest replay point of the active manifests stayed: a clone (its checkpoint on the
    parent never expires) kept the parent's whole WAL from the fork on (an operator saw 17,629
    objects, 123 MiB, after 25 minutes)."""
    from shaledb import DbReader, DbReaderOptions

    url, clone_url = str(tmp_path / "parent"), str(tmp_path / "clone")
    quiet = NO_BG
    db = Db.open(url, settings=quiet)
    at_cp = {b"k%03d" % i: b"a%d" % i for i in range(20)}
    for k, v in at_cp.items():
        db.put(k, v)  # durable: one WAL object each, still only in the memtable
    stalls = _StallingClock()
    tailing = DbReader.open(url, options=DbReaderOptions(background_poll=False), clock=stalls)
    cp = db.create_checkpoint(lifetime=None, name="long")
    clone = Db.open_from_checkpoint(clone_url, url, parent_checkpoint=cp.id, settings=quiet)
    clone.put(b"own", b"1")
    latest_model = dict(at_cp)
    for round_ in range(5):  # WAL objects after the checkpoint, flushed to L0
        for i in range(0, 20, 2):
            k, v = b"k%03d" % i, b"r%d-%d" % (round_, i)
            db.put(k, v)
            latest_model[k] = v
        db.flush(memtable=True)
    db.close()
    store = open_store(url)
    ms = manifests(store)
    latest = ms.read_latest()
    assert latest is not None
    pinned = ms.read(cp.manifest_id)
    kept_range = set(range(pinned.replay_after_wal_id + 1, pinned.next_wal_id))
    assert len(kept_range) >= 20  # the checkpoint covers the unflushed durable puts
    before = set(wal_ids(store))
    after_cp = {w for w in before if pinned.next_wal_id <= w <= latest.replay_after_wal_id}
    assert len(after_cp) >= 50
    report = GarbageCollector.open(store=store).run_once(min_age_s=0)
    now = set(wal_ids(store))
    assert kept_range <= now  # the checkpoint's own range stays
    gone = after_cp - now
    assert len(gone) >= len(after_cp) - 3, (len(after_cp), sorted(after_cp & now))  # fences may stay
    assert len(report.deleted["wal"]) >= len(gone)
    # Every reader still reads what it should.
    with DbReader.open(url, checkpoint=cp.id) as at:
        assert dict(at.scan()) == at_cp
    # A managed reader that stalled past the collector's min_age_s: its manifests were deleted
    # too, so it finds the head with a listing, and the WAL objects gone are in its SSTs.
    stalls.offset_s = 400.0
    tailing.refresh()
    assert dict(tailing.scan()) == latest_model
    tailing.close()
    assert dict(clone.scan()) == {**at_cp, b"own": b"1"}
    clone.close()
    with Db.open(clone_url, settings=quiet) as c2:
        assert dict(c2.scan()) == {**at_cp, b"own": b"1"}
    with Db.open(url, settings=quiet) as db2:
        assert dict(db2.scan()) == latest_model


class _StallingClock(FutureClock):
    """The system clock, both wall and monotonic time ``offset_s`` ahead: a process that
    stalled for that long."""

    def __init__(self) -> None:
        super().__init__(0.0)

    def monotonic(self) -> float:
        return super().monotonic() + self.offset_s

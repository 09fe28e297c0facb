"""Destroying databases: soft (fence, mark, GC after the grace period) and hard, with clones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from clones_kit import QUIET, all_objects, clone_checkpoints, latest, manifest_store, memory_urls

from shaledb import (
    DatabaseDestroyed,
    Db,
    DbReader,
    FencedError,
    InvalidDbState,
    NotFound,
    admin,
)
from shaledb.admin.destruction import gc_destroyed_database
from shaledb.engine.parents import ExternalStores, default_factory
from shaledb.settings import RetryOptions
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock

GRACE = 3600.0


def gc_step(url: str, clock: ManualClock) -> str:
    ext = ExternalStores(default_factory(RetryOptions(), clock, random.Random(0), None))
    return gc_destroyed_database(
        manifest_store(url), clock=clock, grace_s=GRACE, external=ext, timeout_s=10
    ).state


def test_soft_destroy_fences_the_writer_and_gc_deletes_after_grace() -> None:
    clock = ManualClock()
    with memory_urls(1) as (url,):
        db = Db.open(url, settings=QUIET, clock=clock)
        db.put(b"a", b"1")
        db.flush(memtable=True)
        user_cp = admin.create_checkpoint(url, lifetime=2 * GRACE, clock=clock)
        assert gc_step(url, clock) == "active"
        admin.destroy(url, clock=clock)
        admin.destroy(url, clock=clock)  # idempotent
        with pytest.raises(FencedError):
            db.put(b"b", b"2")
        try:
            db.close()
        except FencedError:
            pass
        m = latest(url)
        assert m.destroyed_at_s == clock.now()
        assert all(c.writer_epoch is None for c in m.checkpoints)
        with pytest.raises(DatabaseDestroyed):
            Db.open(url, settings=QUIET)
        with pytest.raises(DatabaseDestroyed):
            DbReader.open(url)
        with pytest.raises(DatabaseDestroyed):
            admin.create_checkpoint(url)
        with DbReader.open(url, user_cp.id, clock=clock) as r:  # a live checkpoint still reads
            assert r.get(b"a") == b"1"
        assert gc_step(url, clock) == "waiting"  # grace period
        clock.advance(GRACE + 1)
        assert gc_step(url, clock) == "waiting"  # the checkpoint is live
        clock.advance(GRACE)
        assert gc_step(url, clock) == "deleted"  # it expired
        assert all_objects(url) == []
        with pytest.raises(NotFound):
            admin.list_checkpoints(url)


def test_soft_destroyed_clone_releases_its_parent_pin() -> None:
    clock = ManualClock()
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
            parent.flush(memtable=True)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        with pytest.raises(InvalidDbState):
            admin.destroy(parent_url, soft=False)  # the clone's pin is live
        admin.destroy(clone_url, clock=clock)
        assert len(clone_checkpoints(parent_url)) == 1  # kept until the GC finishes the clone
        clock.advance(GRACE + 1)
        assert gc_step(clone_url, clock) == "deleted"
        assert clone_checkpoints(parent_url) == [] and all_objects(clone_url) == []
        admin.destroy(parent_url, soft=False)
        assert all_objects(parent_url) == []


def test_soft_destroyed_parent_waits_for_its_clone() -> None:
    clock = ManualClock()
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
            parent.flush(memtable=True)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        admin.destroy(parent_url, clock=clock)
        clock.advance(10 * GRACE)
        assert gc_step(parent_url, clock) == "waiting"  # the clone still reads its SSTs
        with Db.open(clone_url, settings=QUIET) as clone:
            assert clone.get(b"a") == b"1"
        admin.destroy(clone_url, soft=False)  # a hard destroy of the clone releases the pin at once
        assert gc_step(parent_url, clock) == "deleted"
        assert all_objects(parent_url) == []


def test_hard_destroy_refuses_live_checkpoints_only() -> None:
    clock = ManualClock()
    with memory_urls(1) as (url,):
        with Db.open(url, settings=QUIET, clock=clock) as db:
            db.put(b"a", b"1")
            cp = db.create_checkpoint(name="keep")
            db.create_checkpoint(lifetime=10, name="short")
        with pytest.raises(InvalidDbState, match="keep"):
            admin.destroy(url, soft=False, clock=clock)
        assert latest(url).destroyed_at_s is None
        admin.delete_checkpoint(url, cp.id)
        clock.advance(11)  # the other one expired: it does not block
        admin.destroy(url, soft=False, clock=clock)
        assert all_objects(url) == []
        with pytest.raises(NotFound):
            admin.destroy(url, soft=False)
        with pytest.raises(NotFound):
            admin.destroy(url)


def test_hard_destroy_of_a_clone_releases_its_pins() -> None:
    with memory_urls(3) as (parent_url, child_url, grand_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
            parent.flush(memtable=True)
        Db.open_from_checkpoint(child_url, parent_url, settings=QUIET).close()
        Db.open_from_checkpoint(grand_url, child_url, settings=QUIET).close()
        assert len(clone_checkpoints(parent_url)) == 2
        admin.destroy(grand_url, soft=False)
        assert len(clone_checkpoints(parent_url)) == 1 and clone_checkpoints(child_url) == []
        admin.destroy(child_url, soft=False)
        assert clone_checkpoints(parent_url) == []


@pytest.mark.parametrize("nth", [1, 2, 3, 5, 8])
def test_hard_destroy_crash_then_retry(nth: int) -> None:
    with memory_urls(1) as (url,):
        with Db.open(url, settings=QUIET) as db:
            for i in range(20):
                db.put(b"k%d" % i, b"v")
            db.flush(memtable=True)
            db.put(b"wal", b"x")
        faults = FaultInjectingStore(open_store(url), seed=nth)
        rule = faults.add_rule("crash", ops="delete", nth=nth)
        with pytest.raises(SimulatedCrash):
            admin.destroy(store=faults, soft=False)
        assert rule.fired == 1
        m = latest(url)  # the current manifest is deleted last
        assert m.destroyed_at_s is not None
        with pytest.raises(DatabaseDestroyed):
            Db.open(url, settings=QUIET)
        admin.destroy(url, soft=False)
        assert all_objects(url) == []


class OpenWriterAfterFence(StoreWrapper):
    """After the first WAL object is created through it, a new writer opens the database."""

    def __init__(self, inner: ObjectStore, url: str) -> None:
        super().__init__(inner)
        self.url = url
        self.opened: list[Db] = []

    def put(self, path: str, data: Any, *, create: bool = False, attributes: Any = None) -> None:
        self.inner.put(path, data, create=create, attributes=attributes)
        if path.startswith("wal/") and not self.opened:
            self.opened.append(Db.open(self.url, settings=QUIET))


def test_soft_destroy_loses_to_a_writer_opening_meanwhile() -> None:
    """A writer that claims the epoch between destroy's fence and its mark makes destroy fail visibly."""
    with memory_urls(1) as (url,):
        with Db.open(url, settings=QUIET) as db:
            db.put(b"a", b"1")
        store = OpenWriterAfterFence(open_store(url), url)
        with pytest.raises(FencedError, match="destroy again"):
            admin.destroy(store=store)
        writer = store.opened[0]
        assert latest(url).destroyed_at_s is None
        writer.put(b"b", b"2")  # the new writer owns the database
        admin.destroy(url)  # destroying again fences it
        with pytest.raises(FencedError):
            writer.put(b"c", b"3")
        try:
            writer.close()
        except FencedError:
            pass
        assert latest(url).destroyed_at_s is not None


def test_lifecycle_steps_as_the_collector_runs_them() -> None:
    from shaledb.admin.destruction import LifecycleSteps

    clock = ManualClock()
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
            parent.flush(memtable=True)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        steps = LifecycleSteps(manifest_store(clone_url), clock=clock, grace_s=GRACE, timeout_s=10)
        assert steps.destroy_step() is False and steps.last_status.state == "active"
        assert steps.detach_step() is False  # still references the parent's L0
        admin.destroy(clone_url, clock=clock)
        assert steps.destroy_step(dry_run=True) is False
        clock.advance(GRACE + 1)
        assert steps.destroy_step(dry_run=True) is False and all_objects(clone_url)
        assert steps.destroy_step() is True
        assert all_objects(clone_url) == [] and clone_checkpoints(parent_url) == []


def test_hard_destroy_of_a_local_database_removes_the_stages_killed_processes_left(tmp_path: Path) -> None:
    """A writer, copy or backup killed between writing a stage (``<name>#<n>``) and linking it
    leaves the stage: not an object, so the destroy's listing skipped it and the destroyed
    database kept it and its folder (a killed backup's ``compacted/<id>.sst#0``, seen in the
    crash soak). A user's own file beside the database stays."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k", b"v")
        db.flush(memtable=True)
    left = [tmp_path / "db" / "compacted" / "01ABC.sst#0", tmp_path / "db" / "wal" / "00000000000000000009#1"]
    for stage in left:
        stage.parent.mkdir(parents=True, exist_ok=True)
        stage.write_bytes(b"half a copy")
    (tmp_path / "db" / "notes.txt").write_text("the user's")
    admin.destroy(url, soft=False)
    assert sorted(p.name for p in (tmp_path / "db").rglob("*")) == ["notes.txt"]


def test_a_clones_checkpoint_in_its_parent_is_not_deleted_by_hand() -> None:
    """Deleting the checkpoint a clone holds in its parent -- as the hard destroy's refusal
    advised, listing it among the live checkpoints -- let the hard destroy (or the parent's
    GC) delete the SSTs the clone reads: every later read of the clone raised ObjectNotFound.
    Now the delete is refused naming the clone (``force=True`` for a clone gone for good) and
    the refusal to destroy says whose checkpoint it is."""
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"k", b"v")
            parent.flush(memtable=True)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        (held,) = clone_checkpoints(parent_url)
        with pytest.raises(InvalidDbState, match=f"held by the clone at {clone_url}"):
            admin.destroy(parent_url, soft=False)
        with pytest.raises(InvalidDbState, match=rf"held by the clone at {clone_url}.*force=True"):
            admin.delete_checkpoint(parent_url, held.id)
        assert clone_checkpoints(parent_url) == [held]
        with pytest.raises(InvalidDbState):
            admin.destroy(parent_url, soft=False)
        with Db.open(clone_url, settings=QUIET) as clone:
            assert clone.get(b"k") == b"v"
        admin.destroy(clone_url, soft=False)  # the clone's own destroy releases it
        assert clone_checkpoints(parent_url) == []
        admin.destroy(parent_url, soft=False)


def test_force_deletes_the_checkpoint_of_a_clone_gone_for_good() -> None:
    with memory_urls(2) as (parent_url, clone_url):
        Db.open(parent_url, settings=QUIET).close()
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        (held,) = clone_checkpoints(parent_url)
        for path in all_objects(clone_url):  # the clone's objects deleted by other means
            open_store(clone_url).delete(path)
        assert admin.delete_checkpoint(parent_url, held.id, force=True)
        assert clone_checkpoints(parent_url) == []
        admin.destroy(parent_url, soft=False)


def test_a_clones_checkpoint_in_its_parent_is_given_no_expiry() -> None:
    """``refresh_checkpoint(parent, id, lifetime=...)`` on the checkpoint a clone holds made
    it expire: dead from then on, and the parent's GC free to delete the clone's SSTs."""
    clock = ManualClock()
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET, clock=clock) as parent:
            parent.put(b"k", b"v")
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET, clock=clock).close()
        (held,) = clone_checkpoints(parent_url)
        with pytest.raises(InvalidDbState, match=f"held by the clone at {clone_url}"):
            admin.refresh_checkpoint(parent_url, held.id, lifetime="1h", clock=clock)
        assert clone_checkpoints(parent_url) == [held]
        assert admin.refresh_checkpoint(parent_url, held.id, lifetime=None, clock=clock).expire_time_s is None

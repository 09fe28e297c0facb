"""Clones: fork, isolation, clones of clones, crash-safe initialization, detaching."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from clones_kit import (
    QUIET,
    absorb_ancestors,
    all_objects,
    clone_checkpoints,
    latest,
    manifest_store,
    memory_urls,
)

from shaledb import (
    CheckpointNotFound,
    CursorExpired,
    DatabaseDestroyed,
    Db,
    DbReader,
    InvalidArgument,
    InvalidDbState,
    NotFound,
    admin,
)
from shaledb.admin.destruction import PENDING_RELEASE, gc_detach_clone
from shaledb.engine.parents import ExternalStores, default_factory
from shaledb.manifest.model import Manifest
from shaledb.settings import RetryOptions
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock


def fill(db: Db, prefix: bytes, n: int, value: bytes = b"v") -> dict[bytes, bytes]:
    out = {}
    for i in range(n):
        k = prefix + b"%04d" % i
        db.put(k, value + b"%d" % i)
        out[k] = value + b"%d" % i
    return out


def detach(url: str) -> bool:
    ms = manifest_store(url)
    ext = ExternalStores(default_factory(RetryOptions(), ManualClock(), random.Random(0), None))
    return gc_detach_clone(ms, clock=ManualClock(start=2e9), external=ext, timeout_s=10)


@pytest.fixture(params=["memory", "local"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        with memory_urls(3) as u:
            yield u
    else:
        yield [str(tmp_path / name) for name in ("parent", "clone", "grandchild")]


def test_fork_then_each_sees_only_its_own_writes(urls: list[str]) -> None:
    parent_url, clone_url, _ = urls
    with Db.open(parent_url, settings=QUIET) as parent:
        base = fill(parent, b"sst-", 200)
        parent.flush(memtable=True)
        base.update(fill(parent, b"wal-", 50))  # only in WAL objects: the clone copies them
        with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
            assert dict(clone.scan()) == base
            m = clone.manifest
            assert m.parent is not None and m.initialized
            assert [e.url for e in m.external_dbs] == [m.parent.url]
            assert all(s.db == 1 for s in m.data.l0) and m.data.l0
            parent.put(b"p-only", b"1")
            parent.delete(b"sst-0000")
            clone.put(b"c-only", b"1")
            clone.delete(b"wal-0000")
            assert parent.get(b"c-only") is None and parent.get(b"wal-0000") is not None
            assert clone.get(b"p-only") is None and clone.get(b"sst-0000") is not None
            clone.flush(memtable=True)
        cps = clone_checkpoints(parent_url)
        assert len(cps) == 1 and cps[0].expire_time_s is None and cps[0].id == m.parent.checkpoint_id
        with Db.open(clone_url, settings=QUIET) as clone:  # reopens as a normal database
            expected = dict(base)
            expected.pop(b"wal-0000")
            expected[b"c-only"] = b"1"
            assert dict(clone.scan()) == expected
        with DbReader.open(clone_url) as r:  # readers resolve the parent's SSTs too
            assert dict(r.scan()) == expected
        parent_objects = {p for p in all_objects(parent_url) if p.startswith("compacted/")}
        clone_objects = {p for p in all_objects(clone_url) if p.startswith("compacted/")}
        assert parent_objects.isdisjoint(clone_objects)  # SSTs were not copied


def test_clone_from_a_checkpoint_is_that_version(urls: list[str]) -> None:
    parent_url, clone_url, _ = urls
    with Db.open(parent_url, settings=QUIET) as parent:
        fill(parent, b"a-", 100)
        parent.flush(memtable=True)
        fill(parent, b"b-", 30)
        cp = parent.create_checkpoint(lifetime=600)
        fill(parent, b"a-", 100, b"changed")
        parent.flush(memtable=True)
        with DbReader.open(parent_url, cp.id) as r:
            expected = dict(r.scan())
    with Db.open_from_checkpoint(clone_url, parent_url, cp.id, settings=QUIET) as clone:
        assert dict(clone.scan()) == expected
    cps = clone_checkpoints(parent_url)
    assert len(cps) == 1 and cps[0].manifest_id == cp.manifest_id


def test_clone_of_a_clone(urls: list[str]) -> None:
    parent_url, child_url, grand_url = urls
    with Db.open(parent_url, settings=QUIET) as parent:
        data = fill(parent, b"p-", 100)
        parent.flush(memtable=True)
    with Db.open_from_checkpoint(child_url, parent_url, settings=QUIET) as child:
        data.update(fill(child, b"c-", 100))
        child.flush(memtable=True)
        data.update(fill(child, b"cw-", 10))
    with Db.open_from_checkpoint(grand_url, child_url, settings=QUIET) as grand:
        assert dict(grand.scan()) == data
        m = grand.manifest
        assert len(m.external_dbs) == 2
        assert {s.db for s in m.data.ssts()} == {1, 2}
        grand.put(b"g-only", b"1")
        grand.flush(memtable=True)
    # The grandchild holds its own checkpoint in the grandparent, beside the child's.
    assert len(clone_checkpoints(parent_url)) == 2
    assert len(clone_checkpoints(child_url)) == 1
    with Db.open(child_url, settings=QUIET) as child:
        assert child.get(b"g-only") is None
    with DbReader.open(grand_url) as r:
        assert r.get(b"g-only") == b"1" and r.get(b"p-0001") == data[b"p-0001"]
    # The child may even be destroyed: the grandchild references the grandparent directly.
    # (It cannot while the grandchild's checkpoint in it is live.)
    with pytest.raises(InvalidDbState):
        admin.destroy(child_url, soft=False)


def test_reopening_an_initialized_clone_is_a_normal_open(urls: list[str]) -> None:
    parent_url, clone_url, _ = urls
    with Db.open(parent_url, settings=QUIET) as parent:
        fill(parent, b"k", 20)
    with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
        clone.put(b"mine", b"1")
        epoch = clone.epoch
    with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
        assert clone.get(b"mine") == b"1" and clone.epoch == epoch + 1
    assert len(clone_checkpoints(parent_url)) == 1  # no second pin


def test_clone_errors(tmp_path: Path) -> None:
    with memory_urls(4) as (parent_url, clone_url, other_url, uninit_url):
        with pytest.raises(NotFound):
            Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET)
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
            short = parent.create_checkpoint(lifetime=0.001)
        with pytest.raises(InvalidArgument):
            Db.open_from_checkpoint(parent_url, parent_url, settings=QUIET)
        with pytest.raises(InvalidArgument, match="non-empty"):  # was an AttributeError traceback
            Db.open_from_checkpoint("", parent_url, settings=QUIET)
        with pytest.raises(CheckpointNotFound):
            Db.open_from_checkpoint(clone_url, parent_url, uuid.uuid4(), settings=QUIET)
        assert short.expire_time_s is not None
        at_expiry = ManualClock(start=short.expire_time_s)  # not wall time: 1 ms may not have passed
        with pytest.raises(CheckpointNotFound, match="expired"):
            Db.open_from_checkpoint(clone_url, parent_url, short.id, settings=QUIET, clock=at_expiry)
        with Db.open(other_url, settings=QUIET) as other:
            other.put(b"x", b"1")
        with pytest.raises(InvalidArgument, match="not a clone"):
            Db.open_from_checkpoint(other_url, parent_url, settings=QUIET)
        manifest_store(uninit_url).create_initial(Manifest(id=1, initialized=False))
        with pytest.raises(InvalidDbState):
            Db.open_from_checkpoint(clone_url, uninit_url, settings=QUIET)
        with pytest.raises(InvalidArgument):  # the writer refuses an unfinished clone
            Db.open(uninit_url, settings=QUIET)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        with pytest.raises(InvalidArgument, match="clone of"):
            Db.open_from_checkpoint(clone_url, other_url, settings=QUIET)


def test_destroyed_parent_cannot_be_cloned_and_a_started_clone_releases_its_pin() -> None:
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            parent.put(b"a", b"1")
        faults = FaultInjectingStore(open_store(clone_url), seed=5)
        # Crash at the last step (initialized = true): the parent already holds the clone's pin.
        faults.add_rule("crash", ops="create", path_prefix="manifest/", nth=2)
        with pytest.raises(SimulatedCrash):
            Db.open_from_checkpoint(None, parent_url, settings=QUIET, store=faults)
        m = latest(clone_url)
        assert not m.initialized and m.parent is not None
        assert latest(parent_url).checkpoint(m.parent.checkpoint_id) is not None
        admin.create_checkpoint(parent_url)  # unrelated live checkpoint: soft destroy waits for it
        admin.destroy(parent_url)
        with pytest.raises(DatabaseDestroyed):
            Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET)
        assert latest(parent_url).checkpoint(m.parent.checkpoint_id) is None


@pytest.mark.parametrize("side", ["clone", "parent"])
def test_crash_at_every_store_call_of_initialization_then_retry(side: str) -> None:
    """Crash at the n-th store call (on the clone's or the parent's store), then retry with the same
    arguments: the clone ends initialized, equal to the parent's checkpoint, with exactly one pin."""

    def make(faults: FaultInjectingStore | None, parent_url: str, clone_url: str) -> Db:
        if faults is None:
            return Db.open_from_checkpoint(clone_url, parent_url, cp_id, settings=QUIET)
        if side == "clone":
            return Db.open_from_checkpoint(None, parent_url, cp_id, settings=QUIET, store=faults)
        return Db.open_from_checkpoint(clone_url, parent_url, cp_id, settings=QUIET, parent_store=faults)

    # A clean run to enumerate the calls.
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            fill(parent, b"k", 60)
            parent.flush(memtable=True)
            fill(parent, b"w", 20)
            cp_id = parent.create_checkpoint().id
        faults = FaultInjectingStore(open_store(clone_url if side == "clone" else parent_url), seed=1)
        make(faults, parent_url, clone_url).close()
        n_calls = len(faults.calls)
    assert n_calls > 5
    for n in range(1, n_calls + 1):
        with memory_urls(2) as (parent_url, clone_url):
            with Db.open(parent_url, settings=QUIET) as parent:
                fill(parent, b"k", 60)
                parent.flush(memtable=True)
                fill(parent, b"w", 20)
                cp_id = parent.create_checkpoint().id
                parent.put(b"after-checkpoint", b"x")
            with DbReader.open(parent_url, cp_id) as r:
                expected = dict(r.scan())
            faults = FaultInjectingStore(open_store(clone_url if side == "clone" else parent_url), seed=n)
            rule = faults.add_rule("crash", nth=n)
            db = None
            try:
                db = make(faults, parent_url, clone_url)
            except SimulatedCrash:
                pass
            if db is not None:  # the crash hit a background call after open returned
                try:
                    db.close()
                except (SimulatedCrash, Exception):
                    pass
            assert rule.fired == 1, (n, faults.calls[-3:])
            with make(None, parent_url, clone_url) as clone:  # the retry, as a new process
                assert clone.manifest.initialized
                assert dict(clone.scan()) == expected, n
            pins = clone_checkpoints(parent_url)
            assert len(pins) == 1, (n, pins)
            m = latest(clone_url)
            assert m.parent is not None and m.parent.checkpoint_id == pins[0].id
            assert pins[0].manifest_id == latest(parent_url).checkpoint(cp_id).manifest_id


def test_detach_once_no_ancestor_sst_is_referenced() -> None:
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            data = fill(parent, b"k", 100)
            parent.flush(memtable=True)
        with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
            data.update(fill(clone, b"c", 10))
            clone.flush(memtable=True)
        assert detach(clone_url) is False  # still reads the parent's L0
        cp = admin.create_checkpoint(clone_url)  # pins a version that references the parent
        absorb_ancestors(clone_url)
        assert detach(clone_url) is False  # the checkpoint's version still references the parent
        admin.delete_checkpoint(clone_url, cp.id)
        assert detach(clone_url) is True
        m = latest(clone_url)
        assert m.parent is None and m.external_dbs == () and m.option(PENDING_RELEASE) is None
        assert clone_checkpoints(parent_url) == []
        with Db.open(clone_url, settings=QUIET) as clone:
            assert dict(clone.scan()) == data
        with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
            assert dict(clone.scan()) == data  # a detached clone still opens through this API
        admin.destroy(parent_url, soft=False)  # nothing pins the parent any more
        with Db.open(clone_url, settings=QUIET) as clone:
            assert dict(clone.scan()) == data
        assert detach(clone_url) is False


def test_detach_crash_between_steps_is_finished_by_the_next_run() -> None:
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=QUIET) as parent:
            fill(parent, b"k", 10)
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET).close()
        absorb_ancestors(clone_url)
        ms = manifest_store(clone_url)
        m = ms.require_latest()
        pending = f'[["{m.parent.url}", "{m.parent.checkpoint_id}"]]'
        ms.update(
            lambda cur: replace(
                cur, parent=None, external_dbs=(), options=(*cur.options, (PENDING_RELEASE, pending))
            ),
            timeout_s=5,
        )  # as if the GC crashed after its CAS, before releasing the parent's checkpoint
        assert len(clone_checkpoints(parent_url)) == 1
        assert detach(clone_url) is False
        assert clone_checkpoints(parent_url) == []
        assert latest(clone_url).option(PENDING_RELEASE) is None


def test_clone_on_s3(s3_url_factory: Any) -> None:
    parent_loc, clone_loc = s3_url_factory(), s3_url_factory()
    opts = parent_loc.options
    with Db.open(parent_loc.url, settings=QUIET, store_options=opts) as parent:
        data = fill(parent, b"k", 50)
        parent.flush(memtable=True)
        data.update(fill(parent, b"w", 5))
        cp = parent.create_checkpoint()
    with Db.open_from_checkpoint(
        clone_loc.url, parent_loc.url, cp.id, settings=QUIET, store_options=opts
    ) as c:
        assert dict(c.scan()) == data
        c.put(b"mine", b"1")
    with DbReader.open(clone_loc.url, store_options=opts) as r:
        assert r.get(b"mine") == b"1" and r.get(b"k0001") == data[b"k0001"]
    with Db.open(parent_loc.url, settings=QUIET, store_options=opts) as parent:
        assert parent.get(b"mine") is None


def test_compaction_absorbs_the_parent_and_gc_detaches_the_clone() -> None:
    """End to end with the real compactor (reading the parent's SSTs) and garbage collector."""
    import time

    from shaledb import CompactorOptions, GarbageCollector, GcOptions

    busy = QUIET.replace(
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=1 << 20,
        compactor=CompactorOptions(poll_interval_s=0.05, min_l0_ssts=2),
    )
    with memory_urls(2) as (parent_url, clone_url):
        with Db.open(parent_url, settings=busy) as parent:
            data = fill(parent, b"p", 300)
            parent.flush(memtable=True)
        # Checked with the compactor off: it may absorb the parent before an assertion runs.
        with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
            assert any(s.db for s in clone.manifest.all_ssts())
        with Db.open(clone_url, settings=busy) as clone:
            data.update(fill(clone, b"c", 1500))
            data.update(fill(clone, b"p", 100, b"over"))
            clone.flush(memtable=True)
            deadline = time.monotonic() + 60
            while any(s.db for s in latest(clone_url).all_ssts()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(s.db for s in latest(clone_url).all_ssts())
            assert dict(clone.scan()) == data
        gc = GarbageCollector.open(clone_url, GcOptions(min_age_s=0.0))
        report = gc.run_once()
        assert report.detached
        assert clone_checkpoints(parent_url) == [] and latest(clone_url).parent is None
        admin.destroy(parent_url, soft=False)
        with Db.open(clone_url, settings=QUIET) as clone:
            assert dict(clone.scan()) == data


def test_writer_and_clone_opened_with_one_seed_do_not_share_a_checkpoint_id(tmp_path: Path) -> None:
    """Ids come from the injected rng: the same ``seed=`` must not give a duplicate checkpoint."""
    parent, clone = (tmp_path / "parent").as_uri(), (tmp_path / "clone").as_uri()
    with Db.open(parent, seed=7) as db:
        db.put(b"a", b"1")
    Db.open_from_checkpoint(clone, parent, seed=7).close()
    with Db.open(parent, seed=7) as db:  # raised ManifestInvariantError: checkpoint appears twice
        db.put(b"b", b"2")
        assert db.get(b"a") == b"1"


def test_clone_feed_cursor_before_the_clone_says_where_its_history_starts(urls: list[str]) -> None:
    parent_url, clone_url, _ = urls
    with Db.open(parent_url, settings=QUIET) as parent:
        fill(parent, b"sst-", 20)
        parent.flush(memtable=True)
        fill(parent, b"wal-", 5)
        with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
            with pytest.raises(CursorExpired, match=r"clone of .*before the fork") as exc:
                clone.changes(None, follow=False).read()
            assert parent_url in str(exc.value) and 'changes("latest")' in str(exc.value)
            clone.put(b"c-only", b"1")
            assert [c.key for c in clone.changes("latest", follow=False).read()] == []

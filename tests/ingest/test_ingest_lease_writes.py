"""The ingest lease is rewritten only when a quarter of its life may be gone.

The begin writes the lease; a part renews it once ``lease_s / 4`` has passed since the begin
(then since its own last renewal), and the commit rewrites it only then too. A part that runs
right after the begin -- every stream micro-batch -- used to write it with its first SST and
again at its finish, and the commit once more: three requests in the path of every ingest.
"""

from __future__ import annotations

import random

import pytest
from ingest_kit import contents

from shaledb import Db, GarbageCollector, GcOptions, InvalidArgument, Settings
from shaledb.bulk.ingest import IngestPlan, abort_ingest, begin_ingest, commit_ingest
from shaledb.bulk.ingest.model import JobLease, take_lease
from shaledb.bulk.ingest.parts import PartWriter
from shaledb.format import paths
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock

LEASE_S = 100.0


def _ingest(tmp_path, wait_before_part_s: float, wait_before_commit_s: float) -> tuple[int, str]:
    url = f"file://{tmp_path}/db"
    store = FaultInjectingStore(open_store(url), seed=0)
    clock = ManualClock(start=1_700_000_000.0)
    plan = begin_ingest(url, store=store, clock=clock, lease_s=LEASE_S, seed=1)
    assert store.count_calls("put", "compactions/") == 1
    clock.advance(wait_before_part_s)
    part = PartWriter(store, plan, 0, clock=clock)
    part.add([b"a", b"b"], [b"1", b"2"])
    done = part.finish()
    clock.advance(wait_before_commit_s)
    commit_ingest(plan, [done], store=store, clock=clock)
    assert contents(url) == {b"a": b"1", b"b": b"2"}
    return store.count_calls("put", "compactions/"), url


def test_a_part_and_commit_soon_after_the_begin_write_no_lease(tmp_path) -> None:
    writes, _ = _ingest(tmp_path, 1.0, 1.0)
    assert writes == 1  # the begin's (the old code wrote three more)


def test_a_late_part_renews_and_a_late_commit_rewrites(tmp_path) -> None:
    writes, _ = _ingest(tmp_path, LEASE_S / 4 + 1, LEASE_S / 4 + 1)
    assert writes == 3  # begin, the part's first renewal, the commit's


def test_a_late_commit_alone_rewrites(tmp_path) -> None:
    writes, _ = _ingest(tmp_path, 1.0, LEASE_S / 4)
    assert writes == 2


def _gc_deletes_nothing_then_commit(url, store, plan, done) -> None:
    """A pass at ``min_age_s=0`` before the commit deletes no SST; the commit then holds the row."""
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    try:
        assert gc.run_once().deleted["sst"] == []
    finally:
        gc.close()
    commit_ingest(plan, [done], store=store)
    assert contents(url) == {b"k": b"v"}


def test_the_lease_from_the_begin_still_keeps_the_gc_off(tmp_path) -> None:
    """A part that wrote no lease of its own is protected by the begin's until it lapses."""
    url = f"file://{tmp_path}/db"
    store = open_store(url)
    plan = begin_ingest(url, store=store, lease_s=LEASE_S, seed=2)
    part = PartWriter(store, plan, 0)
    part.add([b"k"], [b"v"])
    done = part.finish()
    _gc_deletes_nothing_then_commit(url, store, plan, done)


def test_a_part_whose_clock_is_behind_the_drivers_keeps_its_outputs_under_the_lease(tmp_path) -> None:
    """A Spark task's clock a minute behind the driver's: its SST's ULID time came before the
    lease's start, so the lease did not protect it and a pass at ``min_age_s=0`` deleted it
    (the commit then named a missing SST). Outputs are never born before their lease now."""
    url = f"file://{tmp_path}/db"
    store = open_store(url)
    plan = begin_ingest(url, store=store, lease_s=LEASE_S, seed=3)
    assert plan.lease_id is not None
    behind = ManualClock(start=paths.ulid_time_s(plan.lease_id) - 60.0)
    part = PartWriter(store, plan, 0, clock=behind)
    part.add([b"k"], [b"v"])
    done = part.finish()
    _gc_deletes_nothing_then_commit(url, store, plan, done)


Adopted = tuple[FaultInjectingStore, str, IngestPlan, JobLease, ManualClock]


def _adopting(tmp_path, lease_age_s: float) -> Adopted:
    """An ingest that adopts a lease its caller wrote ``lease_age_s`` before the begin, as a
    stream micro-batch's commit adopts its tasks' (they write it before staging their rows)."""
    url = f"file://{tmp_path}/db"
    Db.open(url, settings=Settings(compactor=None, garbage_collector=None)).close()  # an abort keeps it
    store = FaultInjectingStore(open_store(url), seed=0)
    clock = ManualClock(start=1_700_000_000.0)
    lease = take_lease(store, "a stream's task", LEASE_S, clock, random.Random(4))
    clock.advance(lease_age_s)
    store.clear_calls()
    plan = begin_ingest(url, store=store, clock=clock, lease_s=LEASE_S, seed=1, lease=lease)
    assert plan.lease_id == lease.id and plan.lease_adopted
    return store, url, plan, lease, clock


def test_an_adopted_fresh_lease_is_not_rewritten_and_is_left_to_its_caller(tmp_path) -> None:
    store, url, plan, lease, clock = _adopting(tmp_path, 1.0)
    assert store.count_calls("put", "compactions/") == 0  # the caller's lease is young enough
    part = PartWriter(store, plan, 0, clock=clock)
    part.add([b"a"], [b"1"])
    done = part.finish()
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        assert gc.run_once().deleted["sst"] == []  # the adopted lease covers the part's SST
    commit_ingest(plan, [done], store=store, clock=clock)
    assert contents(url) == {b"a": b"1"}
    assert store.count_calls("delete", "compactions/") == 0
    store.head(paths.job_path(lease.id))  # still there: the caller deletes it with its runs


def test_an_adopted_lease_a_quarter_through_is_rewritten_at_begin(tmp_path) -> None:
    store, _, plan, lease, _ = _adopting(tmp_path, LEASE_S / 4 + 1)
    assert store.count_calls("put", "compactions/") == 1
    abort_ingest(plan, [], store=store)
    store.head(paths.job_path(lease.id))  # an abort leaves it to the caller too


def test_a_lease_that_is_no_ulid_is_refused_before_anything_is_written(tmp_path) -> None:
    url = f"file://{tmp_path}/db"
    with pytest.raises(InvalidArgument, match="object id"):
        begin_ingest(url, lease=JobLease("../x", 0.0))
    assert not (tmp_path / "db").exists()

"""The ingest lease is rewritten only when a quarter of its life may be gone.

The begin writes the lease; a part renews it once ``lease_s / 4`` has passed since the begin
(then since its own last renewal), and the commit rewrites it only then too. A part that runs
right after the begin -- every stream micro-batch -- used to write it with its first SST and
again at its finish, and the commit once more: three requests in the path of every ingest.
"""

from __future__ import annotations

from ingest_kit import contents

from shaledb import GarbageCollector, GcOptions
from shaledb.bulk.ingest import begin_ingest, commit_ingest
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


def test_the_lease_from_the_begin_still_keeps_the_gc_off(tmp_path) -> None:
    """A part that wrote no lease of its own is protected by the begin's until it lapses."""
    url = f"file://{tmp_path}/db"
    store = open_store(url)
    plan = begin_ingest(url, store=store, lease_s=LEASE_S, seed=2)
    part = PartWriter(store, plan, 0)
    part.add([b"k"], [b"v"])
    done = part.finish()
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    try:
        assert gc.run_once().deleted["sst"] == []
    finally:
        gc.close()
    commit_ingest(plan, [done], store=store)
    assert contents(url) == {b"k": b"v"}


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
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    try:
        assert gc.run_once().deleted["sst"] == []
    finally:
        gc.close()
    commit_ingest(plan, [done], store=store)
    assert contents(url) == {b"k": b"v"}

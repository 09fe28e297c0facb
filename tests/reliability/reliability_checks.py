"""Quick protocol checks: each passes on shaledb and must fail with its planted bug.

Each check runs one protocol through the public API (plus a store wrapper to
simulate a crash) and judges the outcome with the reference model
(``HistoryModel``) or the consistency checker, so a failure says which
promise broke. ``test_reliability_checks.py`` runs them as they are,
``test_reliability_planted.py`` under the plants of ``shaledb.testing.plants``.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from shaledb import (
    Compactor,
    CompactorOptions,
    Db,
    FencedError,
    GarbageCollector,
    GcOptions,
    JournalOptions,
    Settings,
)
from shaledb.admin.checkpoint import make_checkpoint
from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import ShaleError
from shaledb.format import paths
from shaledb.manifest.store import ManifestStore
from shaledb.store import drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.linearizability import Op, check_linearizable
from shaledb.testing.model import HistoryModel

QUIET = Settings(compactor=None, garbage_collector=None)
TESTS = Path(__file__).resolve().parent.parent


@contextmanager
def memory_url() -> Iterator[str]:
    name = f"rel-{uuid.uuid4().hex}"
    try:
        yield f"memory://{name}"
    finally:
        drop_memory_store(name)


def check_acknowledged_writes_survive_a_crash(url: str) -> None:
    """Durable writes, then the process "dies" at once (every store call fails from then on):
    a new writer must find every acknowledged write (the model's prefix rule)."""
    inner = open_store(url)
    faults = FaultInjectingStore(inner)
    model = HistoryModel()
    db = Db.open(store=faults, settings=replace(QUIET, flush_interval_s=0.05))
    rng = random.Random(1)
    for i in range(40):
        k, v = b"k%02d" % rng.randrange(8), b"v%d" % i
        n = model.write([(k, v)])
        db.put(k, v)
        model.ack(n)
    faults.crash()
    try:
        db.close()
    except (SimulatedCrash, ShaleError):
        pass
    with Db.open(store=inner, settings=QUIET) as again:
        model.resolve_crash(dict(again.scan()))


def check_a_fenced_writer_cannot_write(url: str) -> None:
    """Writer A, then writer B opens (fencing A); B writes x, A tries to write x, B reads x,
    then a fresh open reads everything: the history must be linearizable."""
    t = time.monotonic
    x = b"x"
    h: list[Op] = []
    a = Db.open(url, settings=QUIET)
    c = t()
    a.put(x, b"1")
    h.append(Op("a", c, t(), writes=((x, b"1"),)))
    b = Db.open(store=open_store(url), settings=QUIET)  # as another process would: one writer per URL here
    c = t()
    b.put(x, b"3")
    h.append(Op("b", c, t(), writes=((x, b"3"),)))
    c = t()
    try:
        a.put(x, b"2")
        ok = True
    except FencedError:
        ok = False
    h.append(Op("a", c, t(), writes=((x, b"2"),), ok=ok))
    c = t()
    got = b.get(x)
    h.append(Op("b", c, t(), read={x: got}))
    b.close()
    try:
        a.close()
    except ShaleError:
        pass
    c = t()
    with Db.open(url, settings=QUIET) as final:
        seen = dict(final.scan())
    h.append(Op("final", c, t(), read=dict(seen), read_all=True))
    verdict = check_linearizable(h)
    assert verdict.ok, f"fencing: {verdict.reason}"


def check_gc_keeps_young_objects(url: str) -> None:
    """An SST written a moment ago and not yet in any manifest (a flush or compaction in
    flight) must survive a GC pass with the default minimum age."""
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.flush(memtable=True)
    store = open_store(url)
    young = paths.sst_path(paths.new_ulid(time.time(), random.Random()))
    store.put(young, b"the output of a flush in flight")
    GarbageCollector.open(url, settings=QUIET).run_once()
    assert [m.path for m in store.list(young)] == [young], f"the GC deleted {young}, seconds old"


def check_deletes_stay_deleted_through_compaction(url: str) -> None:
    """A key deleted after its value reached the bottom run must stay deleted when the
    tombstone is compacted into a run above the bottom."""
    model: dict[bytes, bytes] = {}
    comp_opts = CompactorOptions(min_l0_ssts=1, min_merge_runs=2, max_space_amplification=None)
    with Db.open(url, settings=QUIET) as db:
        for i in range(400):
            k, v = b"k%03d" % i, b"v" * 64
            db.put(k, v, durable=False)
            model[k] = v
        db.flush(memtable=True)
        Compactor.open(url, comp_opts, settings=QUIET).run_once()  # the bottom run
        db.delete(b"k007")
        model.pop(b"k007")
        db.flush(memtable=True)
        Compactor.open(url, comp_opts, settings=QUIET).run_once()  # L0 into a run above it
    with Db.open(url, settings=QUIET) as db:
        got = dict(db.scan())
        assert db.get(b"k007") is None, "a deleted key came back after compaction"
    assert got == model


def check_concurrent_manifest_updates_both_land(url: str) -> None:
    """Two processes update the manifest from the same version: compare-and-swap makes the
    second retry on top of the first, so both changes are in the latest version."""
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    store = open_store(url)
    one = ManifestStore(store, SYSTEM_CLOCK, random.Random(1), author="one")
    two = ManifestStore(store, SYSTEM_CLOCK, random.Random(2), author="two")
    base = one.require_latest()
    ids = [uuid.uuid4(), uuid.uuid4()]
    for ms, cp_id in zip((one, two), ids, strict=True):
        ms.update(
            lambda cur, cp_id=cp_id: replace(
                cur, checkpoints=(*cur.checkpoints, make_checkpoint(cp_id, cur.id, time.time(), 600.0))
            ),
            timeout_s=10,
            current=base,
        )
    latest = ManifestStore(store, SYSTEM_CLOCK, random.Random(3), author="check").require_latest()
    have = {c.id for c in latest.checkpoints}
    assert set(ids) <= have, f"a concurrent manifest update was lost: {set(ids) - have}"


def check_journal_compaction_keeps_live_values(url: str) -> None:
    """Overwrite half the keys (large values in the journal), compact the journal: every
    key still reads its latest value."""
    settings = replace(
        QUIET,
        value_separation_threshold=64,
        journal_max_bytes=4096,
        journal=JournalOptions(single_file_target_pct=90.0, max_run_target_pct=95.0),
    )
    model: dict[bytes, bytes] = {}
    with Db.open(url, settings=settings) as db:
        for rnd in range(3):
            for i in range(40):
                if rnd and i % 2:
                    continue
                k, v = b"k%02d" % i, b"%d-" % rnd + b"v" * 200
                db.put(k, v, durable=False)
                model[k] = v
            db.flush(memtable=True)
        report = db.compact_journal()
        assert report.did_work, "the journal compaction had nothing to do: the check proves nothing"
    # The objects compaction replaced go once the GC runs (no minimum age: nothing else runs).
    GarbageCollector.open(url, GcOptions(min_age_s=0.0), settings=settings).run_once()
    with Db.open(url, settings=settings) as db:
        for k, v in model.items():
            got = db.get(k)
            assert got == v, f"{k!r} reads {None if got is None else got[:12]!r} after journal compaction"


# ------------------------------------------------------------ existing tests as checks


def load_test_module(rel: str) -> ModuleType:
    """A test module of the suite (e.g. ``readers/test_readers_basic.py``), its folder's
    kit modules importable, so its tests can be run as checks under a plant."""
    path = TESTS / rel
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = f"reliability_loaded_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def check_reader_follows_a_collected_wal_object(url: str) -> None:
    """tests/readers: a reader never skips a WAL object flushed and collected while it replays."""
    mod = load_test_module("readers/test_readers_basic.py")
    mod.test_reader_never_skips_a_wal_object_flushed_and_collected_while_it_replays(url, False)


def check_clone_creation_resumes_after_a_crash(url: str) -> None:
    """tests/clones: a crash at every store call of a clone's creation, then a retry."""
    del url  # the test makes its own memory stores
    mod = load_test_module("clones/test_clones.py")
    mod.test_crash_at_every_store_call_of_initialization_then_retry("clone")


SUITE_TESTS = frozenset({"reader_follows_a_collected_wal_object", "clone_creation_resumes_after_a_crash"})
"""Checks that are tests of the suite: they already run in their own folders."""

CHECKS: dict[str, Callable[[str], None]] = {
    "acknowledged_writes_survive_a_crash": check_acknowledged_writes_survive_a_crash,
    "a_fenced_writer_cannot_write": check_a_fenced_writer_cannot_write,
    "gc_keeps_young_objects": check_gc_keeps_young_objects,
    "deletes_stay_deleted_through_compaction": check_deletes_stay_deleted_through_compaction,
    "concurrent_manifest_updates_both_land": check_concurrent_manifest_updates_both_land,
    "journal_compaction_keeps_live_values": check_journal_compaction_keeps_live_values,
    "reader_follows_a_collected_wal_object": check_reader_follows_a_collected_wal_object,
    "clone_creation_resumes_after_a_crash": check_clone_creation_resumes_after_a_crash,
}

"""A clone of the parent's *current* version whose creation dies at a random store call while
the parent keeps writing, compacting and collecting garbage (``min_age_s=0``) before the
retry: the retry finishes it, the parent keeps exactly one pin for it, and the clone never
loses an object it references. Randomized: ``SHALEDB_TEST_SEED``."""

from __future__ import annotations

import random

from clones_kit import QUIET, clone_checkpoints, latest, memory_urls

from shaledb import Db, GarbageCollector, GcOptions
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.compacting import compact_until_idle
from shaledb.testing.seeds import test_seed


def write(db: Db, tag: bytes, n: int, model: dict[bytes, bytes]) -> None:
    for i in range(n):
        k = b"k%03d" % (i * 7 % 50)
        model[k] = tag + b"%d" % i
        db.put(k, model[k])


def churn(parent_url: str, tag: bytes, model: dict[bytes, bytes]) -> None:
    """Parent writes (some flushed to L0, some only in the WAL), compacts, and its GC runs."""
    with Db.open(parent_url, settings=QUIET) as parent:
        write(parent, tag + b"a", 30, model)
        parent.flush(memtable=True)
        write(parent, tag + b"b", 10, model)
        compact_until_idle(parent_url)
        GarbageCollector.open(parent_url, GcOptions(min_age_s=0)).run_once(min_age_s=0)
        parent.flush(memtable=True)
    compact_until_idle(parent_url)
    GarbageCollector.open(parent_url, GcOptions(min_age_s=0)).run_once(min_age_s=0)


def test_clone_creation_killed_then_finished_while_the_parent_compacts_and_collects() -> None:
    rng = random.Random(test_seed())
    calls: dict[str, int] = {}
    with memory_urls(2) as (parent_url, clone_url):  # a clean run counts the store calls
        model: dict[bytes, bytes] = {}
        churn(parent_url, b"x", model)
        for side in ("clone", "parent"):
            faults = FaultInjectingStore(open_store(clone_url if side == "clone" else parent_url), seed=0)
            kw = {"store": faults} if side == "clone" else {"parent_store": faults}
            url = None if side == "clone" else clone_url + side
            Db.open_from_checkpoint(url, parent_url, settings=QUIET, **kw).close()  # type: ignore[arg-type]
            calls[side] = len(faults.calls)
    for run in range(8):
        side = rng.choice(["clone", "parent"])
        nth = rng.randint(1, calls[side])
        where = f"run {run}: crash at {side} call {nth} of {calls[side]}"
        with memory_urls(2) as (parent_url, clone_url):
            model = {}
            churn(parent_url, b"x", model)
            before = dict(model)
            faults = FaultInjectingStore(open_store(clone_url if side == "clone" else parent_url), seed=run)
            faults.add_rule("crash", nth=nth)
            kw = {"store": faults} if side == "clone" else {"parent_store": faults}
            try:
                Db.open_from_checkpoint(
                    None if side == "clone" else clone_url,
                    parent_url,
                    settings=QUIET,
                    **kw,  # type: ignore[arg-type]
                ).close()
            except SimulatedCrash:
                pass
            churn(parent_url, b"y", model)  # the parent moves on before the retry
            with Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET) as clone:
                got = dict(clone.scan())
                assert got in (before, model), where
                clone.put(b"own", b"1")
            assert len(clone_checkpoints(parent_url)) == 1, where
            churn(parent_url, b"z", model)  # the parent compacts and collects under the clone
            with Db.open(clone_url, settings=QUIET) as clone:  # cold: every SST read from the store
                assert dict(clone.scan()) == {**got, b"own": b"1"}, where
            assert latest(clone_url).initialized

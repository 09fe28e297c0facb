"""Model-based test of range deletes and merges: a Hypothesis state machine against a dict model.

Rules: put, delete, ``delete_range``, ``merge`` (the ready ``append`` operator; alone or
inside a ``WriteBatch`` among puts, deletes and range deletes, applied in order: a merge
after a range delete folds onto nothing, a range delete hides every operand), get,
a ``DbReader`` (scan and get), ``get_many``, scan (range, reverse,
limit), snapshots (open, read, close), flush to L0, compaction (a standalone
compactor with 4 KiB SSTs and two subcompactions, so runs have several SSTs and
tombstones cross their boundaries), clean reopen, and a crash (the writer loses
its store; every acknowledged write must survive: every write here is durable).
Every read equals the model; a snapshot equals the model when it was taken;
the SSTs of every sorted run stay disjoint.

Runs on the memory store, a local directory and (one short run) the moto S3
server. Budget: ``SHALEDB_RANGEDEL_EXAMPLES`` (default 30) examples of
``SHALEDB_RANGEDEL_STEPS`` (default 30) steps; Hypothesis prints the failing steps
and the ``seed`` the writer's RNG is derived from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from shaledb import CompactorOptions, Db, DbReader, WriteBatch
from shaledb.compaction import Compactor
from shaledb.errors import ShaleError
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.strategies import tiny_settings

EXAMPLES = int(os.environ.get("SHALEDB_RANGEDEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("SHALEDB_RANGEDEL_STEPS", "30"))

KEY = st.integers(0, 59).map(lambda i: b"k%02d" % i)
BOUND = st.integers(0, 61).map(lambda i: b"k%02d" % i)  # k60, k61: past every key
VALUE = st.integers(0, 9).map(lambda i: b"v%d" % i + b"." * 700)  # a few per 4 KiB SST
OPERAND = st.integers(0, 9).map(lambda i: b"+%d" % i)
OP = st.one_of(
    st.tuples(st.just("put"), KEY, VALUE),
    st.tuples(st.just("delete"), KEY, st.none()),
    st.tuples(st.just("range"), BOUND, BOUND),
    st.tuples(st.just("merge"), KEY, OPERAND),
)
COMPACTOR = CompactorOptions(
    min_l0_ssts=2,
    min_merge_runs=3,
    max_sst_size_bytes=4096,
    max_subcompactions=2,
    max_space_amplification=None,
)
"""Runs pile up (no space-amplification merge), so outputs above the bottom keep tombstones."""

Model = dict[bytes, bytes]


def apply(model: Model, op: tuple[str, bytes, Any]) -> None:
    kind, a, b = op
    if kind == "put":
        model[a] = b
    elif kind == "delete":
        model.pop(a, None)
    elif kind == "merge":
        model[a] = model.get(a, b"") + b  # the ready "append" operator
    else:
        lo, hi = sorted((a, b))
        for k in [k for k in model if lo <= k < hi]:
            del model[k]


def expected(model: Model, start: bytes | None, end: bytes | None, reverse: bool, limit: int | None) -> list:  # type: ignore[type-arg]
    ks = sorted(k for k in model if (start is None or k >= start) and (end is None or k < end))
    if reverse:
        ks.reverse()
    return [(k, model[k]) for k in ks[:limit]]


class RangeDeleteMachine(RuleBasedStateMachine):
    store_kind = "memory"
    locations: Callable[[], Any] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.db: Db | None = None
        self.model: Model = {}
        self.snaps: list[tuple[Any, Model]] = []
        self.tmpdir: str | None = None
        self.memory_name: str | None = None

    @initialize(seed=st.integers(0, 2**32 - 1))
    def open_first(self, seed: int) -> None:
        self.seed = seed
        if self.store_kind == "s3":
            assert RangeDeleteS3Machine.locations is not None
            self.inner: ObjectStore = RangeDeleteS3Machine.locations().open()
        elif self.store_kind == "memory":
            self.memory_name = f"rangedel-{uuid.uuid4().hex}"
            self.inner = open_store(f"memory://{self.memory_name}")
        else:
            self.tmpdir = tempfile.mkdtemp(prefix="shaledb-rangedel-")
            self.inner = open_store(os.path.join(self.tmpdir, "db"))
        self.settings = tiny_settings().replace(merge_operator="append")
        self.faults = FaultInjectingStore(self.inner, seed=seed)
        self.db = Db.open(store=self.faults, settings=self.settings, seed=seed)
        self.compactor = Compactor.open(store=self.inner, options=COMPACTOR, seed=seed)

    def teardown(self) -> None:
        self._close_snaps()
        if self.db is not None:
            with contextlib.suppress(ShaleError, SimulatedCrash):
                self.db.close()
        if self.memory_name is not None:
            drop_memory_store(self.memory_name)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _close_snaps(self) -> None:
        for s, _ in self.snaps:
            s.close()
        self.snaps = []

    @property
    def live(self) -> Db:
        assert self.db is not None
        return self.db

    # ---------------------------------------------------------------- writes

    @rule(key=KEY, value=VALUE)
    def put(self, key: bytes, value: bytes) -> None:
        self.live.put(key, value)
        apply(self.model, ("put", key, value))

    @rule(key=KEY)
    def delete(self, key: bytes) -> None:
        self.live.delete(key)
        apply(self.model, ("delete", key, None))

    @rule(a=BOUND, b=BOUND)
    def delete_range(self, a: bytes, b: bytes) -> None:
        lo, hi = sorted((a, b))
        self.live.delete_range(lo, hi)
        apply(self.model, ("range", lo, hi))

    @rule(key=KEY, operand=OPERAND)
    def merge(self, key: bytes, operand: bytes) -> None:
        self.live.merge(key, operand)
        apply(self.model, ("merge", key, operand))

    @rule(ops=st.lists(OP, min_size=1, max_size=6))
    def batch(self, ops: list[tuple[str, bytes, Any]]) -> None:
        wb = WriteBatch()
        for kind, a, b in ops:
            if kind == "put":
                wb.put(a, b)
            elif kind == "delete":
                wb.delete(a)
            elif kind == "merge":
                wb.merge(a, b)
            else:
                wb.delete_range(*sorted((a, b)))
            apply(self.model, (kind, a, b))
        self.live.write(wb)

    # ----------------------------------------------------------------- reads

    @rule(key=KEY)
    def get(self, key: bytes) -> None:
        assert self.live.get(key) == self.model.get(key), f"seed={self.seed} get {key!r}"

    @rule(keys=st.lists(KEY, max_size=8))
    def get_many(self, keys: list[bytes]) -> None:
        assert self.live.get_many(keys) == [self.model.get(k) for k in keys]

    @rule(
        start=st.one_of(st.none(), BOUND),
        end=st.one_of(st.none(), BOUND),
        reverse=st.booleans(),
        limit=st.one_of(st.none(), st.integers(1, 5)),
    )
    def scan(self, start: bytes | None, end: bytes | None, reverse: bool, limit: int | None) -> None:
        got = list(self.live.scan(start, end, reverse=reverse, limit=limit))
        assert got == expected(self.model, start, end, reverse, limit), f"seed={self.seed} scan"

    @rule(key=KEY)
    def reader(self, key: bytes) -> None:
        """A ``DbReader`` on the same store (every write here is durable: it sees them all)."""
        with DbReader.open(store=self.inner) as r:
            assert dict(r.scan()) == self.model, f"seed={self.seed} reader scan"
            assert r.get(key) == self.model.get(key)

    @rule()
    def snapshot_open(self) -> None:
        if len(self.snaps) >= 3:
            self.snaps.pop(0)[0].close()
        self.snaps.append((self.live.snapshot(), dict(self.model)))

    @rule(pick=st.integers(0, 9), key=KEY, reverse=st.booleans())
    def snapshot_read(self, pick: int, key: bytes, reverse: bool) -> None:
        if not self.snaps:
            return
        snap, state = self.snaps[pick % len(self.snaps)]
        assert snap.get(key) == state.get(key)
        assert list(snap.scan(reverse=reverse)) == expected(state, None, None, reverse, None)

    @rule(pick=st.integers(0, 9))
    def snapshot_close(self, pick: int) -> None:
        if self.snaps:
            self.snaps.pop(pick % len(self.snaps))[0].close()

    # ----------------------------------------------------- flush, compaction

    @rule()
    def flush_memtable(self) -> None:
        self.live.flush(memtable=True)

    @rule()
    def compact(self) -> None:
        self.compactor.run_once()
        self.live.refresh_manifest()

    @rule()
    def reopen(self) -> None:
        self._close_snaps()
        self.live.close()
        self.faults = FaultInjectingStore(self.inner, seed=self.seed)
        self.db = Db.open(store=self.faults, settings=self.settings, seed=self.seed + 1)
        assert dict(self.live.scan()) == self.model

    @rule()
    def crash(self) -> None:
        self._close_snaps()
        self.faults.crash()
        with contextlib.suppress(ShaleError, SimulatedCrash):
            self.live.close()
        self.faults = FaultInjectingStore(self.inner, seed=self.seed)
        self.db = Db.open(store=self.faults, settings=self.settings, seed=self.seed + 2)
        assert dict(self.live.scan()) == self.model, f"seed={self.seed}: lost or revived keys after a crash"

    @invariant()
    def runs_stay_disjoint(self) -> None:
        if self.db is None:
            return
        for run in self.db.manifest.data.runs:
            for a, b in zip(run.ssts, run.ssts[1:]):
                assert a.last_key < b.first_key, f"run {run.id}: SSTs overlap"


class RangeDeleteLocalMachine(RangeDeleteMachine):
    store_kind = "local"


class RangeDeleteS3Machine(RangeDeleteMachine):
    store_kind = "s3"


S3Machine = RangeDeleteS3Machine  # the name the _moto_for_machine fixture looks for

_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

TestRangeDeleteMemory = RangeDeleteMachine.TestCase
TestRangeDeleteMemory.settings = _SETTINGS

TestRangeDeleteLocal = pytest.mark.slow(RangeDeleteLocalMachine.TestCase)
TestRangeDeleteLocal.settings = settings(_SETTINGS, max_examples=max(1, EXAMPLES // 3))

TestRangeDeleteS3 = pytest.mark.usefixtures("_moto_for_machine")(
    pytest.mark.slow(RangeDeleteS3Machine.TestCase)
)
TestRangeDeleteS3.settings = settings(_SETTINGS, max_examples=max(1, EXAMPLES // 10))

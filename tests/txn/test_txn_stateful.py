"""Model-based test of transactions: random plain writes and interleaved transactions
of both isolation levels against a model that predicts every read and every
commit's outcome (commit or ``TransactionConflict``), with flushes, clean
reopens and crashes (abandoning the writer: open transactions die with it;
a commit cut by the crash is all-or-nothing).

The model keeps, per open transaction, the state at its snapshot, its own
writes, the keys it read and ranges it scanned (serializable), and every key
written since it began; a commit must conflict exactly when a written key
(snapshot) or also a read key or a key in a scanned range (serializable) was
written since. Runs on memory, a local directory and the moto S3 server (a
short budget). ``SHALEDB_STATEFUL_EXAMPLES`` (default 40) scales the budget:
half of it on memory, a fifth on a local directory, a twenty-fifth (at least
two) on S3; the longer run sets 100.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from shaledb import Db
from shaledb.compaction import Compactor
from shaledb.errors import ShaleError, TransactionConflict
from shaledb.keys import scan_bounds
from shaledb.settings import CompactorOptions
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock
from shaledb.testing.model import HistoryModel, Op, expected_scan
from shaledb.testing.strategies import KEYS, PREFIXES, bounds, tiny_settings, values

HOT = KEYS[1:7]
"""Few keys, so transactions and plain writes collide often."""


def keys() -> st.SearchStrategy[bytes]:
    return st.sampled_from(HOT)


CRASHED = object()
EXAMPLES = int(os.environ.get("SHALEDB_STATEFUL_EXAMPLES", "40"))


@dataclass
class TxnModel:
    txn: Any
    isolation: str
    state: dict[bytes, bytes]
    writes: dict[bytes, bytes | None] = field(default_factory=dict)
    reads: set[bytes] = field(default_factory=set)
    ranges: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    since: set[bytes] = field(default_factory=set)

    def view(self) -> dict[bytes, bytes]:
        out = dict(self.state)
        for k, v in self.writes.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def conflicts(self) -> bool:
        if not self.writes:
            return False
        if self.since & set(self.writes):
            return True
        if self.isolation != "serializable":
            return False
        if self.since & self.reads:
            return True
        return any((s is None or k >= s) and (e is None or k < e) for k in self.since for s, e in self.ranges)


class TxnMachine(RuleBasedStateMachine):
    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.db: Db | None = None
        self.faults: FaultInjectingStore | None = None
        self.tmpdir: str | None = None
        self.memory_name: str | None = None
        self.model = HistoryModel()
        self.txns: list[TxnModel] = []

    @initialize(seed=st.integers(0, 2**32 - 1))
    def open_first(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.inner = self._new_store()
        self.settings = tiny_settings(history_retention_s=3600.0)
        self.past: list[tuple[int, dict[bytes, bytes]]] = []
        """(seq, state) after acknowledged writes, for time-travel reads."""
        self.clock = ManualClock()
        self._open()

    def _new_store(self) -> ObjectStore:
        if self.store_kind == "s3":
            assert S3Machine.locations is not None
            return S3Machine.locations().open()  # type: ignore[no-any-return]
        if self.store_kind == "memory":
            self.memory_name = f"txn-{uuid.uuid4().hex}"
            return open_store(f"memory://{self.memory_name}")
        self.tmpdir = tempfile.mkdtemp(prefix="shaledb-txn-")
        return open_store(os.path.join(self.tmpdir, "db"))

    def _open(self) -> None:
        self.armed = False
        self.faults = FaultInjectingStore(self.inner, seed=self.rng.getrandbits(32))
        self.db = Db.open(
            store=self.faults, settings=self.settings, clock=self.clock, seed=self.rng.getrandbits(64)
        )

    def teardown(self) -> None:
        self._drop_txns()
        if self.db is not None:
            try:
                self.db.close()
            except (ShaleError, SimulatedCrash):
                pass
        if self.memory_name is not None:
            drop_memory_store(self.memory_name)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _drop_txns(self) -> None:
        for t in self.txns:
            t.txn.rollback()
        self.txns = []

    def _recover(self) -> None:
        assert self.faults is not None and self.db is not None
        self.faults.crash()
        self._drop_txns()
        try:
            self.db.close()
        except (ShaleError, SimulatedCrash):
            pass
        self._open()
        assert self.db is not None
        self.model.resolve_crash(dict(self.db.scan()))

    def _crashed(self, exc: BaseException, ops: list[Op] | None = None) -> bool:
        """``exc`` came from the crash: record ``ops`` as maybe-applied and recover."""
        if not (
            isinstance(exc, (SimulatedCrash, ShaleError)) and self.faults is not None and self.faults.crashed
        ):
            return False
        if ops:
            self.model.write(ops)  # may or may not have landed, all or nothing
        self._recover()
        return True

    def _call(self, fn: Callable[[], Any], ops: list[Op] | None = None) -> Any:
        try:
            return fn()
        except BaseException as exc:
            if not self._crashed(exc, ops):
                raise
            return CRASHED

    def _applied(self, ops: list[Op], seq: int) -> None:
        n = self.model.write(ops, seq=seq)
        self.model.ack(n)
        self.past.append((seq, self.model.current()))
        for t in self.txns:
            t.since.update(k for k, _ in ops)

    # ----------------------------------------------------------- plain writes

    @rule(key=keys(), value=st.one_of(st.none(), values()))
    def plain_write(self, key: bytes, value: bytes | None) -> None:
        assert self.db is not None
        db = self.db
        h = self._call(lambda: db.put(key, value) if value is not None else db.delete(key), [(key, value)])
        if h is not CRASHED:
            self._applied([(key, value)], h.seq)

    @rule(key=keys())
    def get(self, key: bytes) -> None:
        assert self.db is not None
        db = self.db
        got = self._call(lambda: db.get(key))
        if got is not CRASHED:
            assert got == self.model.current().get(key)

    # ----------------------------------------------------------- transactions

    def begin(self, isolation: str) -> None:
        assert self.db is not None
        db = self.db
        t = self._call(lambda: db.transaction(isolation))
        if t is CRASHED:
            return
        self.txns.append(TxnModel(t, isolation, self.model.current()))

    def _pick(self, pick: int) -> TxnModel | None:
        """An open transaction (one is begun if none is, so every step exercises one)."""
        if len(self.txns) <= pick % 3:  # picks 0-7 keep one to three transactions open
            self.begin(("snapshot", "serializable")[pick % 2])
        return self.txns[pick % len(self.txns)] if self.txns else None

    @rule(pick=st.integers(0, 7), key=keys(), value=st.one_of(st.none(), values()))
    def txn_write(self, pick: int, key: bytes, value: bytes | None) -> None:
        t = self._pick(pick)
        if t is None:
            return
        if value is None:
            t.txn.delete(key)
        else:
            t.txn.put(key, value)
        t.writes[key] = value

    @rule(
        pick=st.integers(0, 7),
        read=keys(),
        key=keys(),
        value=values(),
        interfere=st.sampled_from((*HOT, None)),
    )
    def txn_read_modify_write(
        self, pick: int, read: bytes, key: bytes, value: bytes, interfere: bytes | None
    ) -> None:
        """Read one key, write one key; ``interfere``: a plain write lands in between."""
        t = self._pick(pick)
        if t is None:
            return
        got = self._call(lambda: t.txn.get(read))
        if got is CRASHED:
            return
        assert got == t.view().get(read)
        if read not in t.writes:
            t.reads.add(read)
        if interfere is not None:
            self.plain_write(interfere, b"interfering")
            if t not in self.txns:  # the plain write crashed
                return
        t.txn.put(key, value)
        t.writes[key] = value

    @rule(pick=st.integers(0, 7), key=keys(), many=st.lists(keys(), max_size=4))
    def txn_get(self, pick: int, key: bytes, many: list[bytes]) -> None:
        t = self._pick(pick)
        if t is None:
            return
        view = t.view()
        got = self._call(lambda: (t.txn.get(key), t.txn.get_many(many)))
        if got is CRASHED:
            return
        assert got == (view.get(key), [view.get(k) for k in many])
        t.reads.update(k for k in [key, *many] if k not in t.writes)

    @rule(
        pick=st.integers(0, 7),
        start=bounds(),
        end=bounds(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
        reverse=st.booleans(),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    )
    def txn_scan(
        self,
        pick: int,
        start: bytes | None,
        end: bytes | None,
        prefix: bytes | None,
        reverse: bool,
        limit: int | None,
    ) -> None:
        t = self._pick(pick)
        if t is None:
            return
        got = self._call(lambda: list(t.txn.scan(start, end, prefix=prefix, reverse=reverse, limit=limit)))
        if got is CRASHED:
            return
        assert got == expected_scan(t.view(), start, end, prefix=prefix, reverse=reverse, limit=limit)
        t.ranges.append(scan_bounds(start, end, prefix))

    @rule(pick=st.integers(0, 7))
    def txn_commit(self, pick: int) -> None:
        t = self.txns[pick % len(self.txns)] if self.txns else None
        if t is None or not (t.writes or t.reads or t.ranges):
            return
        self.txns.remove(t)
        expect_conflict = t.conflicts()
        ops = sorted(t.writes.items())
        try:
            h = t.txn.commit()
        except TransactionConflict:
            assert expect_conflict, "a commit conflicted that the model says is clean"
            event(f"{t.isolation} commit conflicted")
            return
        except BaseException as exc:
            if not self._crashed(exc, ops):
                raise
            event("crash inside a commit")
            return
        assert not expect_conflict, "a commit succeeded that the model says conflicts"
        if ops:
            self._applied(ops, h.seq)

    @rule(pick=st.integers(0, 7))
    def txn_rollback(self, pick: int) -> None:
        t = self.txns[pick % len(self.txns)] if self.txns else None
        if t is not None:
            self.txns.remove(t)
            t.txn.rollback()

    # ------------------------------------------------------------ time travel

    @rule(pick=st.integers(0, 255), key=keys(), reverse=st.booleans())
    def time_travel_read(self, pick: int, key: bytes, reverse: bool) -> None:
        """A snapshot at an earlier acknowledged write reads the state right after it."""
        if not self.past or self.db is None:
            return
        seq, state = self.past[pick % len(self.past)]
        db = self.db

        def read() -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
            with db.snapshot(at_seq=seq) as snap:
                return snap.get(key), list(snap.scan(reverse=reverse))

        got = self._call(read)
        if got is not CRASHED:
            assert got == (state.get(key), expected_scan(state, reverse=reverse)), f"as of seq {seq}"

    @rule()
    def tick(self) -> None:
        """Time passes: the next write takes a new time mark."""
        self.clock.advance(0.7)

    @rule()
    def compact(self) -> None:
        """A standalone compactor merges the L0 SSTs, keeping the window's versions."""
        assert self.db is not None
        db = self.db

        def run() -> None:
            c = Compactor.open(store=self.inner, options=CompactorOptions(min_l0_ssts=2), clock=self.clock)
            try:
                c.run_once()
            finally:
                c.close()
            db.refresh_manifest()

        self._call(run)

    # -------------------------------------------------------- flush and crash

    @rule()
    def flush_memtable(self) -> None:
        assert self.db is not None
        self._call(lambda: self.db.flush(memtable=True) if self.db else None)

    @rule()
    def reopen(self) -> None:
        assert self.db is not None
        self._drop_txns()
        db = self.db
        if self._call(db.close) is CRASHED:
            return
        if self.faults is not None and self.faults.crashed:  # failed in the background before close
            self._recover()
            return
        if self._call(self._open) is CRASHED:
            return
        assert self.db is not None
        got = self._call(lambda: dict(self.db.scan()) if self.db else None)
        if got is not CRASHED:
            assert got == self.model.current()

    @rule()
    def crash(self) -> None:
        self._recover()

    @rule(n=st.integers(1, 20))
    def arm_crash(self, n: int) -> None:
        """Crash at the n-th store call from now (often inside a durable commit)."""
        assert self.faults is not None
        if not self.armed:
            self.faults.add_rule("crash", nth=n)
            self.armed = True


class LocalDirMachine(TxnMachine):
    store_kind = "local"


class S3Machine(TxnMachine):
    store_kind = "s3"
    locations: Callable[[], Any] | None = None


_SETTINGS = settings(
    max_examples=max(1, EXAMPLES // 2),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

TestTxnStatefulMemory = TxnMachine.TestCase
TestTxnStatefulMemory.settings = _SETTINGS

TestTxnStatefulLocalDir = pytest.mark.slow(LocalDirMachine.TestCase)
TestTxnStatefulLocalDir.settings = settings(_SETTINGS, max_examples=max(1, EXAMPLES // 5))

TestTxnStatefulS3 = pytest.mark.usefixtures("_moto_for_machine")(pytest.mark.slow(S3Machine.TestCase))
TestTxnStatefulS3.settings = settings(_SETTINGS, max_examples=max(2, EXAMPLES // 25))

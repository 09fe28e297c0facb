"""Model-based test of merges (issue 31, item 2): the writer's state machine plus merges.

Extends :class:`test_engine_stateful.DbMachine` (puts, deletes, batches, snapshots, flushes,
clean reopen, crashes at any store call, fencing) with ``Db.merge`` under the ready
``append`` operator, batches mixing puts, deletes and merges to the same keys, hot keys
merged past a memtable stack's fold threshold, compactions by a standalone compactor (which
folds with the operator the manifest records), and -- on half of the examples, with a
history window -- time-travel snapshots at an earlier sequence number. The model
(:class:`shaledb.testing.model.HistoryModel`) applies a merge as "append to the value";
every read of the machine (get, scan both ways, snapshots, reopen, crash recovery) must
agree with it. Runs on memory, a local directory and the moto S3 server.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_engine_stateful import _SETTINGS, CRASHED, DbMachine

from shaledb import CompactorOptions, WriteBatch
from shaledb.compaction import Compactor
from shaledb.engine.merging import MAX_STACK
from shaledb.store import ObjectStore, open_store
from shaledb.testing.model import MergeOperand, expected_scan
from shaledb.testing.strategies import keys, values

COMPACTOR = CompactorOptions(min_l0_ssts=2, min_merge_runs=2, max_sst_size_bytes=4096)

OPS = st.lists(
    st.tuples(keys(), st.sampled_from(["put", "delete", "merge"]), values()),
    min_size=1,
    max_size=6,
)


class MergeMachine(DbMachine):
    def _new_store(self) -> ObjectStore:
        if self.store_kind == "s3":
            assert S3Machine.locations is not None, "runs under the moto fixture"
            return S3Machine.locations().open()  # type: ignore[no-any-return]
        if self.store_kind == "memory":
            self.memory_name = f"merge-stateful-{uuid.uuid4().hex}"
            return open_store(f"memory://{self.memory_name}")
        self.tmpdir = tempfile.mkdtemp(prefix="shaledb-merge-stateful-")
        return open_store(os.path.join(self.tmpdir, "db"))

    def _open(self, faults: Any) -> None:
        if self.settings.merge_operator is None:
            history = 3600.0 if self.rng.random() < 0.5 else 0.0
            self.settings = self.settings.replace(merge_operator="append", history_retention_s=history)
            self.states: list[tuple[int, dict[bytes, bytes]]] = []
        super()._open(faults)

    def _open_and_resolve(self, why: str) -> None:
        self.states = []  # writes not acknowledged may be gone: their seqs mean nothing now
        super()._open_and_resolve(why)

    def _record(self) -> None:
        if self.settings.history_retention_s:
            self.states.append((self.last_seq, self.model.current()))
            del self.states[:-8]

    @rule(key=keys(), operand=values(), durable=st.booleans())
    def merge(self, key: bytes, operand: bytes, durable: bool) -> None:
        assert self.db is not None
        db = self.db
        self._write([(key, MergeOperand(operand))], durable, lambda: db.merge(key, operand, durable=durable))
        self._record()

    @rule(ops=OPS, durable=st.booleans())
    def batch_with_merges(self, ops: list[tuple[bytes, str, bytes]], durable: bool) -> None:
        assert self.db is not None
        db = self.db
        wb = WriteBatch()
        model: list[tuple[bytes, bytes | None]] = []
        for k, what, v in ops:
            if what == "put":
                wb.put(k, v)
                model.append((k, v))
            elif what == "delete":
                wb.delete(k)
                model.append((k, None))
            else:
                wb.merge(k, v)
                model.append((k, MergeOperand(v)))
        self._write(model, durable, lambda: db.write(wb, durable=durable))
        self._record()

    @rule(key=keys(), extra=st.integers(0, 8))
    def hot_key(self, key: bytes, extra: int) -> None:
        """Past the memtable stack's fold threshold: the writer folds with one lookup below."""
        for i in range(MAX_STACK + extra):
            if self.db is None or self.db.closed:
                return
            db = self.db
            op = bytes([65 + i % 26])
            self._write(
                [(key, MergeOperand(op))], False, lambda db=db, op=op: db.merge(key, op, durable=False)
            )
        self._record()

    @rule()
    def compact(self) -> None:
        """A standalone compactor (no operator given: it folds the ready one the manifest names)."""
        assert self.db is not None
        db = self.db
        if self._call(lambda: db.flush(memtable=True)) is CRASHED:
            return
        self.model.ack_all()
        self.handles = []
        comp = Compactor.open(
            store=self.inner, options=COMPACTOR, seed=self.rng.getrandbits(32), clock=self.clock
        )
        try:
            for _ in range(3):
                if not comp.run_once().did_work:
                    break
        finally:
            comp.close()
        if self._call(db.refresh_manifest) is CRASHED:
            return
        got = self._call(lambda: dict(db.scan()))
        if got is not CRASHED:
            assert got == self.model.current()

    @rule(pick=st.integers(0, 255), reverse=st.booleans())
    def time_travel(self, pick: int, reverse: bool) -> None:
        if not self.settings.history_retention_s or not self.states or self.db is None:
            return
        seq, state = self.states[pick % len(self.states)]
        db = self.db

        def read() -> tuple[list[tuple[bytes, bytes]], dict[bytes, Any]]:
            with db.snapshot(at_seq=seq) as snap:
                rows = list(snap.scan(reverse=reverse))
                return rows, {k: snap.get(k) for k in state}

        got = self._call(read)
        if got is CRASHED:
            return
        assert got[0] == expected_scan(state, reverse=reverse)
        assert got[1] == state


class LocalDirMachine(MergeMachine):
    store_kind = "local"


class S3Machine(MergeMachine):
    store_kind = "s3"
    locations: Callable[[], Any] | None = None  # s3_url_factory, set by _moto_for_machine (conftest)


# A share of the writer machine's budget (SHALEDB_STATEFUL_EXAMPLES): its rules run here too.
TestMergeStatefulMemory = MergeMachine.TestCase
TestMergeStatefulMemory.settings = settings(_SETTINGS, max_examples=max(1, _SETTINGS.max_examples // 2))

TestMergeStatefulLocalDir = pytest.mark.slow(LocalDirMachine.TestCase)
TestMergeStatefulLocalDir.settings = settings(_SETTINGS, max_examples=max(1, _SETTINGS.max_examples // 4))

TestMergeStatefulS3 = pytest.mark.usefixtures("_moto_for_machine")(pytest.mark.slow(S3Machine.TestCase))
TestMergeStatefulS3.settings = _SETTINGS.__class__(
    _SETTINGS, max_examples=max(1, _SETTINGS.max_examples // 5)
)

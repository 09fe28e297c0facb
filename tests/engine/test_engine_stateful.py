"""Model-based test of the writer (reliability goal G1): random operations against a dict model.

Rules: put / delete / batch (WriteBatch or ``db.batch()``), durable or not;
get; scan (range, prefix, reverse, limit); snapshots (open, read, close);
waiting on a WriteHandle; flush (WAL barrier); flush(memtable=True); clean
reopen; crash (abandon the Db: its FaultInjectingStore goes into crash mode so
its threads can no longer touch the store, then a new Db opens on the inner
store); and an armed crash that fires at the n-th store call from now, in
whichever thread makes it (mid WAL write, L0 flush, manifest update, close
or open); and a second writer opening while this one runs (the old handle
must then be fenced, and the new one sees a prefix of the history).

The model (:class:`shaledb.testing.model.HistoryModel`) knows the acknowledged
state and the writes not yet known durable; after every crash the recovered
database must equal the acknowledged state plus a prefix of the pending
writes. Live reads must equal every accepted write; a snapshot must equal the
model as it was when the snapshot was taken.

Runs on the memory store, on a local directory and on the moto S3 server with tiny settings (4 KiB
memtables, 700-byte WAL objects, 256-byte blocks) so WAL objects, L0 flushes
and multi-block SSTs happen within a few steps. Hypothesis prints the failing
steps, including the ``seed`` every RNG (Db, fault injector) is derived from.
Budget: ``SHALEDB_STATEFUL_EXAMPLES`` (default 100) examples of
``SHALEDB_STATEFUL_STEPS`` (default 40) steps per store; raise them to soak.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from shaledb import Db, WriteBatch, WriteHandle
from shaledb.errors import ClosedError, FencedError, ShaleError
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock
from shaledb.testing.model import HistoryModel, Op, expected_scan
from shaledb.testing.strategies import KEYS, PREFIXES, bounds, keys, tiny_settings, values

EXAMPLES = int(os.environ.get("SHALEDB_STATEFUL_EXAMPLES", "100"))
STEPS = int(os.environ.get("SHALEDB_STATEFUL_STEPS", "40"))

CRASHED = object()
"""Returned by an operation that hit the simulated crash (the model was updated)."""


class DbMachine(RuleBasedStateMachine):
    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.db: Db | None = None
        self.faults: FaultInjectingStore | None = None
        self.tmpdir: str | None = None
        self.memory_name: str | None = None
        self.model = HistoryModel()
        self.handles: list[tuple[WriteHandle, int]] = []
        self.snaps: list[tuple[Any, dict[bytes, bytes]]] = []
        self.last_seq = 0
        self.armed = False

    # ------------------------------------------------------------ lifecycle

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        compression=st.sampled_from(["none", "lz4", "zstd"]),
        track=st.booleans(),
    )
    def open_first(self, seed: int, compression: str, track: bool) -> None:
        self.rng = random.Random(seed)
        self.inner = self._new_store()
        self.settings = tiny_settings(compression=compression, track_and_verify_wals=track)
        self.clock = ManualClock()
        self._open(self._new_faults())
        assert self.db is not None
        assert dump(self.db) == {}

    def _new_store(self) -> ObjectStore:
        if self.store_kind == "s3":
            assert S3Machine.locations is not None, "runs under the moto fixture (TestStatefulS3)"
            return S3Machine.locations().open()  # type: ignore[no-any-return]
        if self.store_kind == "memory":
            self.memory_name = f"stateful-{uuid.uuid4().hex}"
            return open_store(f"memory://{self.memory_name}")
        self.tmpdir = tempfile.mkdtemp(prefix="shaledb-stateful-")
        return open_store(os.path.join(self.tmpdir, "db"))

    def _new_faults(self) -> FaultInjectingStore:
        self.armed = False
        return FaultInjectingStore(self.inner, seed=self.rng.getrandbits(32))

    def _open(self, faults: FaultInjectingStore) -> None:
        self.faults = faults
        self.db = None
        self.db = Db.open(
            store=faults, settings=self.settings, clock=self.clock, seed=self.rng.getrandbits(64)
        )
        self.last_seq = self.db.stats()["seq"]

    def teardown(self) -> None:
        self._drop_snapshots()
        if self.db is not None and not self.db.closed:
            stats = self.db.stats()
            event(f"L0 SSTs at the end: {min(stats['l0_ssts'], 5)}{'+' if stats['l0_ssts'] >= 5 else ''}")
            event(f"manifest id at the end > 10: {stats['manifest_id'] > 10}")
        if self.db is not None:
            try:
                self.db.close()
            except (ShaleError, SimulatedCrash):
                pass
        if self.memory_name is not None:
            drop_memory_store(self.memory_name)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _drop_snapshots(self) -> None:
        for snap, _ in self.snaps:
            snap.close()
        self.snaps = []

    # ------------------------------------------------------- crash handling

    def _is_crash(self, exc: BaseException) -> bool:
        return (
            isinstance(exc, (SimulatedCrash, ShaleError)) and self.faults is not None and self.faults.crashed
        )

    def _recover(self) -> None:
        """The writer process died: reopen on the inner store and match the model."""
        assert self.faults is not None
        self.faults.crash()
        if self.db is not None:
            try:
                self.db.close()
            except (ShaleError, SimulatedCrash):
                pass
        self._drop_snapshots()
        self.handles = []
        self._open_and_resolve("crash")

    def _open_and_resolve(self, why: str) -> None:
        """Open a new writer on the inner store; its contents must be a prefix of the history."""
        self._open(self._new_faults())
        assert self.db is not None
        observed = dump(self.db)
        pending = len(self.model.pending)
        kept = self.model.resolve_crash(observed)
        event(
            f"{why} recovered: {'some' if kept else 'no'} unacked writes kept, "
            f"{'some' if kept < pending else 'none'} lost"
        )
        for k in KEYS:
            assert self.db.get(k) == observed.get(k), f"get({k!r}) disagrees with the scan after recovery"
        seq = self.db.stats()["seq"]
        assert seq >= self.model.acked_seq, (
            f"sequence went back to {seq} below durable {self.model.acked_seq}"
        )

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except BaseException as exc:
            if not self._is_crash(exc):
                raise
            self._recover()
            return CRASHED

    def _write(self, ops: list[Op], durable: bool, fn: Any, *, has_handle: bool = True) -> None:
        try:
            h = fn()
        except BaseException as exc:
            if not self._is_crash(exc):
                raise
            if ops:
                self.model.write(ops)  # may or may not have reached the WAL
            self._recover()
            return
        assert self.db is not None
        # ``db.batch()`` gives no handle; one thread writes, so the last seq is this write's.
        seq = h.seq if has_handle else self.db.stats()["seq"]
        if not ops:
            assert seq == self.last_seq, "an empty batch must not consume a sequence number"
            return
        assert seq > self.last_seq, f"sequence numbers must increase: {seq} after {self.last_seq}"
        self.last_seq = seq
        number = self.model.write(ops, seq=seq)
        if durable:
            self.model.ack(number)
        elif has_handle:
            self.handles.append((h, number))

    # ---------------------------------------------------------------- writes

    @rule(key=keys(), value=values(), durable=st.booleans())
    def put(self, key: bytes, value: bytes, durable: bool) -> None:
        assert self.db is not None
        db = self.db
        self._write([(key, value)], durable, lambda: db.put(key, value, durable=durable))

    @rule(key=keys(), durable=st.booleans())
    def delete(self, key: bytes, durable: bool) -> None:
        assert self.db is not None
        db = self.db
        self._write([(key, None)], durable, lambda: db.delete(key, durable=durable))

    @rule(
        ops=st.lists(st.tuples(keys(), st.one_of(st.none(), values())), max_size=6),
        durable=st.booleans(),
        context_manager=st.booleans(),
    )
    def batch(self, ops: list[Op], durable: bool, context_manager: bool) -> None:
        assert self.db is not None
        db = self.db
        if context_manager:

            def run_cm() -> None:
                with db.batch(durable=durable) as b:
                    for k, v in ops:
                        if v is None:
                            b.delete(k)
                        else:
                            b.put(k, v)

            self._write(ops, durable, run_cm, has_handle=False)
            return
        wb = WriteBatch()
        for k, v in ops:
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        self._write(ops, durable, lambda: db.write(wb, durable=durable))

    @rule(pick=st.integers(0, 255))
    def wait_durable(self, pick: int) -> None:
        if not self.handles:
            return
        h, number = self.handles[pick % len(self.handles)]
        r = self._call(h.wait_durable)
        if r is CRASHED:
            return
        assert r is True and h.durable
        self.model.ack(number)
        self.handles = [(x, n) for x, n in self.handles if self.model.is_pending(n)]

    # ----------------------------------------------------------------- reads

    @rule(key=keys())
    def get(self, key: bytes) -> None:
        assert self.db is not None
        db = self.db
        got = self._call(lambda: db.get(key))
        if got is not CRASHED:
            assert got == self.model.current().get(key)

    @rule(
        start=bounds(),
        end=bounds(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
        reverse=st.booleans(),
        limit=st.one_of(st.none(), st.integers(0, 5)),
    )
    def scan(
        self,
        start: bytes | None,
        end: bytes | None,
        prefix: bytes | None,
        reverse: bool,
        limit: int | None,
    ) -> None:
        assert self.db is not None
        db = self.db
        got = self._call(lambda: list(db.scan(start, end, prefix=prefix, reverse=reverse, limit=limit)))
        if got is CRASHED:
            return
        want = expected_scan(self.model.current(), start, end, prefix=prefix, reverse=reverse, limit=limit)
        assert got == want

    @rule()
    def snapshot_open(self) -> None:
        assert self.db is not None
        if len(self.snaps) >= 4:
            self.snaps.pop(0)[0].close()
        db = self.db
        snap = self._call(db.snapshot)
        if snap is not CRASHED:
            self.snaps.append((snap, self.model.current()))

    @rule(
        pick=st.integers(0, 255),
        key=keys(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
        reverse=st.booleans(),
    )
    def snapshot_read(self, pick: int, key: bytes, prefix: bytes | None, reverse: bool) -> None:
        if not self.snaps:
            return
        snap, state = self.snaps[pick % len(self.snaps)]
        got = self._call(lambda: (snap.get(key), list(snap.scan(prefix=prefix, reverse=reverse))))
        if got is CRASHED:
            return
        assert got[0] == state.get(key)
        assert got[1] == expected_scan(state, prefix=prefix, reverse=reverse)

    @rule(pick=st.integers(0, 255))
    def snapshot_close(self, pick: int) -> None:
        if self.snaps:
            self.snaps.pop(pick % len(self.snaps))[0].close()

    # ---------------------------------------------------------------- flushes

    @rule()
    def flush(self) -> None:
        assert self.db is not None
        if self._call(self.db.flush) is CRASHED:
            return
        self.model.ack_all()
        self.handles = []

    @rule()
    def flush_memtable(self) -> None:
        assert self.db is not None
        db = self.db
        if self._call(lambda: db.flush(memtable=True)) is CRASHED:
            return
        self.model.ack_all()
        self.handles = []
        if not self.faults or not self.armed:
            stats = db.stats()
            assert stats["memtable_bytes"] == 0 and stats["immutable_memtables"] == 0
            assert db.manifest.last_l0_seq == stats["seq"], "flush(memtable=True) left writes outside L0"

    # ----------------------------------------------------- reopen and crash

    @rule()
    def reopen(self) -> None:
        assert self.db is not None and self.faults is not None
        self._drop_snapshots()
        try:
            self.db.close()
        except BaseException as exc:
            if not self._is_crash(exc):
                raise
            self._recover()
            return
        if self.faults.crashed:
            # The handle had already failed in the background: close() had nothing to flush with.
            self._recover()
            return
        self.model.ack_all()
        self.handles = []
        seq_before = self.last_seq
        try:
            self._open(self.faults)  # an armed crash may fire during open
        except BaseException as exc:
            if not self._is_crash(exc):
                raise
            self._recover()
            return
        assert self.db is not None
        got = self._call(lambda: dump(self.db))
        if got is CRASHED:
            return
        assert got == self.model.current()
        assert self.last_seq >= seq_before, "sequence numbers went backwards across a clean reopen"

    @rule()
    def fence_by_new_writer(self) -> None:
        """A second writer opens while this one runs: the old handle becomes a zombie.

        Its writes not yet durable may or may not have reached the WAL before
        the fence (a prefix, as after a crash); its next durable write must
        raise FencedError and never become visible.
        """
        assert self.db is not None and self.faults is not None
        if self.faults.crashed:
            self._recover()
            return
        zombie, zombie_faults = self.db, self.faults
        zombie_faults.clear_rules()
        self._drop_snapshots()
        self.handles = []
        self._open_and_resolve("fence")
        # A background call armed before clear_rules (an apply_then_crash of a flush's LIST)
        # can still crash the zombie after it: then it refuses with ClosedError, not FencedError.
        for refused in (
            lambda: zombie.put(b"zombie", b"must never be visible"),
            lambda: zombie.flush(memtable=True),
        ):
            with pytest.raises((FencedError, ClosedError)) as got:
                refused()
            assert isinstance(got.value, FencedError) or zombie_faults.crashed, got.value
        zombie.close()

    @rule()
    def tick(self) -> None:
        """Let the WAL flush interval pass: buffered writes go out in the background."""
        self.clock.advance(self.settings.flush_interval_s * 1.5)

    @rule()
    def crash(self) -> None:
        self._recover()

    @rule(n=st.integers(1, 30), action=st.sampled_from(["crash", "apply_then_crash"]))
    def arm_crash(self, n: int, action: str) -> None:
        """Crash at the n-th store call from now, whichever thread makes it.

        No preconditions anywhere in this machine: background threads make a
        crash's timing vary between runs, and a precondition reading state it
        changed would make Hypothesis's replays draw differently.
        """
        assert self.faults is not None
        if not self.armed:
            self.faults.clear_calls()
            self.faults.add_rule(action, nth=n)  # type: ignore[arg-type]
            self.armed = True

    @invariant()
    def durable_never_ahead(self) -> None:
        if self.db is not None and not self.db.closed:
            stats = self.db.stats()
            assert stats["durable_seq"] <= stats["seq"]


def dump(db: Any) -> dict[bytes, bytes]:
    return dict(db.scan())


class LocalDirMachine(DbMachine):
    store_kind = "local"


class S3Machine(DbMachine):
    """The same machine on the moto S3 server: S3's conditional puts, listings and errors."""

    store_kind = "s3"
    locations: Callable[[], Any] | None = None  # s3_url_factory, set by _moto_for_machine (conftest)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

TestStatefulMemory = DbMachine.TestCase
TestStatefulMemory.settings = _SETTINGS

TestStatefulLocalDir = pytest.mark.slow(LocalDirMachine.TestCase)
TestStatefulLocalDir.settings = _SETTINGS

# A request to moto costs about a millisecond, so S3 gets a fifth of the budget.
TestStatefulS3 = pytest.mark.usefixtures("_moto_for_machine")(pytest.mark.slow(S3Machine.TestCase))
TestStatefulS3.settings = settings(_SETTINGS, max_examples=max(1, EXAMPLES // 5))

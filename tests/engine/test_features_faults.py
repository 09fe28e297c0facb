"""A fault at every store call of a transaction commit, a range delete and a merge followed
by a flush, a compaction that folds merges and drops range-deleted rows, and close.

A base database holds merge chains and range tombstones spread over several L0 SSTs (so
the compaction has operands to fold and rows to drop). A scripted run on a
:class:`FaultInjectingStore` records how many store calls it makes; then, for every call
*n* and every fault action, the script runs again on a fresh copy of the base with that one
call broken (no retries, so each failure reaches the engine):

* the failure is a typed error (a ``ShaleError``) or the simulated crash, never another
  exception;
* what the failed handle still reads, and what a new writer reads after it is abandoned,
  is the model after the steps that returned, or after the failed write too (its outcome
  is unknown) -- never part of a transaction or of a range delete;
* the reopened database passes a deep ``verify``, every time-travel snapshot (with a
  history window) equals the model's state at its sequence number, and a compaction run
  again (the operator's retry) changes nothing visible.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shaledb import CompactorOptions, Db, RetryOptions, WriteBatch
from shaledb.admin.verify import verify
from shaledb.compaction import Compactor
from shaledb.errors import HistoryUnavailable, ShaleError
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock
from shaledb.testing.compacting import EAGER
from shaledb.testing.strategies import tiny_settings

NO_RETRY = RetryOptions(max_attempts=1, initial_backoff_s=0.001, max_backoff_s=0.001, timeout_s=30.0)
ACTIONS = ("fail_before", "apply_then_fail", "crash", "apply_then_crash")
State = dict[bytes, bytes]


def _settings(retention: float) -> Any:
    return tiny_settings(
        retry=NO_RETRY,
        l0_sst_size_bytes=1 << 20,
        wal_max_bytes=1 << 20,
        max_unflushed_bytes=4 << 20,
        wal_read_ahead=1,
        open_in_parallel=False,
        history_retention_s=retention,
        merge_operator="append",
    )


def _apply(state: State, ops: list[tuple[str, bytes, bytes | None]]) -> State:
    out = dict(state)
    for kind, a, b in ops:
        if kind == "put":
            assert b is not None
            out[a] = b
        elif kind == "merge":
            assert b is not None
            out[a] = out.get(a, b"") + b
        else:
            assert b is not None
            for k in [k for k in out if a <= k < b]:
                del out[k]
    return out


def _to(target: Any, ops: list[tuple[str, bytes, bytes | None]]) -> None:
    for kind, a, b in ops:
        getattr(target, "delete_range" if kind == "range" else kind)(a, b)


def _base(store: ObjectStore, retention: float) -> list[tuple[int, State]]:
    """Merge chains and range tombstones over four L0 SSTs, and more of both only in WAL
    objects (the writer crashed: the script's open replays them); returns (seq, state)
    history."""
    faults = FaultInjectingStore(store, seed=1)
    db = Db.open(store=faults, settings=_settings(retention), clock=ManualClock(), seed=1)
    state: State = {}
    history = []
    rounds: list[list[tuple[str, bytes, bytes | None]]] = [
        [("put", b"a", b"A0"), ("put", b"c", b"C0"), ("merge", b"m", b"1;"), ("put", b"r1", b"x")],
        [("merge", b"m", b"2;"), ("merge", b"c", b"+c"), ("put", b"r2", b"y"), ("merge", b"n", b"n1;")],
        [("range", b"r", b"r2"), ("merge", b"m", b"3;"), ("merge", b"r1", b"again;"), ("put", b"z", b"Z")],
        [("merge", b"n", b"n2;"), ("range", b"b", b"d"), ("merge", b"c", b"new;"), ("merge", b"m", b"4;")],
    ]
    in_wal = [
        ("merge", b"m", b"w;"),
        ("range", b"y", b"zz"),
        ("merge", b"z", b"after;"),
        ("merge", b"a", b"+a"),
    ]
    for ops in [*rounds, in_wal]:
        for op in ops:
            h = db.write(_batch([op]))
            state = _apply(state, [op])
            history.append((h.seq, state))
        if ops is not in_wal:
            db.flush(memtable=True)
    faults.crash()
    with contextlib.suppress(ShaleError, SimulatedCrash):
        db.close()
    return history


def _batch(ops: list[tuple[str, bytes, bytes | None]]) -> WriteBatch:
    b = WriteBatch()
    _to(b, ops)
    return b


TXN = [("merge", b"m", b"5;"), ("put", b"q", b"Q"), ("range", b"a", b"b"), ("merge", b"a", b"fresh;")]
RANGE = [("range", b"m", b"o")]
MERGE = [("merge", b"n", b"after;")]


class Script:
    """open, a transaction, a range delete, a merge, flush(memtable=True), a standalone
    compaction, close; stops at the first failure of the writer, goes on after one of
    the compactor (it is a separate process's job)."""

    def __init__(
        self, faults: FaultInjectingStore, history: list[tuple[int, State]], retention: float
    ) -> None:
        self.faults = faults
        self.retention = retention
        self.history = list(history)
        self.state = history[-1][1]
        self.maybe: State | None = None  # the state if the failed write landed
        self.db: Db | None = None
        self.failed: str | None = None
        self.error: BaseException | None = None
        self.compactions = 0

    def write(self, ops: list[tuple[str, bytes, bytes | None]], fn: Callable[[Db], Any]) -> None:
        assert self.db is not None
        self.maybe = _apply(self.state, ops)
        h = fn(self.db)
        self.state, self.maybe = self.maybe, None
        self.history.append((h.seq, self.state))

    def txn(self, db: Db) -> Any:
        t = db.transaction("serializable")
        assert t.get(b"m") == self.state.get(b"m")
        _to(t, TXN)
        return t.commit()

    def compact(self) -> None:
        comp = Compactor.open(store=self.faults, options=EAGER, seed=3, clock=ManualClock())
        try:
            self.compactions = comp.run_until_idle(4)
        finally:
            comp.close()

    def run(self) -> None:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("open", self.open),
            ("txn", lambda: self.write(TXN, self.txn)),
            ("range", lambda: self.write(RANGE, lambda db: db.delete_range(b"m", b"o"))),
            ("merge", lambda: self.write(MERGE, lambda db: db.merge(b"n", b"after;"))),
            ("flush", lambda: self.db.flush(memtable=True)),  # type: ignore[union-attr]
            ("compact", self.compact),
            ("close", self.close),
        ]
        for name, step in steps:
            try:
                step()
            except (ShaleError, SimulatedCrash) as exc:
                if self.failed is None:
                    self.failed, self.error = name, exc
                if name != "compact" or self.faults.crashed:
                    return

    def close(self) -> None:
        assert self.db is not None
        self.db.close()

    def open(self) -> None:
        self.db = Db.open(store=self.faults, settings=_settings(self.retention), clock=ManualClock(), seed=2)


def _dump(db: Any) -> State:
    return dict(db.scan())


def _check(inner: ObjectStore, script: Script, what: str) -> None:
    allowed = [script.state] + ([script.maybe] if script.maybe is not None else [])
    live = None
    if script.db is not None and not script.faults.crashed:
        try:
            live = _dump(script.db)
        except ShaleError:
            pass
        else:
            assert live in allowed, f"{what}: the failed handle reads a torn state {live}"
    script.faults.crash()
    if script.db is not None:
        try:
            script.db.close()
        except (ShaleError, SimulatedCrash):
            pass
    with Db.open(store=inner, settings=_settings(script.retention), clock=ManualClock(), seed=4) as db:
        got = _dump(db)
        assert got in allowed, f"{what}: reopened to {got}, want one of {allowed}"
        if script.maybe is not None and got == script.maybe:
            db.flush(memtable=True)  # the unknown write landed: its seq is the newest
            script.history.append((db.refresh_manifest().last_l0_seq, got))
        for seq, then in script.history if script.retention else []:
            with db.snapshot(at_seq=seq) as snap:
                assert _dump(snap) == then, f"{what}: the snapshot at seq {seq} differs"
    report = verify(store=inner, deep=True)
    assert report.ok, f"{what}: {report.problems}"
    comp = Compactor.open(store=inner, options=EAGER, seed=5, clock=ManualClock())
    try:
        comp.run_until_idle(4)
    finally:
        comp.close()
    with Db.open(store=inner, settings=_settings(script.retention), clock=ManualClock(), seed=6) as db:
        assert _dump(db) == got, f"{what}: a compaction run again changed the contents"


@pytest.fixture(params=["memory", "local"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], ObjectStore]]:
    """Makes fresh empty stores of one kind (a local directory's creates and listings are
    its own code, not the in-memory store's)."""
    names: list[str] = []

    def make() -> ObjectStore:
        if request.param == "local":
            return open_store(str(tmp_path / uuid.uuid4().hex))
        name = f"features-faults-{uuid.uuid4().hex}"
        names.append(name)
        return open_store(f"memory://{name}")

    yield make
    for n in names:
        drop_memory_store(n)


def _copy(src: ObjectStore, dst: ObjectStore) -> None:
    for meta in src.list(""):
        dst.put(meta.path, src.get(meta.path))


@pytest.mark.parametrize("retention", [0.0, 3600.0], ids=["no-history", "history"])
def test_a_fault_at_every_store_call_of_commit_range_delete_merge_and_compaction(
    fresh: Callable[[], ObjectStore], retention: float
) -> None:
    """With a history window, compaction keeps every version; without, it folds merges
    into values and drops the rows range tombstones cover (at the bottom, the tombstones)."""
    base = fresh()
    history = _base(base, retention)
    clean_inner = fresh()
    _copy(base, clean_inner)
    clean = Script(FaultInjectingStore(clean_inner, seed=1), history, retention)
    clean.run()
    assert clean.failed is None, f"the clean run failed in {clean.failed}: {clean.error!r}"
    assert clean.compactions > 0, "the clean run compacted nothing"
    total = len(clean.faults.calls)
    assert total > 20
    _check(clean_inner, clean, "clean run")
    failures: dict[str, int] = {}
    for n in range(1, total + 1):
        for action in ACTIONS:
            inner = fresh()
            _copy(base, inner)
            faults = FaultInjectingStore(inner, seed=n)
            rule = faults.add_rule(action, nth=n)  # type: ignore[arg-type]
            script = Script(faults, history, retention)
            script.run()
            what = f"{action} at call {n} ({clean.faults.calls[n - 1]}), failed in {script.failed}"
            if rule.fired:
                failures[script.failed or "nothing"] = failures.get(script.failed or "nothing", 0) + 1
            _check(inner, script, what)
    print(f"{total} store calls; failures by step: {failures}")
    assert {"txn", "range", "merge", "flush", "compact"} <= set(failures), failures


def _hot_base(
    store: ObjectStore, clock: ManualClock, retention: float
) -> tuple[State, list[tuple[int, State]]]:
    """A key whose base is in the bottom run and whose merges (more than the hot threshold)
    are in L0: the next compaction, above the bottom, reads the base from the run below
    (compaction/merge_bases.py) and folds. Returns the state and its history."""
    from shaledb.compaction.merge_bases import FETCH_AT_OPERANDS

    state: State = {}
    history: list[tuple[int, State]] = []
    db = Db.open(store=store, settings=_settings(retention), clock=clock, seed=1)

    def write(op: tuple[str, bytes, bytes | None]) -> None:
        nonlocal state
        h = db.write(_batch([op]))
        state = _apply(state, [op])
        history.append((h.seq, state))

    for i in range(60):
        write(("put", b"a%03d" % i, b"x" * 50))
    write(("put", b"k", b"base;"))
    write(("put", b"kr", b"gone;"))
    db.flush(memtable=True)
    write(("put", b"b", b"x"))
    db.flush(memtable=True)
    comp = Compactor.open(store=store, options=HOT, seed=7, clock=clock)
    try:
        comp.run_once()  # the bottom run, holding the bases
    finally:
        comp.close()
    for i in range(FETCH_AT_OPERANDS + 20):
        write(("merge", b"k", b"%d;" % i))
        write(("merge", b"kr", b"%d;" % i))
        if i == 30:
            write(("range", b"kr", b"ks"))  # kr's later operands fold onto nothing
        clock.advance(0.2)
        if i % 25 == 24:
            db.flush(memtable=True)
    clock.advance(100)
    write(("put", b"other", b"x"))
    db.flush(memtable=True)
    db.close()
    return state, history


HOT = CompactorOptions(min_l0_ssts=2, max_space_amplification=1000.0)


@pytest.mark.parametrize("retention", [0.0, 30.0], ids=["no-history", "history"])
def test_a_fault_at_every_store_call_of_a_hot_merge_fold_above_the_bottom(
    fresh: Callable[[], ObjectStore], retention: float
) -> None:
    """The compaction that reads merge bases from the runs below, broken at each of its
    store calls: the contents (and, within the window, time-travel reads) never change,
    and running it again finishes the fold."""
    base = fresh()
    clock = ManualClock()
    state, history = _hot_base(base, clock, retention)

    def compact(store: ObjectStore) -> int:
        comp = Compactor.open(store=store, options=HOT, seed=8, clock=clock)
        try:
            return comp.run_until_idle(3)
        finally:
            comp.close()

    clean_inner = fresh()
    _copy(base, clean_inner)
    clean = FaultInjectingStore(clean_inner, seed=1)
    assert compact(clean) > 0
    total = len(clean.calls)
    for n in range(1, total + 1):
        for action in ACTIONS:
            inner = fresh()
            _copy(base, inner)
            faults = FaultInjectingStore(inner, seed=n)
            faults.add_rule(action, nth=n)  # type: ignore[arg-type]
            what = f"{action} at call {n} ({clean.calls[n - 1]})"
            try:
                compact(faults)
            except (ShaleError, SimulatedCrash):
                pass
            compact(inner)  # the operator's retry
            with Db.open(store=inner, settings=_settings(retention), clock=clock, seed=4) as db:
                assert _dump(db) == state, f"{what}: the contents changed"
                assert db.get(b"k") == state[b"k"] and db.get(b"kr") == state[b"kr"], what
                for seq, then in history[-40:] if retention else []:
                    try:
                        with db.snapshot(at_seq=seq) as snap:
                            assert _dump(snap) == then, f"{what}: the snapshot at seq {seq} differs"
                    except HistoryUnavailable:
                        pass  # below the window's floor
            report = verify(store=inner, deep=True)
            assert report.ok, f"{what}: {report.problems}"

"""Transactions from many threads: a history checker and a bank-transfer workload.

The checker records every committed transaction (its snapshot and commit
sequence numbers, what it read, what it wrote) and plain writes, rebuilds the
database state after every sequence number from the writes alone, and checks:

* snapshot isolation: every read equals the state at the reader's snapshot,
  and no two committed transactions whose write sets overlap ran
  concurrently (first committer wins);
* serializable: additionally every writing transaction's reads (point reads
  and whole scans) equal the state just before its commit, so running the
  committed transactions one by one in commit order reproduces every read.

Seeds are printed; rerun one with ``SHALEDB_TEST_SEED``.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from shaledb import Db, Settings
from shaledb.errors import ClosedError, ShaleError, TransactionConflict, WrongThread
from shaledb.store import drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.seeds import test_seed
from shaledb.testing.strategies import tiny_settings

KEYS = [b"k%02d" % i for i in range(10)]


def _seed() -> int:
    return test_seed("SHALEDB_TXN_SEED")


@dataclass
class Committed:
    isolation: str
    snap: int
    seq: int
    reads: dict[bytes, bytes | None] = field(default_factory=dict)
    scans: list[tuple[bytes, bytes, list[tuple[bytes, bytes]]]] = field(default_factory=list)
    writes: dict[bytes, bytes | None] = field(default_factory=dict)


def _states(history: list[Committed]) -> Callable[[int], dict[bytes, bytes]]:
    """The state after each sequence number, from the committed writes alone."""
    writers = sorted((c for c in history if c.writes), key=lambda c: c.seq)
    seqs = [c.seq for c in writers]
    assert len(seqs) == len(set(seqs)), "two commits share a sequence number"
    snaps: list[tuple[int, dict[bytes, bytes]]] = [(0, {})]
    for c in writers:
        st = dict(snaps[-1][1])
        for k, v in c.writes.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = v
        snaps.append((c.seq, st))

    def at(seq: int) -> dict[bytes, bytes]:
        best: dict[bytes, bytes] = {}
        for s, st in snaps:
            if s <= seq:
                best = st
        return best

    return at


def check_history(history: list[Committed]) -> None:
    at = _states(history)
    for c in history:
        if c.isolation == "plain":
            continue
        points = [(at(c.snap), "its snapshot")]
        if c.isolation == "serializable" and c.writes:
            points.append((at(c.seq - 1), "its commit point"))
        for state, when in points:
            for k, v in c.reads.items():
                assert state.get(k) == v, f"{c}: read {k!r}={v!r}, state at {when} has {state.get(k)!r}"
            for s, e, rows in c.scans:
                want = [(k, v) for k, v in sorted(state.items()) if s <= k < e]
                assert rows == want, f"{c}: scan [{s!r}, {e!r}) differs from the state at {when}"
    txns = [c for c in history if c.writes and c.isolation != "plain"]
    for i, a in enumerate(txns):
        for b in txns[i + 1 :]:
            if set(a.writes) & set(b.writes):
                assert b.seq <= a.snap or a.seq <= b.snap, (
                    f"concurrent writers of one key both committed: {a} {b}"
                )


def _worker(
    db: Db, isolation: str, rng: random.Random, n: int, out: list[Committed], stats: dict[str, int]
) -> None:
    for i in range(n):
        if rng.random() < 0.1:  # a plain write between the transactions
            k = rng.choice(KEYS)
            v = b"plain-%d" % rng.getrandbits(48)
            h = db.put(k, v, durable=False)
            out.append(Committed("plain", h.seq, h.seq, writes={k: v}))
            continue
        while True:
            t = db.transaction(isolation, durable=False)
            rec = Committed(isolation, t.snapshot_seq, 0)
            for k in rng.sample(KEYS, rng.randint(0, 3)):
                rec.reads[k] = t.get(k)
            if rng.random() < 0.3:
                s, e = sorted(rng.sample(KEYS, 2))
                rec.scans.append((s, e, list(t.scan(s, e))))
            for k in rng.sample(KEYS, rng.randint(0, 2)):
                v = None if rng.random() < 0.2 else b"%d-%d" % (i, rng.getrandbits(48))
                rec.writes[k] = v
                if v is None:
                    t.delete(k)
                else:
                    t.put(k, v)
            time.sleep(0.0002)  # let the other threads commit in between (more conflicts)
            try:
                h = t.commit()
            except TransactionConflict:
                stats["conflicts"] += 1
                continue
            rec.seq = h.seq
            out.append(rec)
            stats["commits"] += 1
            break


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_concurrent_history_is_isolated(mem_url: str, isolation: str) -> None:
    seed = _seed()
    history: list[Committed] = []
    stats = {"conflicts": 0, "commits": 0}
    with Db.open(mem_url, settings=tiny_settings(), seed=seed) as db:
        outs: list[list[Committed]] = [[] for _ in range(6)]
        threads = [
            threading.Thread(
                target=_worker, args=(db, isolation, random.Random(seed + i), 60, outs[i], stats)
            )
            for i in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for o in outs:
            history.extend(o)
        final = dict(db.scan())
        assert db._txn_log is None
    check_history(history)
    last = max(c.seq for c in history if c.writes)
    assert final == _states(history)(last)
    print(stats)
    assert stats["conflicts"] > 0, "the workload should produce conflicts"


def test_checker_catches_a_lost_update() -> None:
    """The checker itself: two overlapping writers of one key must be reported."""
    a = Committed("snapshot", 0, 1, reads={b"k": None}, writes={b"k": b"1"})
    b = Committed("snapshot", 0, 2, reads={b"k": None}, writes={b"k": b"2"})
    with pytest.raises(AssertionError, match="concurrent writers"):
        check_history([a, b])
    c = Committed("serializable", 0, 2, reads={b"j": None}, writes={b"k": b"2"})
    d = Committed("serializable", 0, 1, writes={b"j": b"1"})
    with pytest.raises(AssertionError, match="commit point"):
        check_history([c, d])


# ------------------------------------------------------------------- bank

ACCOUNTS = 100
START = 100


def _acct(i: int) -> bytes:
    return b"acct/%03d" % i


def _total(reader: Any) -> int:
    rows = list(reader.scan(prefix=b"acct/"))
    assert len(rows) == ACCOUNTS
    return sum(int(v) for _, v in rows)


def _bank_round(db: Db, rng: random.Random, crash_after: int, faults: FaultInjectingStore) -> dict[str, int]:
    stats = {"commits": 0, "conflicts": 0, "checks": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def transfer(r: random.Random) -> None:
        try:
            while not faults.crashed:
                a, b = r.sample(range(ACCOUNTS), 2)
                amount = r.randint(1, 20)
                try:
                    with db.transaction("serializable", durable=r.random() < 0.2) as t:
                        va, vb = (int(x or b"0") for x in t.get_many([_acct(a), _acct(b)]))
                        if va < amount:
                            continue
                        t.put(_acct(a), str(va - amount).encode())
                        t.put(_acct(b), str(vb + amount).encode())
                except TransactionConflict:
                    with lock:
                        stats["conflicts"] += 1
                    continue
                with lock:
                    stats["commits"] += 1
                    if stats["commits"] >= crash_after and not faults.crashed:
                        faults.crash()
                if r.random() < 0.05:
                    with db.transaction("serializable") as t:
                        assert _total(t) == ACCOUNTS * START
                    with lock:
                        stats["checks"] += 1
        except (SimulatedCrash, ShaleError):
            if not faults.crashed:
                raise
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=transfer, args=(random.Random(rng.getrandbits(64)),)) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a transfer thread hung"
    assert not errors, errors
    return stats


def test_bank_transfers_keep_the_total_across_crashes(tmp_path: Any) -> None:
    seed = _seed()
    rng = random.Random(seed)
    name = f"bank-{uuid.uuid4().hex}"
    inner = open_store(f"memory://{name}")
    settings: Settings = tiny_settings()
    try:
        faults = FaultInjectingStore(inner, seed=rng.getrandbits(32))
        db = Db.open(store=faults, settings=settings, seed=rng.getrandbits(64))
        with db.batch() as b:
            for i in range(ACCOUNTS):
                b.put(_acct(i), str(START).encode())
        for round_ in range(3):
            stats = _bank_round(db, rng, rng.randint(20, 120), faults)
            print(f"round {round_}: {stats}")
            assert stats["commits"] > 0
            try:
                db.close()
            except (ShaleError, SimulatedCrash):
                pass
            faults = FaultInjectingStore(inner, seed=rng.getrandbits(32))
            db = Db.open(store=faults, settings=settings, seed=rng.getrandbits(64))
            assert _total(db) == ACCOUNTS * START, f"money appeared or vanished (round {round_})"
            assert all(int(v) >= 0 for _, v in db.scan(prefix=b"acct/"))
        db.close()
    finally:
        drop_memory_store(name)


def test_a_transaction_refuses_other_threads_and_says_when_its_database_closed(mem_url: str) -> None:
    """Docs say a transaction belongs to one thread, but another thread's calls went through
    (its buffers have no lock); and after ``db.close()`` its calls said "its snapshots are
    closed with it" (or, for a put, nothing until commit)."""
    db = Db.open(mem_url)
    txn = db.transaction()
    txn.put(b"a", b"1")
    outcomes: list[BaseException | None] = []

    def elsewhere() -> None:
        for call in (lambda: txn.get(b"a"), lambda: txn.put(b"b", b"2"), txn.commit, txn.rollback):
            try:
                call()
                outcomes.append(None)
            except WrongThread as exc:
                outcomes.append(exc)

    worker = threading.Thread(target=elsewhere, name="worker")
    worker.start()
    worker.join()
    assert len(outcomes) == 4 and all(isinstance(o, WrongThread) for o in outcomes), outcomes
    assert "'worker'" in str(outcomes[0]) and "its own" in str(outcomes[0])
    txn.commit()  # its own thread still can, and nothing the other thread tried took effect
    assert db.get(b"a") == b"1" and db.get(b"b") is None
    left = db.transaction()
    left.put(b"c", b"3")
    db.close()
    for call in (lambda: left.get(b"a"), lambda: left.put(b"d", b"4"), left.commit):
        with pytest.raises(ClosedError, match="database is closed: this transaction ended") as info:
            call()
        assert "snapshots" not in str(info.value)
    left.rollback()
    assert left.finished


def test_a_transaction_refuses_a_new_thread_that_reuses_its_ended_threads_ident(mem_url: str) -> None:
    """The check compared ``threading.get_ident()``, which Python hands to a new thread once
    the old one ended: a transaction begun in a finished thread was usable from the next
    thread started (on Linux, usually at once), against its one-thread rule."""
    db = Db.open(mem_url)
    begun: list[Any] = []

    def begin() -> None:
        txn = db.transaction()
        txn.put(b"a", b"1")
        begun.append((txn, threading.get_ident()))

    first = threading.Thread(target=begin, name="beginner")
    first.start()
    first.join()
    txn, ident = begun[0]
    outcomes: list[tuple[int, BaseException | None]] = []

    def elsewhere() -> None:
        try:
            txn.put(b"b", b"2")
            outcomes.append((threading.get_ident(), None))
        except WrongThread as exc:
            outcomes.append((threading.get_ident(), exc))

    for _ in range(20):  # until a thread gets the ended thread's ident (the first, on Linux)
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        if outcomes[-1][0] == ident:
            break
    assert all(isinstance(exc, WrongThread) for _, exc in outcomes), outcomes
    assert "'beginner'" in str(outcomes[-1][1])
    with pytest.raises(WrongThread):  # its thread is gone: only dropping it ends it
        txn.rollback()
    db.put(b"c", b"3")
    assert db.get(b"a") is None and db.get(b"b") is None and db.get(b"c") == b"3"
    db.close()

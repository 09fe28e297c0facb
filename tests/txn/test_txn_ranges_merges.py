"""Transactions with range deletes and merges, interleaved with each other and with plain
writes, against a model of the conflict rules of docs/transactions.md.

Each scenario opens up to three transactions (snapshot or serializable; some stay open
into later scenarios) at different moments, runs random puts, deletes, merges
(``append``), range deletes, gets, get_many and scans in them and plain writes (puts,
merges, range deletes) beside them, and commits them in random order. The model predicts every
commit's outcome -- a commit fails, under both isolations, if since its snapshot another
commit wrote a key it writes, wrote a key inside a range it deletes, deleted a range
overlapping one it deletes or holding a key it writes; under serializable also if
another commit wrote (or range-deleted) a key it read or one inside a range it scanned;
a transaction that wrote nothing always commits -- and every read inside a transaction
(its snapshot with its own writes laid over), and the database after each commit.

Seed: ``SHALEDB_TEST_SEED`` (printed).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from shaledb import Db, Settings, WriteBatch
from shaledb.errors import TransactionConflict
from shaledb.testing.seeds import test_seed

KEYS = [bytes([c]) for c in b"abcdefgh"]
BOUNDS = [b"", *KEYS, b"i"]
State = dict[bytes, bytes]


def _apply(state: State, ops: list[tuple[str, bytes, bytes | None]]) -> State:
    out = dict(state)
    for kind, a, b in ops:
        if kind == "put":
            assert b is not None
            out[a] = b
        elif kind == "del":
            out.pop(a, None)
        elif kind == "merge":
            assert b is not None
            out[a] = out.get(a, b"") + b
        else:
            assert b is not None
            for k in [k for k in out if a <= k < b]:
                del out[k]
    return out


def _inside(k: bytes, ranges: list[tuple[bytes, bytes]]) -> bool:
    return any(s <= k < e for s, e in ranges)


def _overlap(r1: list[tuple[bytes, bytes]], r2: list[tuple[bytes, bytes]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in r1 for s2, e2 in r2)


@dataclass
class Commit:
    """What a committed write touched: its keys and its deleted ranges."""

    seq: int
    keys: set[bytes]
    ranges: list[tuple[bytes, bytes]]


@dataclass
class Open:
    txn: Any
    serializable: bool
    snap: int
    view: State
    ops: list[tuple[str, bytes, bytes | None]] = field(default_factory=list)
    writes: set[bytes] = field(default_factory=set)
    rdels: list[tuple[bytes, bytes]] = field(default_factory=list)
    reads: set[bytes] = field(default_factory=set)
    scans: list[tuple[bytes, bytes]] = field(default_factory=list)

    def conflicts(self, log: list[Commit]) -> bool:
        if not self.writes and not self.rdels:
            return False  # wrote nothing: committed without validation
        for c in log:
            if c.seq <= self.snap:
                continue
            if c.keys & self.writes or any(_inside(k, self.rdels) for k in c.keys):
                return True
            if _overlap(c.ranges, self.rdels) or any(_inside(k, c.ranges) for k in self.writes):
                return True
            if self.serializable:
                if c.keys & self.reads or any(_inside(k, self.scans) for k in c.keys):
                    return True
                if any(_inside(k, c.ranges) for k in self.reads) or _overlap(c.ranges, self.scans):
                    return True
        return False


def _range(rng: random.Random) -> tuple[bytes, bytes]:
    s, e = sorted(rng.sample(BOUNDS, 2))
    return s or b"\x00", e


def _op(rng: random.Random, n: int) -> tuple[str, bytes, bytes | None]:
    r = rng.random()
    k = rng.choice(KEYS)
    if r < 0.35:
        return ("put", k, b"p%d;" % n)
    if r < 0.5:
        return ("del", k, None)
    if r < 0.8:
        return ("merge", k, b"m%d;" % n)
    return ("range", *_range(rng))


def _to(target: Any, op: tuple[str, bytes, bytes | None]) -> None:
    kind, a, b = op
    if kind == "put":
        target.put(a, b)
    elif kind == "del":
        target.delete(a)
    elif kind == "merge":
        target.merge(a, b)
    else:
        target.delete_range(a, b)


def _touch(op: tuple[str, bytes, bytes | None]) -> tuple[set[bytes], list[tuple[bytes, bytes]]]:
    kind, a, b = op
    if kind == "range":
        assert b is not None
        return set(), [(a, b)]
    return {a}, []


def test_transactions_with_range_deletes_and_merges_follow_the_conflict_rules(mem_url: str) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    db = Db.open(mem_url, settings=Settings(merge_operator="append", compactor=None, garbage_collector=None))
    state: State = {}
    log: list[Commit] = []
    outcomes = {"committed": 0, "conflict": 0}
    n = 0
    try:
        opened: list[Open] = []
        for scenario in range(300):
            where = f"scenario {scenario} (SHALEDB_TEST_SEED={seed})"
            to_open = rng.randrange(1, 4)
            for _step in range(rng.randrange(4, 16)):
                n += 1
                r = rng.random()
                if to_open and (not opened or r < 0.2):
                    serializable = rng.random() < 0.5
                    txn = db.transaction("serializable" if serializable else "snapshot")
                    opened.append(Open(txn, serializable, txn.snapshot_seq, dict(state)))
                    to_open -= 1
                elif r < 0.35:
                    op = _op(rng, n)
                    h = db.write(_batch([op]))
                    state = _apply(state, [op])
                    keys, ranges = _touch(op)
                    log.append(Commit(h.seq, keys, ranges))
                elif opened:
                    t = rng.choice(opened)
                    _txn_step(t, rng, n, where)
            # Some stay open into the next scenario: the conflict log then prunes what the
            # oldest open snapshot no longer needs while younger ones still need the rest.
            ending = [t for t in opened if rng.random() < 0.7]
            opened = [t for t in opened if t not in ending]
            for t in rng.sample(ending, len(ending)):
                want_conflict = t.conflicts(log)
                try:
                    h = t.txn.commit()
                except TransactionConflict:
                    assert want_conflict, f"{where}: a commit was refused the model allows: {t}"
                    outcomes["conflict"] += 1
                    continue
                since = [c for c in log if c.seq > t.snap]
                assert not want_conflict, f"{where}: a commit the model refuses went through: {t}; {since}"
                outcomes["committed"] += 1
                if t.writes or t.rdels:
                    state = _apply(state, t.ops)
                    log.append(Commit(h.seq, set(t.writes), list(t.rdels)))
                assert dict(db.scan()) == state, f"{where}: after a commit the database differs"
        print(outcomes)
        assert outcomes["conflict"] > 20 and outcomes["committed"] > 20, outcomes
    finally:
        db.close()


def _batch(ops: list[tuple[str, bytes, bytes | None]]) -> WriteBatch:
    b = WriteBatch()
    for op in ops:
        _to(b, op)
    return b


def _txn_step(t: Open, rng: random.Random, n: int, where: str) -> None:
    r = rng.random()
    if r < 0.5:
        op = _op(rng, n)
        _to(t.txn, op)
        t.ops.append(op)
        t.view = _apply(t.view, [op])
        kind, a, b = op
        if kind == "range":
            assert b is not None
            t.rdels.append((a, b))
        else:
            t.writes.add(a)
    elif r < 0.7:
        k = rng.choice(KEYS)
        assert t.txn.get(k) == t.view.get(k), f"{where}: txn get {k!r}"
        if t.serializable:
            t.reads.add(k)
    elif r < 0.8:
        ks = rng.sample(KEYS, 3)
        assert t.txn.get_many(ks) == [t.view.get(k) for k in ks], f"{where}: txn get_many {ks}"
        if t.serializable:
            t.reads.update(ks)
    else:
        s, e = _range(rng)
        rev = rng.random() < 0.5
        got = list(t.txn.scan(s, e, reverse=rev))
        want = sorted((k, v) for k, v in t.view.items() if s <= k < e)
        assert got == (want[::-1] if rev else want), f"{where}: txn scan {s!r}..{e!r}"
        if t.serializable:
            t.scans.append((s, e))


def test_a_merge_conflicts_with_another_commits_range_delete_of_its_key(mem_url: str) -> None:
    """Found by the test above: a transaction that only merged into a key committed after
    another commit range-deleted the key (its put or delete conflicted): the range-delete
    check looked at the transaction's puts and deletes, not its merges. The commit then
    applied the operand onto nothing, while the transaction had read it onto the value."""
    with Db.open(mem_url, settings=Settings(merge_operator="append")) as db:
        db.put(b"f", b"base;")
        for isolation in ("snapshot", "serializable"):
            txn = db.transaction(isolation)
            txn.merge(b"f", b"more;")
            assert txn.get(b"f") == b"base;more;"
            db.delete_range(b"a", b"i")
            try:
                txn.commit()
            except TransactionConflict as exc:
                assert exc.key == b"f"
            else:
                raise AssertionError(f"{isolation}: the merge committed over the range delete")
            assert db.get(b"f") is None
            db.put(b"f", b"base;")

"""Transactions: the API and the classic anomalies as named tests.

Each anomaly is one interleaving of two or three transactions written out
step by step, so the test states exactly which commit must fail (or succeed)
under snapshot isolation and under serializable isolation.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shaledb import Db, WriteBatch
from shaledb.errors import ClosedError, ConflictError, InvalidArgument, TransactionConflict


@pytest.fixture
def db(url: str) -> Iterator[Db]:
    with Db.open(url) as d:
        yield d


def _int(v: bytes | None) -> int:
    return 0 if v is None else int(v)


# ------------------------------------------------------------------ the API


def test_commit_on_clean_exit_and_rollback_on_exception(db: Db) -> None:
    with db.transaction() as t:
        t.put(b"a", b"1")
        t.put(b"b", b"2")
        assert db.get(b"a") is None, "buffered writes are invisible before commit"
    assert db.get(b"a") == b"1" and db.get(b"b") == b"2"
    with pytest.raises(RuntimeError), db.transaction() as t:
        t.put(b"a", b"9")
        raise RuntimeError("boom")
    assert db.get(b"a") == b"1"


def test_explicit_commit_and_rollback(db: Db) -> None:
    t = db.transaction("serializable")
    t.put(b"k", b"v")
    h = t.commit()
    assert h.seq == t.commit_seq and db.get(b"k") == b"v"
    with pytest.raises(ClosedError):
        t.put(b"k", b"w")
    t2 = db.transaction()
    t2.delete(b"k")
    t2.rollback()
    t2.rollback()  # a second rollback is harmless
    assert db.get(b"k") == b"v"
    with pytest.raises(ClosedError):
        t2.get(b"k")


def test_one_batch_one_sequence_number(db: Db) -> None:
    before = db.stats()["seq"]
    with db.transaction() as t:
        for i in range(10):
            t.put(b"k%d" % i, b"v")
        t.delete(b"k3")
    assert t.commit_seq == before + 1 == db.stats()["seq"]
    assert db.get(b"k3") is None and db.get(b"k9") == b"v"


def test_reads_see_own_writes_over_the_snapshot(db: Db) -> None:
    db.write(WriteBatch().put(b"a", b"1").put(b"b", b"2").put(b"c", b"3").put(b"d", b"4"))
    with db.transaction() as t:
        db.put(b"e", b"late")  # after the snapshot: invisible to t
        t.put(b"bb", b"new")
        t.delete(b"c")
        t.put(b"a", b"one")
        assert t.get(b"a") == b"one" and t.get(b"c") is None and t.get(b"e") is None
        assert list(t.scan()) == [(b"a", b"one"), (b"b", b"2"), (b"bb", b"new"), (b"d", b"4")]
        assert list(t.scan(reverse=True, limit=3)) == [(b"d", b"4"), (b"bb", b"new"), (b"b", b"2")]
        assert list(t.scan(b"b", b"c")) == [(b"b", b"2"), (b"bb", b"new")]
        assert list(t.scan(prefix=b"b")) == [(b"b", b"2"), (b"bb", b"new")]
        assert t.get_many([b"c", b"a", b"e", b"d"]) == [None, b"one", None, b"4"]


def test_bad_input_is_refused_and_changes_nothing(db: Db) -> None:
    with pytest.raises(InvalidArgument):
        db.transaction("read committed")
    with db.transaction() as t:
        with pytest.raises(InvalidArgument):
            t.put("text", b"v")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            t.get(b"")
        t.put(b"ok", b"1")
    assert dict(db.scan()) == {b"ok": b"1"}


def test_conflict_writes_nothing_and_is_a_conflict_error(db: Db) -> None:
    t = db.transaction()
    t.put(b"x", b"t")
    t.put(b"y", b"t")
    db.put(b"x", b"plain")  # a plain write committed after t's snapshot
    with pytest.raises(ConflictError) as info:
        t.commit()
    assert isinstance(info.value, TransactionConflict) and info.value.key == b"x"
    assert db.get(b"x") == b"plain" and db.get(b"y") is None
    assert t.finished


def test_non_durable_commit(db: Db) -> None:
    with db.transaction(durable=False) as t:
        t.put(b"k", b"v")
    h = t.commit_seq
    assert h is not None
    db.flush()
    assert db.wal.durable_seq >= h


def test_conflict_log_is_released_when_the_oldest_ends(db: Db) -> None:
    old = db.transaction()
    for i in range(50):
        db.put(b"k%d" % i, b"v")
    young = db.transaction()
    db.put(b"z", b"v")
    assert db._txn_log is not None and db._txn_log.size() == 51
    old.rollback()
    assert db._txn_log.size() == 1, "entries older than the oldest open snapshot are dropped"
    young.rollback()
    assert db._txn_log is None, "no open transaction: nothing is tracked"
    db.put(b"after", b"v")
    assert db._txn_log is None


def test_dropped_transaction_releases_tracking(db: Db) -> None:
    t = db.transaction()
    t.put(b"k", b"v")
    del t
    import gc

    gc.collect()
    assert db._txn_log is None


# --------------------------------------------------------------- anomalies


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_lost_update_is_refused(db: Db, isolation: str) -> None:
    """Two read-modify-write increments of one counter: the second committer must fail."""
    db.put(b"counter", b"10")
    t1 = db.transaction(isolation)
    t2 = db.transaction(isolation)
    t1.put(b"counter", str(_int(t1.get(b"counter")) + 1).encode())
    t2.put(b"counter", str(_int(t2.get(b"counter")) + 1).encode())
    t1.commit()
    with pytest.raises(TransactionConflict):
        t2.commit()
    assert db.get(b"counter") == b"11"


def _write_skew(db: Db, isolation: str) -> None:
    """Two doctors on call; each goes off call if the other is still on (reads both, writes one)."""
    db.write(WriteBatch().put(b"alice", b"on").put(b"bob", b"on"))
    t1 = db.transaction(isolation)
    t2 = db.transaction(isolation)
    assert t1.get_many([b"alice", b"bob"]) == [b"on", b"on"]
    assert [v for _, v in t2.scan(b"alice", b"c")] == [b"on", b"on"]
    t1.put(b"alice", b"off")
    t2.put(b"bob", b"off")
    t1.commit()
    t2.commit()


def test_write_skew_is_allowed_under_snapshot(db: Db) -> None:
    _write_skew(db, "snapshot")
    assert db.get(b"alice") == db.get(b"bob") == b"off", "snapshot isolation permits write skew"


def test_write_skew_is_refused_under_serializable(db: Db) -> None:
    with pytest.raises(TransactionConflict):
        _write_skew(db, "serializable")
    assert {db.get(b"alice"), db.get(b"bob")} == {b"on", b"off"}, "one doctor stays on call"


def _read_only_anomaly(db: Db, isolation: str) -> tuple[int, int]:
    """Fekete, O'Neil and O'Neil (2004): checking X, savings Y, both 0.

    T2 withdraws 10 from X (charging 1 more if X + Y would go negative), T1
    deposits 20 into Y, and the read-only T3 reports X and Y. T3 sees T1's
    deposit but not T2's withdrawal, while T2 did not see the deposit: no
    serial order explains both. Returns what T3 read.
    """
    db.write(WriteBatch().put(b"x", b"0").put(b"y", b"0"))
    t2 = db.transaction(isolation)
    x, y = _int(t2.get(b"x")), _int(t2.get(b"y"))
    t1 = db.transaction(isolation)
    t1.put(b"y", str(_int(t1.get(b"y")) + 20).encode())
    t1.commit()
    t3 = db.transaction(isolation)
    seen = (_int(t3.get(b"x")), _int(t3.get(b"y")))
    t3.commit()
    t2.put(b"x", str(x - 11 if x + y - 10 < 0 else x - 10).encode())
    t2.commit()
    return seen


def test_read_only_anomaly_happens_under_snapshot(db: Db) -> None:
    assert _read_only_anomaly(db, "snapshot") == (0, 20)
    assert db.get(b"x") == b"-11", "T2 charged the overdraft fee although the deposit came first"


def test_read_only_anomaly_is_refused_under_serializable(db: Db) -> None:
    with pytest.raises(TransactionConflict) as info:
        _read_only_anomaly(db, "serializable")
    assert info.value.key == b"y", "T2 read y, which T1 changed before T2 committed"
    assert db.get(b"x") == b"0" and db.get(b"y") == b"20"


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_phantom(db: Db, isolation: str) -> None:
    """T1 counts the rows under a prefix and writes the count; T2 inserts a row there."""
    db.write(WriteBatch().put(b"row/1", b"x").put(b"row/2", b"x"))
    t1 = db.transaction(isolation)
    n = sum(1 for _ in t1.scan(prefix=b"row/"))
    db.put(b"row/3", b"x")  # the phantom (a plain write)
    t1.put(b"count", str(n).encode())
    if isolation == "serializable":
        with pytest.raises(TransactionConflict) as info:
            t1.commit()
        assert info.value.key == b"row/3"
        assert db.get(b"count") is None
    else:
        t1.commit()
        assert db.get(b"count") == b"2"


def test_writes_outside_a_scanned_range_do_not_conflict(db: Db) -> None:
    t = db.transaction("serializable")
    list(t.scan(b"b", b"c"))
    t.get(b"k")
    db.put(b"a", b"1")
    db.put(b"c", b"1")  # the range is half-open
    db.put(b"kk", b"1")
    t.put(b"out", b"1")
    t.commit()
    assert db.get(b"out") == b"1"


def test_read_only_transaction_never_conflicts(db: Db) -> None:
    t = db.transaction("serializable")
    assert t.get(b"k") is None
    db.put(b"k", b"1")
    t.commit()


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_a_conflict_says_nothing_was_written_and_to_run_the_transaction_again(db: Db, isolation: str) -> None:
    """The conflict's message says what to do, not only what conflicted (it used to end
    at "was written by another commit after this transaction began")."""
    db.put(b"a", b"0")
    t = db.transaction(isolation)
    t.get(b"a")
    t.put(b"a" if isolation == "snapshot" else b"b", b"1")
    db.put(b"a", b"2")
    with pytest.raises(TransactionConflict, match=r"wrote nothing: run it again") as info:
        t.commit()
    assert info.value.key == b"a"
    assert db.get(b"a") == b"2" and db.get(b"b") is None

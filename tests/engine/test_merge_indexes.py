"""Merges on databases with secondary indexes (issue 31): a merge folds at write time,
so index terms stay exact for the folded value. Journal values: tests/journal/test_journal_merges.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from shaledb import Db, MergeOperator, WriteBatch
from shaledb.errors import MergeOperatorFailed
from shaledb.testing.compacting import compact_until_idle as compact
from shaledb.testing.strategies import tiny_settings

# ------------------------------------------------------------------ indexes


def test_merge_on_an_indexed_database_keeps_terms_and_folds(tmp_path: Path) -> None:
    """Before: InvalidArgument ("merge is not supported on a database with index terms")."""
    url = str(tmp_path / "db")
    db = Db.open(url, settings=tiny_settings(merge_operator="append"))
    db.put(b"k", b"a", indexes={"f": [b"t1"]})
    db.merge(b"k", b"b")  # keeps the key's terms, as a put without indexes= does
    db.merge(b"new", b"x")  # no terms
    assert db.get(b"k") == b"ab" and db.get(b"new") == b"x"
    assert db.index_query("f", b"t1", b"t1\x00") == [b"k"]
    assert db.head(b"k").indexes == {"f": (b"t1",)}  # type: ignore[union-attr]
    db.put(b"k", b"z", indexes={"f": [b"t2"]})
    db.merge(b"k", b"y")
    assert db.index_query("f") == [b"k"]
    assert db.index_query("f", b"t1", b"t1\x00") == []
    assert db.index_query("f", b"t2", b"t2\x00") == [b"k"]
    db.delete(b"k")
    db.merge(b"k", b"w")  # onto nothing: no terms left
    assert db.get(b"k") == b"w" and db.index_query("f") == []
    db.flush(memtable=True)
    db.close()
    compact(url)
    with Db.open(url, settings=tiny_settings(merge_operator="append")) as db:
        assert db.get(b"k") == b"w" and db.get(b"new") == b"x" and db.index_query("f") == []


def test_merges_in_an_indexed_batch_fold_in_order(tmp_path: Path) -> None:
    """Before: a batch's merge on an indexed database was stored as a value holding the
    encoded operand (the planner took it for a put)."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=tiny_settings(merge_operator="append")) as db:
        db.put(b"k", b"a", indexes={"f": [b"t"]})
        db.put(b"m", b"old", indexes={"f": [b"u"]})
        db.write(
            WriteBatch()
            .merge(b"k", b"b")
            .put(b"p", b"1", indexes={"f": [b"t"]})
            .merge(b"p", b"2")
            .delete_range(b"m", b"n")
            .merge(b"m", b"x")  # after the range delete: folds onto nothing
        )
        assert db.get(b"k") == b"ab" and db.get(b"p") == b"12" and db.get(b"m") == b"x"
        assert db.index_query("f", b"t", b"t\x00") == [b"k", b"p"]
        with db.transaction() as txn:
            txn.merge(b"k", b"c")
        assert db.get(b"k") == b"abc"
        assert db.index_query("f", b"t", b"t\x00") == [b"k", b"p"]


def test_a_failing_operator_on_an_indexed_database_changes_nothing(tmp_path: Path) -> None:
    def bad(key: bytes, existing: bytes | None, ops: list[bytes]) -> bytes:
        raise ValueError("no")

    op = MergeOperator("tests.bad", bad)  # (a nested function is refused unnamed)
    with Db.open(str(tmp_path / "db"), settings=tiny_settings(merge_operator=op)) as db:
        db.put(b"k", b"a", indexes={"f": [b"t"]})
        with pytest.raises(MergeOperatorFailed):
            db.merge(b"k", b"b")
        assert db.get(b"k") == b"a" and db.index_query("f") == [b"k"]

"""Item 4 of issue 28: dict habits on handles, ``shaledb.dbm``, PathLike URLs, pickling."""

from __future__ import annotations

import asyncio
import pickle
import shelve
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shaledb.aio
import shaledb.dbm
from shaledb import Db, DbReader, InvalidArgument, Settings

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)

try:
    from test import mapping_tests
except ImportError:  # pragma: no cover - CPython's test package is not installed
    mapping_tests = None
    pytest.skip(
        "CPython's test package (test.mapping_tests) is missing on this Python: "
        "the mapping-protocol and shelve tests cannot run. Install the python3-test package "
        "(or use a Python built with its test suite).",
        allow_module_level=True,
    )


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Db]:
    with Db.open(tmp_path / "db", settings=QUIET) as d:
        yield d


def test_dict_habits_on_the_writer(db: Db) -> None:
    db[b"b"] = b"2"
    db[b"a"] = b"1"
    db[b"c"] = b"3"
    assert db[b"a"] == b"1"
    with pytest.raises(KeyError):
        db[b"zz"]
    assert db.get(b"zz") is None and db.get(b"zz", b"dflt") == b"dflt" and db.get(b"a", b"x") == b"1"
    assert b"a" in db and b"zz" not in db
    assert list(db) == [b"a", b"b", b"c"]
    assert list(db.keys(b"b")) == [b"b", b"c"]
    assert list(db.keys(end=b"c")) == [b"a", b"b"]  # half-open
    assert list(db.values(prefix=b"c")) == [b"3"]
    assert list(db.items(reverse=True)) == [(b"c", b"3"), (b"b", b"2"), (b"a", b"1")]
    del db[b"b"]
    assert b"b" not in db
    with pytest.raises(KeyError):
        del db[b"b"]
    with pytest.raises(InvalidArgument):
        db.keys(42)  # type: ignore[arg-type]  # bad bounds raise at the call, not at the first next()


def test_dict_habits_on_snapshots_and_readers(tmp_path: Path) -> None:
    with Db.open(str(tmp_path / "db"), settings=QUIET) as db:
        db[b"k1"] = b"v1"
        db[b"k2"] = b"v2"
        with db.snapshot() as snap:
            db[b"k3"] = b"v3"
            assert list(snap) == [b"k1", b"k2"] and snap[b"k2"] == b"v2"
            assert b"k3" not in snap and snap.get(b"k3", 0) == 0
            with pytest.raises(KeyError):
                snap[b"k3"]
            assert list(snap.items(prefix=b"k1")) == [(b"k1", b"v1")]
        db.flush()
        with DbReader.open(tmp_path / "db") as r:
            assert list(r.keys()) == [b"k1", b"k2", b"k3"] and r[b"k3"] == b"v3"
            assert b"k9" not in r and r.get(b"k9", b"-") == b"-"
            with pytest.raises(KeyError):
                r[b"k9"]
            with r.snapshot() as rs:
                assert list(rs.values()) == [b"v1", b"v2", b"v3"] and rs[b"k1"] == b"v1"
                assert rs.get(b"nope", 5) == 5
            assert not hasattr(r, "__setitem__")


def test_pathlike_urls_and_pickling(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db[b"k"] = b"v"
        for h in (db, db.snapshot()):
            with pytest.raises(TypeError, match="Pickle the database URL"):
                pickle.dumps(h)
    with DbReader.open(tmp_path / "db") as r:
        with pytest.raises(TypeError, match="Pickle the database URL"):
            pickle.dumps(r)
        assert r[b"k"] == b"v"


def test_pickling_any_handle_says_what_to_open_instead(tmp_path: Path) -> None:
    """A transaction or an asyncio handle passed to a process pool: the error names the
    object pickled and the opener of its own API (a transaction's used to name its Db,
    an ``aio.Db``'s the blocking ``Db.open``)."""
    url = tmp_path / "db"
    with Db.open(url, settings=QUIET) as db:
        txn = db.transaction()
        with pytest.raises(TypeError, match=r"a shaledb Transaction: .*call shaledb\.Db\.open\(url\)"):
            pickle.dumps(txn)
        txn.rollback()

    async def aio_handles() -> None:
        adb = await shaledb.aio.Db.open(url, settings=QUIET)
        reader = await shaledb.aio.DbReader.open(url)
        try:
            for h, name, opener in [(adb, "Db", "Db"), (reader, "DbReader", "DbReader")]:
                want = rf"a shaledb\.aio\.{name}: .*call await shaledb\.aio\.{opener}\.open\(url\)"
                with pytest.raises(TypeError, match=want):
                    pickle.dumps(h)
            async with adb.snapshot() as snap:
                with pytest.raises(TypeError, match=r"a shaledb\.aio\.Snapshot: .*shaledb\.aio\.Db\.open"):
                    pickle.dumps(snap)
        finally:
            await reader.close()
            await adb.close()

    asyncio.run(aio_handles())
    with (
        shaledb.dbm.open(tmp_path / "dbm", "c") as d,
        pytest.raises(TypeError, match=r"shaledb\.dbm\.open\(url\)"),
    ):
        pickle.dumps(d)


def test_a_write_to_a_read_only_dbm_raises_a_typed_error_every_dbm_user_catches(tmp_path: Path) -> None:
    """A write to a dbm opened with "r" raised a bare ShaleError: now ReadOnlyError, which
    shaledb.dbm.error catches and, being an OSError like dbm.dumb's, the stdlib dbm.error."""
    import dbm

    url = tmp_path / "ro"
    with shaledb.dbm.open(url, "c") as d:
        d["k"] = "v"
    with shaledb.dbm.open(url, "r") as d:
        for write in (lambda: d.__setitem__("k", "w"), lambda: d.__delitem__("k")):
            with pytest.raises(shaledb.ReadOnlyError, match=r"flag 'r'.*'w' or 'c'") as info:
                write()
            assert isinstance(info.value, shaledb.dbm.error) and isinstance(info.value, dbm.error)
        assert d["k"] == b"v"  # nothing changed
        try:
            d["x"] = "y"
        except dbm.error:  # what stdlib dbm code writes
            pass


def test_shelve_round_trip(tmp_path: Path) -> None:
    url = tmp_path / "shelf"
    data: dict[str, Any] = {"list": [1, 2, 3], "dict": {"a": (1, 2)}, "text": "été"}
    with shelve.Shelf(shaledb.dbm.open(url, "c")) as sh:
        sh.update(data)
        sh["count"] = 7
    with shelve.Shelf(shaledb.dbm.open(url, "r")) as sh:
        assert dict(sh) == {**data, "count": 7}
        assert sorted(sh) == ["count", "dict", "list", "text"]
        with pytest.raises(shaledb.dbm.error, match="read-only"):
            sh["x"] = 1
    with shelve.Shelf(shaledb.dbm.open(url, "w")) as sh:
        del sh["list"]
        assert len(sh) == 3
    with shaledb.dbm.open(url, "n") as d:
        assert len(d) == 0


def test_dbm_open_failures_keep_their_type_and_only_a_missing_database_asks_for_a_flag(
    tmp_path: Path,
) -> None:
    """Every ``NotFound`` of an open used to become a bare ``ShaleError`` advising "need flag
    'c' or 'n' to create a new database" -- also for a destroyed database (or a missing
    bucket) opened with flag ``"c"``, where no flag helps and ``except shaledb.DatabaseDestroyed``
    (or ``BucketNotFound``) missed it."""
    for flag in ("r", "w"):
        with pytest.raises(shaledb.NotFound, match="need flag 'c' or 'n'") as missing:
            shaledb.dbm.open(tmp_path / "missing", flag)
        assert isinstance(missing.value, shaledb.dbm.error)
    url = tmp_path / "gone"
    shaledb.dbm.open(url, "c").close()
    shaledb.admin.destroy(url, soft=True)
    for flag in ("r", "w", "c", "n"):
        with pytest.raises(shaledb.DatabaseDestroyed) as destroyed:
            shaledb.dbm.open(url, flag)
        assert "need flag" not in str(destroyed.value)


def test_dbm_keys_is_a_list_in_key_order(tmp_path: Path) -> None:
    """``keys()`` of a ``dbm`` object (``dbm.dumb``, ``dbm.gnu``, ``dbm.ndbm``) is a list;
    shaledb.dbm's was a ``KeysView``, so ``d.keys()[0]`` or ``d.keys() == [...]`` of dbm code
    failed. Read-only handles answer the same."""
    import dbm.dumb

    with dbm.dumb.open(str(tmp_path / "dumb"), "c") as ref:
        ref["b"] = "2"
        assert type(ref.keys()) is list  # the behaviour matched
    url = tmp_path / "keys"
    with shaledb.dbm.open(url, "c") as d:
        assert d.keys() == []
        d["b"], d[b"a"] = "2", b"1"
        keys = d.keys()
        assert type(keys) is list and keys == [b"a", b"b"] and keys[0] == b"a"
    with shaledb.dbm.open(url, "r") as d:
        assert d.keys() == [b"a", b"b"]
    with pytest.raises(shaledb.dbm.error, match="flag 'c'"):
        shaledb.dbm.open(tmp_path / "missing", "w")
    with pytest.raises(shaledb.dbm.error, match="flag 'c'"):
        shaledb.dbm.open(tmp_path / "missing2", "r")
    with pytest.raises(InvalidArgument, match="flag"):
        shaledb.dbm.open(url, "x")


class _Opened:
    """Every dbm object a mapping test opened, closed after the test."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.n = 0


_opened = _Opened()


def _new_dbm() -> shaledb.dbm.ShaleDbm:
    _opened.n += 1
    d = shaledb.dbm.open(f"memory://mapping-tests-{id(_opened)}-{_opened.n}", "n", settings=QUIET)
    _opened.handles.append(d)
    return d


class TestDbmMappingProtocol(mapping_tests.BasicTestMappingProtocol):
    """CPython's own mapping-protocol tests, on ``shaledb.dbm`` (values stored as given: bytes)."""

    type2test = staticmethod(_new_dbm)  # type: ignore[assignment]

    def _reference(self) -> dict[bytes, bytes]:
        return {b"1": b"2", b"key1": b"value1", b"key2": b"\x00\x01\x02"}

    def tearDown(self) -> None:
        while _opened.handles:
            _opened.handles.pop().close()


class TestShelfMappingProtocol(mapping_tests.BasicTestMappingProtocol):
    """The same tests on a ``shelve.Shelf`` over ``shaledb.dbm`` (values pickled), as CPython tests shelve."""

    def _reference(self) -> dict[str, Any]:
        return {"key1": "value1", "key2": 2, "key3": (1, 2, 3)}

    def _empty_mapping(self) -> shelve.Shelf[Any]:
        sh: shelve.Shelf[Any] = shelve.Shelf(_new_dbm())
        return sh

    def tearDown(self) -> None:
        while _opened.handles:
            _opened.handles.pop().close()


def test_mapping_protocol_suites_ran() -> None:
    """Guard: the unittest classes above are collected and pass (not silently skipped)."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(
        [
            loader.loadTestsFromTestCase(TestDbmMappingProtocol),
            loader.loadTestsFromTestCase(TestShelfMappingProtocol),
        ]
    )
    result = unittest.TestResult()
    suite.run(result)
    assert result.testsRun >= 20 and result.wasSuccessful(), (result.errors, result.failures)

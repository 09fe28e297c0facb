"""``with`` on a closed handle raises at once, as a closed file does: before, the block ran
and its first call raised instead (or, with no call, nothing said the handle was unusable)."""

from __future__ import annotations

from pathlib import Path

import pytest

import shaledb
import shaledb.dbm
from shaledb import ClosedError


def test_with_refuses_a_closed_writer_reader_snapshot_and_dbm(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    db = shaledb.Db.open(url)
    db.put(b"k", b"v")
    reader = shaledb.DbReader.open(url)
    snap = db.snapshot()
    snap.close()
    with pytest.raises(ClosedError, match="closed"), snap:
        pass
    reader.close()
    with pytest.raises(ClosedError, match="reader is closed"), reader:
        pass
    db.close()
    with pytest.raises(ClosedError, match="closed"), db:
        pass
    d = shaledb.dbm.open(url, "w")
    d.close()
    with pytest.raises(ClosedError), d:
        pass


def test_with_still_closes_an_open_handle_on_exit(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with shaledb.Db.open(url) as db:
        db.put(b"k", b"v")
    assert db.closed
    with shaledb.DbReader.open(url) as reader:
        assert reader.get(b"k") == b"v"
    assert reader.closed
    with shaledb.dbm.open(url, "r") as d:
        assert d[b"k"] == b"v"

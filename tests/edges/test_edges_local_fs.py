"""Audit findings 5 and 6 on a local directory: OS errors become the error tree at the
store boundary (a name too long, a file where a directory should be, a refused
permission), a failure leaves no directories behind, and no call on a missing
database creates anything unless it creates the database."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shaledb import Db, DbReader, InvalidArgument, NotFound, Settings, admin
from shaledb.cli import main
from shaledb.cli.output import EXIT_NOT_FOUND
from shaledb.errors import InvalidPathError, ObjectNotFound
from shaledb.store import open_store
from shaledb.store.local_fs import make_dirs

QUIET = Settings(compactor=None, garbage_collector=None)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_name_too_long_is_invalid_path_and_creates_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "parent" / ("x" * 300) / "db")
    with pytest.raises(InvalidPathError, match=r"too long|allows"):
        Db.open(url, settings=QUIET)
    assert _tree(tmp_path) == []


def test_very_long_path_is_invalid_path_and_creates_nothing(tmp_path: Path) -> None:
    url = os.path.join(str(tmp_path), *(["d" * 200] * 30), "db")
    with pytest.raises(InvalidPathError):
        Db.open(url, settings=QUIET)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("below", ["db", "a/b/db"])
def test_a_file_in_the_path_is_invalid_path(tmp_path: Path, below: str) -> None:
    (tmp_path / "some_file").write_bytes(b"x")
    with pytest.raises(InvalidPathError, match="not a directory"):
        Db.open(str(tmp_path / "some_file" / below), settings=QUIET)
    assert _tree(tmp_path) == ["some_file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_permission_refused_is_invalid_argument(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(InvalidArgument, match="permission"):
            Db.open(str(locked / "db"), settings=QUIET)
    finally:
        locked.chmod(0o700)


def test_make_dirs_removes_what_it_created_when_a_later_step_fails(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / ("c" * 300) / "d"
    with pytest.raises(InvalidPathError):
        make_dirs(str(target), "test")
    assert _tree(tmp_path) == []


def test_make_dirs_keeps_directories_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(InvalidPathError):
        make_dirs(str(tmp_path / "a" / "b" / ("c" * 300)), "test")
    assert _tree(tmp_path) == ["a"]


def test_opening_reading_and_listing_a_missing_root_create_nothing(tmp_path: Path) -> None:
    st = open_store(str(tmp_path / "db"))
    assert list(st.list("")) == []
    assert list(st.list("manifest/")) == []
    with pytest.raises(ObjectNotFound):
        st.get("manifest/00000000000000000001.manifest")
    with pytest.raises(ObjectNotFound):
        st.head("x")
    assert st.get_range("wal/1", 0, 0) == b""
    with pytest.raises(ObjectNotFound):
        st.get_range("wal/00000000000000000001.wal", 0, 10)
    st.delete("x")
    st.delete_many(["x", "y"])
    assert not (tmp_path / "db").exists()
    st.put("a/b", b"1", create=True)
    assert (tmp_path / "db" / "a" / "b").read_bytes() == b"1"


def test_missing_database_calls_create_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "nothing")
    with pytest.raises(NotFound):
        admin.list_checkpoints(url)
    with pytest.raises(NotFound):
        admin.destroy(url)
    with pytest.raises(NotFound):
        admin.read_manifest(url)
    with pytest.raises(NotFound):
        DbReader.open(url)
    with pytest.raises(NotFound):
        Db.open(url, settings=QUIET, create_if_missing=False)
    assert main(["--path", url, "get", "k"]) == EXIT_NOT_FOUND
    assert main(["--path", url, "list-checkpoints"]) == EXIT_NOT_FOUND
    capsys.readouterr()
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("parent", ["s3://", "memory://", "ftp://x/y", "{clone}/../missing-parent"])
def test_clone_with_bad_or_missing_parent_creates_nothing(tmp_path: Path, parent: str) -> None:
    clone = str(tmp_path / "clone")
    parent = parent.format(clone=clone) if "{clone}" in parent else parent
    with pytest.raises((InvalidArgument, NotFound)):
        Db.open_from_checkpoint(clone, parent, settings=QUIET)
    assert _tree(tmp_path) == []

"""Audit finding 1: a database root may not lie inside another's -- a clone and its
parent (or any ancestor), a backup and its source -- checked both ways, on every
store kind; and a garbage collector leaves alone a database it finds inside its
tmp/ folder (one placed there before this check existed) instead of deleting it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, InvalidArgument, Settings
from shaledb.admin.gc import GarbageCollector
from shaledb.journal.backup import backup_url
from shaledb.settings import GcOptions
from shaledb.store import drop_memory_store
from shaledb.store.roots import foreign_roots, nested, root_key

QUIET = Settings(compactor=None, garbage_collector=None)


def test_root_keys_and_nesting() -> None:
    assert root_key("s3a://b/x/y/") == ("s3", "b", ("x", "y"))
    assert root_key("memory://m/a") == ("memory", "m", ("a",))
    assert root_key("ftp://x") is None
    assert nested("s3://b/db", "s3://b/db/tmp/clone")
    assert nested("s3://b/db/tmp/clone", "s3a://b/db")
    assert nested("memory://m", "memory://m/x")
    assert nested("/data/db", "file:///data/db/tmp/c")
    assert not nested("s3://b/db", "s3://b/db2")
    assert not nested("s3://b/db", "s3://other/db/x")
    assert not nested("s3://b/db", "gs://b/db/x")
    assert not nested("memory://m/db", "memory://n/db/x")
    assert not nested("/data/db", "/data/dbx")
    assert foreign_roots(["tmp/c/manifest/00000000000000000001.manifest", "tmp/2pc/x.1"]) == {"tmp/c/"}
    assert foreign_roots(["tmp/manifest/x", "tmp/a/manifest/junk"]) == set()


@pytest.fixture(params=["memory", "local"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        name = f"roots-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        drop_memory_store(name)
    else:
        yield str(tmp_path)


def _make_db(url: str) -> None:
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k", b"v", durable=True)
        db.flush(memtable=True)


@pytest.mark.parametrize(
    ("parent", "clone"),
    [("p", "p/tmp/clone"), ("p", "p/sub/clone"), ("outer/p", "outer"), ("p", "p/")],
)
def test_clone_nested_with_its_parent_is_refused(base: str, parent: str, clone: str) -> None:
    parent_url, clone_url = f"{base}/{parent}", f"{base}/{clone}"
    _make_db(parent_url)
    with pytest.raises(InvalidArgument, match=r"nest|itself"):
        Db.open_from_checkpoint(clone_url, parent_url, settings=QUIET)
    with Db.open(parent_url, settings=QUIET, create_if_missing=False) as db:
        assert db.get(b"k") == b"v"


def test_clone_nested_in_a_grandparent_is_refused(base: str) -> None:
    _make_db(f"{base}/g")
    Db.open_from_checkpoint(f"{base}/p", f"{base}/g", settings=QUIET).close()
    with pytest.raises(InvalidArgument, match="ancestor"):
        Db.open_from_checkpoint(f"{base}/g/tmp/c", f"{base}/p", settings=QUIET)


def test_sibling_clone_is_fine(base: str) -> None:
    _make_db(f"{base}/p")
    with Db.open_from_checkpoint(f"{base}/p2", f"{base}/p", settings=QUIET) as db:
        assert db.get(b"k") == b"v"


def test_clone_inside_parent_tmp_refused_on_s3(s3_url_factory: Callable[[], Any]) -> None:
    loc = s3_url_factory()
    with Db.open(loc.url, settings=QUIET, store_options=loc.options) as db:
        db.put(b"k", b"v", durable=True)
    with pytest.raises(InvalidArgument, match="nest"):
        Db.open_from_checkpoint(f"{loc.url}/tmp/clone", loc.url, settings=QUIET, store_options=loc.options)
    with pytest.raises(InvalidArgument, match="nest"):
        Db.open_from_checkpoint(loc.url.rsplit("/", 1)[0], loc.url, settings=QUIET, store_options=loc.options)


@pytest.mark.parametrize("dest", ["p/tmp/backup", "p/backup", "."])
def test_backup_nested_with_its_source_is_refused(base: str, dest: str) -> None:
    src = f"{base}/p"
    _make_db(src)
    dest_url = base if dest == "." else f"{base}/{dest}"
    with pytest.raises(InvalidArgument, match=r"nest|itself"):
        backup_url(src, dest_url)
    with Db.open(src, settings=QUIET) as db, pytest.raises(InvalidArgument, match=r"nest|itself"):
        db.backup(dest_url)


def test_backup_next_to_its_source_works(base: str) -> None:
    _make_db(f"{base}/p")
    backup_url(f"{base}/p", f"{base}/b")
    with Db.open(f"{base}/b", settings=QUIET, create_if_missing=False) as db:
        assert db.get(b"k") == b"v"


def test_gc_leaves_a_database_inside_its_tmp_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A database placed in parent/tmp/ before nesting was refused: the parent's GC must
    not delete it as stale temporaries (the audit's 57 of 57 objects lost)."""
    parent = str(tmp_path / "p")
    _make_db(parent)
    inner = tmp_path / "p" / "tmp" / "clone"
    # Creating it there is refused now (test_edges_new_root.py): build it beside, move it in.
    _make_db(str(tmp_path / "beside"))
    inner.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "beside").rename(inner)
    files = sorted(p for p in inner.rglob("*") if p.is_file())
    assert files
    time.sleep(0.05)
    gc = GarbageCollector.open(parent, GcOptions(min_age_s=0.0))
    gc.run_once()
    gc.close()
    assert sorted(p for p in inner.rglob("*") if p.is_file()) == files
    assert "holds another database" in caplog.text
    with Db.open(str(inner), settings=QUIET, create_if_missing=False) as db:
        assert db.get(b"k") == b"v"


def test_a_nul_in_any_url_or_path_is_a_typed_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NUL reached ``os.path.realpath`` through a clone's parent URL and a settings file path
    and surfaced as a bare ValueError (found by the CLI fuzz test); every entry refuses it."""
    from shaledb.cli.app import main

    name = f"nul-{uuid.uuid4().hex}"
    try:
        with Db.open(f"memory://{name}", settings=QUIET) as db:
            db.put(b"k", b"v", durable=True)
            cp = db.create_checkpoint()
        for parent in ("\x00", "/tmp/a\x00b", "file:///a\x00"):
            with pytest.raises(InvalidArgument):
                Db.open_from_checkpoint(str(tmp_path / "clone"), parent, cp.id, settings=QUIET)
        with pytest.raises(InvalidArgument):
            Db.open(str(tmp_path / "d\x00b"), settings=QUIET)
        with pytest.raises(InvalidArgument):
            Settings.from_file(str(tmp_path / "s\x00.toml"))
        for argv in (
            ["--path", f"memory://{name}", "clone", "--parent=\x00"],
            ["--path", "a\x00", "get", "k"],
        ):
            with pytest.raises(SystemExit) as exc:
                main(argv)
            assert exc.value.code == 2
            err = capsys.readouterr().err
            assert "NUL" in err and "Traceback" not in err
        assert not (tmp_path / "clone").exists()
    finally:
        drop_memory_store(name)

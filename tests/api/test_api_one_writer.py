"""Item 5 of issue 28: one writer per database per process."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from shaledb import Db, InvalidArgument, NotFound, Settings
from shaledb.store.url import open_store

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)


def test_a_second_open_in_one_process_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    a = Db.open(tmp_path / "db", settings=QUIET)
    a[b"k"] = b"1"
    here = os.path.basename(__file__)
    # The same database by another spelling of its path: still refused, naming the open handle.
    other = os.path.relpath(tmp_path / "x" / ".." / "db")
    with pytest.raises(InvalidArgument, match=rf"already has a writer in this process: Db\(.*{here}:"):
        Db.open(other, settings=QUIET)
    with pytest.raises(InvalidArgument, match="already has a writer"):
        Db.open_from_checkpoint(str(tmp_path / "db"), str(tmp_path / "parent"), settings=QUIET)
    a[b"k"] = b"2"  # the first handle was not fenced by the refused opens
    a.close()
    with Db.open(str(tmp_path / "db"), settings=QUIET) as b:
        assert b[b"k"] == b"2"
    with Db.open(str(tmp_path / "db"), settings=QUIET) as c:  # closed by the with: free again
        assert c.get(b"k") == b"2"


def test_a_failed_open_or_a_dropped_handle_frees_the_database(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Db.open(tmp_path / "missing", settings=QUIET, create_if_missing=False)
    Db.open(tmp_path / "missing", settings=QUIET).close()
    with Db.open("memory://one-writer", settings=QUIET), pytest.raises(InvalidArgument):
        Db.open("memory://one-writer", settings=QUIET)
    Db.open("memory://one-writer", settings=QUIET).close()
    gc.collect()


def test_an_explicit_store_is_not_registered(tmp_path: Path) -> None:
    """A store object is the caller's business (in-process fencing tests rely on it)."""
    store = open_store(str(tmp_path / "db"))
    with Db.open(store=store, settings=QUIET) as a, Db.open(store=store, settings=QUIET) as b:
        assert b.epoch > a.epoch


def test_an_async_open_names_the_users_line_in_the_refusal(tmp_path: Path) -> None:
    """The writer opened by ``aio.Db.open`` is named by the user's line, not the thread
    pool's: the refusal used to say ``opened at .../concurrent/futures/thread.py:58``."""
    import asyncio

    from shaledb import aio

    here = os.path.basename(__file__)

    async def main() -> str:
        async with await aio.Db.open(str(tmp_path / "db"), settings=QUIET):
            with pytest.raises(InvalidArgument, match="already has a writer") as refused:
                await aio.Db.open(str(tmp_path / "db"), settings=QUIET)
        return str(refused.value)

    message = asyncio.run(main())
    assert f"(opened at {here}" in message.replace(os.path.dirname(__file__) + os.sep, "")
    assert "concurrent" not in message


def test_a_dropped_unclosed_writer_can_be_found_and_closed(tmp_path: Path) -> None:
    """An open writer's threads keep it alive, so a handle dropped without close() -- an
    exception between open and close, a notebook cell run again -- held the database until
    the process ended: the refusal said "use that handle, or close() it" of a handle nothing
    could reach. ``Db.opened(url)`` reaches it, and the refusal names it."""

    def buggy_job() -> None:
        db = Db.open(tmp_path / "db", settings=QUIET)
        db.put(b"k", b"written")
        db.put(b"k2", 2)  # type: ignore[arg-type]  # the bug: raises before close()

    with pytest.raises(InvalidArgument):
        buggy_job()
    gc.collect()
    assert Db.opened(tmp_path / "nowhere") is None
    with pytest.raises(InvalidArgument, match=r"shaledb\.Db\.opened\(url\)\.close\(\)"):
        Db.open(tmp_path / "db", settings=QUIET)
    lost = Db.opened(os.path.relpath(tmp_path / "x" / ".." / "db"))  # any spelling of the path
    assert lost is not None and lost.get(b"k") == b"written"
    lost.close()
    assert Db.opened(tmp_path / "db") is None
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        assert db.get(b"k") == b"written"
        assert Db.opened(str(tmp_path / "db")) is db

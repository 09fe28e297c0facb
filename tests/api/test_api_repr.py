"""A closed handle's repr says so, so a user printing it in a debugger sees why calls fail."""

import asyncio
from pathlib import Path

import pytest

import shaledb
import shaledb.aio
from shaledb.store import open_store


def test_db_and_reader_reprs_say_closed(tmp_path: Path) -> None:
    db = shaledb.Db.open(str(tmp_path))
    db.put(b"k", b"v")
    assert "closed" not in repr(db)
    reader = shaledb.DbReader.open(str(tmp_path))
    assert "closed" not in repr(reader)
    reader.close()
    db.close()
    assert repr(db).endswith(", closed)")
    assert repr(reader).endswith(", closed)")


def test_a_journal_compaction_report_prints_in_a_line_whatever_it_scored() -> None:
    from shaledb.journal.compaction import FileScore, JournalCompactionReport

    many = [FileScore.__new__(FileScore) for _ in range(2000)]
    text = repr(JournalCompactionReport(scores=many, runs=[["x"] * 50] * 40, outputs=["y"] * 40))
    assert len(text) < 600 and "bytes_read=" in text  # it listed every file's score (40 KB)


def test_db_and_reader_tell_the_url_they_were_opened_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mem_url: str
) -> None:
    """``Db`` had no public ``url`` (only its repr showed the store): a handle passed around
    could not say which database it was. ``url`` is the canonical URL (a path as an absolute
    file:// URL, as manifests record it); None for a handle opened on an explicit ``store=``."""
    monkeypatch.chdir(tmp_path)
    want = "file://" + str(tmp_path.resolve() / "db")
    with shaledb.Db.open("db") as db:
        assert db.url == want
        db.put(b"k", b"v")
        cp = db.create_checkpoint()
    with shaledb.DbReader.open(Path("db")) as reader, shaledb.DbReader.open("./db/", checkpoint=cp) as pinned:
        assert reader.url == want and pinned.url == want
    with shaledb.Db.open_from_checkpoint("clone", "db") as clone:
        assert clone.url == "file://" + str(tmp_path.resolve() / "clone")
    store = open_store(mem_url)
    with shaledb.Db.open(store=store) as db, shaledb.DbReader.open(store=store) as reader:
        assert db.url is None and reader.url is None

    async def aio_url() -> str | None:
        async with shaledb.aio.Db.open(mem_url) as adb:
            return adb.url

    assert asyncio.run(aio_url()) == mem_url
    with pytest.raises(AttributeError):
        db.url = "elsewhere"  # type: ignore[misc]

"""A closed handle's repr says so, so a user printing it in a debugger sees why calls fail."""

from pathlib import Path

import shaledb


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

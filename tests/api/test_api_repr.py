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

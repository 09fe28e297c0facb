"""``shaledb verify`` (and the library function behind it) finds what is wrong, and names it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shaledb import Db, InvalidArgument, Settings
from shaledb.admin.verify import verify
from shaledb.cli.output import Output

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb"]


def shaledb(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BASE, "--path", str(path), *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with Db.open(str(path), settings=QUIET) as d:
        for i in range(300):
            d.put(b"k%03d" % i, b"v" * 50, durable=False)
        d.flush(memtable=True)
        d.put(b"later", b"x")
        d.create_checkpoint(lifetime=600, name="pin")
        d.flush(memtable=True)
    return path


def _one(path: Path, sub: str) -> Path:
    files = sorted((path / sub).iterdir())
    assert files
    return files[0]


def test_a_healthy_database_verifies(db: Path) -> None:
    report = verify(str(db))
    assert report.ok, report.problems
    assert report.ssts >= 2 and report.bytes_read > 0
    p = shaledb(db, "--json", "verify")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["ok"] is True


def test_a_flipped_byte_in_an_sst_is_named(db: Path) -> None:
    sst = _one(db, "compacted")
    data = bytearray(sst.read_bytes())
    data[len(data) // 3] ^= 0xFF
    sst.write_bytes(bytes(data))
    report = verify(str(db))
    assert not report.ok
    assert any(sst.name in p and "damaged" in p for p in report.problems), report.problems
    assert verify(str(db), deep=False).ok  # sizes still match: only a deep check reads the bytes
    p = shaledb(db, "verify")
    assert p.returncode == 1 and sst.name in p.stdout


def test_missing_objects_are_named(db: Path) -> None:
    sst = _one(db, "compacted")
    sst.unlink()
    report = verify(str(db), deep=False)
    assert any(sst.name in p and "missing" in p for p in report.problems), report.problems


def test_a_damaged_wal_object_after_the_replay_point_is_named(tmp_path: Path) -> None:
    path = tmp_path / "db"
    d = Db.open(str(path), settings=QUIET)
    d.put(b"a", b"1")
    d.put(b"b", b"2")  # durable in WAL objects that no L0 flush has absorbed yet
    d.wal.stop()  # the process "dies" here: nothing else is written
    d.flusher.stop()
    wal = sorted((path / "wal").iterdir())[-1]
    wal.write_bytes(wal.read_bytes()[:-3])
    report = verify(str(path))
    assert any(wal.name in p for p in report.problems), report.problems
    (path / "wal" / wal.name).unlink()
    earlier = sorted((path / "wal").iterdir())[-2]
    earlier.unlink()  # a gap below a later object
    report = verify(str(path), deep=False)
    assert any(earlier.name in p and "missing" in p for p in report.problems), report.problems


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verify_reports_progress_and_checks_its_workers(db: Path) -> None:
    seen: list[tuple[int, int]] = []
    report = verify(str(db), workers=4, progress=lambda n, total: seen.append((n, total)))
    # In bytes (issue 28): a few large SSTs no longer jump from 16% to 100%.
    assert len(seen) == report.ssts + report.journal_objects + report.wal_objects
    done = [n for n, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] == report.bytes_read
    assert {t for _, t in seen} == {report.bytes_read}
    assert report.ok and report.bytes_read == verify(str(db), workers=1).bytes_read
    with pytest.raises(InvalidArgument):
        verify(str(db), workers=0)


def test_the_progress_line_is_drawn_only_on_a_terminal() -> None:
    term, pipe = Terminal(), io.StringIO()
    ticks = iter([0.0, 0.01, 0.5, 0.51])
    with Output(False, progress_stream=term).progress("backup") as p:
        p.clock = lambda: next(ticks)
        for n in range(1, 5):
            p(n, 4)
    drawn = term.getvalue()
    assert drawn.count("\r") == 3 and "4/4 100%" in drawn and drawn.endswith("\n")  # the 2nd came too soon
    assert "1/4 25%" in drawn and "3/4 75%" in drawn and "2/4" not in drawn
    with Output(False, progress_stream=pipe).progress("backup") as p:
        p(1, 1)
    with Output(False, progress_stream=term, show_progress=False).progress("backup") as p:
        p(1, 1)
    assert pipe.getvalue() == "" and term.getvalue() == drawn

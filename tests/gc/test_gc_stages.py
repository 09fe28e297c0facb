"""A process killed in the middle of a put in a local directory leaves the put's staging
file (``<name>#<n>``) behind; listings never show it, so the garbage collector finds and
deletes it once it is older than ``min_age_s`` (a soak run found these piling up)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gc_support import FutureClock

from shaledb import Db, GarbageCollector, GcOptions, Settings
from shaledb.admin.gc import STAGE_MIN_AGE_S

KILLED_IN_PUT = textwrap.dedent(
    """
    import os, signal, sys
    import shaledb

    db = shaledb.Db.open(sys.argv[1], settings=shaledb.Settings(compactor=None, garbage_collector=None))
    db.put(b"a", b"1")
    real_link = os.link

    def die(src, dst, *a, **k):  # the stage is written; the process dies before linking it
        os.kill(os.getpid(), signal.SIGKILL)

    os.link = die
    db.put(b"b", b"2")  # the WAL object's create stages and then links
    """
)


def stages(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if "#" in p.name)


def age(*files: Path, days: float = 1.0) -> None:
    """Set back the files' mtimes: a stage's floor is measured on the host clock that stamps
    them, so a collector's clock moved ahead alone does not make a stage old."""
    for f in files:
        t = f.stat().st_mtime - days * 86_400
        os.utime(f, (t, t))


def killed_in_put(root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_IN_PUT, str(root)], check=False, capture_output=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr.decode()


def test_gc_deletes_the_stage_a_killed_writer_left_once_it_is_old(tmp_path: Path) -> None:
    root = tmp_path / "db"
    killed_in_put(root)
    left = stages(root)
    assert [p.parent.name for p in left] == ["wal"], left
    size = left[0].stat().st_size
    with GarbageCollector.open(str(root), GcOptions(min_age_s=3600.0)) as gc:
        report = gc.run_once()
    assert stages(root) == left  # younger than min_age_s: perhaps a live put's
    assert not report.deleted["tmp"]

    age(*left)
    with GarbageCollector.open(str(root), GcOptions(min_age_s=3600.0), clock=FutureClock()) as gc:
        dry = gc.run_once(dry_run=True)
        assert stages(root) == left and dry.deleted["tmp"] == [f"wal/{left[0].name}"]
        report = gc.run_once()
    assert stages(root) == []
    assert report.deleted["tmp"] == [f"wal/{left[0].name}"] and report.bytes_deleted >= size > 0
    with Db.open(str(root), settings=Settings(compactor=None, garbage_collector=None)) as db:
        assert db.get(b"a") == b"1"  # the database is whole; the killed put was never acknowledged


def test_gc_leaves_the_stages_of_a_database_nested_below_alone(tmp_path: Path) -> None:
    root = tmp_path / "db"
    with Db.open(str(root), settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"a", b"1")
    nested = root / "tmp" / "other"
    (nested / "manifest").mkdir(parents=True)
    (nested / "wal").mkdir()
    theirs = nested / "wal" / "00000000000000000002.sst#1"
    theirs.write_bytes(b"x" * 10)
    ours = root / "compacted" / "01ARZ3NDEKTSV4RRFFQ69G5FAV.sst#2"
    ours.parent.mkdir(exist_ok=True)
    ours.write_bytes(b"y" * 10)
    age(theirs, ours)
    with GarbageCollector.open(str(root), GcOptions(min_age_s=0.0), clock=FutureClock()) as gc:
        report = gc.run_once()
    assert theirs.exists() and not ours.exists()
    assert "compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst#2" in report.deleted["tmp"]


def test_gc_leaves_files_outside_the_database_s_folders_alone(tmp_path: Path) -> None:
    """A root may hold a user's other files; one named like a stage is still theirs."""
    root = tmp_path / "db"
    with Db.open(str(root), settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"a", b"1")
    theirs = [root / "notes.txt#1", root / "drafts" / "plan.md#2"]
    for f in theirs:
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(b"mine")
    age(*theirs)
    with GarbageCollector.open(str(root), GcOptions(min_age_s=0.0), clock=FutureClock()) as gc:
        report = gc.run_once()
    assert all(f.exists() for f in theirs) and report.deleted["tmp"] == []


@pytest.mark.parametrize("name", ["../x#1", "/etc/x#1", "wal/1.sst"])
def test_removing_stages_refuses_other_names(tmp_path: Path, name: str) -> None:
    from shaledb.errors import InvalidArgument
    from shaledb.store.local_fs import remove_stages

    with pytest.raises(InvalidArgument):
        remove_stages(str(tmp_path), [name], "test")


def test_a_fresh_stage_survives_a_pass_at_min_age_zero(tmp_path: Path) -> None:
    """A young stage is a put in progress: a pass at ``min_age_s=0`` deleted it under the live
    writer, whose link into place then failed and stopped it. Stages wait ``STAGE_MIN_AGE_S``."""
    root = tmp_path / "db"
    killed_in_put(root)
    left = stages(root)
    assert left
    with GarbageCollector.open(str(root), GcOptions(min_age_s=0.0)) as gc:
        report = gc.run_once()
    assert stages(root) == left and not report.deleted["tmp"]
    with GarbageCollector.open(str(root), GcOptions(min_age_s=0.0), clock=FutureClock()) as gc:
        gc.run_once()  # a clock a day ahead: the stage is still young on the clock that stamped it
    assert stages(root) == left
    age(*left, days=STAGE_MIN_AGE_S / 86_400 + 0.01)
    with GarbageCollector.open(str(root), GcOptions(min_age_s=0.0)) as gc:
        gc.run_once()
    assert stages(root) == []

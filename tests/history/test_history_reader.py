"""Time-travel reads through ``DbReader.snapshot(at_seq=/at_time=)`` and the CLI's ``--as-of``."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shaledb import Db, DbReader, Settings
from shaledb.errors import HistoryUnavailable, InvalidArgument
from shaledb.testing.clock import ManualClock

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]


def _settings(retention: float) -> Settings:
    return Settings(history_retention_s=retention, compactor=None, garbage_collector=None)


def test_reader_reads_flushed_and_replayed_versions(mem_url: str) -> None:
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(600), clock=clock) as db:
        seqs, times = [], []
        for i in range(6):
            seqs.append(db.put(b"k", b"v%d" % i).seq)
            times.append(clock.now())
            db.put(b"n%d" % i, b"x")
            clock.advance(2)
            if i == 2:
                db.flush(memtable=True)  # versions 0-2 in L0; 3-5 only in the WAL
        db.flush()
        with DbReader.open(mem_url, clock=clock) as r:
            for i, s in enumerate(seqs):
                with r.snapshot(at_seq=s) as snap:
                    assert snap.get(b"k") == b"v%d" % i
                    assert sorted(k for k, _ in snap.scan(prefix=b"n")) == [b"n%d" % j for j in range(i)]
            for i in range(3):  # the manifest's marks cover the flushed writes
                with r.snapshot(at_time=datetime.fromtimestamp(times[i], tz=UTC)) as snap:
                    assert snap.get(b"k") == b"v%d" % i
            with pytest.raises(InvalidArgument, match="not flushed yet"):
                r.snapshot(at_time=datetime.fromtimestamp(clock.now(), tz=UTC))
            with pytest.raises(InvalidArgument):
                r.snapshot(at_seq=seqs[-1] + 100)
            clock.advance(3600)
            with pytest.raises(HistoryUnavailable, match="oldest readable point"):
                r.snapshot(at_seq=seqs[0])


def test_reader_of_a_database_without_history(mem_url: str) -> None:
    with Db.open(mem_url, settings=_settings(0)) as db:
        db.put(b"k", b"v")
        db.flush(memtable=True)
        with DbReader.open(mem_url) as r, pytest.raises(InvalidArgument, match="records no history"):
            r.snapshot(at_seq=1)


def test_reader_before_the_writers_first_flush_is_told_to_wait_for_it(mem_url: str) -> None:
    with Db.open(mem_url, settings=_settings(600)) as db:
        db.put(b"k", b"v")
        with DbReader.open(mem_url) as r, pytest.raises(InvalidArgument, match="next flush"):
            r.snapshot(at_seq=1)
        db.flush(memtable=True)
        with DbReader.open(mem_url) as r, r.snapshot(at_seq=1) as snap:
            assert snap.get(b"k") == b"v"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=120, check=False)


def test_cli_get_and_scan_as_of(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    with Db.open(path, settings=_settings(3600)) as db:
        first = db.put(b"k", b"old").seq
        db.put(b"j", b"x")
        db.put(b"k", b"new")
    p = _run("--path", path, "get", "k", "--as-of", str(first))
    assert p.returncode == 0 and p.stdout.strip() == "old", p
    p = _run("--path", path, "--json", "scan", "--as-of", str(first))
    assert [r["key"] for r in json.loads(p.stdout)] == ["k"], p
    now = datetime.now(UTC).isoformat()
    p = _run("--path", path, "get", "k", "--as-of", now)
    assert p.returncode == 0 and p.stdout.strip() == "new", p
    p = _run("--path", path, "get", "k", "--as-of", "2000-01-01T00:00:00Z")
    assert p.returncode == 3 and "oldest readable point" in p.stderr, p
    p = _run("--path", path, "get", "k", "--as-of", "2000-01-01T00:00:00")
    assert p.returncode == 2 and "time zone" in p.stderr, p

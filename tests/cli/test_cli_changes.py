"""``shaledb changes``: the change feed from a shell, as a real process: listing, resuming from
a printed cursor, following new writes line by line, and the errors a user meets."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from shaledb import Db, Settings

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]
QUIET = Settings(compactor=None, garbage_collector=None, merge_operator="append")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=60, check=False)


def test_lists_every_kind_and_resumes_from_a_printed_cursor(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.merge(b"a", b"2")
        db.delete(b"b")
        db.delete_range(b"c", b"f")
    p = _cli("--path", url, "--json", "changes")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [(r["kind"], r["key"], r["value"], r["end"]) for r in rows] == [
        ("put", "a", "1", None),
        ("merge", "a", "2", None),
        ("delete", "b", None, None),
        ("delete_range", "c", None, "f"),
    ]
    p = _cli("--path", url, "--json", "changes", "--since", rows[1]["cursor"])
    assert [r["seq"] for r in json.loads(p.stdout)] == [rows[2]["seq"], rows[3]["seq"]]
    table = _cli("--path", url, "changes", "--limit", "1").stdout.splitlines()
    assert table[0].split() == ["SEQ", "KIND", "KEY", "VALUE", "END", "CURSOR"] and len(table) == 2


def test_follow_prints_each_new_write_as_it_lands(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"first", b"1")
        cmd = [*BASE, "--path", url, "--json", "changes", "--follow", "--since", "latest", "--poll", "0.05"]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            try:
                time.sleep(1.5)  # the process has started and taken "latest"
                db.put(b"second", b"2")
                assert proc.stdout is not None
                line = proc.stdout.readline()  # one JSON line, without waiting for more
                assert json.loads(line)["key"] == "second"
            finally:
                proc.terminate()
                proc.wait(10)


def test_errors_are_one_line_with_the_exit_codes(tmp_path: Path) -> None:
    missing = _cli("--path", str(tmp_path / "nope"), "changes")
    assert missing.returncode == 3 and "no database at" in missing.stderr
    for follow in (["--follow"], ["--follow", "--since", "c1.2.1.1"]):  # no header before the error
        missing = _cli("--path", str(tmp_path / "nope"), "changes", *follow)
        assert missing.returncode == 3 and "no database at" in missing.stderr and missing.stdout == ""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    bad = _cli("--path", url, "changes", "--since", "bogus")
    assert bad.returncode == 2 and "not a change-feed cursor" in bad.stderr
    ahead = _cli("--path", url, "changes", "--since", "c1.99.50.0")
    assert ahead.returncode == 2 and "past the end" in ahead.stderr
    assert _cli("--path", url, "changes", "--poll", "nan").returncode == 2
    assert _cli("--path", url, "changes", "--limit", "-1").returncode == 2


def test_follow_into_head_ends_when_head_does_on_a_quiet_database(tmp_path: Path) -> None:
    """`shaledb changes --follow | head -1` returns to the shell once head has its line: the
    follower notices its reader left without waiting for a next write that never comes."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:  # stays open and quiet while the follower runs
        db.put(b"a", b"1")  # the only write: the follower has nothing more to write
        cmd = [*BASE, "--path", url, "changes", "--follow", "--jsonl", "--poll", "0.05"]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            try:
                assert proc.stdout is not None
                assert json.loads(proc.stdout.readline())["key"] == "a"  # what head -1 keeps
                proc.stdout.close()  # ... and then head exits
                assert proc.wait(30) == 0  # before: it waited for the next write, forever
                assert proc.stderr is not None and proc.stderr.read() == ""
            finally:
                proc.kill()
                proc.wait(10)

"""A writer never closed keeps its ``durable=False`` writes across a normal process exit.

The WAL thread is a daemon; before, a script that ended without ``close()`` lost every
write still buffered, silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shaledb

_SCRIPT = """
import logging, sys
import pytest

import shaledb
logging.basicConfig(level=logging.WARNING)
db = shaledb.Db.open(sys.argv[1], settings=shaledb.Settings(flush_interval_s=3600))
for i in range(100):
    db.put(b"k%03d" % i, b"v", durable=False)
"""


def test_unclosed_writer_flushes_its_wal_at_exit(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    src = str(Path(shaledb.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, url], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "was not closed" in done.stderr
    with shaledb.Db.open(url) as db:
        assert db.get_many([b"k%03d" % i for i in range(100)]) == [b"v"] * 100


_UNCLOSED = """
import sys
import pytest

import shaledb
url = sys.argv[1]
db = shaledb.Db.open(url, settings=shaledb.Settings(flush_interval_s=3600))
db.put(b"k", b"v", durable=False)
reader = shaledb.DbReader.open(url)
with shaledb.DbReader.open(url) as closed_reader:
    pass
shaledb.Db.open(url + "-closed").close()
"""


@pytest.mark.parametrize("action", ["always", "error"])
def test_handles_never_closed_get_a_resource_warning_at_exit(tmp_path: Path, action: str) -> None:
    """As an unclosed file does (``python -X dev``, ``-W default``): a handle's threads keep
    it from being collected, so it is reported at exit; with the warning an error, the
    exit still flushes the writer's WAL first and ends with status 0."""
    url = str(tmp_path / "db")
    src = str(Path(shaledb.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, "-W", f"{action}::ResourceWarning", "-c", _UNCLOSED, url],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("ResourceWarning: unclosed")]
    if action == "always":
        warned = [line for line in done.stderr.splitlines() if "ResourceWarning: unclosed" in line]
    assert len(warned) == 2, done.stderr
    assert "unclosed Db(file://" in done.stderr and "unclosed DbReader(file://" in done.stderr
    assert "-closed" not in done.stderr
    with shaledb.Db.open(url) as db:
        assert db.get(b"k") == b"v"

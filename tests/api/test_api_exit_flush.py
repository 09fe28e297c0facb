"""A writer never closed keeps its ``durable=False`` writes across a normal process exit.

The WAL thread is a daemon; before, a script that ended without ``close()`` lost every
write still buffered, silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import shaledb

_SCRIPT = """
import logging, sys
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

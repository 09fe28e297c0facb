"""Item 1 of issue 28: the CLI streams what it lists.

``scan`` of a database far larger than the memory it may use prints in
constant memory, and a reader that closes the pipe early (``| head -1``)
ends the command quietly with exit 0.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from shaledb import Db, Settings, WriteBatch

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]
QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 210 MB of incompressible values in L0 SSTs."""
    path = tmp_path_factory.mktemp("stream") / "db"
    seed = 2801
    print(f"seed {seed}")
    blob = random.Random(seed).randbytes(1 << 20)
    with Db.open(str(path), settings=QUIET) as db:
        for i in range(0, 3200, 100):
            b = WriteBatch()
            for j in range(i, i + 100):
                off = (j * 4099) % ((1 << 20) - 65536)
                b.put(b"key%06d" % j, blob[off : off + 65536])
            db.write(b, durable=False)
        db.flush(memtable=True)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    assert size > 200e6, size
    return path


def _max_rss_kib(cmd: list[str]) -> tuple[int, int]:
    """Run ``cmd`` with stdout discarded under a fresh parent; its exit code and peak RSS in KiB."""
    probe = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", probe, *cmd], capture_output=True, text=True, timeout=300, check=False
    )
    rc, rss = p.stdout.split()
    return int(rc), int(rss)


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["table", "json"])
def test_scan_of_a_large_database_runs_in_constant_memory(big_db: Path, fmt: list[str]) -> None:
    rc, rss_kib = _max_rss_kib([*BASE, "--path", str(big_db), *fmt, "scan"])
    assert rc == 0
    print(f"peak RSS of the scan: {rss_kib / 1024:.0f} MiB")
    assert rss_kib < 100 * 1024, f"scan of a 200 MB database peaked at {rss_kib / 1024:.0f} MiB"


def test_scan_into_head_exits_zero_quietly(big_db: Path) -> None:
    cmd = " ".join([*BASE, "--path", str(big_db), "scan", "--prefix", "key", "|", "head", "-1"])
    p = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert p.stdout == "KEY        VALUE\n", p.stdout
    assert p.stderr == "", p.stderr


def test_streamed_json_is_the_same_text_as_before(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with Db.open(str(path), settings=QUIET) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v%d" % i)
    p = subprocess.run(
        [*BASE, "--path", str(path), "--json", "scan"], capture_output=True, text=True, check=False
    )
    rows = json.loads(p.stdout)
    assert [r["key"] for r in rows] == [f"k{i}" for i in range(5)]
    assert p.stdout == json.dumps(rows, indent=2, sort_keys=True) + "\n"
    p = subprocess.run(
        [*BASE, "--path", str(path), "--json", "scan", "--prefix", "zz"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.stdout == "[]\n"

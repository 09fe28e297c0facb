"""``--jsonl``: one JSON object per line from every command, so ``| head`` keeps valid JSON
and ``jq`` reads a stream -- run as a user runs it (``python -m shaledb ... | head``).

``--json`` keeps its pretty document (an array for a listing) for the scripts parsing it;
a pretty array cut by ``head`` is not JSON, which is why the lines exist."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import pytest

from shaledb import Db, Settings, WriteBatch, admin

QUIET = Settings(compactor=None, garbage_collector=None)
CLI = [sys.executable, "-m", "shaledb"]
ROWS = 20_000


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


def _into_head(args: list[str], n: int) -> subprocess.CompletedProcess[str]:
    """``python -m shaledb ARGS | head -n N`` in bash with pipefail: the shaledb exit code counts."""
    cmd = f"{shlex.join([*CLI, *args])} | head -n {n}"
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """More rows than a pipe buffer holds, so ``head`` leaves before the listing ends."""
    url = str(tmp_path_factory.mktemp("jsonl") / "db")
    with Db.open(url, settings=QUIET) as d:
        for i in range(0, ROWS, 1000):
            b = WriteBatch()
            for j in range(i, i + 1000):
                b.put(b"key%06d" % j, b"value %d" % j)
            d.write(b)
    admin.create_checkpoint(url, name="one")
    admin.create_checkpoint(url, name="two")
    return url


def _lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("cmd", [["scan"], ["changes"]], ids=" ".join)
def test_listing_into_head_is_valid_json_lines(db: str, cmd: list[str]) -> None:
    p = _into_head(["--path", db, *cmd, "--jsonl"], 3)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)
    head = _lines(p.stdout)  # each line one JSON object
    assert len(head) == 3 and all(isinstance(r, dict) for r in head)
    # The same rows --json prints as its (unchanged) pretty array.
    full = json.loads(_run("--path", db, *cmd, "--json").stdout)
    assert len(full) == ROWS and head == full[:3]


def test_json_into_head_is_cut_which_is_why_jsonl_exists(db: str) -> None:
    p = _into_head(["--path", db, "scan", "--json"], 3)
    assert p.returncode == 0, p.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(p.stdout)


@pytest.mark.parametrize(
    ("cmd", "n"),
    [(["list-manifests", "--long"], None), (["list-checkpoints"], 2), (["scan", "--limit", "5"], 5)],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_every_listing_has_a_line_per_row(db: str, cmd: list[str], n: int | None) -> None:
    p = _run("--path", db, "--jsonl", *cmd)
    assert p.returncode == 0, p.stderr
    rows = _lines(p.stdout)
    assert rows == json.loads(_run("--path", db, "--json", *cmd).stdout)
    assert n is None or len(rows) == n


@pytest.mark.parametrize("cmd", [["get", "key000007"], ["read-manifest"], ["scan", "--count"]], ids=" ".join)
def test_a_single_result_is_one_line(db: str, cmd: list[str]) -> None:
    p = _run("--path", db, *cmd, "--jsonl")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") == 1
    assert json.loads(p.stdout) == json.loads(_run("--path", db, *cmd, "--json").stdout)

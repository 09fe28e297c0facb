"""Keys and values that start with ``-`` on the command line, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("value", ["-1h", "-5", "-.5", "-1e3"])
def test_a_value_that_looks_negative_is_a_value(tmp_path: Path, value: str) -> None:
    """``shaledb put k -1h`` said "the following arguments are required: value": argparse read
    ``-1h`` as an unknown option (only ``-5``-like numbers passed). No option looks negative,
    so such a word is a key or value, as before for ``-5``."""
    db = str(tmp_path / "db")
    p = _cli("--path", db, "put", "k", value)
    assert p.returncode == 0, p.stderr
    p = _cli("--path", db, "put", value, "v")
    assert p.returncode == 0, p.stderr
    assert _cli("--path", db, "get", "k").stdout.strip() == value
    assert _cli("--path", db, "get", value).stdout.strip() == "v"


def test_a_key_or_value_read_as_an_option_gets_the_line_to_type(tmp_path: Path) -> None:
    """``put k -x`` is ambiguous (``-x`` may be a mistyped option): it is still refused, but the
    error spells out the command line that passes ``-x`` as the value; that line works."""
    db = str(tmp_path / "db")
    p = _cli("--path", db, "put", "--json", "k", "-x")
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "required: value" in line, line
    assert line.endswith(
        f"to pass '-x' as a key or value, put it after '--': shaledb --path {db} put --json -- k -x"
    )
    assert not (tmp_path / "db").exists()  # nothing written
    suggested = line.rsplit(": shaledb ", 1)[1].split()
    p = _cli(*suggested)
    assert p.returncode == 0, p.stderr
    assert _cli("--path", db, "get", "k").stdout.strip() == "-x"

"""Keys and values that start with ``-`` on the command line, run as a user runs them."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_an_unknown_dash_word_after_the_keys_and_values_gets_a_hint(tmp_path: Path) -> None:
    """``put k v -x`` said only "unrecognized arguments: -x". The refusal now says '-x' is no
    option of the command and, for a command that takes keys or values, how to pass one that
    starts with '-' (the exact line when it would parse, its shape otherwise); nothing is written."""
    db = str(tmp_path / "db")
    for words, hint in [
        (
            ["put", "k", "v", "-x"],
            f"a key or value that starts with '-' goes after '--': shaledb --path {db} put -- KEY VALUE",
        ),
        (["get", "k", "-x"], f"goes after '--': shaledb --path {db} get -- KEY"),
        (["put", "--json", "-x", "k", "v"], f"goes after '--': shaledb --path {db} put --json -- KEY VALUE"),
    ]:
        p = _cli("--path", db, *words)
        line = p.stderr.strip().splitlines()[-1]
        assert p.returncode == 2 and line.startswith(
            f"shaledb {words[0]}: error: unrecognized arguments: -x;"
        ), line
        assert f"'-x' is no option of 'shaledb {words[0]}' (shaledb {words[0]} --help lists them)" in line, (
            line
        )
        assert line.endswith(hint), line
    p = _cli("--path", db, "scan", "--limit", "3", "-x")  # no keys or values to pass: no '--' line
    assert (
        p.stderr.strip()
        .splitlines()[-1]
        .endswith("'-x' is no option of 'shaledb scan' (shaledb scan --help lists them)")
    )
    p = _cli("--path", db, "put", "k", "v", "extra")  # no dash word: argparse's message as it was
    assert p.stderr.strip().splitlines()[-1] == "shaledb put: error: unrecognized arguments: extra"
    assert not (tmp_path / "db").exists()


def test_a_negative_value_still_works_where_argparse_has_no_negative_number_pattern(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI sets argparse's private ``_negative_number_matcher`` (Python 3.11 has no public
    switch). A Python without it must not silently refuse ``put k -1h`` again: the probe sees
    the attribute is gone and the keys and values are moved after a '--' instead."""
    from shaledb.cli import app, dashes

    init, parse_optional = argparse.ArgumentParser.__init__, argparse.ArgumentParser._parse_optional
    stock = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's own: plain negative numbers only

    def without_pattern(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        del self._negative_number_matcher

    def own_pattern(self: argparse.ArgumentParser, arg: str) -> Any:
        self._negative_number_matcher = stock  # what a parser sets is not what it reads
        try:
            return parse_optional(self, arg)
        finally:
            del self._negative_number_matcher

    monkeypatch.setattr(argparse.ArgumentParser, "__init__", without_pattern)
    monkeypatch.setattr(argparse.ArgumentParser, "_parse_optional", own_pattern)
    assert dashes._hook_works() is False
    db = str(tmp_path / "db")
    with pytest.raises(SystemExit) as info:
        app.main(["--path", db, "put", "k", "-x"])  # a word that does not look negative: refused
    assert info.value.code == 2
    assert app.main(["--path", db, "put", "k", "-1h"]) == 0
    assert app.main(["--path", db, "--json", "put", "--json", "-.5", "v"]) == 0
    monkeypatch.undo()
    assert _cli("--path", db, "get", "k").stdout.strip() == "-1h"
    assert _cli("--path", db, "get", "-.5").stdout.strip() == "v"


def test_a_mistyped_option_gets_the_closest_one(tmp_path: Path) -> None:
    """A typo in a command got the closest command names, a typo in an option only
    "unrecognized arguments: --min_age" (``--pth URL stats`` even said "unknown command
    'URL'"). The refusal now names the option spelled closest; nothing is run or written."""
    db = str(tmp_path / "db")
    for words, want in [
        (
            ["--path", db, "run-gc", "--once", "--min_age", "0"],
            "(did you mean '--min-age'? shaledb run-gc --help",
        ),
        (["--path", db, "stats", "--jsn"], "(did you mean '--json'? shaledb stats --help lists them)"),
        (["--path", db, "scan", "--limt", "3"], "did you mean '--limit'?"),
        (["--path", db, "backup", "--no_prune", str(tmp_path / "b")], "did you mean '--no-prune'?"),
        (["--jsn", "--path", db, "stats"], "unrecognized arguments: --jsn; did you mean '--json'?"),
        (
            ["--pth", db, "stats"],
            f"'--pth' is no option of shaledb (did you mean '--path'?), so {db!r} was read as the command",
        ),
        (
            ["--path", db, "put", "k", "--jsn"],
            "'--jsn' is no option of 'shaledb put' (did you mean '--json'?); to pass it as a key or value, "
            f"put it after '--': shaledb --path {db} put -- k --jsn",
        ),
    ]:
        p = _cli(*words)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and want in lines[-1], (words, p.stderr)
    assert not (tmp_path / "db").exists() and not (tmp_path / "b").exists()

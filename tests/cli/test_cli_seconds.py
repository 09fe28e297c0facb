"""Options that take seconds (``--poll-interval``, ``--min-age``, ``--interval``, ``--poll``)
take a duration as ``--lifetime`` does ("1h", "5m"), still take plain seconds, and refuse
anything else in one line naming the option and the value -- run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shaledb import Db, Settings

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]
QUIET = Settings(compactor=None, garbage_collector=None)

# (command and option, a value past its range as a duration, the seconds the refusal names)
OPTIONS = [
    (["run-compactor", "--once", "--poll-interval"], "200years", "6307200000"),
    (["run-gc", "--once", "--min-age"], "200years", "6307200000"),
    (["run-gc", "--once", "--interval"], "200years", "6307200000"),
    (["changes", "--poll"], "2h", "7200"),
]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = str(tmp_path_factory.mktemp("seconds") / "db")
    with Db.open(url, settings=QUIET) as d:
        d.put(b"k", b"v")
    return url


@pytest.mark.parametrize(
    ("cmd", "too_long", "secs"), OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_seconds_options_take_durations_and_plain_seconds(
    db: str, cmd: list[str], too_long: str, secs: str
) -> None:
    for value in ("5m", "1min30s", "250ms", "90", "1e-3" if cmd[-1] == "--poll" else "0.5"):
        p = _cli("--path", db, *cmd, value)
        assert p.returncode == 0, (value, p.stderr)
    # The duration reaches the option's own range check as seconds: converted, not dropped.
    p = _cli("--path", db, *cmd, too_long)
    assert p.returncode == 2 and secs in p.stderr, p.stderr


@pytest.mark.parametrize(
    ("cmd", "too_long", "secs"), OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_bad_seconds_are_one_line_naming_option_and_value(
    db: str, cmd: list[str], too_long: str, secs: str
) -> None:
    option = cmd[-1]
    for value in ("5x", "soon", "-5m"):
        p = _cli("--path", db, *cmd, value)
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and option in lines[0] and repr(value) in lines[0], p.stderr
        assert "invalid float value" not in p.stderr
    # What float() read before still reaches the same range check: inf and nan are refused.
    for value in ("inf", "nan"):
        p = _cli("--path", db, *cmd, value)
        assert p.returncode == 2 and "finite" in p.stderr, p.stderr


@pytest.mark.parametrize(
    ("cmd", "value", "message"),
    [
        (
            ["run-gc", "--once", "--interval"],
            "0",
            "--interval must be a finite number of seconds, > 0 and <=",
        ),
        (
            ["run-gc", "--once", "--min-age"],
            "-5s",
            "--min-age must be a finite number of seconds, >= 0 and <=",
        ),
        (["run-compactor", "--once", "--poll-interval"], "-1m", "--poll-interval must be a finite number of"),
        (
            ["run-compactor", "--once", "--max-subcompactions"],
            "0",
            "--max-subcompactions must be an integer, >= 1",
        ),
        (["changes", "--poll"], "-5m", "--poll must be a finite number of seconds, > 0 and <= 3600"),
    ],
)
def test_a_value_out_of_range_names_the_flag_typed_and_the_range(
    db: str, cmd: list[str], value: str, message: str
) -> None:
    """``run-gc --interval 0`` said "GcOptions.interval_s must be ...", a settings field the
    user never typed; a negative duration ("-5s") said "cannot be negative" without the range.
    The refusal names the flag, the range and (for a duration) the text typed."""
    p = _cli("--path", db, *cmd, value)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert message in lines[0] and "Options." not in lines[0] and "_s " not in lines[0], lines[0]
    if not value.lstrip("-").isdigit():
        assert repr(value) in lines[0], lines[0]


@pytest.mark.parametrize(
    "cmd", [["create-checkpoint"], ["refresh-checkpoint", "--id", "kept-for-refresh"]], ids=" ".join
)
def test_lifetime_is_refused_as_the_other_seconds_options_are(db: str, cmd: list[str]) -> None:
    """``--lifetime inf`` said "cannot parse duration 'inf' at 'inf'", ``--lifetime 5x`` named
    no option, and ``--lifetime 0`` (a guess at "no expiry") said "checkpoint lifetime must be
    ... (or None for no expiry)": a Python value, no flag. Each now names ``--lifetime`` (and
    how to ask for no expiry when out of range), in one line, and changes nothing."""
    from shaledb import admin

    admin.create_checkpoint(db, name="kept-for-refresh" if len(cmd) > 1 else "other", lifetime=3600)
    before = {(c.id, c.expire_time_s) for c in admin.list_checkpoints(db)}
    for value in ("5x", "soon"):
        p = _cli("--path", db, *cmd, "--lifetime", value)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr
        assert "--lifetime takes seconds or a duration" in lines[0] and repr(value) in lines[0], lines[0]
    for value in ("inf", "nan", "1e400", "0", "300years"):
        p = _cli("--path", db, *cmd, "--lifetime", value)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr
        assert "--lifetime must be a finite number of seconds, > 0" in lines[0], lines[0]
        assert "leave --lifetime out for no expiry" in lines[0] and "None" not in lines[0], lines[0]
    assert {(c.id, c.expire_time_s) for c in admin.list_checkpoints(db)} == before
    p = _cli("--path", db, *cmd, "--lifetime", "90")  # plain seconds, as before
    assert p.returncode == 0, p.stderr

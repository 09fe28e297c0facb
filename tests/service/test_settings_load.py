"""Settings from TOML files and environment variables (issue 32 item 4), and back to TOML."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shaledb import InvalidArgument, Settings
from shaledb.errors import named_as_typed
from shaledb.settings import CompactorOptions, DbReaderOptions, GcOptions, JournalOptions, RetryOptions
from shaledb.settings_load import from_toml, load_settings

EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]

CHANGED = [
    Settings(),
    Settings(compactor=None, garbage_collector=None),
    Settings(
        flush_interval_s=0.025,
        compression="zstd",
        value_separation_threshold=4096,
        malloc_mmap_threshold_bytes=None,
        wal_recovery_mode="point_in_time",
        track_and_verify_wals=False,
        journal=JournalOptions(recovery_strategy="recovr", compaction_interval_s=30),
        retry=RetryOptions(max_attempts=3, timeout_s=5),
        compactor=CompactorOptions(max_sources=12, max_space_amplification=None, size_ratio=2),
        garbage_collector=GcOptions(min_age_s=0, dry_run=True),
    ),
]


@pytest.mark.parametrize("settings", CHANGED, ids=["defaults", "components-off", "changed"])
def test_file_to_object_to_file_round_trip(tmp_path: Path, settings: Settings) -> None:
    path = tmp_path / "shaledb.toml"
    text = settings.to_toml()
    path.write_text(text)
    back = Settings.from_file(path)
    assert back == settings
    assert back.to_toml() == text


def test_nested_environment_variables() -> None:
    env = {
        "SHALEDB_COMPACTOR__MAX_SOURCES": "8",
        "SHALEDB_COMPACTOR__MIN_MERGE_RUNS": "3",
        "SHALEDB_FLUSH_INTERVAL_S": "0.05",
        "SHALEDB_GARBAGE_COLLECTOR": "none",
        "SHALEDB_TRACK_AND_VERIFY_WALS": "false",
        "SHALEDB_VALUE_SEPARATION_THRESHOLD": "1024",  # plain decimal: 1_024 is refused
        "SHALEDB_RETRY__MAX_ATTEMPTS": "4",
        "SHALEDB_TEST_SEED": "7",  # a test knob, not a setting: skipped
        "OTHER": "x",
    }
    s = Settings.from_env(env=env)
    assert s.compactor == CompactorOptions(max_sources=8, min_merge_runs=3)
    assert s.garbage_collector is None
    assert s.flush_interval_s == 0.05
    assert s.track_and_verify_wals is False
    assert s.value_separation_threshold == 1024
    assert s.retry.max_attempts == 4
    assert Settings.from_env(prefix="APP_DB_", env={"APP_DB_L0_MAX_SSTS": "9"}).l0_max_ssts == 9


def test_duration_variables_take_duration_strings() -> None:
    """Every duration option takes a duration string (docs/checkpoints-readers-clones.md), as
    TOML files did; a variable refused one ("SHALEDB_GARBAGE_COLLECTOR__MIN_AGE_S must be a
    number, got '5m'")."""
    env = {
        "SHALEDB_GARBAGE_COLLECTOR__MIN_AGE_S": "5m",
        "SHALEDB_GARBAGE_COLLECTOR__WAL_RETENTION_S": "1h30m",
        "SHALEDB_FLUSH_INTERVAL_S": "250ms",
        "SHALEDB_RETRY__TIMEOUT_S": "90",
    }
    s = Settings.from_env(env=env)
    assert s.garbage_collector is not None
    assert (s.garbage_collector.min_age_s, s.garbage_collector.wal_retention_s) == (300.0, 5400.0)
    assert (s.flush_interval_s, s.retry.timeout_s) == (0.25, 90.0)
    with pytest.raises(InvalidArgument, match="unknown unit 'x'"):
        Settings.from_env(env={"SHALEDB_GARBAGE_COLLECTOR__MIN_AGE_S": "5x"})
    with pytest.raises(InvalidArgument, match="must be a number"):  # not a duration: as before
        Settings.from_env(env={"SHALEDB_COMPACTOR__MAX_SPACE_AMPLIFICATION": "5m"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SHALEDB_WAL_MAX_BYTE": "1"}, "did you mean SHALEDB_WAL_MAX_BYTES"),
        ({"SHALEDB_COMPACTOR__MAX_SOURCE": "8"}, "did you mean SHALEDB_COMPACTOR__MAX_SOURCES"),
        ({"SHALEDB_GARBAGE_COLECTOR__DRY_RUN": "1"}, "did you mean SHALEDB_GARBAGE_COLLECTOR"),
        ({"SHALEDB_COMPACTOR__MAX_SOURCES": "eight"}, "SHALEDB_COMPACTOR__MAX_SOURCES must be an integer"),
        ({"SHALEDB_COMPACTOR__MAX_SOURCES": "1"}, "SHALEDB_COMPACTOR__MAX_SOURCES must be an integer, >= 2"),
        (
            {"SHALEDB_FLUSH_INTERVAL_S": "-1"},
            "SHALEDB_FLUSH_INTERVAL_S must be a finite number of seconds, > 0",
        ),
        ({"SHALEDB_COMPRESSION": "gzip"}, "compression must be one of"),
        ({"SHALEDB_TRACK_AND_VERIFY_WALS": "maybe"}, "must be true or false"),
        ({"SHALEDB_COMPACTOR": "8"}, "is a group of options"),
        ({"SHALEDB_RETRY": "none"}, "is a group of options"),
        ({"SHALEDB_FLUSH_INTERVAL_S__X": "1"}, "is a single value"),
    ],
)
def test_bad_environment_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Settings.from_env(env=env)


@pytest.mark.parametrize(
    "text",
    ["0x10", "0X10", "1_000", "\u0661\u0660", "\uff11\uff10", "1e3", "10.0", "", "++1", "1 000", "0b11"],
)
@pytest.mark.parametrize("var", ["SHALEDB_WAL_MAX_BYTES", "SHALEDB_COMPACTOR__MAX_SOURCES"])
def test_integer_variables_take_plain_ascii_decimal_only(var: str, text: str) -> None:
    # int() took 0x10, 1_000 and Arabic-Indic or full-width digits: a value a person (or a
    # config check) reads differently set the limit silently.
    with pytest.raises(InvalidArgument, match=f"{var} must be an integer in plain decimal digits") as info:
        Settings.from_env(env={var: text})
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["1_0.5", "\u0661.5", "0x1p-3", "0,5", "5s"])
def test_number_variables_take_plain_ascii_decimal_only(text: str) -> None:
    var = "SHALEDB_COMPACTOR__SIZE_RATIO"
    with pytest.raises(InvalidArgument, match=f"{var} must be a number in plain decimal"):
        Settings.from_env(env={var: text})


@pytest.mark.parametrize("text", ["1_0.5", "\u0661.5", "\u0665s", "0x1p-3", "0,5", "5\u212a"])
def test_duration_variables_take_ascii_numbers_and_units_only(text: str) -> None:
    # A duration variable takes a duration string ("5s", "1h30m"), in ASCII like the numbers:
    # Arabic-Indic digits read as 1.5 s, and the Kelvin sign matched the unit letters' case.
    with pytest.raises(InvalidArgument, match="SHALEDB_FLUSH_INTERVAL_S"):
        Settings.from_env(env={"SHALEDB_FLUSH_INTERVAL_S": text})
    assert Settings.from_env(env={"SHALEDB_FLUSH_INTERVAL_S": "250ms"}).flush_interval_s == 0.25


def test_plain_numbers_in_variables_still_read() -> None:
    s = Settings.from_env(
        env={
            "SHALEDB_WAL_MAX_BYTES": " 65536 ",
            "SHALEDB_COMPACTOR__MAX_SOURCES": "+8",
            "SHALEDB_FLUSH_INTERVAL_S": "5e-2",
        }
    )
    assert (s.wal_max_bytes, s.compactor and s.compactor.max_sources, s.flush_interval_s) == (65536, 8, 0.05)
    with pytest.raises(InvalidArgument, match="SHALEDB_WAL_MAX_BYTES must be an integer number of bytes, >="):
        Settings.from_env(env={"SHALEDB_WAL_MAX_BYTES": "-1"})  # a sign reads: the range says no
    with pytest.raises(InvalidArgument, match="SHALEDB_FLUSH_INTERVAL_S must be a finite number"):
        Settings.from_env(env={"SHALEDB_FLUSH_INTERVAL_S": "inf"})
    with pytest.raises(InvalidArgument, match="SHALEDB_WAL_MAX_BYTES must be an integer"):
        Settings.from_env(env={"SHALEDB_WAL_MAX_BYTES": "9" * 5000})  # past int()'s digit limit


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("wal_max_byte = 1\n", "did you mean wal_max_bytes"),
        ("[compactor]\nmax_source = 3\n", "did you mean compactor.max_sources"),
        ("wal_max_bytes = 1.5\n", "wal_max_bytes must be an integer"),
        ("[compactor]\nmin_merge_runs = 9\n", "min_merge_runs must be <= max_sources"),
        ("compactor = 3\n", "is a group of options"),
        ("[flush_interval_s]\nx = 1\n", "is a single value"),
        ("wal_max_bytes = \n", "not valid TOML"),
        ('compression = "gzip"\n', "compression must be one of"),
    ],
)
def test_bad_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        from_toml(Settings, text, "shaledb.toml")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="does not exist"):
        Settings.from_file(tmp_path / "nope.toml")


def test_load_layers_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "shaledb.toml"
    path.write_text("flush_interval_s = 0.5\nl0_max_ssts = 4\n[compactor]\nmax_sources = 6\n")
    env = {
        "SHALEDB_SETTINGS_FILE": str(path),
        "SHALEDB_L0_MAX_SSTS": "5",
        "SHALEDB_COMPACTOR__SIZE_RATIO": "2",
    }
    s = load_settings(Settings, env=env, garbage_collector=None)
    assert (s.flush_interval_s, s.l0_max_ssts, s.garbage_collector) == (0.5, 5, None)
    assert s.compactor == CompactorOptions(max_sources=6, size_ratio=2.0)
    with pytest.raises(InvalidArgument, match="did you mean SHALEDB_L0_MAX_SSTS"):
        load_settings(Settings, env={"SHALEDB_L0_MAX_SST": "5"})


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHALEDB_")}
    full.update(env or {})
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=120, env=full, check=False)


def test_cli_prints_settings_as_toml_and_reads_file_and_environment(tmp_path: Path) -> None:
    p = _cli("settings", "--defaults")
    assert p.returncode == 0, p.stderr
    assert from_toml(Settings, p.stdout) == Settings()
    path = tmp_path / "s.toml"
    path.write_text("[compactor]\nmax_sources = 6\n")
    p = _cli("--json", "--settings", str(path), "settings", env={"SHALEDB_FLUSH_INTERVAL_S": "0.25"})
    assert p.returncode == 0, p.stderr
    data: dict[str, Any] = json.loads(p.stdout)
    assert data["flush_interval_s"] == 0.25 and data["compactor"]["max_sources"] == 6


def test_cli_refuses_a_typo_before_touching_the_database(tmp_path: Path) -> None:
    db = tmp_path / "db"
    p = _cli("--path", str(db), "put", "k", "v", env={"SHALEDB_FLUSH_INTERVAL": "0.2"})
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "did you mean SHALEDB_FLUSH_INTERVAL_S" in p.stderr
    assert not db.exists()
    p = _cli("--path", str(db), "put", "k", "v", env={"SHALEDB_FLUSH_INTERVAL_S": "0.2"})
    assert p.returncode == 0, p.stderr


def test_non_utf8_file_is_a_clear_error(tmp_path: Path) -> None:
    """A binary or Latin-1 settings file raised a bare UnicodeDecodeError (from_file, and
    a traceback from `shaledb --settings FILE`); a non-path raised TypeError."""
    path = tmp_path / "latin1.toml"
    path.write_bytes("flush_interval_s = 1 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(InvalidArgument, match="not UTF-8"):
        Settings.from_file(path)
    with pytest.raises(InvalidArgument, match="not UTF-8"):
        load_settings(Settings, path=str(path), env={})
    with pytest.raises(InvalidArgument, match="must be a path"):
        Settings.from_file(5)  # type: ignore[arg-type]
    result = subprocess.run(
        [*BASE, "--path", str(tmp_path / "db"), "--settings", str(path), "settings"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "not UTF-8" in result.stderr


def test_a_setting_out_of_range_is_named_as_the_user_wrote_it(tmp_path: Path) -> None:
    """The variable or key the user set, and the range: not the settings class's field
    (``GcOptions.interval_s``), and a negative duration ("-5s") says the range too."""
    cases = [
        (
            lambda: Settings.from_env(env={"SHALEDB_GARBAGE_COLLECTOR__INTERVAL_S": "0"}),
            "SHALEDB_GARBAGE_COLLECTOR__INTERVAL_S must be a finite number of seconds, > 0 and <=",
        ),
        (
            lambda: Settings.from_env(env={"SHALEDB_COMPACTOR__POLL_INTERVAL_S": "-5s"}),
            "SHALEDB_COMPACTOR__POLL_INTERVAL_S must be a finite number of seconds, > 0 and <=",
        ),
        (
            lambda: Settings.from_dict({"garbage_collector": {"min_age_s": -1}}),
            "garbage_collector.min_age_s must be a finite number of seconds, >= 0 and <=",
        ),
        (
            lambda: Settings(flush_interval_s="-5s"),
            "flush_interval_s must be a finite number of seconds, > 0",
        ),
        (
            lambda: GcOptions(interval_s=timedelta(seconds=-1)),
            "GcOptions.interval_s must be a finite number of",
        ),
    ]
    toml = tmp_path / "s.toml"
    toml.write_text('[garbage_collector]\ninterval_s = "-1h"\n')
    cases.append(
        (lambda: Settings.from_file(toml), "garbage_collector.interval_s must be a finite number of")
    )
    for make, message in cases:
        with pytest.raises(InvalidArgument) as info:
            make()
        assert str(info.value).startswith(message), (message, str(info.value))


@pytest.mark.parametrize(
    "cls", [Settings, RetryOptions, CompactorOptions, GcOptions, JournalOptions, DbReaderOptions]
)
def test_every_duration_field_refuses_a_negative_duration_with_its_range(cls: type) -> None:
    for f in dataclasses.fields(cls):
        if f.name.endswith("_s"):
            with pytest.raises(InvalidArgument, match=rf"{f.name} must be a finite number of seconds, >"):
                cls(**{f.name: "-5s"})


def test_load_settings_names_a_bad_value_as_the_variable_or_the_key_that_set_it(tmp_path: Path) -> None:
    """The CLI's and Spark's settings (file, then environment): a value out of range is named
    as the variable that set it when the environment did, as the file's key otherwise."""
    toml = tmp_path / "s.toml"
    toml.write_text("flush_interval_s = 0\n[compactor]\npoll_interval_s = 1\n")
    with pytest.raises(InvalidArgument, match=r"^SHALEDB_COMPACTOR__POLL_INTERVAL_S must be .* > 0"):
        load_settings(Settings, path=str(toml), env={"SHALEDB_COMPACTOR__POLL_INTERVAL_S": "-5s"})
    with pytest.raises(InvalidArgument, match=r"^SHALEDB_L0_MAX_SSTS must be"):
        load_settings(Settings, env={"SHALEDB_L0_MAX_SSTS": "0"})
    with pytest.raises(InvalidArgument, match=r"^flush_interval_s must be .*\(in .*s\.toml and the"):
        load_settings(Settings, path=str(toml), env={"SHALEDB_L0_MAX_SSTS": "8"})


def test_one_helper_names_a_range_error_as_the_user_typed_it() -> None:
    """``shaledb.errors.named_as_typed`` is what the CLI's flags, the settings loader and
    ``Settings.from_dict`` share: a range error about a field given is named as typed (with
    the text typed when it is not a plain number), anything else passes through unchanged."""
    spellings = {"interval_s": ("--interval", "-5m"), "min_age_s": ("garbage_collector.min_age_s", None)}
    with pytest.raises(InvalidArgument) as info, named_as_typed(spellings):
        GcOptions(interval_s="-5m")
    assert str(info.value).startswith("--interval must be a finite number of seconds, > 0")
    assert str(info.value).endswith("(given as '-5m')") and info.value.option == "--interval"
    with pytest.raises(InvalidArgument) as info, named_as_typed(spellings):
        GcOptions(min_age_s=-1)
    assert str(info.value).startswith("garbage_collector.min_age_s must be") and "given as" not in str(
        info.value
    )
    with (
        pytest.raises(InvalidArgument, match=r"^GcOptions\.interval_s must"),
        named_as_typed({"min_age_s": ("x", None)}),
    ):
        GcOptions(interval_s=0)  # a field not given keeps its own name
    plain = InvalidArgument("no option named")
    with pytest.raises(InvalidArgument) as info, named_as_typed({"": ("x", None)}):
        raise plain
    assert info.value is plain

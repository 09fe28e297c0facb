"""Audit finding 2 (and the numeric half of 5): NaN, infinite, negative and absurd numbers
are refused with InvalidArgument naming the option and its unit, everywhere a caller
hands shaledb a number -- option classes, per-call arguments and the CLI."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, InvalidArgument, Settings
from shaledb.cli import main
from shaledb.cli.output import EXIT_USAGE
from shaledb.duration import to_seconds
from shaledb.settings import CompactorOptions, DbReaderOptions, GcOptions, JournalOptions, RetryOptions

BAD = [math.nan, math.inf, -math.inf]

CASES = [
    (GcOptions, "min_age_s"),
    (GcOptions, "interval_s"),
    (GcOptions, "db_delete_grace_s"),
    (Settings, "flush_interval_s"),
    (Settings, "manifest_poll_interval_s"),
    (Settings, "manifest_update_timeout_s"),
    (RetryOptions, "initial_backoff_s"),
    (RetryOptions, "max_backoff_s"),
    (RetryOptions, "timeout_s"),
    (CompactorOptions, "poll_interval_s"),
    (CompactorOptions, "size_ratio"),
    (CompactorOptions, "max_space_amplification"),
    (CompactorOptions, "job_lease_s"),
    (CompactorOptions, "manifest_update_timeout_s"),
    (JournalOptions, "single_file_target_pct"),
    (JournalOptions, "max_run_target_pct"),
    (JournalOptions, "compaction_interval_s"),
    (DbReaderOptions, "manifest_poll_interval_s"),
    (DbReaderOptions, "checkpoint_lifetime_s"),
    (DbReaderOptions, "manifest_update_timeout_s"),
]


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize(("cls", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
def test_non_finite_option_is_refused_naming_it(cls: type, name: str, bad: float) -> None:
    with pytest.raises(InvalidArgument, match=name) as info:
        cls(**{name: bad})
    if name.endswith("_s"):
        assert "seconds" in str(info.value)
    if name.endswith("_pct"):
        assert "percent" in str(info.value)


@pytest.mark.parametrize(
    ("cls", "name", "value"),
    [
        (Settings, "wal_max_bytes", 2**70),
        (Settings, "block_cache_bytes", -1),
        (Settings, "wal_read_ahead", 1.5),
        (RetryOptions, "max_attempts", 0),
        (GcOptions, "min_age_s", 1e300),
        (GcOptions, "dry_run", "yes"),
        (DbReaderOptions, "background_poll", 1),
        (DbReaderOptions, "max_memtable_bytes", math.nan),
    ],
)
def test_out_of_range_or_mistyped_option_is_refused(cls: type, name: str, value: object) -> None:
    with pytest.raises(InvalidArgument, match=name):
        cls(**{name: value})


def test_byte_sizes_name_their_unit() -> None:
    with pytest.raises(InvalidArgument, match="bytes"):
        Settings(block_cache_bytes=-5)


def test_valid_edges_still_accepted() -> None:
    GcOptions(min_age_s=0.0, db_delete_grace_s=0)
    Settings(flush_interval_s=1e-6, manifest_update_timeout_s=365 * 86400.0)
    JournalOptions(single_file_target_pct=0, max_run_target_pct=100)


@pytest.mark.parametrize("ttl", [math.inf, math.nan, -1.0, 0, 1e300, timedelta.max, "-10s", "soon", True])
def test_put_ttl_must_be_a_finite_positive_duration(mem_url: str, ttl: object) -> None:
    with Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        with pytest.raises(InvalidArgument, match="ttl"):
            db.put(b"k", b"v", ttl=ttl)  # type: ignore[arg-type]
        assert db.get(b"k") is None  # nothing written
        db.put(b"k", b"v", ttl=timedelta(hours=1))
        assert db.get(b"k") == b"v"


@pytest.mark.parametrize("keys", [None, 5, b"abc", "abc"])
def test_get_many_with_a_non_list_is_a_typed_error(mem_url: str, keys: object) -> None:
    db = Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None))
    with db, pytest.raises(InvalidArgument):
        db.get_many(keys)  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [0, -1, 10**9, 1.5, True])
def test_get_many_workers_checked(mem_url: str, workers: object) -> None:
    db = Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None))
    with db, pytest.raises(InvalidArgument, match="workers"):
        db.get_many([b"a"], workers=workers)  # type: ignore[arg-type]


def test_durations_are_bounded() -> None:
    for bad in (math.inf, math.nan, -1, 1e300):
        with pytest.raises(InvalidArgument):
            to_seconds(bad)
    assert to_seconds("1h") == 3600.0


def test_duration_refusals_name_the_option_and_zero_only_where_it_means_something(mem_url: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^manifest poll: cannot parse duration 'soon'"):
        to_seconds("soon", "manifest poll")
    assert to_seconds("0s", "poll") == 0.0
    with pytest.raises(InvalidArgument, match=r"lease must be a finite number of seconds, > 0"):
        to_seconds(0, "lease", allow_zero=False)
    with Db.open(mem_url) as db:
        for bad, match in [
            (0, r"checkpoint lifetime must be .*> 0 .*got 0 \(or None for no expiry\)"),
            (-1, r"> 0 .*got -1"),  # before: ">= 0" for -1, then "must be positive" for 0
            ("forever", r"^checkpoint lifetime: cannot parse duration 'forever'"),
            ("-1h", r"^checkpoint lifetime: a duration cannot be negative: got '-1h'"),  # was "cannot parse"
            (math.nan, r"checkpoint lifetime .*got nan"),
        ]:
            with pytest.raises(InvalidArgument, match=match):
                db.create_checkpoint(lifetime=bad)
        assert db.create_checkpoint(lifetime="5 minutes").expire_time_s is not None


def test_cli_run_gc_min_age_nan_is_a_usage_error_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"v", durable=True)
            db.flush(memtable=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    rc = main(["--path", url, "run-gc", "--once", "--min-age", "nan"])
    assert rc == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--min-age must be" in err and "seconds" in err
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--keys", "-5"],
        ["bench", "--keys", "0"],
        ["bench", "--keys", "10", "--value-size", "-1"],
        ["bench", "--keys", "10", "--batch", "-3"],
        ["run-compactor", "--once", "--poll-interval", "inf"],
        ["run-gc", "--once", "--interval", "-1"],
    ],
)
def test_cli_bad_numbers_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    url = str(tmp_path / "db")
    rc = main(["--path", url, *argv])
    assert rc == EXIT_USAGE, capsys.readouterr()
    assert "error: InvalidArgument" in capsys.readouterr().err
    assert not (tmp_path / "db").exists()  # refused before anything was created


def test_a_bad_duration_option_names_itself_once() -> None:
    with pytest.raises(InvalidArgument) as err:
        GcOptions(min_age_s="nan")  # type: ignore[arg-type]
    assert str(err.value).count("GcOptions.min_age_s") == 1, err.value


def test_head_refuses_an_empty_key_as_get_does(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db") as db:
        for read in (db.get, db.head):
            with pytest.raises(InvalidArgument, match="empty"):
                read(b"")


def test_yes_no_arguments_take_only_booleans(tmp_path: Path) -> None:
    """A truthy "no" used to mean yes: scan(reverse="no") scanned in reverse and
    backup(prune="no") pruned. Each is refused before it changes anything."""
    from shaledb import GarbageCollector, WriteBatch

    url = str(tmp_path / "db")
    with Db.open(url) as db:
        db.put(b"a", b"1")
        bad: list[tuple[str, Any]] = [
            ("durable", lambda: db.put(b"b", b"2", durable="no")),
            ("durable", lambda: db.merge(b"b", b"2", durable=None)),
            ("durable", lambda: db.write(WriteBatch().put(b"b", b"2"), durable=1)),
            ("durable", lambda: db.delete(b"a", durable="yes")),
            ("reverse", lambda: list(db.scan(reverse="no"))),
            ("durable", lambda: db.transaction(durable="no")),
            ("memtable", lambda: db.flush(memtable="yes")),
            ("prune", lambda: db.backup(str(tmp_path / "bak"), prune="no")),
        ]
        for name, call in bad:
            with pytest.raises(InvalidArgument, match=name):
                call()
        assert dict(db.scan()) == {b"a": b"1"}  # nothing was written
        assert not (tmp_path / "bak").exists()
    gc = GarbageCollector.open(url)
    try:
        with pytest.raises(InvalidArgument, match="dry_run"):
            gc.run_once(dry_run="no")  # type: ignore[arg-type]
    finally:
        gc.close()

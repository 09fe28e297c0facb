"""Issue 28, item 9: the demo says how long it takes and shows progress in long steps."""

from __future__ import annotations

from shaledb.spark.demo_progress import RowProgress, expected_duration


def test_the_demo_states_its_duration_by_store() -> None:
    assert "S3 run takes" in expected_duration("s3://bucket/db") and "950 s" in expected_duration("s3://b/d")
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

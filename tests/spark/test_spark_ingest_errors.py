"""What a user sees when a Spark ingest is refused: shaledb's one-line message, not the
frames of the worker and the ingest's internals (docs/spark.md, "Errors")."""

from __future__ import annotations

import pytest
from spark_kit import latest

from shaledb import spark as shale_spark

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")


def test_a_duplicate_refused_by_the_store_exchange_write_job_reads_as_one_line(spark, tmp_path):
    """Both copies land in one input partition, so the store exchange's *write* job (not its
    stage job, nor the commit) finds the duplicate: its error must be as short as theirs."""
    df = spark.createDataFrame([("a", "1"), ("a", "2"), ("b", "3")], "key string, value string").coalesce(1)
    url = str(tmp_path / "db")
    with pytest.raises(Exception) as err:
        shale_spark.ingest(df, url, exchange="store")
    text = str(err.value)
    assert "InvalidArgument: ingest part 0: key b'a' appears more than once" in text
    assert "Traceback" not in text, text
    m = latest(url)
    assert not m.data.runs and not m.data.l0  # nothing committed


def test_the_store_exchange_still_loads_every_range(spark, tmp_path):
    rows = [(f"k{i:04d}", f"v{i}") for i in range(500)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    url = str(tmp_path / "db")
    record = shale_spark.ingest(df, url, partitions=3, exchange="store")
    assert record.rows == 500
    got = spark.read.format("shaledb").option("key_type", "string").option("value_type", "string").load(url)
    assert sorted((r.key, r.value) for r in got.collect()) == sorted(rows)

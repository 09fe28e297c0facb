"""SQL statements a Delta or Paimon user tries on a shaledb table, and what they do here
(docs/spark.md, "SQL tables" and "Filter pushdown"): CTAS, a temporary view's pinned
version, a table named twice in one statement with pushdown, a stream in update mode."""

from __future__ import annotations

import time

import pytest
from spark_kit import contents, kv_frame

from shaledb import spark as shale_spark

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")


def test_ctas_is_refused_naming_ctas_and_what_to_do_instead(spark, tmp_path):
    url = str(tmp_path / "db")
    query = f"ctas USING shaledb OPTIONS (path '{url}') AS SELECT X'61' AS key, X'31' AS value"
    for stmt in (f"CREATE TABLE {query}", f"CREATE OR REPLACE TABLE {query}"):
        try:
            with pytest.raises(Exception) as err:
                spark.sql(stmt).collect()
            assert "CREATE TABLE ... AS SELECT cannot create a shaledb table" in str(err.value), stmt
        finally:
            spark.sql("DROP TABLE IF EXISTS ctas")
    spark.sql(f"CREATE TABLE ctas USING shaledb OPTIONS (path '{url}')")  # what the message says
    try:
        spark.sql("INSERT INTO ctas (key, value) SELECT X'61', X'31'")
        assert contents(url) == {b"a": b"1"}
    finally:
        spark.sql("DROP TABLE IF EXISTS ctas")


def test_a_temporary_view_reads_the_version_pinned_when_it_was_created(spark, tmp_path):
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"a", b"1")]), url)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW pinned USING shaledb OPTIONS (path '{url}')")
    spark.sql("INSERT INTO pinned SELECT X'62', X'32', 0, null")
    assert contents(url) == {b"a": b"1", b"b": b"2"}  # the insert landed ...
    assert spark.sql("SELECT count(*) AS n FROM pinned").first().n == 1  # ... after the view's version
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW pinned USING shaledb OPTIONS (path '{url}')")
    assert spark.sql("SELECT count(*) AS n FROM pinned").first().n == 2
    spark.catalog.dropTempView("pinned")


def test_pushdown_shares_one_read_among_the_mentions_of_a_table_in_one_statement(spark, tmp_path):
    """PySpark 4.3 plans every mention of a table in one statement on one data source object,
    whose read plan the last pushed filters replace (docs/spark.md pins this, as
    test_spark_read.py pins the reused DataFrame): wrong rows with pushdown, right without."""
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"k%03d" % i, b"v") for i in range(50)]), url)
    both = "SELECT key FROM {t} WHERE key = 'k001' UNION ALL SELECT key FROM {t} WHERE key = 'k002'"
    counts = "SELECT (SELECT count(*) FROM {t} WHERE key = 'k001') AS a, (SELECT count(*) FROM {t}) AS b"
    for t, pushdown in (("pushes", "true"), ("plain", "false")):
        spark.sql(
            f"CREATE TABLE {t} USING shaledb OPTIONS (path '{url}', key_type 'string', pushdown '{pushdown}')"
        )
    try:
        assert sorted(r.key for r in spark.sql(both.format(t="plain")).collect()) == ["k001", "k002"]
        assert tuple(spark.sql(counts.format(t="plain")).first()) == (1, 50)
        assert sorted(r.key for r in spark.sql(both.format(t="pushes")).collect()) == ["k002", "k002"]
        assert tuple(spark.sql(counts.format(t="pushes")).first()) == (1, 1)
        # separate statements plan separately: right with pushdown too
        assert spark.sql("SELECT count(*) AS n FROM pushes WHERE key = 'k001'").first().n == 1
        assert spark.sql("SELECT count(*) AS n FROM pushes").first().n == 50
    finally:
        spark.sql("DROP TABLE IF EXISTS pushes")
        spark.sql("DROP TABLE IF EXISTS plain")


def test_spark_refuses_update_mode_for_the_sink(spark, tmp_path):
    """docs/spark.md: PySpark 4.3 refuses outputMode("update") for a Python data source's sink."""
    src = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    rows = src.selectExpr("cast(value AS string) AS key", "cast(value AS string) AS value")
    q = (
        rows.writeStream.format("shaledb")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start(str(tmp_path / "db"))
    )
    try:
        deadline = time.monotonic() + 60
        while q.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not q.isActive
        assert "does not support Update mode" in str(q.exception())
    finally:
        q.stop()

"""SQL statements a Delta or Paimon user tries on a shaledb table, and what they do here
(docs/spark.md, "SQL tables" and "Filter pushdown"): CTAS, a temporary view's pinned
version, pushdown refused for a table (and pinned for a temporary view), a stream in update
mode."""

from __future__ import annotations

import json
import time

import pytest
from spark_kit import contents, kv_frame

from shaledb import spark as shale_spark

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from shaledb.spark.source import TABLE_OPTIONS, table_schema  # noqa: E402  (needs pyspark)


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


def test_create_table_refuses_pushdown_and_a_table_made_with_it_before_reads_right(spark, tmp_path):
    """PySpark 4.3 plans every mention of a table in one statement on one data source object,
    whose read plan the last pushed filters replace (docs/spark.md, "Filter pushdown"): with
    pushdown a UNION of two key lookups read k002 twice. So a table refuses the option (no
    catalog entry is made), and a table an older shaledb made with it reads without it."""
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"k%03d" % i, b"v") for i in range(50)]), url)
    both = "SELECT key FROM {t} WHERE key = 'k001' UNION ALL SELECT key FROM {t} WHERE key = 'k002'"
    counts = "SELECT (SELECT count(*) FROM {t} WHERE key = 'k001') AS a, (SELECT count(*) FROM {t}) AS b"
    with pytest.raises(Exception) as err:
        spark.sql(
            f"CREATE TABLE pushes USING shaledb OPTIONS (path '{url}', key_type 'string', pushdown 'true')"
        )
    assert "InvalidArgument: option pushdown is refused for a SQL table" in str(err.value)
    assert "DataFrame: spark.read.format" in str(err.value)
    assert not spark.catalog.tableExists("pushes")
    spark.sql(f"CREATE TABLE plain USING shaledb OPTIONS (path '{url}', key_type 'string', pushdown 'false')")
    try:
        assert sorted(r.key for r in spark.sql(both.format(t="plain")).collect()) == ["k001", "k002"]
        assert tuple(spark.sql(counts.format(t="plain")).first()) == (1, 50)
    finally:
        spark.sql("DROP TABLE IF EXISTS plain")
    # A table made before: its options (pushdown among them) travel in the key column's metadata.
    # Read through that schema, the filtered query must not narrow the next one.
    made = table_schema({"path": url, "key_type": "string"})
    key = made.fields[0]
    old = json.loads(key.metadata[TABLE_OPTIONS])
    key.metadata[TABLE_OPTIONS] = json.dumps({**old, "pushdown": "true"})
    df = spark.read.format("shaledb").schema(made).load()
    assert df.filter(df.key == "k001").count() == 1
    assert df.count() == 50


def test_a_temporary_view_with_pushdown_reuses_the_last_pushed_range_pinned(spark, tmp_path):
    """docs/spark.md: a temporary view is a load() kept under a name, and the source gets the
    same options as a DataFrame's (it cannot refuse pushdown there): with it, the view's
    unfiltered query after a filtered one reads the filtered range, even in separate statements
    (PySpark 4.3). Pinned so a PySpark that fixes it shows up here; without pushdown it is right."""
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"k%03d" % i, b"v") for i in range(50)]), url)
    try:
        for view, pushdown, unfiltered in (("pv", "true", 1), ("nv", "false", 50)):
            spark.sql(
                f"CREATE TEMPORARY VIEW {view} USING shaledb "
                f"OPTIONS (path '{url}', key_type 'string', pushdown '{pushdown}')"
            )
            assert spark.sql(f"SELECT count(*) AS n FROM {view} WHERE key = 'k001'").first().n == 1
            assert spark.sql(f"SELECT count(*) AS n FROM {view}").first().n == unfiltered, view
    finally:
        spark.catalog.dropTempView("pv")
        spark.catalog.dropTempView("nv")


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

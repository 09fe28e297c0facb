"""Spark as data engineers use it: save modes, SQL tables, strict options, duplicates, errors,
time travel (issue 29)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from spark_kit import contents, exists, kv_frame, latest

from shaledb import Db, Settings, admin
from shaledb import spark as shale_spark

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


# ------------------------------------------------------------------ save modes


def test_spark_refuses_the_default_save_mode_of_a_python_source_and_save_applies_it(spark, tmp_path):
    url = str(tmp_path / "db")
    df = kv_frame(spark, [(b"a", b"1"), (b"b", b"2")])
    # PySpark 4.3 refuses errorifexists/ignore for any Python data source, before it runs.
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("shaledb").save(url)
    shale_spark.save(df, url)  # errorifexists on an empty database: written
    assert contents(url) == {b"a": b"1", b"b": b"2"}
    with pytest.raises(Exception) as err:  # errorifexists on one that holds data
        shale_spark.save(kv_frame(spark, [(b"c", b"3")]), url)
    assert "already holds data" in first_line(err.value) and 'mode("overwrite")' in first_line(err.value)
    shale_spark.save(kv_frame(spark, [(b"c", b"3")]), url, mode="ignore")
    assert contents(url) == {b"a": b"1", b"b": b"2"}  # ignored
    shale_spark.save(kv_frame(spark, [(b"c", b"3")]), url, mode="append")
    assert contents(url) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    empty = str(tmp_path / "empty")
    shale_spark.save(kv_frame(spark, [(b"z", b"9")]), empty, mode="ignore")  # nothing there: written
    assert contents(empty) == {b"z": b"9"}


def test_overwrite_replaces_everything_in_one_cas_and_checkpoints_keep_the_old(spark, tmp_path):
    url = str(tmp_path / "db")
    old = {b"k%04d" % i: b"old" for i in range(0, 2000)}
    shale_spark.ingest(
        spark.createDataFrame(
            [(k, v, "t" + k.decode()[-1]) for k, v in old.items()], "key binary, value binary, tag string"
        ),
        url,
        value="value",
        index_columns=["tag"],
        value_separation_threshold=2,
    )
    with Db.open(url, settings=QUIET) as db:
        db.put(b"live", b"writer")  # in the WAL and L0 too
    cp = admin.create_checkpoint(url, name="before-overwrite")
    before = latest(url)
    assert before.journal and before.index.runs  # journal and index data to replace
    new = {b"n%04d" % i: b"new" for i in range(500)}
    kv_frame(spark, list(new.items()), partitions=2).write.format("shaledb").mode("overwrite").save(url)
    m = latest(url)
    assert m.id == before.id + 1 or m.id > before.id  # committed
    assert contents(url) == new
    assert not m.journal and not m.index.runs and not m.index.l0  # replaced (the new rows have none)
    assert dict(m.options).get("indexed") != "1"
    with Db.open(url, settings=QUIET) as db:
        assert list(db.index_query("tag", b"t0", b"t:")) == []
    old_view = spark.read.format("shaledb").option("checkpoint", "before-overwrite").load(url)
    assert {r.key: r.value for r in old_view.collect()} == {**old, b"live": b"writer"}
    admin.delete_checkpoint(url, cp.id)


READER = textwrap.dedent(
    """
    import json, os, sys
    from shaledb import DbReader, DbReaderOptions
    url, stop = sys.argv[1], sys.argv[2]
    seen = []
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    while not os.path.exists(stop) or len(seen) < 3:
        with DbReader.open(url, options=opts) as r:
            kinds = sorted({k[:1].decode() for k, _ in r.scan()})
        seen.append("".join(kinds))
    print(json.dumps(seen))
    """
)


def test_a_concurrent_reader_process_sees_the_old_contents_or_the_new_never_a_mix(spark, tmp_path):
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"o%04d" % i, b"x") for i in range(3000)]), url)
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, url, str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        df = kv_frame(spark, [(b"n%04d" % i, b"y") for i in range(3000)], partitions=4)
        old = kv_frame(spark, [(b"o%04d" % i, b"x") for i in range(3000)])
        for _ in range(2):
            shale_spark.ingest(df, url, mode="overwrite")
            shale_spark.ingest(old, url, mode="overwrite")
    finally:
        stop.touch()
    out, _ = reader.communicate(timeout=300)
    seen = json.loads(out)
    assert seen and set(seen) <= {"o", "n"}, sorted(set(seen))  # never "no" (a mix) or "" (nothing)


# ------------------------------------------------------------------ SQL tables


def test_a_sql_table_is_created_inserted_into_queried_and_described(spark, tmp_path):
    url = str(tmp_path / "db")
    spark.sql(f"CREATE TABLE kv USING shaledb OPTIONS (path '{url}', key_type 'string', value_type 'string')")
    try:
        desc = {r.col_name: r.data_type for r in spark.sql("DESCRIBE TABLE kv").collect()}
        assert list(desc)[:4] == ["key", "value", "seq", "metadata"] and desc["key"] == "string"
        spark.sql("INSERT INTO kv (key, value) VALUES ('a', '1'), ('b', '2'), ('c', '3')")
        spark.sql("INSERT INTO kv (key, value) SELECT concat('d', key), value FROM kv")
        assert contents(url) == {
            k.encode(): v.encode()
            for k, v in [("a", "1"), ("b", "2"), ("c", "3"), ("da", "1"), ("db", "2"), ("dc", "3")]
        }
        got = spark.sql("SELECT key, value FROM kv WHERE key = 'b'").collect()
        assert [(r.key, r.value) for r in got] == [("b", "2")]
        assert spark.sql("SELECT count(*) AS n FROM kv WHERE key >= 'b' AND key < 'd'").first().n == 2
        assert sorted(r.key for r in spark.sql("SELECT key FROM kv WHERE key LIKE 'd%'").collect()) == [
            "da",
            "db",
            "dc",
        ]
        assert spark.sql("SELECT count(*) AS n FROM kv").first().n == 6
        spark.sql("INSERT OVERWRITE kv (key, value) VALUES ('z', '26')")
        assert [(r.key, r.value) for r in spark.sql("SELECT key, value FROM kv").collect()] == [("z", "26")]
        # saveAsTable onto the existing table appends through the catalog's schema.
        spark.createDataFrame(
            [("y", "25", None, None)], "key string, value string, seq bigint, metadata binary"
        ).write.format("shaledb").mode("append").saveAsTable("kv")
        assert contents(url) == {b"y": b"25", b"z": b"26"}
        # mode("overwrite").saveAsTable: Spark drops the entry, then the pathless write is
        # refused (docs/spark.md says to use INSERT OVERWRITE); the data is untouched.
        with pytest.raises(Exception, match="give the database URL"):
            spark.createDataFrame([("x", "24")], "key string, value string").write.format("shaledb").mode(
                "overwrite"
            ).saveAsTable("kv")
        assert contents(url) == {b"y": b"25", b"z": b"26"}
    finally:
        spark.sql("DROP TABLE IF EXISTS kv")
    assert contents(url) == {b"y": b"25", b"z": b"26"}  # dropping the table leaves the database


def test_save_as_table_of_a_new_table_needs_the_table_created_first(spark, tmp_path):
    """saveAsTable of a table the catalog does not know: Spark hands the writer the user's
    options only. Without a path nothing is written anywhere and no catalog entry is made;
    with one the rows go to that database only, but Spark's new entry keeps no path. Both
    errors say to CREATE TABLE ... OPTIONS (path ...) first."""
    advice = "CREATE TABLE name USING shaledb OPTIONS (path 'URL')"
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    before = sorted(warehouse.rglob("*"))
    df = spark.createDataFrame([("a", "1")], "key string, value string")
    for mode in ("append", "overwrite"):
        with pytest.raises(Exception) as err:
            df.write.format("shaledb").mode(mode).saveAsTable("brand_new")
        assert advice in first_line(err.value)
        assert not spark.catalog.tableExists("brand_new")
    assert sorted(warehouse.rglob("*")) == before  # no data landed in the warehouse either
    url = str(tmp_path / "db")
    try:
        df.write.format("shaledb").mode("append").option("path", url).saveAsTable("pathless")
        assert contents(url) == {b"a": b"1"}
        with pytest.raises(Exception) as err:
            spark.sql("SELECT * FROM pathless").collect()
        assert advice in first_line(err.value)
    finally:
        spark.sql("DROP TABLE IF EXISTS pathless")
    assert contents(url) == {b"a": b"1"}  # dropping the entry leaves the database


# ------------------------------------------------------------------ strict options


def test_a_misspelled_option_is_refused_with_the_closest_name(spark, tmp_path):
    url = str(tmp_path / "db")
    df = kv_frame(spark, [(b"a", b"1")])
    with pytest.raises(Exception) as err:
        df.write.format("shaledb").mode("append").option("keycol", "key").save(url)
    assert "unknown shaledb option 'keycol'; did you mean 'key'?" in first_line(err.value)
    shale_spark.ingest(df, url)
    with pytest.raises(Exception) as err:
        spark.read.format("shaledb").option("prefx", "k00").load(url)
    assert "did you mean 'prefix'?" in first_line(err.value)
    with pytest.raises(Exception) as err:
        df.write.format("shaledb").mode("append").option("max_sst_size_bytes", "big").save(url)
    assert "option max_sst_size_bytes must be an integer number of bytes, >= 4096" in first_line(err.value)
    assert "got 'big' (str)" in first_line(err.value)
    with pytest.raises(Exception) as err:  # the one numeric check, end to end (no NaN, inf, huge)
        df.write.format("shaledb").mode("append").option("lease_s", "inf").save(url)
    assert "InvalidArgument: option lease_s must be a finite number of seconds, > 0" in first_line(err.value)
    with pytest.raises(Exception) as err:
        df.write.format("shaledb").mode("append").option("compression", "gzip").save(url)
    assert "option compression must be one of" in first_line(err.value)
    assert contents(url) == {b"a": b"1"}  # nothing changed


def test_errors_reach_the_user_as_one_line_at_the_head(spark, tmp_path):
    url = str(tmp_path / "db")
    with pytest.raises(Exception) as err:
        spark.read.format("shaledb").option("partitions", "0").load(url)
    line = first_line(err.value)
    assert "InvalidArgument: option partitions must be an integer, >= 1 and <= " in line, str(err.value)
    assert "got 0" in line, line
    with pytest.raises(Exception) as err:
        spark.read.format("shaledb").option("checkpoint_lifetime_s", "nan").load(url)
    assert "InvalidArgument: option checkpoint_lifetime_s must be a finite number of seconds" in first_line(
        err.value
    ), str(err.value)
    assert "Traceback" not in str(err.value)
    df = kv_frame(spark, [(b"a", b"1"), (b"a", b"2")], partitions=1)
    with pytest.raises(Exception) as err:  # raised in a task
        df.write.format("shaledb").mode("append").save(url)
    assert "appears more than once" in str(err.value) and "Traceback" not in str(err.value)


# ------------------------------------------------------------------ duplicates


def test_duplicates_across_partitions_are_refused_whatever_the_partitioning(spark, tmp_path):
    rows = [(b"k%03d" % i, b"a") for i in range(200)]
    again = [(b"k050", b"b")]
    df = (
        spark.createDataFrame(rows, "key binary, value binary")
        .union(spark.createDataFrame(again, "key binary, value binary"))
        .repartition(4)
    )
    for how in ("raw", "store", "spark"):
        url = str(tmp_path / how)
        with pytest.raises(Exception) as err:
            if how == "raw":
                df.write.format("shaledb").mode("append").save(url)
            else:
                shale_spark.ingest(df, url, exchange=how)
        assert "b'k050' appears more than once" in str(err.value), how
        assert not exists(url), how  # nothing committed: the database the write created is gone


def test_on_duplicate_last_and_first_follow_the_order_column(spark, tmp_path):
    rows = [(b"k%03d" % i, b"v0", 0) for i in range(100)] + [(b"k007", b"v2", 2), (b"k007", b"v1", 1)]
    df = spark.createDataFrame(rows, "key binary, value binary, t int").repartition(4)
    with pytest.raises(Exception, match="needs option order_by"):
        df.write.format("shaledb").mode("append").option("value", "value").option(
            "on_duplicate", "last"
        ).save(str(tmp_path / "x"))
    for policy, want in (("last", b"v2"), ("first", b"v0")):
        url = str(tmp_path / policy)
        shale_spark.ingest(df, url, value="value", duplicates=policy, order_by=["t"])
        assert contents(url)[b"k007"] == want and len(contents(url)) == 100


# ------------------------------------------------------------------ time travel


def test_checkpoints_by_name_and_versions_a_checkpoint_pins(spark, tmp_path):
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"a", b"1")]), url)
    cp = admin.create_checkpoint(url, name="v1")
    shale_spark.ingest(kv_frame(spark, [(b"a", b"2")]), url)
    by_name = spark.read.format("shaledb").option("checkpoint", "v1").load(url)
    assert [(r.key, r.value) for r in by_name.collect()] == [(b"a", b"1")]
    by_version = spark.read.format("shaledb").option("version", str(cp.manifest_id)).load(url)
    assert [(r.key, r.value) for r in by_version.collect()] == [(b"a", b"1")]
    unpinned = latest(url).id - 1
    with pytest.raises(Exception) as err:
        spark.read.format("shaledb").option("version", str(unpinned)).load(url)
    assert f"CheckpointNotFound: no checkpoint pins manifest version {unpinned}" in first_line(err.value)
    with pytest.raises(Exception, match="CheckpointNotFound"):
        spark.read.format("shaledb").option("checkpoint", "nope").load(url)


# ------------------------------------------------------------------ pushdown


def test_filtered_then_unfiltered_counts_are_right_by_default_and_per_sql_statement(spark, tmp_path):
    """The sequence PySpark 4.3 gets wrong with pushdown on a reused DataFrame
    (test_spark_read.py pins that): right by default, and right per SQL statement on a
    table, which takes no pushdown (test_spark_sql_statements.py): Spark applies its WHERE."""
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"k%03d" % i, b"v") for i in range(300)]), url)
    df = spark.read.format("shaledb").load(url)
    assert df.filter(df.key == b"k007").count() == 1
    assert df.count() == 300
    assert df.filter(df.key < b"k010").count() == 10
    spark.sql(f"CREATE TABLE pushed USING shaledb OPTIONS (path '{url}', key_type 'string')")
    try:
        one = spark.sql("SELECT key FROM pushed WHERE key = 'k007'")
        plan = one._jdf.queryExecution().executedPlan().toString()
        assert re.search(r"\bFilter\b", plan) is not None, plan  # Spark applies it
        assert one.count() == 1
        assert spark.sql("SELECT count(*) AS n FROM pushed").first().n == 300
        assert spark.sql("SELECT count(*) AS n FROM pushed WHERE key LIKE 'k01%'").first().n == 10
        assert spark.sql("SELECT count(*) AS n FROM pushed").first().n == 300
    finally:
        spark.sql("DROP TABLE IF EXISTS pushed")


def test_a_table_created_with_a_column_list_says_to_create_it_without_one(spark, tmp_path):
    url = str(tmp_path / "db")
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"a", b"1")
    spark.sql(f"CREATE TABLE listed (key STRING, value STRING) USING shaledb OPTIONS (path '{url}')")
    try:
        for stmt in ("SELECT * FROM listed", "INSERT INTO listed VALUES ('b', '2')"):
            with pytest.raises(Exception, match="created with a column list") as exc:
                spark.sql(stmt).collect()
            assert "drop it and create it without one" in str(exc.value)
    finally:
        spark.sql("DROP TABLE IF EXISTS listed")
    assert contents(url) == {b"a": b"1"}


def test_writes_to_a_table_by_column_name_take_key_and_value_alone(spark, tmp_path):
    """docs/spark.md: saveAsTable and writeTo match by name; insertInto by position (all four)."""
    url = str(tmp_path / "db")
    spark.sql(
        f"CREATE TABLE named USING shaledb OPTIONS (path '{url}', key_type 'string', value_type 'string')"
    )
    try:
        spark.createDataFrame([("a", "1")], "key string, value string").writeTo("named").append()
        df = spark.createDataFrame([("b", "2")], "key string, value string")
        df.write.format("shaledb").mode("append").saveAsTable("named")
        with pytest.raises(Exception, match="INSERT_COLUMN_ARITY_MISMATCH"):
            spark.createDataFrame([("c", "3")], "key string, value string").write.insertInto("named")
        spark.createDataFrame(
            [("d", "4", None, None)], "key string, value string, seq bigint, metadata binary"
        ).write.insertInto("named")
    finally:
        spark.sql("DROP TABLE IF EXISTS named")
    assert contents(url) == {b"a": b"1", b"b": b"2", b"d": b"4"}

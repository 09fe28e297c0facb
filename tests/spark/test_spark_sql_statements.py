"""SQL statements a Delta or Paimon user tries on a shaledb table, and what they do here
(docs/spark.md, "SQL tables" and "Filter pushdown"): CTAS, a temporary view's pinned
version, pushdown refused for a table (and pinned for a temporary view), type names in any
case, ALTER TABLE, SHOW CREATE TABLE, a stream in update mode."""

from __future__ import annotations

import json
import time

import pytest
from spark_kit import contents, exists, kv_frame, latest

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


def test_create_table_takes_sql_type_names_in_any_case(spark, tmp_path):
    url = str(tmp_path / "db")
    spark.sql(
        f"CREATE TABLE cased USING shaledb OPTIONS (path '{url}', key_type 'STRING', value_type 'String')"
    )
    try:
        assert [f.dataType.simpleString() for f in spark.table("cased").schema.fields[:2]] == [
            "string",
            "string",
        ]
        spark.sql("INSERT INTO cased (key, value) VALUES ('a', '1')")
        assert [tuple(r) for r in spark.sql("SELECT key, value FROM cased").collect()] == [("a", "1")]
    finally:
        spark.sql("DROP TABLE IF EXISTS cased")


def test_alter_table_columns_fails_the_next_read_and_write_naming_the_cause(spark, tmp_path):
    """Spark applies ALTER TABLE ... ADD/RENAME COLUMNS to a Python data source's table without
    running the source (no hook to refuse it), so the next statement is the first to notice: a
    read and a write are refused naming ALTER TABLE, and no added column's value is dropped
    silently (the write of one used to succeed, storing key and value only)."""
    url = str(tmp_path / "db")
    create = (
        f"CREATE TABLE altered USING shaledb OPTIONS (path '{url}', key_type 'string', value_type 'string')"
    )
    spark.sql(create)
    try:
        spark.sql("INSERT INTO altered (key, value) VALUES ('a', '1')")
        spark.sql("ALTER TABLE altered ADD COLUMNS (extra string)")  # Spark accepts it
        statements = (
            "SELECT * FROM altered",
            "SELECT key FROM altered",
            "INSERT INTO altered (key, value, extra) VALUES ('b', '2', 'x')",
            "INSERT INTO altered (key, value) VALUES ('c', '3')",
        )
        for stmt in statements:
            with pytest.raises(Exception) as err:
                spark.sql(stmt).collect()
            text = str(err.value)
            assert "columns were changed with ALTER TABLE" in text, (stmt, text)
            assert "key, value, seq, metadata, extra" in text and url in text, text
        assert contents(url) == {b"a": b"1"}  # nothing written
        spark.sql("DROP TABLE altered")  # what the message says: the data stays at its URL
        spark.sql(create)
        spark.sql("ALTER TABLE altered RENAME COLUMN value TO v")
        with pytest.raises(Exception, match="columns were changed with ALTER TABLE"):
            spark.sql("INSERT INTO altered (key, v) VALUES ('b', '2')")  # was: v, seq JSON-encoded
        assert contents(url) == {b"a": b"1"}
    finally:
        spark.sql("DROP TABLE IF EXISTS altered")


def test_show_create_table_cannot_print_using_shaledb_so_the_key_comment_carries_it(spark, tmp_path):
    """PySpark 4.3's PythonTable has no properties, and SHOW CREATE TABLE takes the provider
    and options from them: it prints the columns only (Spark's, pinned here). The key column's
    comment carries the URL and the clause that creates the table again, secrets masked."""
    url = str(tmp_path / "db")
    shale_spark.ingest(kv_frame(spark, [(b"a", b"1")]), url)
    spark.sql(f"CREATE TABLE shown USING shaledb OPTIONS (path '{url}', key_type 'string', partitions '2')")
    try:
        text = spark.sql("SHOW CREATE TABLE shown").first()[0]
        columns, comment_and_rest = text.split("COMMENT", 1)
        assert "USING" not in columns and "USING" not in comment_and_rest.split("\n", 1)[1], text
        assert "USING shaledb OPTIONS (path" in comment_and_rest, text  # in the key's comment
        comment = spark.sql("DESCRIBE TABLE shown").first().comment
        clause = comment.split("CREATE TABLE name ", 1)[1]
        assert clause.startswith(f"USING shaledb OPTIONS (path 'file:{url}'"), comment
        assert clause.endswith(", key_type 'string', partitions '2')"), comment
        spark.sql(f"CREATE TABLE shown_again {clause}")  # the clause works as it stands
        try:
            assert spark.sql("SELECT key, value FROM shown_again").collect() == [("a", b"1")]
        finally:
            spark.sql("DROP TABLE IF EXISTS shown_again")
    finally:
        spark.sql("DROP TABLE IF EXISTS shown")
    secret = table_schema({"path": url, "store.secret_access_key": "hush", "store.region": "eu"})
    assert "store.secret_access_key '***'" in secret.fields[0].metadata["comment"]
    assert "store.region 'eu'" in secret.fields[0].metadata["comment"]
    assert "hush" not in secret.fields[0].metadata["comment"]


def test_a_copy_of_one_table_into_another_is_refused_not_written_back_into_the_source(spark, tmp_path):
    """The options of a table travel in its key column's metadata, and PySpark 4.3 hands a
    write the metadata of the rows when a statement passes a table's four columns through
    unchanged: INSERT INTO dst SELECT * FROM src (and CTAS, insertInto, writeTo of
    spark.table(src)) wrote the rows back into src, silently, and CTAS made dst a second name
    for src. Rows with seq values (only a read gives them) are refused now; naming the columns
    writes into dst."""
    src, dst, other = (str(tmp_path / n) for n in ("src", "dst", "other"))
    shale_spark.ingest(kv_frame(spark, [(b"a", b"1"), (b"b", b"2")]), src)
    spark.sql(f"CREATE TABLE src USING shaledb OPTIONS (path '{src}')")
    spark.sql(f"CREATE TABLE dst USING shaledb OPTIONS (path '{dst}')")
    ingests = len(latest(src).ingests)
    ctas = f"CREATE TABLE made USING shaledb OPTIONS (path '{other}') AS SELECT "
    try:
        copies = {
            "INSERT INTO": lambda: spark.sql("INSERT INTO dst SELECT * FROM src"),
            "INSERT OVERWRITE": lambda: spark.sql("INSERT OVERWRITE dst SELECT * FROM src"),
            "insertInto": lambda: spark.table("src").write.insertInto("dst"),
            "writeTo": lambda: spark.table("src").writeTo("dst").append(),
            "CTAS": lambda: spark.sql(ctas + "* FROM src"),
        }
        for how, copy in copies.items():
            with pytest.raises(Exception) as err:
                copy()
            text = str(err.value)
            assert "a write to a shaledb table got rows with seq values" in text, (how, text)
            assert "written back to " in text and src in text, (how, text)
            assert len(latest(src).ingests) == ingests, how  # nothing committed into src
            assert not exists(dst) and not exists(other), how
        assert not spark.catalog.tableExists("made")  # Spark drops what a failed CTAS created
        with pytest.raises(Exception, match="Or the rows were read from that table"):
            spark.sql(ctas + "key, value FROM src")
        assert not spark.catalog.tableExists("made") and not exists(other)
        # What the message says: name the columns.
        spark.sql("INSERT INTO dst (key, value, metadata) SELECT key, value, metadata FROM src")
        spark.table("src").where("key = X'61'").selectExpr("key", "X'39' AS value").writeTo("dst").append()
        assert contents(dst) == {b"a": b"9", b"b": b"2"}
        assert len(latest(src).ingests) == ingests
        spark.sql("INSERT INTO dst VALUES (X'63', X'33', NULL, NULL)")  # a null seq: as before
        assert contents(dst)[b"c"] == b"3"
    finally:
        for t in ("src", "dst", "made"):
            spark.sql(f"DROP TABLE IF EXISTS {t}")


def test_a_loaded_dataframe_written_into_a_table_as_read_is_told_to_name_the_columns(spark, tmp_path):
    """A DataFrame from load() has the table's four columns but no table's options on them, so
    insertInto passed them through and the write got no path: the message said to create the
    table first, which the user had done. It now names this case and the way out, which works."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    shale_spark.ingest(kv_frame(spark, [(b"a", b"1"), (b"b", b"2")]), src)
    spark.sql(f"CREATE TABLE loaded_into USING shaledb OPTIONS (path '{dst}')")
    try:
        df = spark.read.format("shaledb").load(src)
        with pytest.raises(Exception) as err:
            df.write.insertInto("loaded_into")
        assert "written into a table with its four columns as read" in str(err.value), str(err.value)
        assert not exists(dst)
        df.select("key", "value", "metadata").writeTo("loaded_into").append()  # what it says
        assert contents(dst) == {b"a": b"1", b"b": b"2"}
    finally:
        spark.sql("DROP TABLE IF EXISTS loaded_into")

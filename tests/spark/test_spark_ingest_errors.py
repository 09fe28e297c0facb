"""What a user sees when a Spark ingest is refused: shaledb's one-line message, not the
frames of the worker and the ingest's internals (docs/spark.md, "Errors")."""

from __future__ import annotations

import pytest
from spark_kit import contents, exists

from shaledb import Db
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
    assert not exists(url)  # nothing committed: the database the write created is gone


def test_the_store_exchange_still_loads_every_range(spark, tmp_path):
    rows = [(f"k{i:04d}", f"v{i}") for i in range(500)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    url = str(tmp_path / "db")
    record = shale_spark.ingest(df, url, partitions=3, exchange="store")
    assert record.rows == 500
    got = spark.read.format("shaledb").option("key_type", "string").option("value_type", "string").load(url)
    assert sorted((r.key, r.value) for r in got.collect()) == sorted(rows)


def test_a_raw_write_with_on_duplicate_last_whose_partitions_share_a_key_says_to_repartition(spark, tmp_path):
    """on_duplicate=last is resolved by order_by within each task; copies of a key in two
    partitions of a raw write fail at the commit, which must not advise setting the options
    the user already set."""
    rows = [("a", "1", 1), ("b", "2", 1)]
    df = spark.createDataFrame(rows, "key string, value string, t int").union(
        spark.createDataFrame([("a", "3", 2)], "key string, value string, t int")
    )
    assert df.rdd.getNumPartitions() > 1
    url = str(tmp_path / "db")
    with pytest.raises(Exception) as err:
        df.write.format("shaledb").mode("append").option("value", "value").option(
            "on_duplicate", "last"
        ).option("order_by", "t").save(url)
    text = str(err.value)
    assert "key b'a' appears more than once in this ingest" in text
    assert "on_duplicate='last' is decided by order_by within a partition" in text, text
    assert "repartitionByRange(key)" in text


def test_a_load_of_several_urls_says_one_url_not_a_misspelled_option(spark, tmp_path):
    """load([a, b]) reaches the source as option "paths": it was refused as an unknown option,
    "did you mean 'partitions'?"."""
    with pytest.raises(Exception) as err:
        spark.read.format("shaledb").load([str(tmp_path / "a"), str(tmp_path / "b")])
    text = str(err.value)
    assert "takes one database URL" in text, text
    assert "partitions" not in text


def test_save_and_ingest_work_from_a_thread_of_their_own(spark, tmp_path):
    """PySpark 4.3 finds a Python data source for a write only in the JVM thread's active
    session, which a new Python thread lacks (DATA_SOURCE_NOT_FOUND: shaledb) unless something
    there set it; the helpers make the DataFrame's session active first."""
    import threading

    url = str(tmp_path / "db")
    errors: list[BaseException] = []

    def load() -> None:
        try:
            # Not createDataFrame, which happens to make its session active on the thread.
            df = spark.range(2).selectExpr("char(97 + id) AS key", "cast(id + 1 AS string) AS value")
            shale_spark.save(df, url)
            more = spark.range(1).selectExpr("'c' AS key", "'3' AS value")
            shale_spark.ingest(more, url, exchange="spark")
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    worker = threading.Thread(target=load)
    worker.start()
    worker.join()
    assert errors == []
    got = spark.read.format("shaledb").option("key_type", "string").option("value_type", "string").load(url)
    assert sorted((r.key, r.value) for r in got.collect()) == [("a", "1"), ("b", "2"), ("c", "3")]


def test_a_failed_first_write_leaves_no_database_behind(spark, tmp_path):
    """A first write to a new URL that fails (a duplicate key, a null key; raw write and both
    exchanges) leaves nothing there: a read says there is no database, not an empty one, and
    the retry creates it afresh. A database that was there before stays (empty or not)."""
    dup = spark.createDataFrame([("a", "1"), ("a", "2"), ("b", "3")], "key string, value string").repartition(
        2
    )
    null = spark.createDataFrame([(None, "1"), ("b", "2")], "key string, value string").repartition(2)
    writes = {
        "raw": lambda df, url: df.write.format("shaledb").mode("append").save(url),
        "store": lambda df, url: shale_spark.ingest(df, url, exchange="store"),
        "spark": lambda df, url: shale_spark.ingest(df, url, exchange="spark"),
    }
    for name, write in writes.items():
        for rows, why in ((dup, "appears more than once"), (null, "has nulls")):
            where = tmp_path / f"{name}-{why.split()[0]}"
            with pytest.raises(Exception, match=why):
                write(rows, str(where))
            assert not exists(str(where)), (name, why)
            assert [p for p in where.rglob("*") if p.is_file()] == [], (name, why)
            with pytest.raises(Exception, match="NotFound: no database at"):
                spark.read.format("shaledb").load(str(where)).collect()
    url = str(tmp_path / "raw-appears")  # the retry, with good rows
    shale_spark.ingest(spark.createDataFrame([("a", "1")], "key string, value string"), url)
    assert contents(url) == {b"a": b"1"}
    with pytest.raises(Exception, match="appears more than once"):
        writes["raw"](dup, url)
    assert contents(url) == {b"a": b"1"}  # there before: kept
    empty = str(tmp_path / "empty")
    Db.open(empty).close()
    with pytest.raises(Exception, match="appears more than once"):
        writes["raw"](dup, empty)
    assert contents(empty) == {}  # there before, though empty: kept

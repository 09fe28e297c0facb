"""Checkpoint reads through the Spark data source: consistency, filters, partitions, release."""

from __future__ import annotations

import random
import re

import pytest
from spark_kit import kv_frame

from shaledb import Db, Settings, admin
from shaledb import spark as shale_spark
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


@pytest.fixture(scope="module")
def loaded(spark, tmp_path_factory):
    """A database with a bulk-loaded run of 6 SSTs plus writer data in L0 and only in the WAL."""
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path_factory.mktemp("read") / "db")
    data = {b"k%05d" % i: rng.randbytes(20) for i in range(6000)}
    shale_spark.ingest(kv_frame(spark, list(data.items())), url, partitions=6)
    db = Db.open(url, settings=QUIET)
    for i in range(0, 6000, 7):
        data[b"k%05d" % i] = b"l0"
        db.put(b"k%05d" % i, b"l0", durable=False)
    db.flush(memtable=True)
    for i in range(0, 6000, 11):
        db.delete(b"k%05d" % i, durable=False)
        data.pop(b"k%05d" % i, None)
    db.put(b"zz", b"wal", metadata=b"m")
    data[b"zz"] = b"wal"
    db.flush()
    yield url, db, data
    db.close()


def plan_text(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def has_filter(df) -> bool:
    """True if Spark still filters rows after the scan (a predicate was not pushed)."""
    return re.search(r"\bFilter\b", plan_text(df)) is not None


def test_a_load_reads_one_checkpoint_for_every_query(spark, loaded):
    url, db, data = loaded
    df = spark.read.format("shaledb").load(url)
    assert {r.key: r.value for r in df.collect()} == data
    db.put(b"k00001", b"after the load")  # not in the DataFrame's checkpoint
    db.flush()
    assert df.count() == len(data)
    assert df.filter(df.key == b"k00001").collect()[0].value == data[b"k00001"]
    meta = {r.key: r.metadata for r in df.filter(df.key >= b"zz").collect()}
    assert meta == {b"zz": b"m"}
    fresh = spark.read.format("shaledb").load(url)
    assert fresh.filter(fresh.key == b"k00001").collect()[0].value == b"after the load"
    data[b"k00001"] = b"after the load"


def test_pyspark_reuses_a_filtered_read_plan_for_a_later_unfiltered_query(spark, loaded):
    """PySpark 4.3 caches the read plan per loaded DataFrame and replaces it with the plan of
    the last query whose filters were pushed; a later query without filters reuses that one.
    With pushdown this DataFrame then sees only the last pushed key range (docs/spark.md), so
    filter pushdown is opt-in and the default DataFrame is safe to reuse for anything."""
    url, _, data = loaded
    df = spark.read.format("shaledb").option("pushdown", "true").load(url)
    assert df.filter(df.key == b"k00002").count() == 1
    assert df.select("key").count() == 1  # the stale plan: the PySpark bug, shown
    safe = spark.read.format("shaledb").load(url)
    assert safe.filter(safe.key == b"k00002").count() == 1
    assert safe.select("key").count() == len(data)


def test_key_range_options_narrow_the_read_and_stay_correct(spark, loaded):
    url, db, data = loaded
    df = (
        spark.read.format("shaledb")
        .option("partitions", "6")
        .option("start", "k01000")
        .option("end", "0x" + b"k02000".hex())
        .load(url)
    )
    want = sorted(k for k in data if b"k01000" <= k < b"k02000")
    assert sorted(r.key for r in df.collect()) == want
    assert df.count() == len(want)  # reusing the DataFrame keeps the same range
    pre = spark.read.format("shaledb").option("prefix", "k012").load(url)
    assert sorted(r.key for r in pre.collect()) == sorted(k for k in data if k.startswith(b"k012"))
    # A key no SST starts or ends at: at such an edge the planner may rightly cut the prefix's
    # range in two (keys such as b"k04001a" could sort after an SST's last key b"k04001"), and
    # where the bulk load's sampled range partitioning put its edges differs from run to run.
    edges = {k for s in db.manifest.data.ssts() for k in (s.first_key, s.last_key)}
    key = next(k for k in sorted(data) if k >= b"k04001" and k not in edges)
    point = spark.read.format("shaledb").option("partitions", "6").option("prefix", key.decode()).load(url)
    assert point.rdd.getNumPartitions() == 1  # the range, not the whole version, was planned
    assert [r.key for r in point.collect()] == [key]


def test_key_filters_are_pushed_down_and_prune_partitions(spark, loaded):
    url, _, data = loaded
    df = spark.read.format("shaledb").option("partitions", "6").option("pushdown", "true").load(url)
    assert 1 <= df.rdd.getNumPartitions() <= 6  # "at most 6", cut where SST boundaries allow
    q = df.filter((df.key >= b"k01000") & (df.key < b"k02000"))
    assert not has_filter(q)  # every predicate went to the source
    assert sorted(r.key for r in q.collect()) == sorted(k for k in data if b"k01000" <= k < b"k02000")
    point = df.filter(df.key == b"k04001")
    assert point.rdd.getNumPartitions() == 1 and not has_filter(point)
    assert [r.value for r in point.collect()] == [data[b"k04001"]]
    # A predicate the source cannot apply exactly stays with Spark, and still narrows the range.
    some = df.filter(df.key.isin(b"k00002", b"k00003", b"nope"))
    assert has_filter(some)
    assert sorted(r.key for r in some.collect()) == [b"k00002", b"k00003"]


def test_prefix_filter_on_string_keys(spark, loaded):
    url, _, data = loaded
    df = (
        spark.read.format("shaledb")
        .option("key_type", "string")
        .option("partitions", "6")
        .option("pushdown", "true")
        .load(url)
    )
    q = df.filter(df.key.startswith("k012"))
    assert not has_filter(q) and q.rdd.getNumPartitions() == 1
    assert sorted(r.key for r in q.collect()) == sorted(k.decode() for k in data if k.startswith(b"k012"))


def test_a_given_checkpoint_is_read_as_is_and_kept(spark, loaded):
    url, db, _ = loaded
    cp = db.create_checkpoint(lifetime=600, name="for spark")
    expected = dict(db.scan())
    db.put(b"k00005", b"later")
    db.flush()
    df = spark.read.format("shaledb").option("checkpoint", str(cp.id)).load(url)
    assert {r.key: r.value for r in df.collect()} == expected
    assert any(c.id == cp.id for c in admin.list_checkpoints(url))


def test_read_checkpoint_releases_its_checkpoint(spark, loaded):
    url, _, _ = loaded
    before = {c.id for c in admin.list_checkpoints(url)}
    with shale_spark.read_checkpoint(spark, url) as df:
        assert df.count() > 0
        mine = {c.id for c in admin.list_checkpoints(url)} - before
        assert len(mine) == 1
    assert not mine & {c.id for c in admin.list_checkpoints(url)}


def test_a_plain_load_pins_an_expiring_checkpoint(spark, loaded):
    url, _, _ = loaded
    before = {c.id for c in admin.list_checkpoints(url)}
    df = spark.read.format("shaledb").option("checkpoint_lifetime_s", "120").load(url)
    assert df.count() > 0
    new = [c for c in admin.list_checkpoints(url) if c.id not in before]
    assert len(new) == 1 and new[0].name == "spark-read"
    assert new[0].expire_time_s is not None and new[0].expire_time_s - new[0].create_time_s == pytest.approx(
        120
    )
    admin.delete_checkpoint(url, new[0].id)
    with pytest.raises(Exception, match="checkpoint"):
        df.collect()  # the DataFrame's version is gone: a clear error, not other data


def test_a_default_read_plans_one_part_per_task_slot(spark, tmp_path):
    """register() hands the session's parallelism to the planner processes: two slots, two parts.

    One SST of ~10 MB (one ingest part): without the slots the read would be one part
    of at most 128 MiB; with them it is cut in two at the SST's block ends.
    """
    from shaledb.bulk.ingest import ingest_columns

    assert spark.sparkContext.defaultParallelism == 2
    url = str(tmp_path / "db")
    rng = random.Random(test_seed())
    keys = [b"k%07d" % i for i in range(90_000)]
    ingest_columns(url, keys, [rng.randbytes(100) for _ in keys])
    df = spark.read.format("shaledb").load(url)
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == len(keys)
    sizes = df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    assert sum(sizes) == len(keys) and min(sizes) > len(keys) // 3  # even halves, to a few blocks


def test_merges_and_range_deletes_read_as_the_writer_sees_them(spark, tmp_path):
    """Merges over range-deleted keys fold onto nothing, and range-deleted merge operands
    stay hidden, in an L0 SST, the WAL and after a flush (issue 31)."""
    url = str(tmp_path / "db")
    db = Db.open(url, settings=QUIET.replace(merge_operator="append"))
    try:
        for i in range(40):
            db.put(b"k%02d" % i, b"old", durable=False)
        db.merge(b"k05", b"+a", durable=False)
        db.flush(memtable=True)
        db.delete_range(b"k00", b"k10", durable=False)  # hides k05's operand and base
        db.merge(b"k05", b"+b", durable=False)  # onto nothing
        db.flush(memtable=True)
        db.delete_range(b"k30", b"k40", durable=False)  # WAL only
        db.merge(b"k35", b"+c", durable=False)
        db.merge(b"k20", b"+d", durable=False)
        db.flush()
        want = dict(db.scan())
        assert want[b"k05"] == b"+b" and want[b"k35"] == b"+c" and want[b"k20"] == b"old+d"
        assert b"k01" not in want and b"k31" not in want
        df = spark.read.format("shaledb").load(url)
        assert {r.key: r.value for r in df.collect()} == want
    finally:
        db.close()


def test_text_that_is_not_utf8_is_named_by_its_column_key_and_option(spark, tmp_path):
    """key_type/value_type string over bytes that are not UTF-8 said only "a key or value is
    not valid UTF-8": which column, which key and which option were left to guess."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"good", b"text")
        db.put(b"bad\xff", b"text")
        db.put(b"ok", b"\xc3\x28 binary")

    def read(option: str):  # a DataFrameReader keeps its options: a new one each time
        return spark.read.format("shaledb").option(option, "string")

    with pytest.raises(Exception) as err:
        read("key_type").load(url).collect()
    assert "the key of key b'bad\\xff' in " in str(err.value) and "option key_type=string" in str(err.value)
    with pytest.raises(Exception) as err:
        read("value_type").load(url).collect()
    assert "the value of key b'ok' in " in str(err.value) and "option value_type=string" in str(err.value)
    good = read("value_type").option("start", "good").option("end", "goodz").load(url).first()
    assert good.value == "text"  # the other rows read

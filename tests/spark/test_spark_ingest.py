"""Bulk ingest through the Spark data source: round trip, re-runs, failures, speculation, writers."""

from __future__ import annotations

import json
import random

import pytest
from spark_kit import contents, kv_frame, latest, referenced, sst_ids, test_seed

from shaledb import Db, FencedError, GarbageCollector, GcOptions, Settings
from shaledb import spark as shale_spark
from shaledb.compaction import schedule
from shaledb.settings import CompactorOptions

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


def rows(n: int, rng: random.Random, vlen: int = 30) -> list[tuple[bytes, bytes]]:
    keys = {rng.randbytes(12) for _ in range(n)}
    return [(k, rng.randbytes(vlen)) for k in keys]


def test_round_trip_binary_keys_values_and_metadata(spark, tmp_path):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    data = rows(5000, rng)
    metas = {k: (rng.randbytes(4) if rng.random() < 0.5 else None) for k, _ in data}
    df = spark.createDataFrame([(k, v, metas[k]) for k, v in data], "key binary, value binary, meta binary")
    rec = shale_spark.ingest(df, url, metadata="meta", partitions=3)
    assert rec.rows == 5000
    m = latest(url)
    assert m.data.l0 == () and len(m.data.runs) == 1 and len(m.data.runs[0].ssts) == 3
    assert schedule(m, CompactorOptions()) == []  # settled: nothing to compact
    back = spark.read.format("shaledb").load(url).collect()
    assert sorted((r.key, r.value, r.metadata) for r in back) == sorted((k, v, metas[k]) for k, v in data)
    assert {r.seq for r in back} == {rec.seq}
    assert contents(url) == dict(data)


def test_json_values_string_keys_and_plain_df_write(spark, tmp_path):
    url = str(tmp_path / "db")
    df = spark.createDataFrame(
        [("b", 2, 2.5, None), ("a", 1, None, "x"), ("c", 3, 0.0, "z")], "id string, n int, f double, s string"
    )
    # The plain write path: the caller prepares the partitioning (or not: each task sorts its input).
    df.write.format("shaledb").mode("append").option("key", "id").save(url)
    out = spark.read.format("shaledb").option("key_type", "string").option("value_type", "string").load(url)
    got = {r.key: json.loads(r.value) for r in out.collect()}
    assert got == {
        "a": {"n": 1, "f": None, "s": "x"},
        "b": {"n": 2, "f": 2.5, "s": None},
        "c": {"n": 3, "f": 0.0, "s": "z"},
    }
    parsed = shale_spark.transforms.decode_json(out, "n int, f double, s string")
    assert sorted(parsed.columns) == ["f", "key", "metadata", "n", "s", "seq"]
    assert parsed.filter("n = 2").select("key").collect()[0].key == "b"


def test_rerunning_the_same_job_does_not_duplicate_data(spark, tmp_path):
    seed = test_seed()
    url = str(tmp_path / "db")
    data = rows(2000, random.Random(seed))
    df = kv_frame(spark, data)
    first = shale_spark.ingest(df, url, ingest_id="nightly-2013-01-01")
    ssts = referenced(url)
    again = shale_spark.ingest(df, url, ingest_id="nightly-2013-01-01")
    assert again.manifest_id == first.manifest_id  # the same record: the re-run committed nothing
    assert referenced(url) == ssts and sst_ids(url) == ssts  # and left no copies behind
    assert contents(url) == dict(data)
    # Without the id, a re-run writes the rows again as a newer version: same contents.
    shale_spark.ingest(df, url)
    assert contents(url) == dict(data) and len(latest(url).data.runs) == 2


def test_a_task_failing_its_first_attempt_is_retried_and_leaves_only_garbage(spark, tmp_path):
    seed = test_seed()
    url = str(tmp_path / "db")
    data = rows(3000, random.Random(seed))
    shale_spark.ingest(kv_frame(spark, data), url, partitions=3, options={"testing.fail_partition": "1"})
    assert contents(url) == dict(data)
    orphans = sst_ids(url) - referenced(url)
    assert orphans  # the failed attempt wrote its SSTs before failing
    report = GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    assert {p.split("/", 1)[1][:-4] for p in report.deleted["sst"]} == orphans
    assert contents(url) == dict(data)


def test_speculation_a_losing_attempts_output_is_never_committed(spark, tmp_path):
    # Spark does not launch speculative copies on a single host, so each task here also
    # writes the SSTs a losing speculative attempt of its partition would have written.
    assert spark.sparkContext.getConf().get("spark.speculation") == "true"
    seed = test_seed()
    url = str(tmp_path / "db")
    data = rows(3000, random.Random(seed))
    shale_spark.ingest(
        kv_frame(spark, data), url, partitions=2, options={"testing.duplicate_attempt": "true"}
    )
    m = latest(url)
    assert len(m.data.runs) == 1 and len(m.data.runs[0].ssts) == 2
    orphans = sst_ids(url) - referenced(url)
    assert len(orphans) == 2
    GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    assert sst_ids(url) == referenced(url)
    assert contents(url) == dict(data)


def test_a_live_writer_is_fenced_and_ordered_before_the_ingest(spark, tmp_path):
    url = str(tmp_path / "db")
    db = Db.open(url, settings=QUIET)
    db.put(b"k1", b"writer")
    db.put(b"k2", b"writer")
    df = kv_frame(spark, [(b"k2", b"ingest"), (b"k3", b"ingest")], partitions=1)
    shale_spark.ingest(df, url)
    with pytest.raises(FencedError, match="took over"):
        db.put(b"k4", b"too late")
    db.close()
    assert contents(url) == {b"k1": b"writer", b"k2": b"ingest", b"k3": b"ingest"}


def test_ingest_behind_keeps_existing_values(spark, tmp_path):
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k1", b"current")
    df = kv_frame(spark, [(b"k1", b"history"), (b"k0", b"history")], partitions=1)
    rec = shale_spark.ingest(df, url, behind=True)
    assert rec.seq == 0
    assert contents(url) == {b"k0": b"history", b"k1": b"current"}


def test_duplicates_fail_the_job_unless_last_is_asked_for(spark, tmp_path):
    url = str(tmp_path / "db")
    df = spark.createDataFrame(
        [(b"k", b"1", 1), (b"k", b"3", 3), (b"k", b"2", 2)], "key binary, value binary, t int"
    )
    with pytest.raises(Exception, match="appears more than once"):
        shale_spark.ingest(df.select("key", "value"), url)
    assert latest(url).data.runs == ()  # nothing committed
    shale_spark.ingest(df, url, value="value", duplicates="last", order_by=["t"])
    assert contents(url) == {b"k": b"3"}


def test_unsupported_requests_fail_before_any_task(spark, tmp_path):
    url = str(tmp_path / "db")
    df = kv_frame(spark, [(b"a", b"1")], partitions=1)
    with pytest.raises(Exception, match="secondary index"):
        shale_spark.ingest(df, url, index_columns=["value"])
    with pytest.raises(Exception, match='mode\\("append"\\)'):
        df.write.format("shaledb").mode("overwrite").save(url)

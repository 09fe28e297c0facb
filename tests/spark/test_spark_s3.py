"""The Spark pipeline against a real S3 API (the session's moto server), reached only through options.

Executors open the store from the URL and the ``store.*`` options the job
carries (no ``AWS_*`` variables are set here), so a bulk ingest, a checkpoint
read, a Spark compaction and the checkpoint's release all have to pass the
endpoint and credentials along to every task.
"""

from __future__ import annotations

import random

import pytest
from spark_kit import kv_frame

from shaledb import Db, DbReader, DbReaderOptions, Settings, admin
from shaledb import spark as shale_spark
from shaledb.compaction import schedule
from shaledb.errors import NotFound
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")


def test_ingest_read_and_compact_on_s3(spark, s3_url_factory):
    seed = test_seed()
    rng = random.Random(seed)
    loc = s3_url_factory()
    url, sopts = loc.url, loc.options
    strs = {f"store.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in sopts.items()}
    data = {rng.randbytes(10): rng.randbytes(rng.randrange(1, 300)) for _ in range(3000)}

    rec = shale_spark.ingest(kv_frame(spark, list(data.items())), url, partitions=3, options=strs)
    assert rec.rows == len(data)
    m = admin.read_manifest(url, store_options=sopts)
    assert not m.data.l0 and len(m.data.runs) == 1 and len(m.data.runs[0].ssts) == 3

    # A second, overlapping run (so there is something to compact) and newer writes on top.
    newer = {k: b"second " + v[:5] for k, v in list(data.items())[::3]}
    shale_spark.ingest(kv_frame(spark, list(newer.items())), url, partitions=2, options=strs)
    data.update(newer)
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None), store_options=sopts) as db:
        for k in list(data)[::50]:
            db.put(k, b"live")
            data[k] = b"live"

    with shale_spark.read_checkpoint(spark, url, options=strs) as df:
        assert {r.key: r.value for r in df.collect()} == data
        assert len(admin.list_checkpoints(url, store_options=sopts)) == 1
    assert admin.list_checkpoints(url, store_options=sopts) == []  # released

    eager = CompactorOptions(min_l0_ssts=1, min_merge_runs=2)
    assert schedule(admin.read_manifest(url, store_options=sopts), eager) != []
    report = shale_spark.compact(spark, url, options=eager, until_settled=True, store_options=sopts)
    assert report.committed >= 1
    assert schedule(admin.read_manifest(url, store_options=sopts), eager) == []
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    with DbReader.open(url, options=opts, store_options=sopts) as r:
        assert dict(r.scan()) == data
    back = spark.read.format("shaledb").options(**strs).load(url)
    assert back.count() == len(data)


def test_a_failed_first_write_to_s3_leaves_no_object_behind(spark, s3_url_factory):
    """As on a local directory (test_spark_ingest_errors.py): the database a failed first write
    created is deleted again, so the prefix holds nothing and a read finds no database."""
    loc = s3_url_factory()
    url, sopts = loc.url, loc.options
    strs = {f"store.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in sopts.items()}
    dup = spark.createDataFrame([("a", "1"), ("a", "2"), ("b", "3")], "key string, value string").repartition(
        2
    )
    with pytest.raises(Exception, match="appears more than once"):
        dup.write.format("shaledb").mode("append").options(**strs).save(url)
    assert list(open_store(url, **sopts).list("")) == []
    with pytest.raises(NotFound, match="no database at"):
        admin.read_manifest(url, store_options=sopts)
    rec = shale_spark.ingest(
        spark.createDataFrame([("a", "1")], "key string, value string"), url, options=strs
    )
    assert rec.rows == 1


def test_create_table_on_a_missing_bucket_fails_at_once_and_makes_no_entry(spark, s3_url_factory):
    """CREATE TABLE ... OPTIONS (path 's3://typo/...') was accepted and the table's first query
    failed; as a Delta user expects, the statement itself fails now, naming the bucket, and
    leaves no catalog entry. A location with no database yet is still fine."""
    loc = s3_url_factory()
    store = ", ".join(
        f"store.{k} '{str(v).lower() if isinstance(v, bool) else v}'" for k, v in loc.options.items()
    )
    bucket = loc.url.split("/")[2]
    missing = loc.url.replace(f"s3://{bucket}/", "s3://no-such-bucket-here/")
    with pytest.raises(Exception) as err:
        spark.sql(f"CREATE TABLE typo_bucket USING shaledb OPTIONS (path '{missing}', {store})")
    assert "BucketNotFound: bucket 'no-such-bucket-here'" in str(err.value), str(err.value)
    assert not spark.catalog.tableExists("typo_bucket")
    spark.sql(f"CREATE TABLE fresh_s3 USING shaledb OPTIONS (path '{loc.url}', {store}, key_type 'string')")
    try:
        spark.sql("INSERT INTO fresh_s3 (key, value) VALUES ('a', X'31')")
        assert spark.sql("SELECT key FROM fresh_s3").first().key == "a"
    finally:
        spark.sql("DROP TABLE IF EXISTS fresh_s3")

"""Structured Streaming into a database (``writeStream.format("shaledb")``): each micro-batch
is one ingest, a replayed micro-batch writes nothing, complete mode replaces the contents, and
bad options fail when the query starts."""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from shaledb import Db, DbReader, InvalidArgument, Settings, admin
from shaledb.bulk.ingest import IngestConflict
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None)


def _contents(url: str, **store: Any) -> dict[bytes, bytes]:
    with DbReader.open(url, store_options=store or None) as r:
        return dict(r.scan())


def _stream(spark: Any, src: Path, url: str, ckpt: Path, **opts: str) -> Any:
    df = spark.readStream.schema("key string, value string").json(str(src))
    w = df.writeStream.format("shaledb").option("checkpointLocation", str(ckpt))
    for k, v in opts.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start(url)
    q.awaitTermination(180)
    return q


def _json(path: Path, rows: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"key": "{k}", "value": "{v}"}}\n' for k, v in rows.items()))


def test_a_stream_appends_each_micro_batch_and_a_restart_goes_on(spark: Any, tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    src, url, ckpt = tmp_path / "in", str(tmp_path / "db"), tmp_path / "ckpt"
    first = {f"k{rng.randrange(10**6):06d}": f"v{i}" for i in range(300)}
    _json(src / "a.json", first)
    q = _stream(spark, src, url, ckpt)
    assert q.exception() is None, q.exception()
    assert _contents(url) == {k.encode(): v.encode() for k, v in first.items()}, f"seed {seed}"

    second = {k: "new" for k in list(first)[:50]} | {"z-only": "1"}
    _json(src / "b.json", second)
    q = _stream(spark, src, url, ckpt)  # the same query restarted: only the new file
    assert q.exception() is None, q.exception()
    want = {k.encode(): v.encode() for k, v in (first | second).items()}
    assert _contents(url) == want, f"seed {seed}"
    m = admin.read_manifest(url)
    ids = [g.id for g in m.ingests]
    assert len(ids) == 2 and ids[0].endswith("-0") and ids[1].endswith("-1"), ids
    assert ids[0].rsplit("-", 1)[0] == ids[1].rsplit("-", 1)[0]  # one sink id per checkpoint location
    assert not list((Path(url) / "tmp").rglob("*.arrows"))  # staged runs deleted


def test_complete_mode_replaces_the_contents_with_each_micro_batch(spark: Any, tmp_path: Path) -> None:
    src, url, ckpt = tmp_path / "in", str(tmp_path / "db"), tmp_path / "ckpt"
    with Db.open(url, settings=QUIET) as db:
        db.put(b"stale", b"gone after the first micro-batch")
    _json(src / "a.json", {"a1": "x", "a2": "y", "b1": "z"})
    df = spark.readStream.schema("key string, value string").json(str(src))
    counts = df.selectExpr("substr(key, 1, 1) AS key").groupBy("key").count()
    out = counts.selectExpr("key", "CAST(count AS STRING) AS value")
    q = (
        out.writeStream.format("shaledb")
        .outputMode("complete")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(url)
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert _contents(url) == {b"a": b"2", b"b": b"1"}


def test_stream_options_are_checked_when_the_query_starts(spark: Any, tmp_path: Path) -> None:
    src, url = tmp_path / "in", str(tmp_path / "db")
    _json(src / "a.json", {"a": "1"})
    for opts, match in (
        ({"save_mode": "overwrite"}, "a stream has no save_mode"),
        ({"keycol": "key"}, "did you mean 'key'"),
        ({"key": "nope"}, "key column 'nope' is not in the DataFrame"),
    ):
        with pytest.raises(Exception, match=match):
            q = _stream(spark, src, url, tmp_path / f"ckpt-{len(match)}", **opts)
            raise q.exception() or AssertionError("started")
    assert not Path(url).exists()  # nothing was written or created


def _writer(url: str, overwrite: bool = False, **opts: str) -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    from shaledb.spark.source import ShaleDataSource

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    return ShaleDataSource({"path": url, **opts}).streamWriter(schema, overwrite)


def _batch(rows: dict[str, str]) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"key": list(rows), "value": list(rows.values())})]


def test_a_replayed_micro_batch_writes_nothing_and_a_reset_checkpoint_is_refused(tmp_path: Path) -> None:
    """Driven as Spark drives a sink (no JVM): tasks' write() then the driver's commit()."""
    url = str(tmp_path / "db")
    w = _writer(url, checkpointlocation=str(tmp_path / "ckpt"))
    w.commit([w.write(iter(_batch({"a": "1", "b": "2"}))), w.write(iter([]))], 0)
    m1 = admin.read_manifest(url)
    again = pickle.loads(pickle.dumps(w))  # Spark replays batch 0 after a crash: the same rows
    again.commit([again.write(iter(_batch({"b": "2"}))), again.write(iter(_batch({"a": "1"})))], 0)
    m2 = admin.read_manifest(url)
    assert m2.ingests == m1.ingests and {s.id for s in m2.all_ssts()} == {s.id for s in m1.all_ssts()}
    assert _contents(url) == {b"a": b"1", b"b": b"2"}
    w.commit([w.write(iter(_batch({"c": "3"})))], 1)
    with pytest.raises(IngestConflict, match="new checkpointLocation"):
        w.commit([w.write(iter(_batch({"a": "other"})))], 0)  # batch ids restarted, other rows
    assert _contents(url) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert not list((tmp_path / "db" / "tmp").rglob("*.arrows"))

    msgs = [w.write(iter(_batch({"d": "4"})))]
    assert list((tmp_path / "db" / "tmp").rglob("*.arrows"))
    w.abort(msgs, 2)  # a task failed: the staged runs go, nothing is committed
    assert not list((tmp_path / "db" / "tmp").rglob("*.arrows"))
    w.commit([w.write(iter([]))], 3)  # an empty micro-batch commits nothing
    assert admin.read_manifest(url).id == admin.read_manifest(url).id
    assert len(admin.read_manifest(url).ingests) == 2


def test_duplicate_keys_across_a_micro_batch_fail_it_and_write_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    w = _writer(url)
    w.commit([w.write(iter(_batch({"a": "1"})))], 0)
    with pytest.raises(InvalidArgument, match="appears more than once"):
        w.commit([w.write(iter(_batch({"k": "1"}))), w.write(iter(_batch({"k": "2"})))], 1)
    assert _contents(url) == {b"a": b"1"}
    assert not list((tmp_path / "db" / "tmp").rglob("*.arrows"))


def test_a_stream_into_s3(spark: Any, tmp_path: Path, s3_url_factory: Any) -> None:
    loc = s3_url_factory()
    strs = {f"store.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in loc.options.items()}
    src = tmp_path / "in"
    _json(src / "a.json", {f"k{i:03d}": f"v{i}" for i in range(100)})
    q = _stream(spark, src, loc.url, tmp_path / "ckpt", **strs)
    assert q.exception() is None, q.exception()
    assert len(_contents(loc.url, **loc.options)) == 100


def test_complete_mode_micro_batches_replace_and_an_empty_one_empties(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    w = _writer(url, overwrite=True)
    w.commit([w.write(iter(_batch({"a": "1", "b": "2"})))], 0)
    w.commit([w.write(iter(_batch({"c": "3"}))), w.write(iter([]))], 1)
    assert _contents(url) == {b"c": b"3"}
    w.commit([w.write(iter([]))], 2)  # the aggregate it stands for is empty now
    assert _contents(url) == {}

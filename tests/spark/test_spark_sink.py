"""Structured Streaming into a database (``writeStream.format("shaledb")``): each micro-batch
is one ingest, a replayed micro-batch writes nothing, complete mode replaces the contents, and
bad options fail when the query starts."""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, DbReader, InvalidArgument, NotFound, Settings, admin
from shaledb.bulk.ingest import IngestConflict
from shaledb.errors import BucketNotFound, DatabaseDestroyed
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

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
    assert not list((Path(url) / "compactions").glob("*.job"))  # and the tasks' leases


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


def test_to_table_is_refused_naming_the_way_that_works(spark: Any, tmp_path: Path) -> None:
    src, url = tmp_path / "in", str(tmp_path / "db")
    _json(src / "a.json", {"a": "1"})
    spark.sql(f"CREATE TABLE sunk USING shaledb OPTIONS (path '{url}', key_type 'string')")
    try:
        df = spark.readStream.schema("key string, value string").json(str(src))
        with pytest.raises(Exception, match=r"toTable\(\) cannot reach"):
            q = df.writeStream.option("checkpointLocation", str(tmp_path / "ckpt")).toTable("sunk")
            q.awaitTermination(120)
            raise q.exception() or AssertionError("started")
    finally:
        spark.sql("DROP TABLE IF EXISTS sunk")


def _schema() -> Any:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("key", StringType()), StructField("value", StringType())])


def _writer(url: str, overwrite: bool = False, **opts: str) -> Any:
    from shaledb.spark.source import ShaleDataSource

    return ShaleDataSource({"path": url, **opts}).streamWriter(_schema(), overwrite)


def _batch(rows: dict[str, str]) -> list[Any]:
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
    before = admin.read_manifest(url).id
    w.commit([w.write(iter([]))], 3)  # an empty micro-batch commits nothing (and claims nothing)
    assert admin.read_manifest(url).id == before
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


def test_a_wrong_bucket_or_a_destroyed_database_fails_when_the_query_starts(
    tmp_path: Path, s3_url_factory: Any
) -> None:
    """As a batch write does: before any task runs (the first task's error used to be the
    first word of it, inside Spark's own error lines)."""
    loc = s3_url_factory()
    strs = {f"store.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in loc.options.items()}
    wrong = "s3://no-such-bucket-here/" + loc.url.split("/", 3)[3]
    with pytest.raises(BucketNotFound, match="no-such-bucket-here"):
        _writer(wrong, **strs)
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    admin.destroy(url)
    with pytest.raises(DatabaseDestroyed):
        _writer(url)
    _writer(str(tmp_path / "new"))  # a database not there yet: the first micro-batch creates it
    assert not (tmp_path / "new").exists()


def test_complete_mode_micro_batches_replace_and_an_empty_one_empties(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    w = _writer(url, overwrite=True)
    w.commit([w.write(iter(_batch({"a": "1", "b": "2"})))], 0)
    w.commit([w.write(iter(_batch({"c": "3"}))), w.write(iter([]))], 1)
    assert _contents(url) == {b"c": b"3"}
    w.commit([w.write(iter([]))], 2)  # the aggregate it stands for is empty now
    assert _contents(url) == {}


STREAM_JOB = """
import sys
import shaledb.spark as shale_spark

src, url, ckpt = sys.argv[1:4]
spark = shale_spark.local_session("sink-crash", master="local[2]")
df = spark.readStream.option("maxFilesPerTrigger", 1).schema("key string, value string").json(src)
q = (df.writeStream.format("shaledb").option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start(url))
q.awaitTermination()
print("done", flush=True)
"""


def test_a_killed_stream_restarted_commits_each_micro_batch_once(tmp_path: Path) -> None:
    """The driver is killed (SIGKILL) in the middle of the stream; the restarted query replays
    what was in flight. Every micro-batch Spark committed has its ingest recorded once (a
    replayed one wrote nothing more), and the rows are all there."""
    import os
    import signal
    import subprocess
    import sys
    import time

    seed = test_seed()
    rng = random.Random(seed)
    src, url, ckpt = tmp_path / "in", str(tmp_path / "db"), str(tmp_path / "ckpt")
    want: dict[bytes, bytes] = {}
    for f in range(8):
        rows = {f"f{f}-{i:03d}": f"v{rng.randrange(1000)}" for i in range(50)}
        _json(src / f"part-{f}.json", rows)
        want |= {k.encode(): v.encode() for k, v in rows.items()}
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = [sys.executable, "-c", STREAM_JOB, str(src), url, ckpt]
    job = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if len(admin.read_manifest(url).ingests) >= 2 + rng.randrange(3):
                    break
            except NotFound:  # not created yet
                pass
            time.sleep(0.05)
        else:
            pytest.fail(f"the stream made no progress (seed {seed})")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(60)
    before = len(admin.read_manifest(url).ingests)
    assert before < 8, f"the stream ended before it was killed (seed {seed})"
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "done" in done.stdout, done.stderr[-3000:]
    ids = [g.id for g in admin.read_manifest(url).ingests]
    batches = sorted(int(i.rsplit("-", 1)[1]) for i in ids)
    # Spark may group the files left after the restart differently: what must hold is one
    # ingest per micro-batch Spark committed, and every row.
    committed = sorted(int(p.name) for p in (Path(ckpt) / "commits").iterdir() if p.name.isdigit())
    assert batches == committed == list(range(len(ids))), (ids, committed, seed)
    assert _contents(url) == want, f"seed {seed}"


def test_a_micro_batch_whose_staged_runs_were_collected_fails_saying_why(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    w = _writer(url)
    msgs = [w.write(iter(_batch({"a": "1"})))]
    for p in (tmp_path / "db" / "tmp").rglob("*.arrows"):
        p.unlink()  # what a GC pass does to runs once their lease lapsed
    with pytest.raises(NotFound, match="lease lapsed"):
        w.commit(msgs, 0)
    with pytest.raises(NotFound, match="no database at"):  # nothing committed: the database the
        admin.read_manifest(url)  # micro-batch created is gone again


def test_complete_mode_behind_existing_data_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot load behind"):
        _writer(str(tmp_path / "db"), overwrite=True, ingest_behind="true")


def test_an_ingest_id_prefix_too_long_for_its_batch_ids_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="ingest id"):
        _writer(str(tmp_path / "db"), ingest_id="x" * 190)


def test_micro_batches_are_compacted_as_they_come_unless_told_not_to(tmp_path: Path) -> None:
    """Each micro-batch adds a sorted run; the sink merges them by the compactor's policy."""
    for compact, most in (("true", 4), ("false", 12)):
        url = str(tmp_path / compact)
        w = _writer(url, compact=compact)
        model: dict[bytes, bytes] = {}
        for b in range(12):
            rows = {f"k{(b * 37 + i) % 200:03d}": f"v{b}" for i in range(40)}
            w.commit([w.write(iter(_batch(rows)))], b)
            model |= {k.encode(): v.encode() for k, v in rows.items()}
        runs = admin.read_manifest(url).data.runs
        print(f"compact={compact}: {len(runs)} sorted runs after 12 micro-batches")
        assert (len(runs) <= most) if compact == "true" else len(runs) == most, (compact, len(runs))
        assert _contents(url) == model
    from shaledb.spark.write import write_options

    with pytest.raises(InvalidArgument, match="option compact is for streams"):
        write_options(_schema(), {"path": url, "compact": "true"})


def test_a_change_stream_copied_into_another_database(spark: Any, tmp_path: Path) -> None:
    """docs/spark.md: the puts of one database's change stream, written by the sink into another."""
    from shaledb import spark as shale_spark

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with Db.open(a, settings=QUIET) as db:
        for i in range(60):
            db.put(b"k%02d" % i, b"v%d" % i, durable=False)
        db.put(b"k01", b"newer")
        db.flush()
        want = dict(db.scan())
    q = (
        shale_spark.read_changes(spark, a, max_changes_per_trigger=100)  # k01 twice in a micro-batch
        .filter("kind = 'put'")
        .select("key", "value", "seq", "batch_index")
        .writeStream.format("shaledb")
        .option("value", "value")
        .option("on_duplicate", "last")
        .option("order_by", "seq,batch_index")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start(b)
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert _contents(b) == want


def test_a_stream_behind_a_live_writer_neither_fences_it_nor_hides_its_writes(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"x", b"writer")
        db.flush()
        w = _writer(url, ingest_behind="true")
        w.commit([w.write(iter(_batch({"x": "stream", "y": "stream"})))], 0)
        db.put(b"z", b"writer again")  # not fenced
        db.refresh_manifest()
        assert db.get(b"x") == b"writer" and db.get(b"y") == b"stream"
        assert w.compact is False  # behind a writer, its compactor merges
    assert _contents(url) == {b"x": b"writer", b"y": b"stream", b"z": b"writer again"}

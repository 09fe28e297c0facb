"""The change feed as a Structured Streaming source: micro-batches between cursors, a
restarted query resumes from its checkpointed offset without repeating or missing a change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shaledb import CursorExpired, Db, GarbageCollector, GcOptions, InvalidArgument, Settings, WriteBatch
from shaledb import spark as shale_spark

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None)


def _run(spark: Any, url: str, out: Path, ckpt: Path) -> list[tuple[Any, ...]]:
    """Run the stream to the end of what is committed now, appending to parquet at ``out``."""
    q = (
        shale_spark.read_changes(spark, url, max_changes_per_trigger=40)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    rows = spark.read.parquet(str(out)).orderBy("seq", "batch_index").collect()
    return [
        (r.seq, r.batch_index, r.kind, bytes(r.key), None if r.value is None else bytes(r.value))
        for r in rows
    ]


def test_change_stream_resumes_from_its_offsets(spark: Any, tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    with Db.open(url, settings=QUIET) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v%d" % i, durable=False)
        db.write(WriteBatch().delete(b"k000").put(b"k001", b"batch"))
        first = _run(spark, url, out, ckpt)
        assert len(first) == 102
        for i in range(50):
            db.delete(b"k%03d" % (i + 10), durable=False)
        db.flush()
        want = [(c.seq, c.batch_index, c.kind, c.key, c.value) for c in db.changes(follow=False).read()]
    second = _run(spark, url, out, ckpt)  # a new query on the same checkpoint: only the new changes
    assert second == want and len(want) == 152


def test_stream_reader_offsets_without_a_session(tmp_path: Path) -> None:
    """The stream reader's offset protocol, driven as Spark drives it (no JVM needed): micro-batches
    between cursors cover every change once, respect the read limit and the AvailableNow target."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    from pyspark.sql.types import StructType

    from shaledb.spark.stream import CHANGES_SCHEMA, ShaleChangeStream

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(25):
            db.put(b"k%02d" % i, b"v", durable=False)
        db.write(WriteBatch().put(b"a", b"1").delete(b"k00").put(b"b", b"2"))
        db.flush()
        want = [(c.seq, c.batch_index) for c in db.changes(follow=False).read()]
        reader = ShaleChangeStream({"path": url, "maxChangesPerTrigger": "10"}, CHANGES_SCHEMA)
        assert reader.getDefaultReadLimit() == ReadMaxRows(10)
        start = reader.initialOffset()
        got: list[tuple[int, int]] = []
        sizes = []
        while True:
            end = reader.latestOffset(start, ReadMaxRows(10))
            if end == start:
                break
            rows = [r for p in reader.partitions(start, end) for r in reader.read(p)]
            sizes.append(len(rows))
            got += [(r[0], r[1]) for r in rows]
            reader.commit(end)
            start = end
        assert got == want and sizes == [10, 10, 8]
        # AvailableNow: the target is fixed when the query starts; later writes wait for the next query.
        reader.prepareForTriggerAvailableNow()
        db.put(b"late", b"1")
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        fresh = ShaleChangeStream({"path": url}, CHANGES_SCHEMA)
        end = fresh.latestOffset(start, ReadAllAvailable())
        rows = [r for p in fresh.partitions(start, end) for r in fresh.read(p)]
        assert [(r[3], bytes(r[4])) for r in rows] == [("put", b"late")]
        with pytest.raises(InvalidArgument, match="CHANGES_SCHEMA"):
            ShaleChangeStream({"path": url}, StructType(CHANGES_SCHEMA.fields[:-1]))


def test_change_stream_carries_range_ends_and_expiries(spark: Any, tmp_path: Path) -> None:
    """A consumer applying the stream needs a range delete's end key and a put's expiry
    (before, the rows had neither: a "delete_range" row could not be applied)."""
    url = str(tmp_path / "db")
    settings = Settings(compactor=None, garbage_collector=None, merge_operator="add_u64")
    with Db.open(url, settings=settings) as db:
        db.put(b"a", b"1")
        db.put(b"t", b"2", ttl=3600)
        db.merge(b"n", (5).to_bytes(8, "little"))
        db.delete_range(b"b", b"m")
        want = {c.kind: c for c in db.changes(follow=False).read()}
    q = (
        shale_spark.read_changes(spark, url)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    rows = {r.key: r for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert rows[b"b"].kind == "delete_range" and bytes(rows[b"b"].end) == b"m"
    assert want["put"].key == b"t" and want["put"].expires_at_ms is not None
    assert rows[b"t"].expires_at_ms == want["put"].expires_at_ms
    assert rows[b"a"].expires_at_ms is None and rows[b"a"].end is None
    assert rows[b"n"].kind == "merge" and bytes(rows[b"n"].value) == (5).to_bytes(8, "little")


def test_a_misspelled_stream_option_is_refused_naming_the_known_ones(spark: Any, tmp_path: Path) -> None:
    """``startCursor`` (for ``startingCursor``) used to be ignored: the stream replayed the whole feed."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    q = (
        spark.readStream.format("shaledb")
        .schema(shale_spark.stream.CHANGES_SCHEMA)
        .option("startCursor", "latest")
        .load(url)
        .writeStream.format("memory")
        .queryName("misspelled_stream_option")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
    )
    with pytest.raises(Exception, match=r"unknown shaledb stream option 'startcursor'.*'startingCursor'"):
        q.start().awaitTermination(60)


def test_a_stream_of_a_missing_database_fails_with_a_short_message(spark: Any, tmp_path: Path) -> None:
    """Spark prints a streaming source's Python traceback whole (hideTraceback does not reach
    it): our own errors come without the feed's internal frames."""
    with pytest.raises(Exception) as exc:
        q = (
            shale_spark.read_changes(spark, str(tmp_path / "missing"))
            .writeStream.format("console")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        raise q.exception() or AssertionError("the stream ran")
    text = str(exc.value)
    assert "NotFound: no database at" in text
    assert "engine/changes.py" not in text and "manifest/store.py" not in text, text
    assert not (tmp_path / "missing").exists()


def test_a_new_stream_starts_at_the_oldest_history_the_collector_left(tmp_path: Path) -> None:
    """Without startingCursor a stream starts at the oldest change the WAL still holds (as
    ``changes(since=None)`` does). Before, its initial offset was the cursor ``c1.1.0.0``, which
    names wal/1: once the collector had run, every new stream failed with CursorExpired."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from shaledb.spark.stream import CHANGES_SCHEMA, ShaleChangeStream

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(20):
            db.put(b"old%02d" % i, b"v")
        db.flush(memtable=True)
        for i in range(5):
            db.put(b"new%d" % i, b"v")
        with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
            assert gc.run_once().deleted["wal"]  # the old writes' WAL objects are gone
        want = [(c.seq, c.batch_index, c.key) for c in db.changes(follow=False).read()]
    assert [k for _, _, k in want] == [b"new%d" % i for i in range(5)]
    reader = ShaleChangeStream({"path": url}, CHANGES_SCHEMA)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = [r for p in reader.partitions(start, end) for r in reader.read(p)]
    assert [(r[0], r[1], r[4]) for r in rows] == want
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    empty = str(tmp_path / "empty")
    with Db.open(empty, settings=QUIET):
        pass
    fresh = ShaleChangeStream({"path": empty}, CHANGES_SCHEMA)
    start = fresh.initialOffset()  # no change yet: the end of the history, which the first write follows
    with Db.open(empty, settings=QUIET) as db:
        db.put(b"first", b"1")
    end = fresh.latestOffset(start, ReadAllAvailable())
    assert [r[4] for p in fresh.partitions(start, end) for r in fresh.read(p)] == [b"first"]
    # Every change collected: the start is past the collected gap, before the next write.
    with Db.open(empty, settings=QUIET) as db:
        db.flush(memtable=True)
    with GarbageCollector.open(empty, GcOptions(min_age_s=0)) as gc:
        assert gc.run_once().deleted["wal"]
    fresh = ShaleChangeStream({"path": empty}, CHANGES_SCHEMA)
    start = fresh.initialOffset()
    with Db.open(empty, settings=QUIET) as db:
        db.put(b"second", b"2")
    end = fresh.latestOffset(start, ReadAllAvailable())
    assert [r[4] for p in fresh.partitions(start, end) for r in fresh.read(p)] == [b"second"]


def test_a_stopped_stream_whose_offset_was_collected_fails_naming_it_and_the_way_out(tmp_path: Path) -> None:
    """A query stopped at its offset while the WAL objects it needs reached SSTs and were
    collected must fail, never skip them; and say so in the query's terms (its offset, a new
    checkpointLocation), where the feed's message only spoke of a cursor and a snapshot."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from shaledb.spark.stream import CHANGES_SCHEMA, ShaleChangeStream

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v")
        reader = ShaleChangeStream({"path": url}, CHANGES_SCHEMA)
        start = reader.initialOffset()
        stopped = reader.latestOffset(start, ReadAllAvailable())  # the query stops here
        for i in range(10):
            db.put(b"late%d" % i, b"v")
        db.flush(memtable=True)
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        assert gc.run_once().deleted["wal"]
    again = ShaleChangeStream({"path": url}, CHANGES_SCHEMA)  # the query restarted
    with pytest.raises(CursorExpired) as exc:
        again.latestOffset(stopped, ReadAllAvailable())
    text = str(exc.value)
    assert f"offset {stopped['cursor']}" in text and "garbage collector removed" in text, text
    assert "new checkpointLocation" in text and "wal_retention_s" in text, text
    # An executor reading a micro-batch planned before the collector ran says the same.
    (partition,) = again.partitions(stopped, {"cursor": "c1.99.99.0"})
    with pytest.raises(CursorExpired, match="new checkpointLocation"):
        list(again.read(partition))

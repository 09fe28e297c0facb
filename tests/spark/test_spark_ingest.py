"""Bulk ingest through the Spark data source: round trip, re-runs, failures, speculation, writers."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from spark_kit import contents, exists, kv_frame, latest, referenced, sst_ids

from shaledb import Db, FencedError, GarbageCollector, GcOptions, Settings
from shaledb import spark as shale_spark
from shaledb.bulk.ingest import commit_ingest
from shaledb.bulk.ingest.exchange import assign, choose_bounds
from shaledb.bulk.read import plan_read
from shaledb.compaction import schedule
from shaledb.errors import InvalidArgument
from shaledb.format import paths
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from shaledb.bulk.read_arrow import read_part_arrow  # noqa: E402
from shaledb.spark.schema import WriteOptions  # noqa: E402
from shaledb.spark.write import ShaleWriter, begin_write  # noqa: E402

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


def test_round_trip_fixed_width_keys_sorted_by_the_writer(spark, tmp_path):
    """16-byte keys (the writer's numpy sort), shuffled, with zero bytes and shared prefixes.

    No key repeats: a repeated key is an error unless ``on_duplicate`` names an ``order_by``
    (test_spark_sql.py); the sort's stability is tested in tests/ingest/test_ingest_sort.py.
    """
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys = [
        rng.randbytes(8) + bytes(8) if i % 3 else bytes(16 - i % 5) + b"\x01" * (i % 5) for i in range(3000)
    ]
    data = [(k, k[::-1] + b"v") for k in dict.fromkeys(keys)]
    rng.shuffle(data)
    df = spark.createDataFrame(data, "key binary, value binary").coalesce(1)
    shale_spark.ingest(df, url, partitions=2)
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
    assert not exists(url)  # nothing committed: the database the ingest created is gone
    shale_spark.ingest(df, url, value="value", duplicates="last", order_by=["t"])
    assert contents(url) == {b"k": b"3"}


def staged(url: str) -> list[str]:
    return [m.path for m in open_store(url).list(paths.STAGE_DIR)]


def test_both_exchanges_load_the_same_rows_and_leave_nothing_staged(spark, tmp_path):
    seed = test_seed()
    data = rows(4000, random.Random(seed))
    # Five input partitions of different sizes, keys in every one of them.
    df = kv_frame(spark, data, partitions=5)
    for exchange in ("store", "spark"):
        url = str(tmp_path / exchange)
        shale_spark.ingest(df, url, partitions=3, exchange=exchange)
        m = latest(url)
        assert len(m.data.runs) == 1 and len(m.data.runs[0].ssts) == 3 and m.data.l0 == ()
        assert contents(url) == dict(data)
        assert staged(url) == []
    # A failing job (duplicate keys) commits nothing and leaves nothing staged either.
    url = str(tmp_path / "dups")
    with pytest.raises(Exception, match="appears more than once"):
        shale_spark.ingest(kv_frame(spark, data + data[:3], partitions=2), url)
    assert not exists(url) and staged(url) == []  # the database the job created is gone
    with pytest.raises(InvalidArgument, match="order_by"):
        shale_spark.ingest(df, url, order_by=["value"], exchange="store")
    with pytest.raises(InvalidArgument, match="exchange"):
        shale_spark.ingest(df, url, exchange="hash")


def test_exchange_and_read_tasks_close_their_stores(tmp_path):
    """Spark reuses its Python workers: a task that kept a local store's descriptors open
    would hold deleted staged runs' (and collected SSTs') disk space, and leak descriptors,
    for the worker's life."""
    import pyarrow as pa

    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd")
    url = str(tmp_path / "db")
    cols = {"key": "binary", "value": "binary"}
    opts = WriteOptions.parse({"path": url, "key": "key", "value": "value"}, cols)
    w = ShaleWriter(opts, begin_write(opts))
    rng = random.Random(test_seed())
    keys = [rng.randbytes(8) for _ in range(6000)]
    halves = (keys[:3000], keys[3000:])
    inputs = [pa.RecordBatch.from_pydict({"key": ks, "value": [b"v" * 20] * 3000}) for ks in halves]
    runs = [run for b in inputs if (run := w.stage(iter([b]), w.plan.lease_id, 2)) is not None]
    parts = [w.gather(t) for t in assign(runs, choose_bounds(runs, 2))]
    assert sum(p.rows for p in parts) == 6000
    commit_ingest(w.plan, parts, url)
    plan = plan_read(url, partitions=2)
    got = [k for part in plan.parts for c in read_part_arrow(part, url) for k in c.keys.to_pylist()]
    assert got == sorted(keys)

    def target(fd: Path) -> str:
        try:
            return os.readlink(fd)
        except OSError:  # the listing's own descriptor is gone by now
            return ""

    assert [t for t in map(target, fds.iterdir()) if t.startswith(url)] == []


def test_empty_input_partitions_stage_nothing(spark, tmp_path):
    url = str(tmp_path / "db")
    data = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    df = kv_frame(spark, data, partitions=6)  # at least three input partitions are empty
    assert df.rdd.glom().map(len).collect().count(0) >= 3
    rec = shale_spark.ingest(df, url, partitions=2)
    assert rec.rows == 3 and contents(url) == dict(data) and staged(url) == []


def test_unsupported_requests_fail_before_any_task(spark, tmp_path):
    url = str(tmp_path / "db")
    df = kv_frame(spark, [(b"a", b"1")], partitions=1)
    with pytest.raises(Exception, match="did you mean 'ingest_behind'"):  # overwrite is a mode now
        df.write.format("shaledb").mode("overwrite").option("ingest_behnd", "true").save(url)
    assert not (tmp_path / "db").exists()


# ------------------------------------------------------------ index terms


def pairs(db: Db, field: str) -> set[tuple[bytes, bytes]]:
    """Every (term, key) of ``field`` in the index."""
    got = db.index_query(field, return_terms=True)
    assert len(got) == len(set(got))
    return set(got)


def expected_pairs(terms: dict[bytes, Any]) -> set[tuple[bytes, bytes]]:
    """(term, key) pairs of a column of str / list-of-str-or-None / None per key (empties: no term)."""
    out = set()
    for k, ts in terms.items():
        for t in [ts] if isinstance(ts, str) else ts or ():
            if t:
                out.add((t.encode(), k))
    return out


def term_rows(rng: random.Random, n: int) -> dict[bytes, tuple[str | None, list[str | None] | None]]:
    """Per key: a destination (sometimes null or empty) and a tag array (null, empty, null elements)."""
    out = {}
    for i in range(n):
        dest = rng.choice(["LAX", "SFO", "JFK", "BOS", "ÅRE", None, ""])
        tags = (
            None
            if rng.random() < 0.15
            else [rng.choice(["a", "b", "c", "dd", None, ""]) for _ in range(rng.randrange(0, 4))]
        )
        out[b"k%05d" % i] = (dest, tags)
    return out


def test_index_columns_write_exactly_the_terms_of_each_row(spark, tmp_path):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    terms = term_rows(rng, 3000)
    rows = [(k.decode(), d, t, rng.randrange(100)) for k, (d, t) in terms.items()]
    rng.shuffle(rows)  # each task sorts its partition (no order_by): terms must follow their rows
    df = spark.createDataFrame(rows, "key string, dest string, tags array<string>, n int").repartition(3)
    rec = shale_spark.ingest(df, url, index_columns=["dest", "tags"], partitions=3)
    assert rec.rows == 3000
    with Db.open(url, settings=QUIET) as db:
        assert pairs(db, "dest") == expected_pairs({k: d for k, (d, _) in terms.items()})
        assert pairs(db, "tags") == expected_pairs({k: t for k, (_, t) in terms.items()})
        lax = sorted(k for k, (d, _) in terms.items() if d == "LAX")
        assert db.index_query("dest", b"LAX", b"LAX\x00") == lax
        are = sorted(k for k, (d, _) in terms.items() if d == "ÅRE")
        assert db.index_query("dest", "ÅRE".encode(), "ÅRE\x00".encode()) == are
        k, (d, t) = next((k, v) for k, v in terms.items() if v[0] and v[1] and "a" in v[1])
        h = db.head(k)
        assert h is not None and h.indexes["dest"] == (d.encode(),)
        assert h.indexes["tags"] == tuple(sorted({x.encode() for x in t if x}))
        # The index columns stay part of the JSON value built from the other columns.
        value = json.loads(db.get(k) or b"")
        assert value["dest"] == d and value["tags"] == t and set(value) == {"dest", "tags", "n"}


def test_index_terms_of_the_last_duplicate_win(spark, tmp_path):
    url = str(tmp_path / "db")
    df = spark.createDataFrame(
        [("k", "v1", "A", 1), ("k", "v3", "C", 3), ("k", "v2", "B", 2), ("j", "w", None, 1)],
        "key string, value string, dest string, t int",
    )
    shale_spark.ingest(df, url, value="value", index_columns=["dest"], duplicates="last", order_by=["t"])
    with Db.open(url, settings=QUIET) as db:
        assert db.get(b"k") == b"v3"
        assert db.index_query("dest", return_terms=True) == [(b"C", b"k")]


def test_a_second_ingest_replaces_terms_and_leaves_none_stale(spark, tmp_path):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    first = term_rows(rng, 2000)
    df1 = spark.createDataFrame(
        [(k, d, t) for k, (d, t) in first.items()], "key binary, dest string, tags array<string>"
    )
    shale_spark.ingest(df1, url, index_columns=["dest", "tags"], partitions=3)
    # Half the keys again with new terms for dest only (tags keep theirs), and some new keys.
    changed = {k: rng.choice(["SEA", "LAX", None, ""]) for k in rng.sample(sorted(first), 1000)}
    changed.update({b"new%03d" % i: "SEA" for i in range(50)})
    df2 = spark.createDataFrame(list(changed.items()), "key binary, dest string").repartition(2)
    shale_spark.ingest(df2, url, index_columns=["dest"], partitions=2)
    dest = {k: d for k, (d, _) in first.items()} | changed
    tags = {k: t for k, (_, t) in first.items()}
    with Db.open(url, settings=QUIET) as db:
        assert pairs(db, "dest") == expected_pairs(dest)
        assert pairs(db, "tags") == expected_pairs(tags)
        assert db.index_query("dest", b"SEA", b"SEA\x00") == sorted(k for k, d in dest.items() if d == "SEA")
        db.delete(b"new000")
        db.put(next(iter(changed)), b"plain put keeps the terms")
    # A third, plain ingest into a database with terms (the writer takes the row path): terms kept.
    some = sorted(first)[:100]
    shale_spark.ingest(kv_frame(spark, [(k, b"plain") for k in some], partitions=2), url)
    dest.pop(b"new000")
    with Db.open(url, settings=QUIET) as db:
        assert pairs(db, "dest") == expected_pairs(dest)
        assert pairs(db, "tags") == expected_pairs(tags)
        assert all(db.get(k) == b"plain" for k in some)


def test_value_separation_threshold_puts_large_values_in_the_journal(spark, tmp_path):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    data = {rng.randbytes(10): rng.randbytes(rng.choice([100, 2000, 5000])) for _ in range(300)}
    df = kv_frame(spark, list(data.items()), partitions=2)
    shale_spark.ingest(df, url, partitions=2, value_separation_threshold=1024)
    with Db.open(url, settings=QUIET) as db:
        for k, v in data.items():
            h = db.head(k)
            assert h is not None and h.in_journal == (len(v) >= 1024) and h.value_size == len(v)
            assert db.get(k) == v
    assert contents(url) == data
    back = spark.read.format("shaledb").load(url).collect()
    assert {r.key: r.value for r in back} == data


def test_invalid_index_and_journal_options_fail_before_any_task(spark, tmp_path):
    url = str(tmp_path / "db")
    df = spark.createDataFrame(
        [("a", 1, ["x"], [1], "LAX")], "key string, n int, tags array<string>, nums array<int>, dest string"
    )
    cases = [
        ({"index_columns": "n"}, "index column 'n' must be string, binary or an array of them, not int"),
        ({"index_columns": "nums"}, "index column 'nums' must be string, binary .* not array<int>"),
        ({"index_columns": "dest,nope"}, "index column 'nope' is not in the DataFrame"),
        ({"index_columns": "dest,dest"}, "names a column twice"),
        (
            {"value_separation_threshold": "0"},
            "value_separation_threshold must be an integer number of bytes, >= 1",
        ),
        (
            {"value_separation_threshold": "nan"},
            "value_separation_threshold must be an integer number of bytes",
        ),
        ({"value_separation_threshold": "big"}, "value_separation_threshold must be an integer"),
        ({"index_columns": "tags", "ingest_behind": "true"}, "behind existing data cannot write index terms"),
    ]
    for opts, message in cases:
        with pytest.raises(Exception, match=message) as info:
            df.write.format("shaledb").mode("append").options(**opts).save(url)
        assert "InvalidArgument" in str(info.value), opts
    assert not (tmp_path / "db").exists()

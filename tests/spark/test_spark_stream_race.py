"""A batch write racing a streaming write into the same database (two Spark jobs of one
session): every ingest claims the database, so each write either lands whole or fails with
``IngestFenced`` and leaves nothing of itself; a stream so failed, restarted, lands every row."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from spark_kit import contents

from shaledb import NotFound, admin
from shaledb.testing.seeds import test_seed

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")


def test_a_batch_write_racing_a_stream_lands_whole_or_fails_typed(spark: Any, tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    src, url, ckpt = tmp_path / "in", str(tmp_path / "db"), tmp_path / "ckpt"
    src.mkdir()
    stream_rows: dict[bytes, bytes] = {}
    for f in range(10):
        rows = {f"s{f}-{i:03d}": f"v{rng.randrange(1000)}" for i in range(30)}
        (src / f"part-{f}.json").write_text(
            "".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows.items())
        )
        stream_rows |= {k.encode(): v.encode() for k, v in rows.items()}

    def start() -> Any:
        df = (
            spark.readStream.option("maxFilesPerTrigger", 1).schema("key string, value string").json(str(src))
        )
        return (
            df.writeStream.format("shaledb")
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start(url)
        )

    batches: list[dict[bytes, bytes]] = []
    outcomes: list[BaseException | None] = []

    def stream_started() -> bool:
        try:
            return any(g.id.startswith("stream-") for g in admin.read_manifest(url).ingests)
        except NotFound:
            return False

    def batch_writes() -> None:
        deadline = time.monotonic() + 120
        while not stream_started() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.5))
        for j in range(3):
            rows = {f"b{j}-{i:03d}": f"w{j}" for i in range(rng.randrange(20, 200))}
            batches.append({k.encode(): v.encode() for k, v in rows.items()})
            df = spark.createDataFrame(list(rows.items()), "key string, value string").repartition(2)
            try:
                df.write.format("shaledb").mode("append").save(url)
                outcomes.append(None)
            except Exception as exc:  # checked below
                outcomes.append(exc)

    q = start()
    t = threading.Thread(target=batch_writes)
    t.start()
    t.join(180)
    q.awaitTermination(180)
    restarts = 0
    while q.exception() is not None:
        assert "IngestFenced" in str(q.exception()), q.exception()
        restarts += 1
        assert restarts <= 3, f"seed {seed}"
        q = start()  # the same query restarted: goes on where Spark's commit log stopped
        q.awaitTermination(180)
    got = contents(url)
    print(f"stream restarts {restarts}; batch writes: {[type(o).__name__ if o else 'ok' for o in outcomes]}")
    for rows, outcome in zip(batches, outcomes, strict=True):
        landed = [k for k in rows if got.get(k) == rows[k]]
        if outcome is None:
            assert len(landed) == len(rows), f"seed {seed}: a batch write that succeeded is not all there"
        else:
            assert "IngestFenced" in str(outcome) and "nothing was" in str(outcome), outcome
            assert not landed, f"seed {seed}: a failed batch write left {len(landed)} of its rows"
    assert {k: v for k, v in got.items() if k.startswith(b"s")} == stream_rows, f"seed {seed}"
    ids = [g.id for g in admin.read_manifest(url).ingests]
    stream_ids = sorted(int(i.rsplit("-", 1)[1]) for i in ids if i.startswith("stream-"))
    assert stream_ids == list(range(len(stream_ids))), (ids, seed)  # each micro-batch once
    db = Path(url)
    assert not list((db / "compactions").glob("*.job")), seed  # every lease dropped, fenced or not
    assert not list((db / "tmp").rglob("*.arrows")), seed  # and every staged run

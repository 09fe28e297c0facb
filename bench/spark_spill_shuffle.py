"""Experiment: bulk ingest with the range shuffle done through files instead of Spark's shuffle.

    .venv/bin/python bench/spark_spill_shuffle.py [--rows 1000000] [--repeat 3] [--out r.json]

Why it exists: ``bench/spark_ingest.py`` shows Spark's range partitioning plus
the Arrow hand-over to Python (``shuffle_floor_s``) already costs 1.5-1.6x a
whole ``df.write.parquet``. This measures the one alternative that skips
Spark's shuffle, so the 2x question rests on a figure and not a guess:

1. sample the keys on the driver and choose range bounds;
2. one ``mapInArrow`` job: each task splits its rows by range with Arrow
   kernels and writes one uncompressed Arrow IPC file per range;
3. one job of a task per range: memory-map that range's files, concatenate,
   sort with Arrow, ``PartWriter.add_arrow``;
4. ``commit_ingest`` on the driver (a real ingest: one sorted run, settled).

Against ``shale_spark.ingest`` and ``df.write.parquet``, alternately, on the
same cached DataFrame as ``spark_ingest.py``; best of ``--repeat``. Local
directory only (the spill files are a scratch directory on this machine).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shaledb import admin
from shaledb import spark as shale_spark
from shaledb.bulk.ingest import IngestPart, PartWriter, begin_ingest, commit_ingest, open_ingest_store
from spark_ingest import bench_frame, settled


def spill_ingest(spark: Any, df: Any, url: str, scratch: str, ranges: int) -> dict[str, float]:
    """Ingest ``df`` into ``url`` through spill files; the time of each step."""
    t0 = time.perf_counter()
    plan = begin_ingest(url)
    sample = sorted(r[0] for r in df.select("key").sample(0.002, seed=1).collect())
    bounds = [bytes(sample[len(sample) * j // ranges]) for j in range(1, ranges)]
    t1 = time.perf_counter()
    os.makedirs(scratch)

    def split(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.ipc as ipc

        table = pa.Table.from_batches(list(batches))
        keys = table.column("key")
        which = None  # the range of each row: how many bounds its key is at or above
        for b in bounds:
            above = pc.cast(pc.greater_equal(keys, pa.scalar(b, pa.binary())), pa.int8())
            which = above if which is None else pc.add(which, above)
        tag = uuid.uuid4().hex
        for r in range(ranges):
            part = table if which is None else table.filter(pc.equal(which, r))
            with ipc.new_file(f"{scratch}/{r}-{tag}.arrow", part.schema) as w:
                w.write_table(part)
        yield pa.RecordBatch.from_pydict({"rows": [table.num_rows]})

    df.mapInArrow(split, "rows long").collect()
    t2 = time.perf_counter()

    def write(rs: Iterator[int]) -> Iterator[IngestPart]:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.ipc as ipc

        store = open_ingest_store(url)
        for r in rs:
            files = glob.glob(f"{scratch}/{r}-*.arrow")
            table = pa.concat_tables(
                ipc.open_file(pa.memory_map(f)).read_all() for f in files
            ).combine_chunks()
            keys, values = table.column("key").chunk(0), table.column("value").chunk(0)
            order = pc.array_sort_indices(keys)
            w = PartWriter(store, plan, r)
            w.add_arrow(keys.take(order), values.take(order))
            yield w.finish()

    parts = spark.sparkContext.parallelize(range(ranges), ranges).mapPartitions(write).collect()
    t3 = time.perf_counter()
    commit_ingest(plan, parts, url)
    t4 = time.perf_counter()
    shutil.rmtree(scratch)
    return {
        "sample_s": t1 - t0,
        "split_s": t2 - t1,
        "write_s": t3 - t2,
        "commit_s": t4 - t3,
        "total_s": t4 - t0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shaledb-spill-bench-"))
    spark = shale_spark.local_session(
        "shaledb-spill-bench", master="local[2]", conf={"spark.driver.memory": "2g"}
    )
    ranges = int(spark.conf.get("spark.sql.shuffle.partitions") or "2")
    df = bench_frame(spark, args.rows)
    times: dict[str, list[float]] = {"parquet_write_s": [], "ingest_s": [], "spill_ingest_s": []}
    steps: list[dict[str, float]] = []
    for r in range(-1, args.repeat):  # round -1 is the warm-up
        t = time.perf_counter()
        df.write.mode("overwrite").parquet(str(work / "parquet"))
        parquet = time.perf_counter() - t
        t = time.perf_counter()
        shale_spark.ingest(df, str(work / f"shuffle-{r}"))
        ingest = time.perf_counter() - t
        url = str(work / f"spill-{r}")
        s = spill_ingest(spark, df, url, str(work / f"scratch-{r}"), ranges)
        m = admin.read_manifest(url)
        assert settled(url) and len(m.data.runs) == 1 and not m.data.l0
        assert sum(i.entries for i in m.data.ssts()) == args.rows
        if r >= 0:
            times["parquet_write_s"].append(parquet)
            times["ingest_s"].append(ingest)
            times["spill_ingest_s"].append(s["total_s"])
            steps.append(s)
        shutil.rmtree(work / f"shuffle-{r}", ignore_errors=True)
        shutil.rmtree(url, ignore_errors=True)
    res: dict[str, Any] = {k: min(v) for k, v in times.items()}
    res["spill_steps_of_best"] = min(steps, key=lambda s: s["total_s"])
    res["ingest_vs_parquet"] = res["ingest_s"] / res["parquet_write_s"]
    res["spill_ingest_vs_parquet"] = res["spill_ingest_s"] / res["parquet_write_s"]
    res.update(rows=args.rows, ranges=ranges, cpus=os.cpu_count(), python=sys.version.split()[0])
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

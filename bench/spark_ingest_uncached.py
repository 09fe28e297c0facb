"""Spark benchmark: bulk ingest of an uncached input, through the store and through Spark's shuffle.

    .venv/bin/python bench/spark_ingest_uncached.py [--rows 1000000] [--repeat 5]

Writes the benchmark's rows (``spark_ingest.bench_frame``: 16-byte keys,
100-byte values) as Parquet once, then, on ``spark.read.parquet`` of them
(nothing cached, as in a pipeline that loads a table), alternates
``repeat + 1`` rounds of: a Parquet-to-Parquet copy, ``shale_spark.ingest``
with ``exchange="store"`` and with ``exchange="spark"`` (the first round is a
warm-up). Spark's range partitioning reads such an input twice (its sampling
job runs the upstream); the store exchange reads it once. Prints best and
median of each.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time

from shaledb import spark as shale_spark
from spark_ingest import bench_frame


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    spark = shale_spark.local_session("shaledb-bench-uncached", conf={"spark.driver.memory": "2g"})
    work = tempfile.mkdtemp(prefix="shaledb-bench-uncached-")
    try:
        bench_frame(spark, args.rows).write.parquet(f"{work}/input")
        spark.catalog.clearCache()
        df = spark.read.parquet(f"{work}/input")
        times: dict[str, list[float]] = {"parquet copy": [], "ingest, store": [], "ingest, spark": []}
        for r in range(args.repeat + 1):
            for name, runs in times.items():
                t = time.perf_counter()
                if name == "parquet copy":
                    df.write.mode("overwrite").parquet(f"{work}/copy")
                else:
                    exchange = name.split(", ")[1]
                    shale_spark.ingest(df, f"{work}/db-{exchange}", exchange=exchange)
                if r:
                    runs.append(time.perf_counter() - t)
            for d in ("store", "spark"):
                shutil.rmtree(f"{work}/db-{d}", ignore_errors=True)
        base = min(times["parquet copy"])
        for name, ts in times.items():
            print(
                f"{name:14s} best {min(ts):.3f} s ({min(ts) / base:.2f}x)  median {statistics.median(ts):.3f} s",
                flush=True,
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

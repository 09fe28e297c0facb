"""What one micro-batch of the Spark stream sink costs on S3-like latency, beside a plain ingest.

The sink (``shaledb.spark.sink``) turns each micro-batch into one ingest: the tasks stage
their rows (one PUT each), the commit reads them back, writes the SSTs, claims and commits
(manifest CASes), deletes the staged runs and, with ``compact=true``, reads the manifest
to ask the compactor's policy and compacts when it says so. The baseline is the same rows
loaded by ``shaledb.bulk.ingest.ingest_columns`` (claim, SSTs, commit: no staging, no
compaction), so the difference is what the stream adds.

The sink is driven as Spark drives it (``write`` per task, then ``commit``), in this process
and without a JVM, so the figures are the sink's own and not Spark's scheduling. Requests go
through ``delay_proxy.DelayProxy`` in front of a local moto server, which waits
``--latency-ms`` before forwarding each one and counts them by method. Variants run
interleaved, each repeat on fresh databases; medians per micro-batch.

    PYTHONPATH=$PWD/src .venv/bin/python bench/stream_sink.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

VARIANTS = ("ingest", "sink", "sink_compact")


def batch_rows(rng: random.Random, rows: int) -> dict[str, str]:
    return {f"k{rng.randrange(10**8):08d}": "v" * 100 for _ in range(rows)}


def run_variant(
    variant: str, url: str, batches: int, rows: int, seed: int, endpoint: str
) -> list[dict[str, float]]:
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from delay_proxy import read_stats
    from shaledb.bulk.ingest import ingest_columns
    from shaledb.spark.source import ShaleDataSource

    rng = random.Random(seed)
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    writer = None
    if variant != "ingest":
        compact = "true" if variant == "sink_compact" else "false"
        writer = ShaleDataSource({"path": url, "compact": compact}).streamWriter(schema, False)
    out = []
    for b in range(batches):
        data = batch_rows(rng, rows)
        before = read_stats(endpoint)
        t0 = time.perf_counter()
        if writer is None:
            ks = sorted(k.encode() for k in data)
            ingest_columns(url, ks, [data[k.decode()].encode() for k in ks], ingest_id=f"b{b}")
            t1 = t0
        else:
            batch = pa.RecordBatch.from_pydict({"key": list(data), "value": list(data.values())})
            msg = writer.write(iter([batch]))
            t1 = time.perf_counter()
            writer.commit([msg], b)
        t2 = time.perf_counter()
        after = read_stats(endpoint)
        got = {m: after.get(m, 0) - before.get(m, 0) for m in set(after) | set(before)}
        out.append(
            {
                "task_s": t1 - t0,
                "commit_s": t2 - t1,
                "total_s": t2 - t0,
                **{f"req_{m}": float(n) for m, n in got.items()},
                "requests": float(sum(got.values())),
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batches", type=int, default=12, help="micro-batches per database")
    ap.add_argument(
        "--rows", type=int, default=1000, help="rows per micro-batch (16-byte keys, 100-byte values)"
    )
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(f"seed={args.seed} load={os.getloadavg()}", flush=True)
    from delay_proxy import DelayProxy
    from engines import MotoServer

    moto = MotoServer("stream-sink")
    proxy = DelayProxy(moto.endpoint, args.latency_ms / 1000)
    endpoint = proxy.start()
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    try:
        for r in range(args.repeat):
            k = r % len(VARIANTS)
            for v in VARIANTS[k:] + VARIANTS[:k]:
                url = f"s3://{moto.bucket}/{v}-{r}"
                got = run_variant(v, url, args.batches, args.rows, args.seed + r, endpoint)
                runs[v].extend(got[1:])  # the first creates the database
                med = statistics.median(x["total_s"] for x in got[1:])
                print(f"repeat {r} {v}: median micro-batch {med * 1000:.0f} ms", flush=True)
    finally:
        proxy.stop()
        moto.stop()
    rt = args.latency_ms / 1000
    print(f"\nper micro-batch of {args.rows} rows, medians over {args.repeat} repeats x {args.batches - 1}:")
    print(
        "| variant | wall ms | round trips | of which tasks (ms) | requests | GET | PUT | DELETE | HEAD | POST |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    report = {}
    for v in VARIANTS:
        xs = runs[v]

        def med(name: str, xs: list[dict[str, float]] = xs) -> float:
            return statistics.median(x.get(name, 0.0) for x in xs)

        report[v] = {
            n: med(n)
            for n in (
                "total_s",
                "task_s",
                "requests",
                "req_GET",
                "req_PUT",
                "req_DELETE",
                "req_HEAD",
                "req_POST",
            )
        }
        row = report[v]
        print(
            f"| {v} | {row['total_s'] * 1000:.0f} | {row['total_s'] / rt:.1f} | {row['task_s'] * 1000:.0f} | "
            f"{row['requests']:.0f} | {row['req_GET']:.0f} | {row['req_PUT']:.0f} | {row['req_DELETE']:.0f} | "
            f"{row['req_HEAD']:.0f} | {row['req_POST']:.0f} |"
        )
    base = report["ingest"]["total_s"]
    for v in VARIANTS[1:]:
        print(f"{v} / ingest wall time: {report[v]['total_s'] / base:.2f}x")
    print(json.dumps({"args": vars(args), "medians": report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

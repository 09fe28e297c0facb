"""CLI: ``verify`` (checksums, tracked WALs, references) and ``bench`` (a quick load test)."""

from __future__ import annotations

import argparse
import os
import random
import time

from .. import Db, WriteBatch
from ..admin.verify import verify
from ..numbers import check_int, counted, human_size
from ..store.wrappers import InstrumentedStore
from .more import bench_guard
from .output import EXIT_ERROR, Output, command, id_list
from .settings import cli_settings


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shallow",
        action="store_true",
        help="check existence and sizes only (no object is read in full)",
    )


@command("verify", "check every referenced object: existence, sizes, checksums, tracked WALs")(_verify_args)
def verify_cmd(args: argparse.Namespace, out: Output) -> int | None:
    with out.progress("verify", unit="" if args.shallow else "bytes") as progress:
        report = verify(args.path, deep=not args.shallow, progress=progress)
    if out.as_json:
        out.emit(report.as_dict())
    else:
        out.line(
            f"manifests {id_list(report.manifests)}: {counted(report.ssts, 'SST')}, "
            f"{counted(report.journal_objects, 'journal object')}, "
            f"{counted(report.wal_objects, 'WAL object')}, "
            f"{human_size(report.bytes_read)} read"
        )
        for p in report.problems:
            out.line(f"PROBLEM {p}")
        out.line("ok" if report.ok else f"{len(report.problems)} problem(s)")
    return None if report.ok else EXIT_ERROR


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keys", type=int, default=100_000, help="keys to write and read (default 100000)")
    p.add_argument("--value-size", type=int, default=100, help="value bytes (default 100)")
    p.add_argument("--batch", type=int, default=100, help="keys per write batch (default 100)")
    p.add_argument(
        "--durable",
        action="store_true",
        help="wait for durability on every batch (measures the store's latency)",
    )
    p.add_argument(
        "--scratch-prefix",
        metavar="PREFIX",
        help="on a database holding data: write the bench keys under PREFIX (unused) and delete them after",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="bench an existing database although opening its writer fences a running writer",
    )


@command(
    "bench",
    "a quick load test of the store at --path: write, flush, read back (a new location; "
    "an existing database needs --force and, if it holds data, --scratch-prefix)",
)(_bench_args)
def bench_cmd(args: argparse.Namespace, out: Output) -> int | None:
    n = check_int("--keys", args.keys, minimum=1, maximum=10**9)
    # 97 distinct values are kept in memory: 1 MiB each at most.
    vs = check_int("--value-size (bytes)", args.value_size, minimum=0, maximum=1 << 20)
    batch = check_int("--batch", args.batch, minimum=1, maximum=10**6)
    prefix = bench_guard(args.path, args.scratch_prefix, args.force)
    rng = random.Random(1)
    keys = [prefix + b"%012d" % i for i in range(n)]
    rng.shuffle(keys)
    values = [os.urandom(vs) for _ in range(97)]
    results: dict[str, object] = {"keys": n, "value_size": vs, "batch": batch}
    with Db.open(args.path, settings=cli_settings(args, flush_interval_s=0.01)) as db:
        t = time.perf_counter()
        for i in range(0, n, batch):
            b = WriteBatch()
            for j, k in enumerate(keys[i : i + batch]):
                b.put(k, values[(i + j) % 97])
            db.write(b, durable=args.durable)
        db.flush()
        dt = time.perf_counter() - t
        results["write_ops_per_s"] = round(n / dt)
        t = time.perf_counter()
        db.flush(memtable=True)
        results["memtable_flush_s"] = round(time.perf_counter() - t, 3)
        sample = keys[: min(n, 20_000)]
        t = time.perf_counter()
        for k in sample:
            db.get(k)
        results["read_ops_per_s"] = round(len(sample) / (time.perf_counter() - t))
        inner = getattr(db.store, "inner", None)
        stats = inner.snapshot() if isinstance(inner, InstrumentedStore) else None
        if args.scratch_prefix is not None:  # leave the database as it was
            for i in range(0, n, 1000):
                b = WriteBatch()
                for k in keys[i : i + 1000]:
                    b.delete(k)
                db.write(b, durable=False)
            db.flush()
    if stats is not None:
        requests = dict(stats.requests)  # every kind in JSON; only the ones made, for people
        results["store_requests"] = requests if out.as_json else {k: n for k, n in requests.items() if n}
        results["store_bytes_written"] = stats.bytes_written
    out.emit(results)
    return None

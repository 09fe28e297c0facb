#!/usr/bin/env python3
"""Compaction benchmark: space, read speed and write amplification under overwrites.

    .venv/bin/python bench/compaction.py [--puts 1000000] [--keys 100000] [--value-size 100]
                                         [--l0-sst-size-mib 8] [--dir DIR] [--json]

1. Writes ``--puts`` random overwrites of ``--keys`` 16-byte keys (``--value-size``-byte
   values, ``durable=False``, then one flush) into a local directory with the writer's
   embedded compactor and garbage collector running.
2. *Settles*: flushes the memtable, then waits until the embedded compactor's last pass
   found nothing to do and the manifest has stopped changing for a second; closes the
   writer (which drops its view checkpoints) and runs one GC pass with ``min_age_s=0``.
   "Stored bytes" are then every object under the directory (SSTs, manifests, WAL
   fences); "live data" is ``keys x (16 + value_size)``.
3. Copies the settled directory and compacts the copy into one sorted run with a
   standalone compactor ("fully compacted"), timing that merge (MB/s of input SSTs).
4. readrandom on both (existing keys, uniform; each round reopens the database, so
   the block cache starts cold), alternating which goes first, ``--rounds`` rounds
   each; the median is reported.

Write amplification is the store's ``bytes_written`` (``InstrumentedStore`` under the
writer's ``RetryingStore``: WAL, L0 SSTs, compaction outputs, manifests, leases) divided
by the bytes put (``puts x (16 + value_size)``), counted up to the end of settling.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import shaledb
from shaledb import CompactorOptions, Db, GarbageCollector, GcOptions, Settings
from shaledb.compaction import Compactor, EmbeddedCompactor
from workloads import disk_usage, read_rate, settle

MB = 1e6


def shape(db: Db) -> str:
    t = db.manifest.data
    runs = ", ".join(f"{len(r.ssts)} SSTs/{r.size / MB:.1f} MB" for r in t.runs)
    return f"{len(t.l0)} L0 ({sum(s.size for s in t.l0) / MB:.1f} MB), runs [{runs}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--l0-sst-size-mib", type=float, default=8.0, help="Settings.l0_sst_size_bytes in MiB")
    ap.add_argument("--reads", type=int, default=100_000, help="gets per readrandom round")
    ap.add_argument("--rounds", type=int, default=5, help="readrandom rounds per database (median)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args()

    scratch = args.dir or tempfile.mkdtemp(prefix="shaledb-bench-compaction-")
    path = os.path.join(scratch, "db")
    full = os.path.join(scratch, "db-fully-compacted")
    for p in (path, full):
        shutil.rmtree(p, ignore_errors=True)
    compactor_opts = CompactorOptions(poll_interval_s=0.2)
    settings = Settings(
        l0_sst_size_bytes=int(args.l0_sst_size_mib * 1024 * 1024),
        compactor=compactor_opts,
        garbage_collector=GcOptions(interval_s=10, min_age_s=30),
    )
    rng = random.Random(args.seed)
    keys = [b"key%013d" % i for i in range(args.keys)]
    assert all(len(k) == 16 for k in keys)
    pool = [rng.randbytes(args.value_size) for _ in range(1024)]
    bytes_put = args.puts * (16 + args.value_size)
    live = args.keys * (16 + args.value_size)

    db = Db.open(path, settings=settings, seed=args.seed)
    (emb,) = [s for s in db._background if isinstance(s, EmbeddedCompactor)]
    stats = db.store.inner  # RetryingStore -> InstrumentedStore
    put = db.put
    order = [rng.randrange(args.keys) for _ in range(args.puts)]
    for k in range(args.keys):  # every key exists: 100k of the puts cover the key space once
        order[k * (args.puts // args.keys)] = k
    t0 = time.perf_counter()
    for i, k in enumerate(order):
        put(keys[k], pool[i & 1023], durable=False)
    db.flush()
    write_s = time.perf_counter() - t0
    at_end_of_writes = {"stored_bytes": disk_usage(path)[0], "shape": shape(db)}

    # Settle: memtable to L0, then wait for the compactor to run out of work.
    settle_s = settle(db, emb, compactor_opts)
    written = stats.snapshot().bytes_written
    totals = emb.totals
    settled_shape = shape(db)
    db.close()
    gc = GarbageCollector.open(path).run_once(min_age_s=0)
    stored = disk_usage(path)[0]

    # Fully compacted copy: one sorted run, no L0.
    shutil.copytree(path, full)
    c = Compactor.open(full, CompactorOptions(min_l0_ssts=1, min_merge_runs=2, max_space_amplification=1e-9))
    t2 = time.perf_counter()
    merged_in = 0
    while True:
        r = c.run_once()
        merged_in += r.input_bytes
        if not r.did_work:
            break
    full_merge_s = time.perf_counter() - t2
    GarbageCollector.open(full).run_once(min_age_s=0)
    with Db.open(full, settings=Settings(compactor=None, garbage_collector=None)) as fdb:
        full_shape = shape(fdb)
        full_sst_bytes = fdb.manifest.data.size
    full_stored = disk_usage(full)[0]

    rates: dict[str, list[float]] = {"settled": [], "fully_compacted": []}
    pair = [("settled", path), ("fully_compacted", full)]
    for rnd in range(args.rounds):
        for name, p in pair if rnd % 2 == 0 else pair[::-1]:
            rates[name].append(read_rate(p, keys, args.reads, args.seed + rnd))
    settled_rate = statistics.median(rates["settled"])
    full_rate = statistics.median(rates["fully_compacted"])

    result: dict[str, Any] = {
        "shaledb": shaledb.__version__,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "puts": args.puts,
        "keys": args.keys,
        "value_size": args.value_size,
        "l0_sst_size_mib": args.l0_sst_size_mib,
        "write_s": round(write_s, 2),
        "puts_per_s": round(args.puts / write_s),
        "at_end_of_writes": at_end_of_writes,
        "settle_s": round(settle_s, 2),
        "settled_shape": settled_shape,
        "gc_after_settling": gc.counts(),
        "live_bytes": live,
        "stored_bytes": stored,
        "stored_over_live": round(stored / live, 3),
        "fully_compacted_sst_bytes": full_sst_bytes,
        "fully_compacted_stored_bytes": full_stored,
        "stored_over_fully_compacted": round(stored / full_stored, 3),
        "bytes_put": bytes_put,
        "bytes_written": written,
        "write_amplification": round(written / bytes_put, 2),
        "embedded_compactions": totals.committed,
        "embedded_compaction_input_bytes": totals.input_bytes,
        "embedded_compaction_output_bytes": totals.bytes_written,
        "embedded_compaction_mb_per_s": round(totals.input_bytes / MB / totals.duration_s, 1)
        if totals.duration_s
        else None,
        "full_merge_input_bytes": merged_in,
        "full_merge_s": round(full_merge_s, 2),
        "full_merge_mb_per_s": round(merged_in / MB / full_merge_s, 1) if merged_in else None,
        "fully_compacted_shape": full_shape,
        "readrandom_settled_ops": round(settled_rate),
        "readrandom_fully_compacted_ops": round(full_rate),
        "readrandom_settled_over_full": round(settled_rate / full_rate, 3),
        "readrandom_rounds": {k: [round(x) for x in v] for k, v in rates.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:34s} {v}")
    if not args.dir:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

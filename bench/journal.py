#!/usr/bin/env python3
"""Value-journal benchmark: key/value separation against inline values.

    .venv/bin/python bench/journal.py [--value-size 4096] [--keys 100000] [--writes-per-key 6]
                                      [--threshold 1024] [--reads 20000] [--dir DIR] [--json]

For one value size, twice -- values inline (``value_separation_threshold=None``)
and separated (values of ``--threshold`` bytes or more in the journal):

1. **Writes**: ``--keys x --writes-per-key`` puts: every key once in a shuffled
   order, then overwrites of uniformly random keys (``--order rounds``: every
   key once per round instead), ``durable=False`` and one flush at the end, into a local directory with the embedded compactor on
   (garbage collection off, so the store's write counter sees only writes).
   Then *settle*: memtable to L0 and wait until the compactor runs out of work.
   **Write amplification** = the store's ``bytes_written`` (WAL objects, L0
   SSTs, compaction outputs, manifests, leases) / bytes put (keys + values).
2. **Journal compaction** (separated only): ``Db.compact_journal()`` -- scores,
   runs, bytes rewritten and reclaimed -- then a GC pass (``min_age_s=0``) to
   see the space come back. "Dead bytes reclaimed in the objects it picks" =
   (bytes of the picked objects - bytes of the objects written) / (bytes of the
   picked objects - key and payload bytes of the entries kept): the share of
   what was not live data that compaction gave back.
3. **Reads**: the database reopened (cold cache, compactor off), ``--reads``
   random gets of existing keys, median of ``--rounds`` rounds; for the
   separated database also ``head`` (metadata only, no journal read).

Targets (the issue): write amplification with separation <= 1/3 of inline;
journal compaction reclaims >= 90 % of the dead bytes of the objects it picks;
separated gets within 2x of inline gets; head at least as fast as an inline get.
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
from shaledb import CompactorOptions, Db, GarbageCollector, Settings
from shaledb.compaction import EmbeddedCompactor
from workloads import disk_usage, read_rate, settle

MB = 1e6


def run_mode(args: argparse.Namespace, path: str, threshold: int | None) -> dict[str, Any]:
    shutil.rmtree(path, ignore_errors=True)
    opts = CompactorOptions(poll_interval_s=0.2)
    settings = Settings(
        l0_sst_size_bytes=int(args.l0_sst_size_mib * 1024 * 1024),
        max_unflushed_bytes=max(256 * 1024 * 1024, int(args.l0_sst_size_mib * 1024 * 1024) * 4),
        value_separation_threshold=threshold,
        compactor=opts,
        garbage_collector=None,
    )
    rng = random.Random(args.seed)
    keys = [b"key%013d" % i for i in range(args.keys)]
    pool = [rng.randbytes(args.value_size) for _ in range(64)]
    bytes_put = args.keys * args.writes_per_key * (16 + args.value_size)
    live = args.keys * (16 + args.value_size)

    db = Db.open(path, settings=settings, seed=args.seed)
    (emb,) = [s for s in db._background if isinstance(s, EmbeddedCompactor)]
    stats = db.store.inner  # RetryingStore -> InstrumentedStore
    put = db.put
    order = list(range(args.keys))
    rng.shuffle(order)
    for _ in range(1, args.writes_per_key):
        if args.order == "rounds":
            more = list(range(args.keys))
            rng.shuffle(more)
            order += more
        else:
            order += [rng.randrange(args.keys) for _ in range(args.keys)]
    t0 = time.perf_counter()
    n = 0
    for i in order:
        put(keys[i], pool[n & 63], durable=False)
        n += 1
    db.flush()
    write_s = time.perf_counter() - t0
    settle_s = settle(db, emb, opts)
    written = stats.snapshot().bytes_written
    out: dict[str, Any] = {
        "threshold": threshold,
        "bytes_put": bytes_put,
        "live_bytes": live,
        "write_s": round(write_s, 1),
        "puts_per_s": round(n / write_s),
        "mb_put_per_s": round(bytes_put / MB / write_s, 1),
        "settle_s": round(settle_s, 1),
        "bytes_written": written,
        "write_amplification": round(written / bytes_put, 3),
        "ledger_bytes": db.manifest.data.size,
        "journal_files": len(db.manifest.journal),
        "journal_bytes": sum(j.size for j in db.manifest.journal),
        "compactions": emb.totals.committed,
        "compaction_input_bytes": emb.totals.input_bytes,
    }
    if threshold is not None:
        t1 = time.perf_counter()
        before_gc = disk_usage(path)[0]
        r = db.compact_journal()
        jc_s = time.perf_counter() - t1
        dead = r.bytes_read - r.bytes_kept
        out["journal_compaction"] = {
            "seconds": round(jc_s, 1),
            "objects_scored": len(r.scores),
            "score_min_median_max": [
                round(f(s.score for s in r.scores), 1) for f in (min, statistics.median, max)
            ]
            if r.scores
            else None,
            "runs": len(r.runs),
            "objects_compacted": sum(len(x) for x in r.runs),
            "bytes_read": r.bytes_read,
            "bytes_rewritten": r.bytes_rewritten,
            "bytes_reclaimed": r.bytes_reclaimed,
            "bytes_kept": r.bytes_kept,
            "dead_bytes_reclaimed_share": round(r.bytes_reclaimed / dead, 4) if dead > 0 else None,
            "ledger_ssts_rewritten": r.ledger_ssts_rewritten,
            "ledger_bytes_written": r.ledger_bytes_written,
            "repeat_run_rewrites": db.compact_journal().bytes_rewritten,
        }
        db.close()
        GarbageCollector.open(path).run_once(min_age_s=0)
        out["journal_compaction"]["stored_bytes_before_gc"] = before_gc
        out["journal_compaction"]["stored_bytes_after_gc"] = disk_usage(path)[0]
    else:
        db.close()
        GarbageCollector.open(path).run_once(min_age_s=0)
    out["stored_bytes"] = disk_usage(path)[0]
    rates: dict[str, list[float]] = {"get": []}
    if threshold is not None:
        rates["head"] = []
    for rnd in range(args.rounds):
        for op, got in rates.items():
            settings = Settings(value_separation_threshold=threshold)
            got.append(read_rate(path, keys, args.reads, args.seed + rnd, op=op, settings=settings))
    for op, v in rates.items():
        out[f"{op}_per_s"] = round(statistics.median(v))
        out[f"{op}_rounds"] = [round(x) for x in v]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--value-size", type=int, default=4096)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--writes-per-key", type=int, default=6, help="a first write and (this - 1) overwrites")
    ap.add_argument("--order", choices=["random", "rounds"], default="random")
    ap.add_argument(
        "--threshold", type=int, default=1024, help="value_separation_threshold of the separated run"
    )
    ap.add_argument("--l0-sst-size-mib", type=float, default=64.0)
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    scratch = args.dir or tempfile.mkdtemp(prefix="shaledb-bench-journal-")
    inline = run_mode(args, os.path.join(scratch, "inline"), None)
    sep = run_mode(args, os.path.join(scratch, "separated"), args.threshold)
    if not args.keep:
        shutil.rmtree(os.path.join(scratch, "inline"), ignore_errors=True)
        shutil.rmtree(os.path.join(scratch, "separated"), ignore_errors=True)
    jc = sep["journal_compaction"]
    targets = {
        "write_amplification_ratio": round(sep["write_amplification"] / inline["write_amplification"], 3),
        "write_amplification_ratio_target_max": round(1 / 3, 3),
        "dead_bytes_reclaimed_share": jc["dead_bytes_reclaimed_share"],
        "dead_bytes_reclaimed_target_min": 0.9,
        "get_separated_over_inline": round(sep["get_per_s"] / inline["get_per_s"], 3),
        "get_separated_over_inline_target_min": 0.5,
        "head_over_inline_get": round(sep["head_per_s"] / inline["get_per_s"], 3),
        "head_over_inline_get_target_min": 1.0,
    }
    targets["met"] = {
        "write_amplification": targets["write_amplification_ratio"] <= 1 / 3,
        "journal_compaction": (jc["dead_bytes_reclaimed_share"] or 0) >= 0.9,
        "get": targets["get_separated_over_inline"] >= 0.5,
        "head": targets["head_over_inline_get"] >= 1.0,
    }
    result = {
        "shaledb": shaledb.__version__,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "value_size": args.value_size,
        "keys": args.keys,
        "writes_per_key": args.writes_per_key,
        "order": args.order,
        "threshold": args.threshold,
        "inline": inline,
        "separated": sep,
        "targets": targets,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, r in (("inline", inline), ("separated", sep)):
            print(
                f"{name:9s} WA {r['write_amplification']:.2f}  {r['mb_put_per_s']} MB/s put  "
                f"get {r['get_per_s']}/s" + (f"  head {r['head_per_s']}/s" if "head_per_s" in r else "")
            )
        print(json.dumps(targets, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

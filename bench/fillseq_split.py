#!/usr/bin/env python3
"""Where fillseq's time goes: the harness's timed loop with parts of shaledb's work taken away.

    PYTHONPATH=src .venv/bin/python bench/fillseq_split.py [--rounds 6] [--n 200000]

Each run is a fresh process (as ``run.py suite`` runs them) that writes ``--n`` keys of 16
bytes with 100-byte values in ``put_many`` batches of 100 to a local directory
(``durable=False``), timed as ``bench/workloads.py`` times it, in one of these variants,
interleaved round by round:

* ``real``: as shipped;
* ``no-wal-encode``: the WAL thread writes a blank object of the right size instead of
  encoding one (what the writer thread loses to the WAL thread's share of the interpreter);
* ``no-gc``: the cyclic garbage collector off (what collections of young tuples cost);
* ``batch-only``: only ``WriteBatch.put_many``, no ``Db.write`` (the batch's share).

The variants are measurements, not settings: a run without WAL encoding writes objects that
could not be replayed. Prints the median microseconds per key of each variant.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("real", "no-wal-encode", "no-gc", "batch-only")


def child(variant: str, n: int) -> float:
    import gc

    import shaledb

    if variant == "no-wal-encode":
        import shaledb.engine.wal as wal_module

        def blank(keys: list[bytes], *_a: object, **_k: object) -> tuple[bytearray, list[int], list[int]]:
            return bytearray(len(keys) * 130), [0], [0]

        setattr(wal_module, "encode_wal_columns", blank)  # noqa: B010 - a measurement stub
    rng = random.Random(301)
    keys = [b"%016d" % (2 * i) for i in range(n)]
    vals = [rng.randbytes(100) for _ in range(n)]
    d = tempfile.mkdtemp()
    db = shaledb.Db.open(os.path.join(d, "db"))
    batch = shaledb.WriteBatch
    if variant == "no-gc":
        gc.disable()
    t0 = time.perf_counter()
    if variant == "batch-only":
        for s in range(0, n, 100):
            batch().put_many(list(zip(keys[s : s + 100], vals[s : s + 100])))
    else:
        for s in range(0, n, 100):
            db.write(batch().put_many(list(zip(keys[s : s + 100], vals[s : s + 100]))), durable=False)
    secs = time.perf_counter() - t0
    db.close()
    shutil.rmtree(d)
    return secs / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.n)))
        return
    got: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(a.rounds):
        order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
        for v in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", v, "--n", str(a.n)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            got[v].append(json.loads(out.strip().splitlines()[-1]))
    for v in VARIANTS:
        xs = got[v]
        print(
            f"{v:14s} median {statistics.median(xs):.2f} us/key  (min {min(xs):.2f}, max {max(xs):.2f}, {len(xs)} runs)"
        )


if __name__ == "__main__":
    main()

"""Python-level function calls per get, per 100-key scan and per batch of 100 puts.

A count, not a time: the same on a loaded machine as on a quiet one, so two versions of
the code can be compared exactly (run one with PYTHONPATH pointing at the other's src).

    .venv/bin/python bench/call_counts.py after
    PYTHONPATH=/path/to/base/src .venv/bin/python bench/call_counts.py before
"""

from __future__ import annotations

import cProfile
import os
import pstats
import random
import shutil
import sys
import tempfile
from collections.abc import Callable

import shaledb

N = 20_000


def calls(fn: Callable[[], object]) -> int:
    p = cProfile.Profile()
    p.enable()
    fn()
    p.disable()
    return int(pstats.Stats(p).total_calls)  # type: ignore[attr-defined]


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this"
    rng = random.Random(1)
    order = [b"key%012d" % i for i in range(N)]
    rng.shuffle(order)
    d = tempfile.mkdtemp()
    try:
        settings = shaledb.Settings(compactor=None, garbage_collector=None)
        db = shaledb.Db.open(os.path.join(d, "db"), settings=settings)
        for i in range(0, N, 100):
            b = shaledb.WriteBatch()
            for k in order[i : i + 100]:
                b.put(k, rng.randbytes(100))
            db.write(b, durable=False)
        db.flush(memtable=True)

        def gets() -> None:
            for k in order[:5000]:
                db.get(k)

        def scans() -> None:
            for k in order[:500]:
                for _ in db.scan(k, limit=100):
                    pass

        def writes() -> None:
            for i in range(0, 5000, 100):
                b = shaledb.WriteBatch()
                for k in order[i : i + 100]:
                    b.put(k, b"v" * 100)
                db.write(b, durable=False)

        gets()
        scans()  # warm: blocks cached, as in the timed workloads
        per_get, per_scan, per_batch = calls(gets) / 5000, calls(scans) / 500, calls(writes) / 50
        print(
            f"{label}: calls per get {per_get:.2f}, per scan {per_scan:.1f}, per batch of 100 puts {per_batch:.1f}"
        )
        db.close()
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Transaction throughput beside plain batches, at 1 and 8 threads.

    .venv/bin/python bench/txn.py [--ops 20000] [--accounts 10000] [--repeat 3] [--durable]

A local-directory database holding ``--accounts`` 8-byte counters. Each
operation is a transfer between two random accounts:

* ``batch``: two puts in one ``WriteBatch`` (no reads: the floor);
* ``get+batch``: ``get_many`` of the two accounts, then the batch (what a
  transfer costs without isolation);
* ``snapshot`` / ``serializable``: the same inside ``db.transaction(...)``
  (a conflict is retried and counted).

``--ops`` operations split across the threads; best of ``--repeat`` runs;
prints operations per second and conflicts. ``durable=False`` unless
``--durable`` (then every commit waits for its WAL object).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
import time

from shaledb import Db, Settings, WriteBatch
from shaledb.errors import TransactionConflict

QUIET = Settings(compactor=None, garbage_collector=None)


def key(i: int) -> bytes:
    return b"acct/%08d" % i


def run(
    db: Db, mode: str, ops: int, threads: int, accounts: int, durable: bool, seed: int
) -> dict[str, float]:
    conflicts = [0]
    lock = threading.Lock()

    def one(r: random.Random) -> None:
        a, b = r.sample(range(accounts), 2)
        ka, kb = key(a), key(b)
        if mode == "batch":
            db.write(WriteBatch().put(ka, b"1").put(kb, b"2"), durable=durable)
            return
        if mode == "get+batch":
            va, vb = db.get_many([ka, kb])
            db.write(
                WriteBatch().put(ka, str(int(va or 0) - 1).encode()).put(kb, str(int(vb or 0) + 1).encode()),
                durable=durable,
            )
            return
        while True:
            try:
                with db.transaction(mode, durable=durable) as t:
                    va, vb = t.get_many([ka, kb])
                    t.put(ka, str(int(va or 0) - 1).encode())
                    t.put(kb, str(int(vb or 0) + 1).encode())
                return
            except TransactionConflict:
                with lock:
                    conflicts[0] += 1

    def worker(n: int, r: random.Random) -> None:
        for _ in range(n):
            one(r)

    per = ops // threads
    ts = [threading.Thread(target=worker, args=(per, random.Random(seed + i))) for i in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return {"ops_per_s": per * threads / dt, "conflicts": conflicts[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--accounts", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--durable", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shaledb-bench-txn-")
    try:
        with Db.open(f"{tmp}/db", settings=QUIET) as db:
            for i in range(0, args.accounts, 1000):
                b = WriteBatch()
                for j in range(i, min(i + 1000, args.accounts)):
                    b.put(key(j), b"100")
                db.write(b, durable=False)
            db.flush(memtable=True)
            for threads in (1, 8):
                for mode in ("batch", "get+batch", "snapshot", "serializable"):
                    runs: list[dict[str, float]] = []
                    for rep in range(args.repeat):
                        runs.append(
                            run(db, mode, args.ops, threads, args.accounts, args.durable, args.seed + rep)
                        )
                    best = max(runs, key=lambda r: r["ops_per_s"])
                    print(json.dumps({"threads": threads, "mode": mode, "durable": args.durable, **best}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Transaction throughput beside plain batches, at 1 and 8 threads; RocksDB beside it.

    .venv/bin/python bench/txn.py [--ops 20000] [--accounts 10000] [--repeat 3] [--durable]
    .venv/bin/python bench/txn.py --engines shaledb,rocksdict --rounds 3 [--out FILE] [...]

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

``--engine rocksdict`` runs the same transfers on RocksDB through ``rocksdict`` (the
options of ``run.py``'s RocksDB adapter; ``--durable``: ``WriteOptions.sync``). rocksdict
0.3.29 has no transaction API (no ``TransactionDB`` / ``OptimisticTransactionDB``), so only
``batch`` (a ``WriteBatch`` of two puts) and ``get+batch`` (a multi-key ``get`` of the two
accounts, then the batch) run there: the floor a transaction is compared with.
``--engines shaledb,rocksdict`` runs both, each under its own interpreter, interleaved
(``beside.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import threading
import time
from typing import Any

import beside

MODES = {"shaledb": ("batch", "get+batch", "snapshot", "serializable"), "rocksdict": ("batch", "get+batch")}


def key(i: int) -> bytes:
    return b"acct/%08d" % i


def rocksdb_transfer(db: Any, mode: str, durable: bool) -> Any:
    """One transfer on rocksdict: ``batch`` or ``get+batch`` (it has no transactions)."""
    import rocksdict as rd

    wo = rd.WriteOptions()
    wo.sync = durable

    def one(r: random.Random, accounts: int) -> None:
        a, b = r.sample(range(accounts), 2)
        ka, kb = key(a), key(b)
        wb = rd.WriteBatch(raw_mode=True)
        if mode == "batch":
            wb.put(ka, b"1")
            wb.put(kb, b"2")
        else:
            va, vb = db.get([ka, kb])
            wb.put(ka, str(int(va or 0) - 1).encode())
            wb.put(kb, str(int(vb or 0) + 1).encode())
        db.write(wb, wo)

    return one


def run(
    db: Any, mode: str, ops: int, threads: int, accounts: int, durable: bool, seed: int
) -> dict[str, float]:
    conflicts = [0]
    lock = threading.Lock()
    from shaledb import WriteBatch
    from shaledb.errors import TransactionConflict

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

    if not hasattr(db, "transaction"):  # rocksdict
        rocks = rocksdb_transfer(db, mode, durable)

        def one(r: random.Random) -> None:
            rocks(r, accounts)

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


class open_db:
    """The engine's database holding ``accounts`` accounts of 100, flushed (a context manager)."""

    def __init__(self, engine: str, path: str, accounts: int) -> None:
        self.engine, self.path, self.accounts = engine, path, accounts

    def __enter__(self) -> Any:
        if self.engine == "rocksdict":
            import rocksdict as rd

            self.db = rd.Rdict(self.path, rd.Options(raw_mode=True))  # run.py's RocksDB adapter
            for i in range(0, self.accounts, 1000):
                wb = rd.WriteBatch(raw_mode=True)
                for j in range(i, min(i + 1000, self.accounts)):
                    wb.put(key(j), b"100")
                self.db.write(wb)
            self.db.flush()
            return self.db
        from shaledb import Db, Settings, WriteBatch

        self.db = Db.open(self.path, settings=Settings(compactor=None, garbage_collector=None))
        for i in range(0, self.accounts, 1000):
            b = WriteBatch()
            for j in range(i, min(i + 1000, self.accounts)):
                b.put(key(j), b"100")
            self.db.write(b, durable=False)
        self.db.flush(memtable=True)
        return self.db

    def __exit__(self, *exc: object) -> None:
        self.db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--accounts", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--durable", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    beside.add_options(ap, tuple(MODES))
    args = ap.parse_args()
    if args.engines:
        beside.interleave(__file__, args, ("threads", "mode"))
        return
    tmp = tempfile.mkdtemp(prefix="shaledb-bench-txn-")
    try:
        with open_db(args.engine, f"{tmp}/db", args.accounts) as db:
            for threads in (1, 8):
                for mode in MODES[args.engine]:
                    runs: list[dict[str, float]] = []
                    for rep in range(args.repeat):
                        runs.append(
                            run(db, mode, args.ops, threads, args.accounts, args.durable, args.seed + rep)
                        )
                    best = max(runs, key=lambda r: r["ops_per_s"])
                    print(
                        json.dumps(
                            {
                                "engine": args.engine,
                                "threads": threads,
                                "mode": mode,
                                "durable": args.durable,
                                **best,
                            }
                        )
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

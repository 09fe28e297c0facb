"""A writer process that is killed with SIGKILL at a random moment (run by test_engine_kill.py).

    python engine_kill_worker.py URL LEDGER SEED FIRST_VERSION

Writes forever (until killed) a random mix of durable and non-durable puts,
deletes, batches, flush() and flush(memtable=True) on 16 keys, with tiny
memtables so L0 flushes run in the background. Before each write it appends
``{"w": n, "ops": [...]}`` to the ledger file, and once the write is
acknowledged (durable put returned, wait_durable, flush) ``{"ack": n}``:
RocksDB's pending/acknowledged pattern. The ledger is written with
``os.write`` on an O_APPEND descriptor, so whatever was written survives the
kill (a process kill does not lose the page cache).
"""

from __future__ import annotations

import json
import os
import random
import sys


def main() -> int:
    url, ledger, seed, version = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    import shaledb

    rng = random.Random(seed)
    fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(obj: dict[str, object]) -> None:
        os.write(fd, (json.dumps(obj) + "\n").encode())

    settings = shaledb.Settings(
        compactor=None,
        garbage_collector=None,
        l0_sst_size_bytes=4096,
        wal_max_bytes=2048,
        max_unflushed_bytes=1 << 20,
        l0_max_ssts=1_000_000,
        block_size_bytes=512,
        flush_interval_s=0.02,
    )
    db = shaledb.Db.open(url, settings=settings, seed=seed)
    log({"opened": db.epoch})
    keys = [f"k{i:02d}" for i in range(16)]
    n = 0
    pending: list[tuple[int, shaledb.WriteHandle]] = []
    while True:
        version += 1
        r = rng.random()
        if r >= 0.9:
            db.flush(memtable=r >= 0.97)
            if n:
                log({"ack": n})
            pending.clear()
            continue
        n += 1
        durable = rng.random() < 0.5
        if r < 0.6:
            k = rng.choice(keys)
            v = f"{version}:" + "x" * rng.randrange(0, 300)
            log({"w": n, "ops": [[k, v]]})
            h = db.put(k.encode(), v.encode(), durable=durable)
        elif r < 0.75:
            k = rng.choice(keys)
            log({"w": n, "ops": [[k, None]]})
            h = db.delete(k.encode(), durable=durable)
        else:
            ops: list[list[str | None]] = []
            b = shaledb.WriteBatch()
            for _ in range(rng.randrange(1, 5)):
                k = rng.choice(keys)
                if rng.random() < 0.7:
                    v = f"{version}:b"
                    ops.append([k, v])
                    b.put(k.encode(), v.encode())
                else:
                    ops.append([k, None])
                    b.delete(k.encode())
            log({"w": n, "ops": ops})
            h = db.write(b, durable=durable)
        if durable:
            log({"ack": n})
            pending.clear()
        else:
            pending.append((n, h))
            if rng.random() < 0.1:
                wn, wh = pending[rng.randrange(len(pending))]
                wh.wait_durable()
                log({"ack": wn})
                pending = [p for p in pending if p[0] > wn]


if __name__ == "__main__":
    sys.exit(main())

"""A writer using the post-audit features, killed with SIGKILL at a random moment
(run by test_features_kill.py).

    python features_kill_worker.py URL LEDGER SEED THRESHOLD

``THRESHOLD``: ``Settings.value_separation_threshold`` (0: off; on, merged values grow
past it into the value journal).

Writes forever (until killed) a random mix of puts, deletes, merges (the ``append``
operator), range deletes, batches mixing all four, transactions (some made to conflict)
and flushes on 12 keys, with tiny memtables and an embedded compactor, and a history
window, so flushes and compactions of merges and range tombstones run in the background.
Each write is logged to the ledger before it is issued (``{"w": n, "ops": [...], "t":
time}``), its return (``{"ret": n, "t": time}``) and acknowledgement (``{"ack": n, "seq":
s}``) after, a transaction refused by a
conflict as ``{"abort": n}``. It checks its own reads against the model of everything
it wrote (the writer's reads are linearizable); a wrong read is logged as
``{"mismatch": ...}`` and the process exits with status 3.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

Op = list[Any]  # ["put", k, v] | ["del", k] | ["merge", k, operand] | ["range", start, end]


def apply(state: dict[str, str], ops: list[Op]) -> None:
    """The model: ops in order; a merge appends to the live value (or to nothing)."""
    for op in ops:
        if op[0] == "put":
            state[op[1]] = op[2]
        elif op[0] == "del":
            state.pop(op[1], None)
        elif op[0] == "merge":
            state[op[1]] = state.get(op[1], "") + op[2]
        else:
            for k in [k for k in state if op[1] <= k < op[2]]:
                del state[k]


KEYS = [f"k{i:02d}" for i in range(12)]


def random_op(rng: random.Random, n: int, i: int) -> Op:
    r = rng.random()
    k = rng.choice(KEYS)
    if r < 0.35:
        return ["put", k, f"p{n}.{i}:"]
    if r < 0.5:
        return ["del", k]
    if r < 0.85:
        return ["merge", k, f"m{n}.{i};"]
    a, b = sorted(rng.sample([*KEYS, "k", "k99", "k05a"], 2))
    return ["range", a, b]


def main() -> int:
    url, ledger, seed, threshold = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    import shaledb
    from shaledb.errors import TransactionConflict

    rng = random.Random(seed)
    fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(obj: dict[str, object]) -> None:
        os.write(fd, (json.dumps(obj) + "\n").encode())

    settings = shaledb.Settings(
        compactor=shaledb.CompactorOptions(poll_interval_s=0.05, min_l0_ssts=2, min_merge_runs=2),
        garbage_collector=None,
        l0_sst_size_bytes=4096,
        wal_max_bytes=1024,
        max_unflushed_bytes=1 << 20,
        l0_max_ssts=1_000_000,
        block_size_bytes=512,
        flush_interval_s=0.02,
        history_retention_s=3600,
        merge_operator="append",
        value_separation_threshold=threshold or None,
    )
    db = shaledb.Db.open(url, settings=settings, seed=seed)
    state: dict[str, str] = dict((k.decode(), v.decode()) for k, v in db.scan())
    log({"opened": db.epoch})

    def check(what: str, got: object, want: object) -> None:
        if got != want:
            log({"mismatch": what, "got": repr(got), "want": repr(want)})
            os._exit(3)

    def to_batch(ops: list[Op], target: Any) -> None:
        for op in ops:
            if op[0] == "put":
                target.put(op[1].encode(), op[2].encode())
            elif op[0] == "del":
                target.delete(op[1].encode())
            elif op[0] == "merge":
                target.merge(op[1].encode(), op[2].encode())
            else:
                target.delete_range(op[1].encode(), op[2].encode())

    n = 0
    pending: list[tuple[int, Any]] = []
    while True:
        r = rng.random()
        if r < 0.05:
            db.flush(memtable=rng.random() < 0.5)
            for wn, wh in pending:
                log({"ack": wn, "seq": wh.seq})
            pending.clear()
            continue
        if r < 0.15:
            k = rng.choice(KEYS)
            got = db.get(k.encode())
            check(f"get {k}", None if got is None else got.decode(), state.get(k))
            if rng.random() < 0.2:
                check("scan", {k.decode(): v.decode() for k, v in db.scan()}, state)
            continue
        n += 1
        durable = rng.random() < 0.6
        if r < 0.7:
            op = random_op(rng, n, 0)
            log({"w": n, "ops": [op], "t": time.time()})
            if op[0] == "put":
                h = db.put(op[1].encode(), op[2].encode(), durable=durable)
            elif op[0] == "del":
                h = db.delete(op[1].encode(), durable=durable)
            elif op[0] == "merge":
                h = db.merge(op[1].encode(), op[2].encode(), durable=durable)
            else:
                h = db.delete_range(op[1].encode(), op[2].encode(), durable=durable)
            apply(state, [op])
        elif r < 0.82:
            ops = [random_op(rng, n, i) for i in range(rng.randrange(1, 6))]
            log({"w": n, "ops": ops, "t": time.time()})
            batch = shaledb.WriteBatch()
            to_batch(ops, batch)
            h = db.write(batch, durable=durable)
            apply(state, ops)
        else:
            ops = [random_op(rng, n, i) for i in range(rng.randrange(1, 6))]
            txn = db.transaction(rng.choice(["snapshot", "serializable"]), durable=durable)
            view = dict(state)
            for op in ops:
                to_batch([op], txn)
                apply(view, [op])
                k = rng.choice(KEYS)
                got = txn.get(k.encode())
                check(f"txn get {k}", None if got is None else got.decode(), view.get(k))
                if rng.random() < 0.3:
                    lo, hi = sorted(rng.sample(KEYS, 2))
                    rev = rng.random() < 0.5
                    limit = rng.choice([None, 1, 3])
                    rows = [
                        (a.decode(), b.decode())
                        for a, b in txn.scan(lo.encode(), hi.encode(), reverse=rev, limit=limit)
                    ]
                    want = sorted((a, b) for a, b in view.items() if lo <= a < hi)
                    want = (want[::-1] if rev else want)[:limit]
                    check(f"txn scan {lo} {hi} reverse={rev} limit={limit}", rows, want)
            rival = None
            if rng.random() < 0.3:
                # A rival transaction that writes a key this one writes commits first.
                written = [op[1] for op in ops if op[0] in ("put", "del", "merge")]
                if written:
                    rival_key = rng.choice(written)
                    rival = ["put", rival_key, f"r{n}:"]
                    n += 1
                    log({"w": n, "ops": [rival], "t": time.time()})
                    with db.transaction() as rt:
                        rt.put(rival_key.encode(), rival[2].encode())
                    log({"ret": n, "t": time.time()})
                    log({"ack": n, "seq": None})
                    apply(state, [rival])
                    n += 1
            log({"w": n, "ops": ops, "t": time.time()})
            try:
                h = txn.commit()
            except TransactionConflict:
                check("conflict expected", rival is not None, True)
                log({"abort": n})
                continue
            check("commit despite a rival", rival, None)
            apply(state, ops)
        log({"ret": n, "t": time.time()})
        if durable:
            log({"ack": n, "seq": h.seq})
        else:
            pending.append((n, h))
            if rng.random() < 0.1:
                h.wait_durable()
                for wn, wh in pending:
                    log({"ack": wn, "seq": wh.seq})
                pending.clear()


if __name__ == "__main__":
    sys.exit(main())

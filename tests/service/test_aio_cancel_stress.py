"""Cancelled asyncio writes and reads, and a close while tasks run, against a model.

Tasks write to keys of their own (so each key's history is one task's program order):
merges (``append``), puts, range deletes of their own key and batches, each awaited under
a random ``wait_for`` timeout or cancelled outright, with reads and scans cancelled the
same way and the handle closed while many are in flight. Then:

* every task ends with its write acknowledged, refused with a typed error
  (``ClosedError`` once the handle closes), or cancelled -- nothing hangs;
* the handle keeps working after the cancellations (a put and a get);
* after the close and a reopen, each key's value holds every acknowledged operand once,
  in order, and otherwise only operands that were issued (a cancelled write may or may
  not land; none lands twice).

Seed: ``SHALEDB_TEST_SEED`` (printed).
"""

from __future__ import annotations

import asyncio
import random

from shaledb import Db, Settings, WriteBatch, aio
from shaledb.errors import ShaleError
from shaledb.testing.seeds import test_seed

TASKS = 12
STEPS = 1_000_000  # more than run before the close: the close meets them mid-flight


def _settings() -> Settings:
    return Settings(
        merge_operator="append",
        compactor=None,
        garbage_collector=None,
        l0_sst_size_bytes=4096,
        wal_max_bytes=2048,
        flush_interval_s=0.01,
    )


async def _writer(db: aio.Db, i: int, rng: random.Random, log: dict[str, list[str]]) -> str:
    """Task ``i``: merges onto key ``t{i}`` (a put or range delete of it resets the model
    there: recorded as a ``|`` token)."""
    key = b"t%02d" % i
    for j in range(STEPS):
        tok = f"{j};"
        r = rng.random()
        if r < 0.7:
            op = db.merge(key, tok.encode())
        elif r < 0.8:
            op = db.write(WriteBatch().merge(key, tok.encode()).merge(b"u%02d" % i, tok.encode()))
        elif r < 0.9:
            op = db.write(WriteBatch().delete_range(key, key + b"\x00").merge(key, b"|" + tok.encode()))
            tok = "|" + tok
        else:
            op = db.put(key, b"|" + tok.encode())
            tok = "|" + tok
        log["issued"].append(tok)
        try:
            if rng.random() < 0.2:
                await asyncio.wait_for(op, timeout=rng.choice([0, 0.0001, 0.001]))
            else:
                await op
        except TimeoutError:
            log["cancelled"].append(tok)
            continue
        except ShaleError:
            return "refused"
        log["acked"].append(tok)
        if rng.random() < 0.2:
            try:
                await asyncio.wait_for(db.get(key), timeout=rng.choice([0, 0.001, 1]))
            except TimeoutError:
                pass
            except ShaleError:
                return "refused"
    return "done"


def _tokens(value: bytes | None) -> list[str]:
    if value is None:
        return []
    text = value.decode()
    return [t + ";" for t in text.split(";") if t]


def _check_key(value: bytes | None, log: dict[str, list[str]], what: str) -> None:
    """A reset (``|j;``: a put, or a range delete then a merge) is applied on the loop
    thread, so the newest one that landed is the value's first token. Every operand
    acknowledged after it must follow it once, in order; anything else only if issued."""
    got = _tokens(value)
    assert len(got) == len(set(got)), f"{what}: an operand applied twice: {got}"
    assert set(got) <= set(log["issued"]), f"{what}: invented operands: {got}"
    assert all(not t.startswith("|") for t in got[1:]), f"{what}: a reset not first: {got}"
    issued = log["issued"]
    since = issued.index(got[0]) if got and got[0].startswith("|") else -1
    want = [t for t in log["acked"] if issued.index(t) > since]
    missing = [t for t in want if t not in got]
    assert not missing, f"{what}: acknowledged operands missing: {missing} (value {got})"
    positions = [got.index(t) for t in want]
    assert positions == sorted(positions), f"{what}: acknowledged operands out of order: {got}"


def test_cancelled_tasks_and_a_close_mid_flight_keep_the_database_whole(tmp_path: object) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    url = f"{tmp_path}/db"
    logs = [{"issued": [], "acked": [], "cancelled": []} for _ in range(TASKS)]  # type: ignore[var-annotated]

    async def main() -> list[object]:
        db = await aio.Db.open(url, settings=_settings())
        tasks = [
            asyncio.create_task(_writer(db, i, random.Random(rng.getrandbits(32)), logs[i]))
            for i in range(TASKS)
        ]
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        for t in rng.sample(tasks, 3):  # cancelled outright, wherever they are
            t.cancel()
        await db.put(b"probe", b"alive")  # the handle still works after the cancellations
        assert await db.get(b"probe") == b"alive"
        await asyncio.sleep(rng.uniform(0.0, 0.2))
        await db.close()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)

    outcomes = asyncio.run(main())
    acked = sum(len(log["acked"]) for log in logs)
    cancelled = sum(len(log["cancelled"]) for log in logs)
    print(f"{acked} acknowledged, {cancelled} timed out; tasks: {[str(o) for o in outcomes]}")
    for o in outcomes:
        assert o in ("done", "refused") or isinstance(o, asyncio.CancelledError), o
    with Db.open(url, settings=_settings()) as db:
        assert db.get(b"probe") == b"alive"
        for i, log in enumerate(logs):
            _check_key(db.get(b"t%02d" % i), log, f"key t{i:02d} (SHALEDB_TEST_SEED={seed})")

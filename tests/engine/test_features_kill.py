"""kill -9 loop over transactions, merges and range deletes, checked three ways.

A writer process (``features_kill_worker.py``) runs puts, deletes, merges (``append``),
range deletes, mixed batches and transactions (some refused by a rival's commit) with an
embedded compactor and a history window, logging each write before it is issued and
each acknowledgement after. The test kills it with SIGKILL at a random moment, then
reopens the database here and checks:

* the change feed: the round's new batches are the ledger's writes in order (each batch
  has the effect of its write: a transaction or a range delete is all or nothing, a merge
  operand is applied once), at least every acknowledged write and nothing else, and an
  acknowledged write's batch carries the sequence number it was acknowledged with;
* the contents equal the model after exactly those writes;
* time travel: snapshots at the sequence numbers of writes of this and earlier rounds
  (flushed, compacted and replayed since) equal the model's state then, and snapshots at
  times during the round are a state of the few seconds before the time asked (``_check_at_time``).

Between rounds a standalone compactor runs until idle and a garbage collector pass
(``min_age_s=0``, the WAL kept for the feed), so later rounds read through both.

With value separation on (threshold 24 bytes), merged values grow into the value journal,
so merges fold onto journal bases, and journal compaction runs between rounds too.
Rounds: ``SHALEDB_KILL_ROUNDS`` (default 6); seed ``SHALEDB_TEST_SEED`` (printed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from features_kill_worker import apply

from shaledb import Db, GarbageCollector, GcOptions, Settings
from shaledb.admin.verify import verify
from shaledb.testing.compacting import compact_until_idle
from shaledb.testing.seeds import test_seed

ROUNDS = int(os.environ.get("SHALEDB_KILL_ROUNDS", "6"))
WORKER = Path(__file__).with_name("features_kill_worker.py")


def _settings(threshold: int) -> Settings:
    return Settings(
        value_separation_threshold=threshold or None,
        compactor=None,
        garbage_collector=None,
        l0_max_ssts=1_000_000,
        history_retention_s=3600,
        merge_operator="append",
    )


class Ledger(NamedTuple):
    writes: list[tuple[int, list[Any]]]
    """In ledger order, transactions refused by a conflict left out."""
    acks: dict[int, int | None]
    """Acknowledged write -> the seq it was acknowledged with (None: not reported)."""
    issued: dict[int, float]
    returned: dict[int, float]
    """Wall times before each write was issued and after it returned."""
    mismatch: str | None
    """A wrong read the worker reported."""


def _ledger(path: Path) -> Ledger:
    out = Ledger([], {}, {}, {}, None)
    aborted: set[int] = set()
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the line being written when the process died
        if "mismatch" in rec:
            return out._replace(mismatch=line)
        if "w" in rec:
            out.writes.append((rec["w"], rec["ops"]))
            out.issued[rec["w"]] = rec["t"]
        elif "ret" in rec:
            out.returned[rec["ret"]] = rec["t"]
        elif "ack" in rec:
            out.acks[rec["ack"]] = rec["seq"]
        elif "abort" in rec:
            aborted.add(rec["abort"])
    return out._replace(writes=[w for w in out.writes if w[0] not in aborted])


_AT_TIME_SLACK_S = 3.0
"""How much older than asked a time-travel read's state may be here (``_check_at_time``)."""


class Era(NamedTuple):
    """A state and when it may have been current: from the issue of the write that made it
    to the return of the next one (whose outcome ends it)."""

    state: dict[str, str]
    start: float
    end: float


def _check_at_time(db: Db, timeline: list[Era], lo: float, rng: random.Random, where: str) -> None:
    """``snapshot(at_time=t)`` for times since ``lo``: a state current at some moment within
    the few seconds before ``t`` (docs/transactions.md: marks are thinned to one a second, and a
    write replayed after a crash is marked with its WAL object's creation time, which on a
    loaded machine came 1.3 s after the object's first write) -- never a later state."""
    hi = time.time() - 0.01
    for _ in range(8):
        t = rng.uniform(lo, hi)
        with db.snapshot(at_time=datetime.fromtimestamp(t, tz=UTC)) as snap:
            got = {k.decode(): v.decode() for k, v in snap.scan()}
        since = t - _AT_TIME_SLACK_S
        ok = [e for e in timeline if e.start <= t + 0.002 and e.end >= since and e.state == got]
        same = [(e.start - t, e.end - t) for e in timeline if e.state == got]
        assert ok, (
            f"{where}: the snapshot at time {t} is no state of the {_AT_TIME_SLACK_S:g} s before it; "
            f"it is the state current from/to (relative to t) {same[:5]}"
        )


def _as_op(change: Any) -> list[Any]:
    key = change.key.decode()
    if change.kind == "put":
        return ["put", key, change.value.decode()]
    if change.kind == "delete":
        return ["del", key]
    if change.kind == "merge":
        return ["merge", key, change.value.decode()]
    assert change.kind == "delete_range", change
    return ["range", key, change.end.decode()]


def _batches(db: Db, since: Any) -> tuple[list[tuple[int, list[Any]]], Any]:
    out: list[tuple[int, list[Any]]] = []
    with db.changes(since=since, follow=False) as feed:
        for c in feed:
            if not out or out[-1][0] != c.seq:
                assert c.batch_index == 0, f"a batch starts at index {c.batch_index}: {c}"
                out.append((c.seq, []))
            out[-1][1].append(_as_op(c))
            assert c.batch_index == len(out[-1][1]) - 1 and c.batch_size >= len(out[-1][1]), c
        return out, feed.cursor


def _run_worker(url: str, ledger: Path, seed: int, threshold: int, rng: random.Random) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, str(ledger), str(seed), str(threshold)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        deadline = time.monotonic() + 60
        while not (ledger.exists() and "opened" in ledger.read_text()):
            assert proc.poll() is None, f"the worker died: {proc.stderr.read()[-3000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the worker did not open"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.3, 1.5))
        if proc.poll() is not None:
            err = proc.stderr.read()[-3000:]  # type: ignore[union-attr]
            raise AssertionError(f"the worker exited ({proc.returncode}): {err}")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [0, 24], ids=["inline", "value-journal"])
def test_sigkill_loop_with_transactions_merges_and_range_deletes(tmp_path: Path, threshold: int) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    state: dict[str, str] = {}
    history: list[tuple[int, dict[str, str]]] = []  # (seq, state after it)
    timeline = [Era({}, float("-inf"), float("inf"))]
    cursor = None
    total_acked = 0
    for r in range(ROUNDS):
        ledger = tmp_path / f"ledger-{r}.jsonl"
        where = f"round {r} (SHALEDB_TEST_SEED={seed}, ledger {ledger})"
        _run_worker(url, ledger, rng.getrandbits(31), threshold, rng)
        led = _ledger(ledger)
        writes, acks = led.writes, led.acks
        assert led.mismatch is None, f"{where}: the worker read a wrong value: {led.mismatch}"
        returned = led.returned
        acked_upto = max((i + 1 for i, (n, _) in enumerate(writes) if n in acks), default=0)
        total_acked += len(acks)
        with Db.open(url, settings=_settings(threshold)) as db:
            batches, cursor = _batches(db, cursor)
            assert acked_upto <= len(batches) <= len(writes), (
                f"{where}: {len(batches)} batches in the feed for {len(writes)} writes, "
                f"the first {acked_upto} acknowledged"
            )
            for (n, ops), (seq, feed_ops) in zip(writes, batches, strict=False):
                want = dict(state)
                apply(want, ops)
                got = dict(state)
                apply(got, feed_ops)
                assert got == want, f"{where}: write {n} {ops} is in the feed as {feed_ops}"
                if acks.get(n) is not None:
                    assert acks[n] == seq, (
                        f"{where}: write {n} acknowledged as seq {acks[n]}, in the feed {seq}"
                    )
                state = want
                history.append((seq, dict(state)))
                timeline[-1] = timeline[-1]._replace(end=returned.get(n, float("inf")))
                timeline.append(Era(state, led.issued[n], float("inf")))
            contents = {k.decode(): v.decode() for k, v in db.scan()}
            assert contents == state, f"{where}: the contents are not the model after {len(batches)} writes"
            for seq, then in rng.sample(history, min(len(history), 12)):
                with db.snapshot(at_seq=seq) as snap:
                    old = {k.decode(): v.decode() for k, v in snap.scan()}
                assert old == then, f"{where}: the snapshot at seq {seq} differs from the model"
            if writes:
                _check_at_time(db, timeline, led.issued[writes[0][0]], rng, where)
            if threshold:
                db.compact_journal()
        # Between rounds, as an operator's maintenance would: compact everything (folding
        # merges, dropping range-deleted rows within the window's rules) and collect garbage
        # (the WAL kept for the feed); the next round's reads go through both.
        compact_until_idle(url)
        gc = GarbageCollector.open(url, GcOptions(min_age_s=0, wal_retention_s=3600))
        try:
            gc.run_once()
        finally:
            gc.close()
    print(f"{ROUNDS} rounds: {len(history)} writes recovered, {total_acked} acknowledged")
    assert total_acked > ROUNDS, f"the workers acknowledged only {total_acked} writes"
    report = verify(url, deep=True)
    assert report.ok, report.problems

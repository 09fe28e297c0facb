"""kill -9 crash loop with an acknowledged-writes ledger (reliability goal G4).

A writer process (``engine_kill_worker.py``) writes a random mix of durable
and non-durable puts, deletes, batches and flushes, logging each write before
it is issued and each acknowledgement after it returns. The test kills it with
SIGKILL after a random 0.2-1.2 s, reopens the database in this process and
checks the recovered contents against the ledger: every acknowledged write is
there, and the database equals the acknowledged writes plus a prefix of the
unacknowledged ones (no holes, nothing invented). Then the next round starts
a new writer on the same database, which must fence the dead one and replay
its WAL.

Rounds: ``SHALEDB_KILL_ROUNDS`` (default 12 on a local directory, a third of
that on moto S3). Each round's seed is printed in the failure message.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, Settings
from shaledb.testing.model import HistoryModel

ROUNDS = int(os.environ.get("SHALEDB_KILL_ROUNDS", "12"))
WORKER = Path(__file__).with_name("engine_kill_worker.py")


def _replay_ledger(model: HistoryModel, ledger: Path) -> tuple[int, int]:
    """Feed one round's ledger into the model; returns (writes, acknowledged)."""
    numbers: dict[int, int] = {}
    acked = 0
    for line in ledger.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the line being written when the process died
        if "w" in rec:
            ops = [(k.encode(), None if v is None else v.encode()) for k, v in rec["ops"]]
            numbers[rec["w"]] = model.write(ops)
        elif "ack" in rec:
            model.ack(numbers[rec["ack"]])
            acked = max(acked, rec["ack"])
    return len(numbers), acked


def _kill_loop(url: str, env: dict[str, str], tmp: Path, rounds: int, open_db: Any, base_seed: int) -> None:
    model = HistoryModel()
    total_writes = total_acked = 0
    for r in range(rounds):
        seed = base_seed + r
        ledger = tmp / f"ledger-{r}.jsonl"
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), url, str(ledger), str(seed), str(r * 1_000_000)],
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        rng = random.Random(seed)
        try:
            deadline = time.monotonic() + 60
            while not (ledger.exists() and "opened" in ledger.read_text()):
                assert proc.poll() is None, (
                    f"round {r} (seed {seed}): the writer died: {proc.stderr.read()[-3000:]}"
                )  # type: ignore[union-attr]
                assert time.monotonic() < deadline, f"round {r}: the writer did not open"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.2, 1.2))
            assert proc.poll() is None, (
                f"round {r} (seed {seed}): the writer exited: {proc.stderr.read()[-3000:]}"
            )  # type: ignore[union-attr]
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        writes, acked = _replay_ledger(model, ledger)
        total_writes += writes
        total_acked += acked
        with open_db() as db:
            got = dict(db.scan())
        try:
            model.resolve_crash(got)
        except AssertionError as exc:
            raise AssertionError(f"round {r} (seed {seed}, ledger {ledger}): {exc}") from None
    assert total_acked > rounds, f"the writers acknowledged only {total_acked} writes in {rounds} rounds"


def _settings() -> Settings:
    return Settings(compactor=None, garbage_collector=None, l0_max_ssts=1_000_000)


@pytest.mark.slow
def test_sigkill_loop_on_a_local_directory(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    _kill_loop(url, {}, tmp_path, ROUNDS, lambda: Db.open(url, settings=_settings()), base_seed=1000)


@pytest.mark.slow
def test_sigkill_loop_on_s3(tmp_path: Path, s3_url_factory: Any) -> None:
    loc = s3_url_factory()
    _kill_loop(
        loc.url,
        loc.env(),
        tmp_path,
        max(1, ROUNDS // 3),
        lambda: Db.open(store=loc.open(), settings=_settings()),
        base_seed=2000,
    )

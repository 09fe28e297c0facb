"""Real processes racing to open one database (reliability goal G5).

N writer processes (``engine_race_worker.py``) open the same database at
once -- on a local directory and on the moto S3 server -- and write durable
puts. Checks:

* an open either succeeds or fails with FencedError (it saw a newer epoch);
* in the final phase (one more durable put and ``flush(memtable=True)`` each,
  after everyone stopped opening) exactly one process succeeds: the one with
  the highest epoch; every other gets FencedError -- never success, never
  another error;
* in "barrier" mode (all open, then all write) every process but the survivor
  is fenced at its very first write;
* reopening afterwards shows every acknowledged write with its value, none of
  the writes that raised FencedError, and nothing that was never written.

Rounds: ``SHALEDB_RACE_ROUNDS`` (default 2 per store and mode) of
``SHALEDB_RACE_WRITERS`` (default 4) processes.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from shaledb import Db, Settings

ROUNDS = int(os.environ.get("SHALEDB_RACE_ROUNDS", "2"))
WRITERS = int(os.environ.get("SHALEDB_RACE_WRITERS", "4"))
WRITES = 12
WORKER = Path(__file__).with_name("engine_race_worker.py")
TIMEOUT_S = 60.0


class Worker:
    def __init__(self, url: str, wid: int, mode: str, env: dict[str, str], jitter_ms: int) -> None:
        self.wid = wid
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), url, str(wid), str(WRITES), mode, str(jitter_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.log: list[dict[str, Any]] = []
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            if line.strip():
                self.events.put(json.loads(line))
        self.events.put({"event": "eof"})

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def until(self, *names: str) -> dict[str, Any]:
        """Events up to the first named one (which is returned)."""
        while True:
            try:
                ev = self.events.get(timeout=TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(
                    f"worker {self.wid}: no {names} within {TIMEOUT_S}s; log {self.log}"
                ) from None
            self.log.append(ev)
            if ev["event"] == "eof":
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"worker {self.wid} exited early (rc {self.proc.poll()}): {err[-3000:]}")
            if ev["event"] in names:
                return ev

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _race(url: str, mode: str, env: dict[str, str], open_db: Callable[[], Db], jitter_ms: int) -> None:
    workers = [Worker(url, i, mode, env, jitter_ms) for i in range(WRITERS)]
    try:
        for w in workers:
            w.until("ready")
        for w in workers:
            w.send("open")
        opened: dict[int, int] = {}
        for w in workers:
            ev = w.until("opened", "open_failed")
            if ev["event"] == "opened":
                opened[w.wid] = ev["epoch"]
            else:
                assert ev["error"] == "FencedError", f"worker {w.wid} failed to open: {ev}"
        assert opened, "no process managed to open the database"
        assert len(set(opened.values())) == len(opened), f"two writers share an epoch: {opened}"
        live = [w for w in workers if w.wid in opened]
        if mode == "barrier":
            for w in live:
                w.send("write")
        for w in live:
            w.until("written")
        for w in live:
            w.send("final")
        finals = {w.wid: w.until("final") for w in live}
        for w in workers:
            w.send("close")
            w.until("closed")
            assert w.proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        for w in workers:
            w.kill()

    survivor = max(opened, key=lambda wid: opened[wid])
    outcomes = {wid: ev["outcome"] for wid, ev in finals.items()}
    assert outcomes[survivor] == "ok", f"the newest writer {survivor} failed: {finals[survivor]}"
    others = {wid: o for wid, o in outcomes.items() if wid != survivor}
    assert all(o == "fenced" for o in others.values()), (
        f"split brain or bad error: {outcomes}, epochs {opened}"
    )

    acked: dict[str, str] = {}
    refused: set[str] = set()
    attempted: set[str] = set()
    for w in workers:
        for ev in w.log:
            if "key" in ev:
                attempted.add(ev["key"])
            if ev["event"] == "ack":
                acked[ev["key"]] = ev["value"]
            elif ev["event"] == "fenced" or (ev["event"] == "final" and ev["outcome"] == "fenced"):
                refused.add(ev["key"])
            elif ev["event"] == "error":
                raise AssertionError(f"worker {w.wid}: unexpected error {ev}")
        if mode == "barrier" and w.wid != survivor and w.wid in opened:
            assert not any(ev["event"] == "ack" for ev in w.log), (
                f"zombie {w.wid} acknowledged a write: {w.log}"
            )
    survivor_keys = [k for k in acked if k.startswith(f"w{survivor}-")]
    assert len(survivor_keys) == WRITES + 1

    with open_db() as db:
        got = {k.decode(): v.decode() for k, v in db.scan()}
    missing = {k: v for k, v in acked.items() if got.get(k) != v}
    assert not missing, f"acknowledged writes lost or changed: {missing}"
    assert not (refused & set(got)), f"writes refused with FencedError are visible: {refused & set(got)}"
    assert set(got) <= attempted, f"keys nobody wrote: {set(got) - attempted}"


def _settings() -> Settings:
    return Settings(compactor=None, garbage_collector=None, l0_max_ssts=1_000_000)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["barrier", "eager"])
def test_processes_race_to_open_a_local_directory(tmp_path: Path, mode: str) -> None:
    for r in range(ROUNDS):
        url = str(tmp_path / f"db-{r}")
        _race(url, mode, {}, lambda url=url: Db.open(url, settings=_settings()), jitter_ms=20)  # type: ignore[misc]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["barrier", "eager"])
def test_processes_race_to_open_on_s3(s3_url_factory: Any, mode: str) -> None:
    for _ in range(ROUNDS):
        loc = s3_url_factory()
        _race(
            loc.url,
            mode,
            loc.env(),
            lambda loc=loc: Db.open(store=loc.open(), settings=_settings()),  # type: ignore[misc]
            jitter_ms=5,
        )

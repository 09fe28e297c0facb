"""A writer process for the open race (run by test_engine_race.py, not collected by pytest).

    python engine_race_worker.py URL WORKER_ID N_WRITES MODE JITTER_MS

Talks JSON lines on stdout and takes commands on stdin, so the parent can
line the processes up: ``ready`` -> "open" -> ``opened``/``open_failed`` ->
"write" -> ``ack``... (``fenced``/``error`` end the writes) -> "final" -> one
more durable put and ``flush(memtable=True)`` -> ``final`` -> "close" ->
``closed``. MODE "barrier" waits for "write" after opening; MODE "eager"
writes at once after opening. Every store call first waits a random
0..JITTER_MS milliseconds (seeded by the worker id), which widens the windows
in which the processes' opens interleave. S3 credentials and endpoint come
from AWS_* environment variables.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def say(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def expect(command: str) -> None:
    line = sys.stdin.readline().strip()
    if line != command:
        raise SystemExit(f"expected {command!r}, got {line!r}")


def main() -> int:
    url, wid, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    jitter_s = float(sys.argv[5]) / 1000
    import random

    import shaledb
    from shaledb import FencedError, Settings, ShaleError
    from shaledb.clock import SYSTEM_CLOCK
    from shaledb.store import LatencyStore, open_store

    settings = Settings(
        compactor=None,
        garbage_collector=None,
        l0_sst_size_bytes=8 << 20,
        max_unflushed_bytes=32 << 20,
        l0_max_ssts=1_000_000,
        retry=shaledb.RetryOptions(max_attempts=8, initial_backoff_s=0.01, max_backoff_s=0.2),
    )
    say(event="ready", worker=wid)
    expect("open")
    try:
        store = LatencyStore(open_store(url), SYSTEM_CLOCK, 0.0, jitter_s, random.Random(wid))
        db = shaledb.Db.open(store=store, settings=settings)
    except ShaleError as exc:
        say(event="open_failed", worker=wid, error=type(exc).__name__, message=str(exc))
        expect("close")
        say(event="closed", worker=wid)
        return 0
    say(event="opened", worker=wid, epoch=db.epoch)
    if mode == "barrier":
        expect("write")
    stopped = False
    for j in range(n):
        key, value = f"w{wid}-{j:03d}", f"{wid}:{j}:{db.epoch}"
        try:
            db.put(key.encode(), value.encode())
        except FencedError:
            say(event="fenced", worker=wid, key=key, value=value)
            stopped = True
            break
        except ShaleError as exc:
            say(event="error", worker=wid, key=key, value=value, error=type(exc).__name__, message=str(exc))
            stopped = True
            break
        say(event="ack", worker=wid, key=key, value=value)
    say(event="written", worker=wid)
    expect("final")
    key, value = f"w{wid}-final", f"{wid}:final:{db.epoch}"
    try:
        db.put(key.encode(), value.encode())
        say(event="ack", worker=wid, key=key, value=value)
        db.flush(memtable=True)
        say(event="final", worker=wid, outcome="ok")
    except FencedError:
        say(event="final", worker=wid, outcome="fenced", key=key, value=value, already_stopped=stopped)
    except ShaleError as exc:
        say(event="final", worker=wid, outcome=type(exc).__name__, message=str(exc))
    expect("close")
    db.close()
    say(event="closed", worker=wid)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Chaos runs: a writer and a reader process on an S3 server behind a :class:`FaultProxy`.

:func:`run_chaos` starts the processes of :mod:`shaledb.testing.chaos_worker`
with their endpoint at the proxy, lets them run while the proxy delays,
resets and fails requests, kills both with SIGKILL at a random moment, and
repeats (each new writer fences the previous one). Then it reopens the
database over a clean connection and checks the whole recorded history with
:func:`shaledb.testing.linearizability.check`:

* every writer session is a *strong* process (its acknowledged writes obey
  real time), its writes take effect as a prefix (``prefix=True``), and a
  write whose outcome it never learned may take effect only before the next
  session's open returned (fencing);
* the reader is a *weak* process: its scans must be explained by one order
  in which it never goes back (sequential consistency);
* a final strong read of the reopened database's whole contents must come
  after every acknowledged write: nothing acknowledged is lost, nothing is
  invented, no batch is torn.

Values are compared by their version tag (the text before ``:``), which
is unique per written value.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .faultproxy import FaultProxy
from .ledger import read_ledger
from .linearizability import Op, Verdict, check


def _tag(v: bytes | str | None) -> bytes | None:
    if v is None:
        return None
    b = v.encode("latin-1") if isinstance(v, str) else v
    return b.split(b":", 1)[0]


@dataclass
class ChaosStats:
    rounds: int = 0
    writer_kills: int = 0
    reader_kills: int = 0
    sessions: int = 0
    writes_issued: int = 0
    writes_acknowledged: int = 0
    writes_unknown: int = 0
    reader_scans: int = 0
    worker_errors: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    states_explored: int = 0

    def summary(self) -> str:
        f = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()) if k != "pass")
        return (
            f"{self.rounds} rounds, kills: writer {self.writer_kills}, reader {self.reader_kills}; "
            f"writer sessions {self.sessions}, writes issued {self.writes_issued}, acknowledged "
            f"{self.writes_acknowledged}, outcome unknown {self.writes_unknown}; reader scans "
            f"{self.reader_scans}; errors surfaced to the processes {self.worker_errors}; faults "
            f"injected: {f or 'none'} (requests passed {self.faults.get('pass', 0)}); "
            f"checker states {self.states_explored}"
        )


def build_history(
    writer_ledgers: list[Path], reader_ledgers: list[Path], stats: ChaosStats
) -> tuple[list[Op], float]:
    """The history of every writer session and reader scan; returns it with the last time seen."""
    ops: list[Op] = []
    last_t = 0.0
    session = 0
    unresolved: list[int] = []  # unknown-outcome writes of the last session seen
    for path in writer_ledgers:
        open_ops: dict[int, int] = {}  # this session's writes not yet acknowledged: number -> index
        for rec in read_ledger(path):
            last_t = max(last_t, rec.get("t", 0.0))
            if "open" in rec:
                # Fencing: no earlier session's write may take effect after this open returned.
                for j in list(open_ops.values()) + unresolved:
                    ops[j] = _with(ops[j], deadline=rec["t"])
                unresolved, open_ops = [], {}
                session += 1
                stats.sessions += 1
            elif "w" in rec:
                open_ops[rec["w"]] = len(ops)
                stats.writes_issued += 1
                ops.append(
                    Op(
                        f"writer{session}",
                        rec["t"],
                        None,
                        writes=tuple((k, _tag(v)) for k, v in rec["ops"]),
                        label=f"w{rec['w']}",
                    )
                )
            elif "ack" in rec:
                for n in sorted(n for n in open_ops if n <= rec["ack"]):
                    j = open_ops.pop(n)
                    ops[j] = _with(ops[j], ret=rec["t"])
            elif "err" in rec:
                stats.worker_errors += 1
        unresolved.extend(open_ops.values())  # the killed process's last session
    stats.writes_unknown = sum(1 for o in ops if not o.is_read and o.ret is None)
    for r, path in enumerate(reader_ledgers):
        for rec in read_ledger(path):
            if "r" in rec:
                stats.reader_scans += 1
                seen = {k.encode("latin-1"): _tag(v) for k, v in rec["r"].items()}
                ops.append(Op(f"reader{r}", rec["t0"], rec["t"], read=seen, read_all=True, label="scan"))
            elif "err" in rec:
                stats.worker_errors += 1
    stats.writes_acknowledged = sum(1 for o in ops if not o.is_read and o.ret is not None)
    return ops, last_t


def _with(op: Op, **changes: Any) -> Op:
    from dataclasses import replace

    return replace(op, **changes)


def run_chaos(
    endpoint: str,
    url: str,
    env: Mapping[str, str],
    open_clean: Callable[[], Any],
    workdir: Path,
    *,
    seed: int,
    rounds: int,
    rates: Mapping[str, float],
    round_s: tuple[float, float] = (1.0, 3.0),
    log: Callable[[str], None] = print,
) -> tuple[ChaosStats, Verdict]:
    """Run the chaos rounds against the S3 server at ``endpoint`` (see module docstring).

    ``env`` is the child processes' store environment (its endpoint is replaced by
    the proxy's); ``open_clean()`` opens a writer on the database directly.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    stats = ChaosStats()
    log(f"chaos: seed {seed}, {rounds} rounds, fault rates {dict(rates)}")
    writer_ledgers: list[Path] = []
    reader_ledgers: list[Path] = []
    with FaultProxy(endpoint, seed=seed, rates=rates) as proxy:
        child_env = {**os.environ, **env, "AWS_ENDPOINT_URL": proxy.url}
        for r in range(rounds):
            wl, rl = workdir / f"writer-{r}.jsonl", workdir / f"reader-{r}.jsonl"
            writer_ledgers.append(wl)
            reader_ledgers.append(rl)
            mod = "shaledb.testing.chaos_worker"
            procs = []
            t_start = time.monotonic()
            with (
                (workdir / f"writer-{r}.err").open("wb") as we,
                (workdir / f"reader-{r}.err").open("wb") as re_,
            ):
                wseed = str(rng.randrange(1 << 31))
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", mod, "writer", url, str(wl), wseed, str(r << 20)],
                        env=child_env,
                        stderr=we,
                    )
                )
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", mod, "reader", url, str(rl), "0", "0"],
                        env=child_env,
                        stderr=re_,
                    )
                )
            _wait_ready(wl, procs[0], f"round {r} writer", workdir / f"writer-{r}.err")
            _wait_ready(rl, procs[1], f"round {r} reader", workdir / f"reader-{r}.err")
            log(f"  chaos round {r}: both processes ready after {time.monotonic() - t_start:.1f} s")
            try:
                time.sleep(rng.uniform(*round_s))
                for p, name in zip(procs, ("writer", "reader"), strict=True):
                    if p.poll() is not None:
                        raise AssertionError(f"chaos round {r} (seed {seed}): the {name} exited early")
                rng.shuffle(procs)
                for p in procs:
                    p.send_signal(signal.SIGKILL)
                    time.sleep(rng.uniform(0, 0.2))
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                    p.wait()
            stats.rounds += 1
            stats.writer_kills += 1
            stats.reader_kills += 1
        stats.faults = dict(proxy.counts)
    history, last_t = build_history(writer_ledgers, reader_ledgers, stats)
    t = time.monotonic()
    with open_clean() as db:
        final = {k: _tag(v) for k, v in db.scan()}
    history.append(
        Op("final", max(t, last_t + 1e-6), time.monotonic(), read=final, read_all=True, label="final")
    )
    writer_procs = {o.process for o in history if o.process.startswith("writer")} | {"final"}
    verdict = check(history, strong=writer_procs, prefix=True)
    stats.states_explored = verdict.explored
    log(f"chaos: {stats.summary()}; verdict {'ok' if verdict.ok else verdict.reason}")
    return stats, verdict


def _wait_ready(ledger: Path, proc: subprocess.Popen[bytes], what: str, err: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if b'"ready"' in ledger.read_bytes():
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"{what} died: {err.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never got ready")
        time.sleep(0.01)


__all__ = ["ChaosStats", "build_history", "run_chaos"]

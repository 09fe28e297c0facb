"""The crash soak: kill -9 processes of every role at random moments, then check everything.

One :class:`CrashSoak` owns one database (a local directory or a prefix on an
S3 server, value separation on or off) and the reference model of its
contents (:class:`~shaledb.testing.model.HistoryModel`). Each :meth:`round`
starts a process of one role (:mod:`shaledb.testing.soak_worker`: the writer,
a standalone compactor, a GC, a reader, a process creating checkpoints,
clones or backups, compacting the journal or committing bulk ingests), waits
until it is under way, lets it run a random 0.05-1 s, kills it with SIGKILL
and then, in this process:

1. replays the process's ledger into the model and reopens the database:
   every acknowledged write must be there with its value, and the contents
   must equal the acknowledged writes plus a prefix of the unacknowledged
   ones (:meth:`HistoryModel.resolve_crash`);
2. runs :func:`shaledb.admin.verify.verify` (deep every fourth round): manifest
   invariants, every referenced object present, sizes and checksums;
3. checks what the role promises: a reader's states were prefixes of the
   write history and never went back (:func:`prefix_positions`); every
   checkpoint the ledger says was created is listed; the clone being created
   reopens (its creation resumes) with the parent's contents at that moment,
   and a finished one still does; an interrupted backup can be re-run and
   opens with the source's contents, a finished one opens as recorded.

After the checks every clone and backup the round made is destroyed
(:func:`shaledb.admin.destroy`, hard): a clone pins its parent's objects with a
checkpoint that never expires, and backups copy the whole database, so kept
ones would make the database (and, on S3, the bucket the server lists by
walking it) grow with every round and later rounds ever slower. Destroying a
clone releases its checkpoint in the parent, so the parent's GC can collect
again; what a kill can break is checked before. Then a garbage collector pass
runs (``min_age_s=0``: nothing else runs between rounds), as an operator's GC
would over a long life: without it the manifests and WAL objects of hundreds of
short sessions pile up (writers are mostly killed before their embedded GC's
first pass), and every open, reader poll and ``verify`` lists them -- on the S3
server, a listing of 500 manifests took 1.7 s, and rounds slowed tenfold.
What no GC may delete still grows: one fencing WAL object per writer open
(kept forever, see :mod:`shaledb.admin.gc`), a few per round. So with
``rotate_every`` a soak moves on to a fresh database (a sibling of the
target's URL, ``<url>-g1``, ``-g2``, ...) every that many rounds of a
database; each still lives through that many kills of every role.

Every round's seed is printed; a failure names the round, seed and ledger, and
``SoakStats`` adds up the figures docs/reliability.md reports.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ShaleError
from .ledger import read_ledger, state_digest
from .linearizability import PrefixViolation, digests_of_prefixes, prefix_positions
from .model import HistoryModel
from .soak_worker import ROLES, settings_for


@dataclass(frozen=True)
class SoakTarget:
    """Where a soak's database lives: its URL, a sibling location for clones and
    backups, the child processes' environment and this process's store options."""

    name: str
    url: str
    aux: str
    env: Mapping[str, str] = field(default_factory=dict)
    store_options: Mapping[str, Any] | None = None


@dataclass
class SoakStats:
    kills: Counter[str] = field(default_factory=Counter)
    writes_issued: int = 0
    writes_acknowledged: int = 0
    unacknowledged_kept: int = 0
    unacknowledged_lost: int = 0
    acknowledged_lost: int = 0
    verifies: int = 0
    reader_states_checked: int = 0
    clones_reopened: int = 0
    backups_checked: int = 0
    checkpoints_checked: int = 0
    released: int = 0
    gc_passes: int = 0
    gc_deleted: int = 0
    rotations: int = 0
    seconds: float = 0.0

    def add(self, other: SoakStats) -> None:
        self.kills.update(other.kills)
        for name in (
            "writes_issued",
            "writes_acknowledged",
            "unacknowledged_kept",
            "unacknowledged_lost",
            "acknowledged_lost",
            "verifies",
            "reader_states_checked",
            "clones_reopened",
            "backups_checked",
            "checkpoints_checked",
            "released",
            "gc_passes",
            "gc_deleted",
            "rotations",
            "seconds",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> str:
        kills = ", ".join(f"{r} {self.kills[r]}" for r in ROLES if self.kills[r])
        return (
            f"kills {sum(self.kills.values())} ({kills}); writes issued {self.writes_issued}, "
            f"acknowledged {self.writes_acknowledged}, acknowledged lost {self.acknowledged_lost}, "
            f"unacknowledged kept {self.unacknowledged_kept} / dropped {self.unacknowledged_lost}; "
            f"verify runs {self.verifies}, reader states {self.reader_states_checked}, "
            f"clones reopened {self.clones_reopened}, backups checked {self.backups_checked}, "
            f"checkpoints checked {self.checkpoints_checked}, clones and backups destroyed after their "
            f"check {self.released}; GC passes between rounds {self.gc_passes} (objects deleted "
            f"{self.gc_deleted}), fresh databases {self.rotations}; rounds took {self.seconds:.0f} s "
            "(summed over the databases, which run in parallel)"
        )


class SoakFailure(AssertionError):
    pass


class CrashSoak:
    """One database under repeated kills (see module docstring)."""

    def __init__(
        self,
        target: SoakTarget,
        workdir: Path,
        *,
        vsep: bool,
        kill_after_s: tuple[float, float] = (0.05, 1.0),
        log: Callable[[str], None] = print,
        rotate_every: int | None = None,
    ) -> None:
        self.target, self.workdir, self.vsep = target, workdir, vsep
        self.kill_after_s = kill_after_s
        self.log = log
        self.model = HistoryModel()
        self.rotate_every = rotate_every
        self.generation = 0
        self.url = target.url
        """The database now under test: ``target.url``, then a fresh sibling every
        ``rotate_every`` rounds (see module docstring)."""
        self.stats = SoakStats()
        self.rounds = 0
        workdir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ helpers

    def _opts(self) -> dict[str, Any]:
        return dict(self.target.store_options or {})

    def _open(self, url: str | None = None) -> Any:
        import shaledb

        return shaledb.Db.open(
            url or self.url, settings=settings_for(self.vsep), store_options=self._opts() or None
        )

    def _store(self, url: str) -> Any:
        from shaledb.store import open_store

        return open_store(url, **self._opts())

    # ------------------------------------------------------------------ a round

    def round(self, role: str, seed: int) -> None:
        """Start a ``role`` process, kill it at a random moment, check everything."""
        r = self.rounds
        self.rounds += 1
        if self.rotate_every and r and r % self.rotate_every == 0:
            self.generation += 1
            self.url = f"{self.target.url}-g{self.generation}"
            self.model = HistoryModel()
            self.stats.rotations += 1
        t0 = time.monotonic()
        ledger = self.workdir / f"{self.target.name}-{r}-{role}.jsonl"
        errlog = self.workdir / f"{self.target.name}-{r}-{role}.err"
        where = (
            f"{self.target.name} vsep={int(self.vsep)} round {r} role {role} seed {seed} at {self.url} "
            f"(ledger {ledger})"
        )
        cmd = [
            sys.executable,
            "-m",
            "shaledb.testing.soak_worker",
            role,
            self.url,
            self.target.aux,
            str(ledger),
            str(seed),
            str(r * 1_000_000),
            "1" if self.vsep else "0",
        ]
        with errlog.open("wb") as err:
            proc = subprocess.Popen(cmd, env={**os.environ, **self.target.env}, stderr=err)
        rng = random.Random(seed)
        try:
            deadline = time.monotonic() + 120
            while not _has_ready(ledger):
                if proc.poll() is not None:
                    raise SoakFailure(f"{where}: the process died: {errlog.read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise SoakFailure(f"{where}: the process never got ready")
                time.sleep(0.01)
            time.sleep(rng.uniform(*self.kill_after_s))
            if proc.poll() is not None:
                raise SoakFailure(f"{where}: the process exited: {errlog.read_text()[-3000:]}")
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.stats.kills[role] += 1
        try:
            self._check(role, ledger, r)
        except (AssertionError, ShaleError) as exc:
            raise SoakFailure(f"{where}: {type(exc).__name__}: {exc}") from None
        self.stats.seconds += time.monotonic() - t0

    def _check(self, role: str, ledger: Path, r: int) -> None:
        round_base = self.model.current()
        numbers: dict[int, int] = {}
        writes: list[tuple[tuple[bytes, bytes | None], ...]] = []
        observations: list[tuple[str, int]] = []
        records: list[dict[str, Any]] = []
        acked = 0
        for rec in read_ledger(ledger):
            if "w" in rec:
                numbers[rec["w"]] = self.model.write(rec["ops"])
                writes.append(tuple(rec["ops"]))
            elif "ack" in rec:
                self.model.ack(numbers[rec["ack"]])
                acked = max(acked, rec["ack"])
            elif "r" in rec:
                observations.append((rec["r"], len(writes)))
            else:
                records.append(rec)
        self.stats.writes_issued += len(numbers)
        self.stats.writes_acknowledged += acked
        pending_before = len(self.model.pending)
        with self._open() as db:
            got = dict(db.scan())
        kept = self.model.resolve_crash(got)  # raises ModelMismatch naming each key
        self.stats.unacknowledged_kept += kept
        self.stats.unacknowledged_lost += pending_before - kept
        from shaledb.admin.verify import verify

        report = verify(self.url, deep=r % 4 == 0, store_options=self._opts() or None)
        if not report.ok:
            raise AssertionError(f"verify found problems: {report.problems[:10]}")
        self.stats.verifies += 1
        if role == "reader" and observations:
            digests = digests_of_prefixes(round_base, writes, state_digest)
            try:
                prefix_positions(digests, observations)
            except PrefixViolation as exc:
                raise AssertionError(f"reader: {exc}") from None
            self.stats.reader_states_checked += len(observations)
        elif role == "checkpoint":
            self._check_checkpoints(records)
        elif role == "clone":
            self._check_clones(records)
            self._release(records, "clone")
        elif role == "backup":
            self._check_backups(records)
            self._release(records, "backup")
        self._collect()

    def _collect(self) -> None:
        """A GC pass between rounds (see module docstring)."""
        import shaledb

        gc = shaledb.GarbageCollector.open(
            self.url,
            shaledb.GcOptions(min_age_s=0.0),
            settings=settings_for(self.vsep),
            store_options=self._opts() or None,
        )
        try:
            self.stats.gc_passes += 1
            self.stats.gc_deleted += sum(len(v) for v in gc.run_once().deleted.values())
        finally:
            gc.close()

    def _release(self, records: list[dict[str, Any]], kind: str) -> None:
        """Destroy the round's clones or backups once checked (see module docstring).

        Every one of them is whole by now: only the last can have been interrupted,
        and its check reopened (clone) or re-ran (backup) it."""
        from shaledb import admin

        seen: list[str] = []
        for rec in records:
            if kind in rec and rec[kind] not in seen:
                seen.append(rec[kind])
        for url in seen:
            admin.destroy(url, soft=False, store_options=self._opts() or None)
            self.stats.released += 1

    def _check_checkpoints(self, records: list[dict[str, Any]]) -> None:
        from shaledb import admin

        created = {rec["cp"] for rec in records if "cp" in rec}
        deleting = {rec["cp_del"] for rec in records if "cp_del" in rec}
        listed = {str(cp.id) for cp in admin.list_checkpoints(self.url, store_options=self._opts() or None)}
        missing = created - deleting - listed
        if missing:
            raise AssertionError(f"checkpoints created and never deleted are gone: {sorted(missing)}")
        self.stats.checkpoints_checked += len(created)

    def _check_clones(self, records: list[dict[str, Any]]) -> None:
        import shaledb

        started = [rec for rec in records if "clone" in rec]
        done = {rec["clone_done"] for rec in records if "clone_done" in rec}
        finished = [rec for rec in started if rec["clone"] in done]
        check = started[-1:] + finished[-1:]
        for rec in check:
            curl = rec["clone"]
            with shaledb.Db.open_from_checkpoint(
                curl,
                self.url,
                settings=settings_for(self.vsep),
                store=self._store(curl),
                parent_store=self._store(self.url),
            ) as clone:
                got = state_digest(clone.scan())
            if got != rec["digest"]:
                state = "finished" if curl in done else "interrupted"
                raise AssertionError(f"{state} clone {curl} reopened with other contents than its parent's")
            self.stats.clones_reopened += 1

    def _check_backups(self, records: list[dict[str, Any]]) -> None:
        started = [rec for rec in records if "backup" in rec]
        done = {rec["backup_done"] for rec in records if "backup_done" in rec}
        for rec in started[-1:]:
            dest = rec["backup"]
            if dest in done:
                with self._open(dest) as b:
                    got = state_digest(b.scan())
                if got != rec["digest"]:
                    raise AssertionError(f"finished backup {dest} opens with other contents")
            else:
                with self._open() as db:
                    want = state_digest(db.scan())
                    db.backup(dest, store_options=self._opts() or None, workers=2)
                with self._open(dest) as b:
                    got = state_digest(b.scan())
                if got != want:
                    raise AssertionError(f"backup {dest} re-run after the kill opens with other contents")
            self.stats.backups_checked += 1


def _has_ready(ledger: Path) -> bool:
    try:
        with ledger.open("rb") as f:
            return b'"ready"' in f.read()
    except FileNotFoundError:
        return False


def plan_roles(writer_kills: int, other_kills: int, rng: random.Random) -> list[str]:
    """A shuffled list of roles: ``writer_kills`` writers and ``other_kills`` others spread
    evenly over the other roles."""
    others = [r for r in ROLES if r != "writer"]
    roles = ["writer"] * writer_kills + [others[i % len(others)] for i in range(other_kills)]
    rng.shuffle(roles)
    return roles


def run_soak(
    targets: list[tuple[SoakTarget, bool]],
    workdir: Path,
    *,
    writer_kills: int,
    other_kills: int,
    seed: int,
    log: Callable[[str], None] = print,
    kill_after_s: tuple[float, float] = (0.05, 1.0),
    max_seconds: float | None = None,
    weights: list[int] | None = None,
    rotate_every: int | None = None,
) -> SoakStats:
    """Spread the kills over ``targets`` (each a location and whether value separation
    is on), round-robin; returns the combined figures. With ``max_seconds``, no new
    round starts after that long (the figures then say how many kills ran). ``weights``
    (one per target) give some databases a larger share of the kills; ``rotate_every``
    moves each on to a fresh database after that many rounds (see module docstring)."""
    log(
        f"crash soak: seed {seed}, {writer_kills} writer kills + {other_kills} other kills "
        f"over {len(targets)} databases"
    )
    rng = random.Random(seed)
    soaks = [
        CrashSoak(
            t,
            workdir / f"{t.name}-v{int(v)}",
            vsep=v,
            kill_after_s=kill_after_s,
            log=log,
            rotate_every=rotate_every,
        )
        for t, v in targets
    ]
    roles = plan_roles(writer_kills, other_kills, rng)
    # Each database gets every len(soaks)-th kill; the journal role needs value separation.
    shares: list[list[tuple[str, int]]] = [[] for _ in soaks]
    slots = [k for k, w in enumerate(weights or [1] * len(soaks)) for _ in range(w)]
    for i, role in enumerate(roles):
        k = slots[i % len(slots)]
        if role == "journal" and not soaks[k].vsep:
            k = next((j for j, s in enumerate(soaks) if s.vsep), k)
        shares[k].append((role, rng.randrange(1 << 31)))
    done = [0]
    lock = threading.Lock()
    stop_at = None if max_seconds is None else time.monotonic() + max_seconds
    errors: list[BaseException] = []

    def drive(soak: CrashSoak, share: list[tuple[str, int]]) -> None:
        # The databases are independent and a round mostly waits on its child process,
        # so each runs in its own thread; the first failure stops them all.
        try:
            for role, round_seed in share:
                if errors or (stop_at is not None and time.monotonic() > stop_at):
                    return
                soak.round(role, round_seed)
                with lock:
                    done[0] += 1
                    if done[0] % 25 == 0:
                        running = SoakStats()
                        for other in soaks:
                            running.add(other.stats)
                        log(f"  {done[0]}/{len(roles)} kills done: {running.summary()}")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(s, sh)) for s, sh in zip(soaks, shares, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = SoakStats()
    if errors:
        raise errors[0]
    for s in soaks:
        log(f"  {s.target.name} vsep={int(s.vsep)}: {s.stats.summary()}")
        total.add(s.stats)
    log(f"crash soak total: {total.summary()}")
    return total


__all__ = ["CrashSoak", "SoakFailure", "SoakStats", "SoakTarget", "plan_roles", "run_soak"]

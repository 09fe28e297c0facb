"""A process of the crash soak, killed with SIGKILL at a random moment.

    python -m shaledb.testing.soak_worker ROLE URL AUX LEDGER SEED VERSION VSEP

``ROLE`` is one of :data:`ROLES`. Every role loops until it is killed; the
ones that are not the plain writer alternate short *bursts* of ledgered
writes (open a writer, write, flush to L0, close) with their own operation:
a standalone compactor's run, a GC pass (``min_age_s=0``: nothing else runs
at the same time), checkpoint create/refresh/delete, a clone's creation, a
backup, a journal compaction, a bulk ingest commit, or a reader following a
writer thread. ``AUX`` is a location beside the database (never inside it)
under which clones and backups are created. ``VSEP`` 1 turns value
separation (the value journal) on with a small threshold.

The ledger (:class:`shaledb.testing.ledger.Ledger`) gets ``{"w": n, "ops":
...}`` before each write is issued and ``{"ack": n}`` (fsynced) once it is
acknowledged, plus role records the soak driver checks after the kill (see
:mod:`shaledb.testing.crashsoak`). ``{"ready": ...}`` marks the moment the
driver's kill timer starts.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from .ledger import Ledger, state_digest

if TYPE_CHECKING:
    from ..compaction import Compactor

ROLES: tuple[str, ...] = (
    "writer",
    "compactor",
    "gc",
    "reader",
    "checkpoint",
    "clone",
    "backup",
    "journal",
    "ingest",
)
KEYS = [f"k{i:02d}".encode() for i in range(16)]
VSEP_THRESHOLD = 256


def settings_for(vsep: bool, **extra: Any) -> Any:
    """The settings every soak process and the driver open the database with."""
    import shaledb

    base: dict[str, Any] = dict(
        compactor=None,
        garbage_collector=None,
        l0_sst_size_bytes=4096,
        wal_max_bytes=2048,
        max_unflushed_bytes=1 << 20,
        l0_max_ssts=1_000_000,
        block_size_bytes=512,
        flush_interval_s=0.02,
    )
    if vsep:
        base.update(
            value_separation_threshold=VSEP_THRESHOLD,
            journal_max_bytes=8192,
            journal=shaledb.JournalOptions(single_file_target_pct=90.0, max_run_target_pct=95.0),
        )
    base.update(extra)
    return shaledb.Settings(**base)


class Writes:
    """Random ledgered writes on the 16 keys (puts, deletes, batches; durable or not)."""

    def __init__(self, ledger: Ledger, rng: random.Random, version: int, vsep: bool) -> None:
        self.ledger, self.rng, self.version, self.vsep = ledger, rng, version, vsep
        self.n = 0

    def value(self) -> bytes:
        self.version += 1
        size = self.rng.randrange(0, 700 if self.vsep else 300)
        return f"{self.version}:".encode() + b"x" * size

    def one(self, db: Any, pending: list[tuple[int, Any]]) -> None:
        import shaledb

        rng = self.rng
        r = rng.random()
        if r >= 0.9:
            db.flush(memtable=r >= 0.97)
            if self.n:
                self.ledger.ack(self.n)
            pending.clear()
            return
        self.n += 1
        n = self.n
        durable = rng.random() < 0.5
        if r < 0.6:
            k, v = rng.choice(KEYS), self.value()
            self.ledger.write(n, [(k, v)])
            h = db.put(k, v, durable=durable)
        elif r < 0.75:
            k = rng.choice(KEYS)
            self.ledger.write(n, [(k, None)])
            h = db.delete(k, durable=durable)
        else:
            ops: list[tuple[bytes, bytes | None]] = []
            b = shaledb.WriteBatch()
            for _ in range(rng.randrange(1, 5)):
                k = rng.choice(KEYS)
                if rng.random() < 0.7:
                    v = self.value()
                    ops.append((k, v))
                    b.put(k, v)
                else:
                    ops.append((k, None))
                    b.delete(k)
            self.ledger.write(n, ops)
            h = db.write(b, durable=durable)
        if durable:
            self.ledger.ack(n)
            pending.clear()
        else:
            pending.append((n, h))
            if rng.random() < 0.1:
                wn, wh = pending[rng.randrange(len(pending))]
                wh.wait_durable()
                self.ledger.ack(wn)
                pending[:] = [p for p in pending if p[0] > wn]

    def burst(self, url: str | None, settings: Any, count: int, store: Any = None) -> str:
        """Open a writer, write ``count`` times, flush to L0, close; returns the digest
        of the database's contents afterwards (all of it acknowledged)."""
        import shaledb

        with shaledb.Db.open(url, store=store, settings=settings, seed=self.rng.randrange(1 << 30)) as db:
            pending: list[tuple[int, Any]] = []
            for _ in range(count):
                self.one(db, pending)
            db.flush(memtable=True)
            if self.n:
                self.ledger.ack(self.n)
            return state_digest(db.scan())


def _eager_compactor(url: str, settings: Any, rng: random.Random) -> Compactor:
    """A standalone compactor that merges as soon as there are two of anything, so the
    compactor and GC roles get a compaction to be killed in after every short burst."""
    import shaledb

    return shaledb.Compactor.open(
        url,
        shaledb.CompactorOptions(min_l0_ssts=2, min_merge_runs=2),
        settings=settings,
        seed=rng.randrange(1 << 62),
    )


def run(role: str, url: str, aux: str, ledger: Ledger, seed: int, version: int, vsep: bool) -> None:
    import shaledb
    from shaledb import admin

    rng = random.Random(seed)
    writes = Writes(ledger, rng, version, vsep)
    settings = settings_for(vsep)
    if role == "writer":
        st = settings_for(
            vsep,
            compactor=shaledb.CompactorOptions(poll_interval_s=0.2, min_l0_ssts=4)
            if rng.random() < 0.5
            else None,
            garbage_collector=shaledb.GcOptions(interval_s=0.5, min_age_s=30.0)
            if rng.random() < 0.5
            else None,
        )
        db = shaledb.Db.open(url, settings=st, seed=rng.randrange(1 << 62))
        ledger.log({"ready": db.epoch})
        pending: list[tuple[int, Any]] = []
        while True:
            writes.one(db, pending)
    writes.burst(url, settings, 20)
    if role != "reader":  # the reader is ready once it has scanned (see _reader)
        ledger.log({"ready": role})
    i = 0
    if role == "compactor":
        comp = _eager_compactor(url, settings, rng)
        while True:
            ledger.log({"op": "compact"})
            comp.run_once()
            writes.burst(url, settings, 10)
    elif role == "gc":
        gc = shaledb.GarbageCollector.open(
            url, shaledb.GcOptions(min_age_s=0.0), settings=settings, seed=rng.randrange(1 << 62)
        )
        comp = _eager_compactor(url, settings, rng)
        while True:
            ledger.log({"op": "gc"})
            gc.run_once()
            comp.run_once()
            writes.burst(url, settings, 10)
    elif role == "checkpoint":
        live: list[str] = []
        while True:
            r = rng.random()
            if r < 0.5 or not live:
                cp = admin.create_checkpoint(url, lifetime=600.0, name=f"soak-{seed}")
                live.append(str(cp.id))
                ledger.log({"cp": str(cp.id)})
            elif r < 0.7:
                admin.refresh_checkpoint(url, live[-1], lifetime=900.0)
            elif r < 0.9:
                cp_id = live.pop(rng.randrange(len(live)))
                ledger.log({"cp_del": cp_id})
                admin.delete_checkpoint(url, cp_id)
            else:
                writes.burst(url, settings, 5)
    elif role == "clone":
        digest = writes.burst(url, settings, 5)
        while True:
            i += 1
            curl = f"{aux}/clone-{seed}-{i}"
            ledger.log({"clone": curl, "digest": digest})
            shaledb.Db.open_from_checkpoint(curl, url, settings=settings, seed=rng.randrange(1 << 62)).close()
            ledger.log({"clone_done": curl})
            if rng.random() < 0.3:
                digest = writes.burst(url, settings, 5)
    elif role == "backup":
        with shaledb.Db.open(url, settings=settings, seed=rng.randrange(1 << 62)) as db:
            pending = []
            while True:
                i += 1
                for _ in range(5):
                    writes.one(db, pending)
                db.flush(memtable=rng.random() < 0.5)
                ledger.ack(writes.n)
                pending.clear()
                dest = f"{aux}/backup-{seed}-{i}"
                ledger.log({"backup": dest, "digest": state_digest(db.scan())})
                db.backup(dest, workers=2)
                ledger.log({"backup_done": dest})
    elif role == "journal":
        with shaledb.Db.open(url, settings=settings, seed=rng.randrange(1 << 62)) as db:
            pending = []
            while True:
                for _ in range(8):
                    writes.one(db, pending)
                db.flush(memtable=True)
                ledger.ack(writes.n)
                pending.clear()
                ledger.log({"op": "compact_journal"})
                db.compact_journal(max_runs=2)
    elif role == "ingest":
        from shaledb.bulk.ingest import ingest_columns

        while True:
            keys = sorted(rng.sample(KEYS, rng.randrange(1, 9)))
            values = [writes.value() for _ in keys]
            writes.n += 1
            ledger.write(writes.n, list(zip(keys, values, strict=True)))
            ingest_columns(url, keys, values, settings=settings)
            ledger.ack(writes.n)
            if rng.random() < 0.3:
                writes.burst(url, settings, 5)
    elif role == "reader":
        _reader(url, ledger, writes, settings, rng)
    else:
        raise SystemExit(f"unknown role {role!r}")


def _reader(url: str, ledger: Ledger, writes: Writes, settings: Any, rng: random.Random) -> None:
    """A writer thread writes while a DbReader in this process records every state it sees."""
    import shaledb

    db = shaledb.Db.open(url, settings=settings, seed=rng.randrange(1 << 30))

    def write_forever() -> None:
        pending: list[tuple[int, Any]] = []
        while True:
            writes.one(db, pending)
            time.sleep(0.002)

    reader = shaledb.DbReader.open(url, manifest_poll_interval=0.05)
    threading.Thread(target=write_forever, daemon=True).start()
    ledger.log({"r": state_digest(reader.scan())})
    ledger.log({"ready": "reader"})  # the kill lands while it follows the writer, not while it opens
    while True:
        ledger.log({"r": state_digest(reader.scan())})
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    from .plants import plant_from_env

    plant_from_env()  # a planted-bug test runs the soak against a bug (shaledb.testing.plants)
    role, url, aux, path, seed, version, vsep = argv
    ledger = Ledger(path)
    run(role, url, aux, ledger, int(seed), int(version), vsep == "1")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

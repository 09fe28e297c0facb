"""Model-based test: writes (some with a TTL), snapshots, flushes, compactions, GC
passes, reopens and the passing of time, interleaved at random; every read equals a
dict model (snapshots: the model when they were taken, with expiry judged now).

The writer and the compactor share a manual clock, so TTL expiry (which compaction
turns into tombstones, or drops at the bottom) is deterministic."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from compaction_support import FutureClock, memory_store

from shaledb import CompactorOptions, Db, GarbageCollector, GcOptions, Settings, WriteBatch
from shaledb.compaction import Compactor
from shaledb.db.writer import Snapshot
from shaledb.store import ObjectStore, open_store
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed

Model = dict[bytes, tuple[bytes, "int | None"]]
"""key -> (value, expires_at_ms or None)"""

STEP_SETTINGS = Settings(
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=256 * 1024,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)
COMPACTOR = CompactorOptions(min_l0_ssts=2, min_merge_runs=2, max_sst_size_bytes=4096, max_subcompactions=2)


def expected_scan(model: dict[bytes, bytes], start, end, reverse: bool, limit) -> list:  # type: ignore[no-untyped-def]
    keys = sorted(k for k in model if (start is None or k >= start) and (end is None or k < end))
    if reverse:
        keys.reverse()
    if limit is not None:
        keys = keys[:limit]
    return [(k, model[k]) for k in keys]


def live(model: Model, now_ms: int) -> dict[bytes, bytes]:
    return {k: v for k, (v, exp) in model.items() if exp is None or exp > now_ms}


class Run:
    def __init__(self, store: ObjectStore, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.seed = seed
        self.clock = ManualClock(time.time())
        self.db = Db.open(store=store, settings=STEP_SETTINGS, seed=seed, clock=self.clock)
        self._model: Model = {}
        self.snaps: list[tuple[Snapshot, Model]] = []
        self.compactor = Compactor.open(store=store, options=COMPACTOR, seed=seed, clock=self.clock)
        # A day ahead: expired grace periods and min_age never protect anything here.
        self.gc = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0), clock=FutureClock())
        self.n = 0
        self.counts: dict[str, int] = {}

    @property
    def now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    @property
    def model(self) -> dict[bytes, bytes]:
        """What a read sees now."""
        return live(self._model, self.now_ms)

    def key(self) -> bytes:
        return b"k%03d" % self.rng.randrange(300)

    def value(self) -> bytes:
        self.n += 1
        return b"v%d." % self.n * self.rng.randrange(1, 12)

    def ctx(self, what: str) -> str:
        return f"seed={self.seed} step={self.n} {what}"

    # ---------------------------------------------------------------- steps

    def put(self) -> None:
        k, v = self.key(), self.value()
        self.db.put(k, v, durable=self.rng.random() < 0.3)
        self._model[k] = (v, None)

    def put_ttl(self) -> None:
        k, v = self.key(), self.value()
        ttl_s = self.rng.choice([1, 5, 30])
        self.db.put(k, v, ttl=ttl_s, durable=self.rng.random() < 0.3)
        self._model[k] = (v, self.now_ms + ttl_s * 1000)

    def advance(self) -> None:
        self.clock.advance(self.rng.choice([0.5, 2, 10]))

    def delete(self) -> None:
        k = self.key()
        self.db.delete(k, durable=self.rng.random() < 0.3)
        self._model.pop(k, None)

    def batch(self) -> None:
        b = WriteBatch()
        for _ in range(self.rng.randrange(1, 20)):
            k = self.key()
            if self.rng.random() < 0.2:
                b.delete(k)
                self._model.pop(k, None)
            else:
                v = self.value()
                b.put(k, v)
                self._model[k] = (v, None)
        self.db.write(b, durable=False)

    def get(self) -> None:
        for _ in range(5):
            k = self.key()
            assert self.db.get(k) == self.model.get(k), self.ctx(f"get {k!r}")

    def scan(self, target: Db | Snapshot | None = None, model: Model | None = None) -> None:
        target = target or self.db
        now = self.model if model is None else live(model, self.now_ms)
        model = now
        a, b = sorted([self.key(), self.key()])
        start = a if self.rng.random() < 0.7 else None
        end = b if self.rng.random() < 0.7 else None
        reverse = self.rng.random() < 0.3
        limit = self.rng.choice([None, 1, 10])
        got = list(target.scan(start, end, reverse=reverse, limit=limit))
        assert got == expected_scan(model, start, end, reverse, limit), self.ctx(f"scan {start!r}..{end!r}")

    def snapshot(self) -> None:
        if len(self.snaps) < 4:
            self.snaps.append((self.db.snapshot(), dict(self._model)))

    def read_snapshot(self) -> None:
        if not self.snaps:
            return
        s, m = self.rng.choice(self.snaps)
        now = live(m, self.now_ms)
        for _ in range(5):
            k = self.key()
            assert s.get(k) == now.get(k), self.ctx(f"snapshot get {k!r}")
        self.scan(s, m)

    def close_snapshot(self) -> None:
        if self.snaps:
            s, m = self.snaps.pop(self.rng.randrange(len(self.snaps)))
            assert dict(s.scan()) == live(m, self.now_ms), self.ctx("snapshot full scan")
            s.close()

    def flush(self) -> None:
        self.db.flush(memtable=True)

    def compact(self) -> None:
        if self.rng.random() < 0.1:
            # A new compactor fences the old one.
            self.compactor = Compactor.open(
                store=self.store, options=COMPACTOR, clock=self.clock, takeover=True
            )
        self.compactor.run_once()
        if self.rng.random() < 0.5:
            self.db.refresh_manifest()

    def gc_pass(self) -> None:
        # min_age 0 is safe only while no L0 flush is between its SST and its manifest.
        deadline = time.monotonic() + 30
        while self.db._imms and time.monotonic() < deadline:
            time.sleep(0.002)
        self.gc.run_once(dry_run=self.rng.random() < 0.2)

    def reopen(self) -> None:
        for s, m in self.snaps:
            assert dict(s.scan()) == live(m, self.now_ms), self.ctx("snapshot before reopen")
            s.close()
        self.snaps.clear()
        self.db.close()
        self.db = Db.open(
            store=self.store, settings=STEP_SETTINGS, seed=self.rng.randrange(1 << 30), clock=self.clock
        )

    def full_check(self) -> None:
        assert dict(self.db.scan()) == self.model, self.ctx("full scan")

    def run(self, steps: int) -> None:
        table: list[tuple[Callable[[], None], int]] = [
            (self.put, 30),
            (self.put_ttl, 5),
            (self.advance, 3),
            (self.delete, 8),
            (self.batch, 6),
            (self.get, 12),
            (self.scan, 5),
            (self.snapshot, 3),
            (self.read_snapshot, 6),
            (self.close_snapshot, 3),
            (self.flush, 4),
            (self.compact, 6),
            (self.gc_pass, 4),
            (self.reopen, 1),
            (self.full_check, 2),
        ]
        fns = [f for f, _ in table]
        weights = [w for _, w in table]
        for _ in range(steps):
            f = self.rng.choices(fns, weights)[0]
            self.counts[f.__name__] = self.counts.get(f.__name__, 0) + 1
            f()
        self.reopen()
        self.full_check()
        self.compactor.run_once()
        self.gc.run_once()
        self.db.refresh_manifest()
        self.full_check()
        self.db.close()


@pytest.mark.parametrize("kind", ["memory", "memory", "memory", "memory", "local", "local"])
def test_model_with_compaction_gc_snapshots_and_reopen(kind: str, tmp_path: Path) -> None:
    seed = test_seed()
    with memory_store() as mem:
        store = mem if kind == "memory" else open_store(str(tmp_path / "db"))
        run = Run(store, seed)
        run.run(3000)
        print(run.counts)
        assert run.counts.get("compact", 0) > 5 and run.counts.get("gc_pass", 0) > 5


def test_model_with_embedded_compactor_and_gc() -> None:
    """Same reads, with the writer's own compactor and GC running in the background."""
    seed = test_seed()
    settings = Settings(
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=64 * 1024,
        l0_max_ssts=6,
        manifest_poll_interval_s=0.05,
        compactor=CompactorOptions(
            min_l0_ssts=2, min_merge_runs=2, max_sst_size_bytes=8192, poll_interval_s=0.02
        ),
        garbage_collector=GcOptions(interval_s=0.05, min_age_s=1.0),
    )
    with memory_store() as store:
        rng = random.Random(seed)
        db = Db.open(store=store, settings=settings, seed=seed)
        model: dict[bytes, bytes] = {}
        snaps: list[tuple[Snapshot, dict[bytes, bytes]]] = []
        for i in range(15000):
            k = b"k%03d" % rng.randrange(400)
            r = rng.random()
            if r < 0.6:
                v = b"v%d" % i * rng.randrange(1, 10)
                db.put(k, v, durable=False)
                model[k] = v
            elif r < 0.7:
                db.delete(k, durable=False)
                model.pop(k, None)
            elif r < 0.95:
                assert db.get(k) == model.get(k), f"seed={seed} i={i} get {k!r}"
            elif r < 0.97 and len(snaps) < 3:
                snaps.append((db.snapshot(), dict(model)))
            elif snaps:
                s, m = snaps.pop(rng.randrange(len(snaps)))
                assert dict(s.scan()) == m, f"seed={seed} i={i} snapshot"
                s.close()
            if i % 500 == 0:
                assert dict(db.scan()) == model, f"seed={seed} i={i} scan"
        for s, m in snaps:
            assert dict(s.scan()) == m, f"seed={seed} final snapshot"
            s.close()
        assert dict(db.scan()) == model
        compactor, gc = db._background
        assert compactor.reports > 0 and gc.passes > 0
        assert compactor.last_error is None and gc.last_error is None
        db.close()
        with Db.open(store=store, settings=settings.replace(compactor=None, garbage_collector=None)) as db2:
            assert dict(db2.scan()) == model

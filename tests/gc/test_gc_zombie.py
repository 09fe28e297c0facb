"""GC against a database with snapshots, checkpoints and a paused (SIGSTOP) zombie writer:
no referenced object is deleted, and the zombie's next write fails with FencedError."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

from gc_support import FutureClock

from shaledb import CompactorOptions, Db, GarbageCollector, GcOptions, Settings
from shaledb.clock import SYSTEM_CLOCK
from shaledb.compaction import Compactor
from shaledb.engine.cache import LruCache
from shaledb.engine.sstable import TableCache
from shaledb.format import paths
from shaledb.manifest import Checkpoint, Manifest, ManifestStore
from shaledb.store import ObjectStore, open_store
from shaledb.testing.seeds import test_seed

SETTINGS = Settings(
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)

ZOMBIE = textwrap.dedent(
    """
    import sys
    from shaledb import Db, FencedError, Settings, WriteBatch
    s = Settings(compactor=None, garbage_collector=None, manifest_poll_interval_s=3600, l0_max_ssts=1000)
    db = Db.open(sys.argv[1], settings=s)
    for i in range(5):
        b = WriteBatch()
        for j in range(40):
            b.put(b"zombie%03d" % (i * 40 + j), b"acked before the fence")
        db.write(b)  # durable: acknowledged
    print("ready", flush=True)
    sys.stdin.readline()  # the test stops us (SIGSTOP) here, and later resumes us
    try:
        db.put(b"late", b"written by a zombie")
        print("RESULT ok", flush=True)
    except FencedError as e:
        print("RESULT fenced", e, flush=True)
    except Exception as e:
        print("RESULT error", type(e).__name__, e, flush=True)
    """
)


def referenced_objects_exist(store: ObjectStore, m: Manifest) -> list[str]:
    """Paths an active manifest needs that are missing, after reading every SST."""
    missing = []
    tables = TableCache(lambda _i: store, LruCache(1 << 20), 1 << 16)
    for s in m.all_ssts():
        try:
            for _row in tables.reader(s).all_rows():
                pass
        except Exception as exc:
            missing.append(f"{paths.sst_path(s.id)}: {exc}")
    present = {paths.parse_wal_id(o.path) for o in store.list(paths.WAL_DIR)}
    for wid in range(m.replay_after_wal_id + 1, m.next_wal_id):
        if wid not in present:
            missing.append(paths.wal_path(wid))
    return missing


def test_gc_with_snapshots_checkpoints_and_a_stopped_zombie_writer(tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    zombie = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        assert zombie.stdout.readline().strip() == "ready"
        os.kill(zombie.pid, signal.SIGSTOP)

        # The new writer fences the zombie, then lives a busy life while it sleeps.
        db = Db.open(url, settings=SETTINGS, seed=seed)
        model = {b"zombie%03d" % i: b"acked before the fence" for i in range(200)}
        assert dict(db.scan()) == model  # the zombie's acknowledged writes survived
        store = db.store
        ms = ManifestStore(store, SYSTEM_CLOCK, random.Random(seed), author="test")
        snapshots = []
        checkpoints: list[Checkpoint] = []
        compactor = Compactor.open(url, CompactorOptions(min_l0_ssts=2, max_sst_size_bytes=8192))
        for round_ in range(6):
            for i in range(300):
                k = b"k%04d" % rng.randrange(800)
                if rng.random() < 0.1:
                    db.delete(k, durable=False)
                    model.pop(k, None)
                else:
                    v = b"r%d-%d" % (round_, i) * rng.randrange(1, 6)
                    db.put(k, v, durable=False)
                    model[k] = v
            db.flush(memtable=True)
            snapshots.append((db.snapshot(), dict(model)))
            if round_ % 2 == 0:

                def add(m: Manifest) -> Manifest:
                    cp = Checkpoint(uuid.uuid4(), m.id + 1, SYSTEM_CLOCK.now())
                    checkpoints.append(cp)
                    return replace(m, checkpoints=(*m.checkpoints, cp))

                ms.update(add, timeout_s=30)
            compactor.run_once()
            db.refresh_manifest()
            # Aggressive GC: a day ahead (every grace period over) and no minimum age.
            GarbageCollector.open(store=store, options=GcOptions(min_age_s=0), clock=FutureClock()).run_once()

        latest = ms.require_latest()
        live_cps = {c.id for c in latest.checkpoints}
        assert all(c.id in live_cps for c in checkpoints)
        for c in latest.checkpoints:
            missing = referenced_objects_exist(store, ms.read(c.manifest_id))
            assert not missing, f"seed={seed}: checkpoint {c.id} lost {missing[:5]}"
        assert not referenced_objects_exist(store, latest)
        for s, m in snapshots:
            assert dict(s.scan()) == m, f"seed={seed}: a snapshot changed"

        # The zombie wakes up and writes: its WAL slot holds the new writer's fence.
        os.kill(zombie.pid, signal.SIGCONT)
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        result = zombie.stdout.readline().strip()
        assert result.startswith("RESULT fenced"), result
        assert zombie.wait(60) == 0
        assert db.get(b"late") is None
        for s, _m in snapshots:
            s.close()
        db.close()
        with Db.open(url, settings=SETTINGS) as db2:
            assert dict(db2.scan()) == model
            assert db2.get(b"late") is None
        store2 = open_store(url)
        assert not any(o.path.endswith(".sst") and o.size == 0 for o in store2.list(paths.WAL_DIR))
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()

"""Checkpoints created, refreshed, used as sources and deleted while a writer (with its
compactor) and a garbage collector run in other processes: a live checkpoint's version reads
the same cold, whenever it is read; an expired one is refused, and once the collector has run
its pinned manifest is gone. Randomized: ``SHALEDB_TEST_SEED``."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shaledb
from shaledb import CheckpointNotFound, DbReader, GarbageCollector, GcOptions, admin
from shaledb.errors import ObjectNotFound
from shaledb.manifest import ManifestStore
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

WRITER = """
import sys, time
from shaledb import CompactorOptions, Db, Settings
s = Settings(compactor=CompactorOptions(min_l0_ssts=2, min_merge_runs=2, poll_interval_s=0.05),
             garbage_collector=None, l0_sst_size_bytes=4096, max_unflushed_bytes=16384)
end = time.monotonic() + float(sys.argv[2])
with Db.open(sys.argv[1], settings=s) as db:
    i = 0
    while time.monotonic() < end:
        db.put(b"k%03d" % (i % 300), b"v%d" % i * 10)
        i += 1
        time.sleep(0.001)
"""

COLLECTOR = """
import sys, time
from shaledb import GarbageCollector, GcOptions
end = time.monotonic() + float(sys.argv[2])
with GarbageCollector.open(sys.argv[1], GcOptions(min_age_s=0.3)) as gc:
    while time.monotonic() < end:
        gc.run_once()
        time.sleep(0.05)
"""


def cold_read(url: str, cp_id: object) -> dict[bytes, bytes]:
    with DbReader.open(url, cp_id) as r:  # type: ignore[arg-type]
        return dict(r.scan())


def test_checkpoint_lifecycle_against_a_writer_and_a_collector_in_other_processes(tmp_path: Path) -> None:
    rng = random.Random(test_seed())
    url = str(tmp_path / "db")
    env = {**os.environ, "PYTHONPATH": str(Path(shaledb.__file__).parent.parent)}
    with shaledb.Db.open(url) as db:
        db.put(b"start", b"1")
    secs = 6.0
    procs = [
        subprocess.Popen([sys.executable, "-c", code, url, str(secs)], env=env, stderr=subprocess.PIPE)
        for code in (WRITER, COLLECTOR)
    ]
    live: dict[object, dict[bytes, bytes]] = {}
    dead: dict[object, int] = {}
    try:
        time.sleep(0.5)
        end = time.monotonic() + secs - 1.5
        while time.monotonic() < end:
            op = rng.random()
            if op < 0.4 or not live:
                short = rng.random() < 0.4
                cp = admin.create_checkpoint(url, lifetime=0.5 if short else 120)
                seen = cold_read(url, cp.id)
                if short:
                    dead[cp.id] = cp.manifest_id
                else:
                    live[cp.id] = seen
            elif op < 0.55:
                src = rng.choice(list(live))
                cp = admin.create_checkpoint(url, source=src, lifetime=120)
                live[cp.id] = live[src]
            elif op < 0.7:
                admin.refresh_checkpoint(url, rng.choice(list(live)), lifetime=120)
            elif op < 0.8:
                gone = rng.choice(list(live))
                assert admin.delete_checkpoint(url, gone)
                dead[gone] = -1
                del live[gone]
            else:
                cp_id = rng.choice(list(live))
                assert cold_read(url, cp_id) == live[cp_id], cp_id
            time.sleep(rng.uniform(0, 0.05))
    finally:
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err.decode()[-2000:]
    for cp_id, want in live.items():  # after the churn, read cold: nothing it pins was collected
        assert cold_read(url, cp_id) == want, cp_id
    time.sleep(0.6)  # every short-lived checkpoint has expired
    for cp_id in dead:
        with pytest.raises(CheckpointNotFound):
            cold_read(url, cp_id)
    for cp_id in list(live):
        admin.delete_checkpoint(url, cp_id)
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        gc.run_once()
    ms = ManifestStore(open_store(url), shaledb.clock.SYSTEM_CLOCK, random.Random(0), author="test")
    latest = ms.require_latest()
    assert not {c.id for c in latest.checkpoints} & set(dead), "the collector removes expired checkpoints"
    for manifest_id in dead.values():
        if 0 < manifest_id < latest.id:
            with pytest.raises(ObjectNotFound):
                ms.read(manifest_id)

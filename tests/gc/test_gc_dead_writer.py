"""A killed writer's view checkpoints (``shaledb.engine.pins``) with no writer open.

The ones it had released carry an expiry, and a standalone collector drops them once expired.
Its current view's, a snapshot's and the one its last write superseded (a reader may take that
one until the write is confirmed; the next write would have given it its grace period) carry
none. A collector cannot tell a dead writer from an idle one (an idle writer writes no manifest
for as long as it likes while a snapshot reads that view), so they stay, with everything they
pin, until the next writer opens and drops every checkpoint of older epochs in its epoch claim.
A fenced writer's (an older epoch than the manifest's) are the collector's to remove.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from gc_support import FutureClock, sst_ids

from shaledb import CompactorOptions, Db, GarbageCollector, Settings, admin
from shaledb.compaction import Compactor
from shaledb.manifest import Checkpoint, Manifest
from shaledb.store import open_store

WRITER = textwrap.dedent(
    """
    import sys
    from shaledb import CompactorOptions, Db, Settings
    from shaledb.compaction import Compactor
    s = Settings(compactor=None, garbage_collector=None, l0_max_ssts=1000, manifest_poll_interval_s=3600)
    db = Db.open(sys.argv[1], settings=s)
    def write(tag):
        for i in range(100):
            db.put(b"k%03d" % i, tag + b"%d" % i, durable=False)
        db.flush(memtable=True)
    write(b"a")
    write(b"b")
    Compactor.open(sys.argv[1], CompactorOptions(min_l0_ssts=2)).run_once()
    db.refresh_manifest()  # adopting the compaction: a new view checkpoint, the old one superseded
    write(b"c")  # the superseded one, unreferenced, gets an expiry (the writer's grace period)
    snap = db.snapshot()  # still reading when the process is killed
    print("ready", flush=True)
    sys.stdin.readline()
    """
)

QUIET = Settings(compactor=None, garbage_collector=None)


def writer_cps(m: Manifest) -> list[Checkpoint]:
    return [c for c in m.checkpoints if c.writer_epoch is not None]


def test_a_killed_writers_expiring_view_checkpoints_go_without_a_writer_the_rest_wait_for_the_next(
    tmp_path: Path,
) -> None:
    url = str(tmp_path / "db")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(60)
    store = open_store(url)
    dead = writer_cps(admin.read_manifest(url))
    expiring = {str(c.id) for c in dead if c.expire_time_s is not None}
    in_use = [c for c in dead if c.expire_time_s is None]
    assert expiring and in_use, dead

    # A standalone compactor replaces the SSTs of the dead writer's view; a standalone pass a
    # day later (every grace period over), no writer open.
    Compactor.open(url, CompactorOptions(min_l0_ssts=1)).run_once()
    report = GarbageCollector.open(url, clock=FutureClock()).run_once(min_age_s=0)
    assert set(report.checkpoints_expired) == expiring
    latest = admin.read_manifest(url)
    assert {c.id for c in writer_cps(latest)} == {c.id for c in in_use}
    pinned = {s.id for c in in_use for s in admin.read_manifest(url, manifest_id=c.manifest_id).all_ssts()}
    only_pinned = pinned - {s.id for s in latest.all_ssts()}
    assert only_pinned  # what the dead writer's view still costs
    assert pinned <= sst_ids(store), "an SST a live view checkpoint pins was deleted"

    # The next writer's epoch claim drops them; the pass after it frees what only they pinned.
    with Db.open(url, settings=QUIET) as db:
        assert [c.writer_epoch for c in writer_cps(db.manifest)] == [db.epoch]
        GarbageCollector.open(url, clock=FutureClock()).run_once(min_age_s=0)
        assert sst_ids(store) == {s.id for s in db.manifest.all_ssts()}
        assert not only_pinned & sst_ids(store)
        assert db.get(b"k007") == b"c7"


def test_the_view_checkpoints_of_a_writer_a_killed_soft_destroy_fenced_are_collected() -> None:
    """A soft destroy fences the writer (a new epoch), then drops its checkpoints and marks the
    database destroyed. Killed between the two, it left the fenced writer's view checkpoints in
    every later version: no writer opening dropped them (the database is not destroyed, but no
    writer of the old epoch can write again) and they pinned their versions for good. A
    collector removes the view checkpoints of every writer epoch older than the manifest's."""
    from gc_support import memory_store

    from shaledb.errors import ShaleError
    from shaledb.store.wrappers import StoreWrapper

    class KilledAtTheFence(StoreWrapper):
        def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
            if path.startswith("wal/"):
                raise KeyboardInterrupt  # the destroy's process dies after its first step
            self.inner.put(path, data, create=create, attributes=attributes)

    with memory_store() as mem:
        db = Db.open(store=mem, settings=QUIET)
        db.put(b"k", b"v")
        db.flush(memtable=True)
        snap = db.snapshot()  # referenced: no expiry
        fenced = writer_cps(db.manifest)
        assert fenced
        try:
            admin.destroy(store=KilledAtTheFence(mem), soft=True)
        except KeyboardInterrupt:
            pass
        m = admin.read_manifest(store=mem)
        assert m.destroyed_at_s is None and m.writer_epoch > db.epoch
        report = GarbageCollector.open(store=mem).run_once(min_age_s=0)
        assert set(report.checkpoints_expired) >= {str(c.id) for c in fenced}
        assert writer_cps(admin.read_manifest(store=mem)) == []
        snap.close()
        try:
            db.close()
        except ShaleError:
            pass  # fenced
        with Db.open(store=mem, settings=QUIET) as db2:
            assert db2.get(b"k") == b"v"

"""Backups that die part-way, fail, or prune under a reader of the backup.

A backup that dies or fails at any store call (of the source or of the destination) must
leave a destination that opens -- as a writer too, which verifies its WAL -- at
a state the source passed through between the two backups, and running the
backup again finishes it. Pruning must keep what a live checkpoint of the
destination (a reader of the backup) pins. Randomized: ``SHALEDB_TEST_SEED``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import shaledb
from shaledb import CompactorOptions, Db, DbReader, DbReaderOptions, GarbageCollector, GcOptions, Settings
from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import ShaleError
from shaledb.journal.backup import backup_url, backup_version
from shaledb.manifest import ManifestStore
from shaledb.settings import RetryOptions
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.compacting import compact_until_idle
from shaledb.testing.seeds import test_seed

SMALL = Settings(
    compactor=None,
    garbage_collector=None,
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
)
QUIET = DbReaderOptions(establish_checkpoint=False, background_poll=False)


def key(i: int) -> bytes:
    return b"k%04d" % i


def write(db: Db, lo: int, hi: int) -> None:
    """Keys ``lo..hi-1`` in order, each durable (one WAL object each): the source's state
    at any moment is the first n keys."""
    for i in range(lo, hi):
        db.put(key(i), key(i) * 8)


def prefix(n: int) -> dict[bytes, bytes]:
    return {key(i): key(i) * 8 for i in range(n)}


def objects(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def opened_as_writer(dest: Path, scratch: Path) -> dict[bytes, bytes]:
    """What a writer opening (a copy of) the destination sees: a restore."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(dest, scratch)
    try:
        with Db.open(str(scratch), settings=SMALL, create_if_missing=False) as db:
            return dict(db.scan())
    finally:
        shutil.rmtree(scratch)


def test_a_backup_dying_at_any_store_call_leaves_a_destination_that_opens(tmp_path: Path) -> None:
    """A backup killed while copying WAL objects left the previous backup's WAL followed by a
    gap and the new range: a writer opening the destination refused it as a lost WAL object
    (CorruptionError), though the docs promise it still opens at the previous backup."""
    rng = random.Random(test_seed())
    src, base = tmp_path / "src", tmp_path / "base"
    with Db.open(str(src), settings=SMALL) as db:
        write(db, 0, 20)
        db.backup(str(base))
        db.flush(memtable=True)  # the next backup's WAL range starts past the first's
        write(db, 20, 30)
        db.flush(memtable=True)
        write(db, 30, 30 + rng.randrange(10, 30))
        end = len(dict(db.scan()))
        cp = db.create_checkpoint(name="test")
        m = ManifestStore(open_store(str(src)), SYSTEM_CLOCK, random.Random(1), author="t").read(
            cp.manifest_id
        )
        # The source is done: every backup below copies this one version.
    counted_src = FaultInjectingStore(open_store(str(src)), seed=0)
    dry = tmp_path / "dry"
    shutil.copytree(base, dry)
    counted_dst = FaultInjectingStore(open_store(str(dry)), seed=0)
    backup_version(m, counted_src, lambda _: counted_src, counted_dst, clock=SYSTEM_CLOCK, rng=rng, workers=4)
    calls = {"src": len(counted_src.calls), "dst": len(counted_dst.calls)}
    for run in range(16):
        side = rng.choice(["src", "dst"])
        nth = rng.randint(1, calls[side])
        action = rng.choice(["crash", "apply_then_crash", "fail_before", "apply_then_fail"])
        where = f"run {run}: {action} at {side} call {nth} of {calls[side]}"
        dest = tmp_path / f"dest{run}"
        shutil.copytree(base, dest)
        s = FaultInjectingStore(open_store(str(src)), seed=0)
        d = FaultInjectingStore(open_store(str(dest)), seed=0)
        (s if side == "src" else d).add_rule(action, nth=nth)  # type: ignore[arg-type]
        try:
            backup_version(m, s, lambda _, s=s: s, d, clock=SYSTEM_CLOCK, rng=rng, workers=4)
        except SimulatedCrash:
            pass  # the process died there
        except ShaleError:
            pass  # a failed request: a typed error (an untyped one fails the test)
        got = opened_as_writer(dest, tmp_path / "probe")
        assert got == prefix(len(got)) and 20 <= len(got) <= end, where
        plain = open_store(str(src))
        backup_version(
            m,
            plain,
            lambda _, plain=plain: plain,
            open_store(str(dest)),
            clock=SYSTEM_CLOCK,
            rng=rng,
            workers=4,
        )
        with DbReader.open(str(dest), options=QUIET) as r:
            assert dict(r.scan()) == prefix(end), where
        assert opened_as_writer(dest, tmp_path / "probe") == prefix(end), where
        shutil.rmtree(dest)


def test_pruning_keeps_what_a_reader_of_the_backup_pins(tmp_path: Path) -> None:
    """Backups keep the destination's checkpoints (its readers'), but pruning deleted the SSTs
    those checkpoints' versions read: a reader of the backup failed with ObjectNotFound once
    a backup after a compaction ran."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    with Db.open(src, settings=SMALL) as db:
        for i in range(200):
            db.put(key(i), b"old" * 30, durable=False)
        db.flush(memtable=True)
        db.backup(dest)
        old = dict(db.scan())
        reader = DbReader.open(dest, options=DbReaderOptions(background_poll=False))
        try:
            (cp,) = shaledb.admin.list_checkpoints(dest)
            for i in range(200):
                db.put(key(i), b"new" * 30, durable=False)
            db.flush(memtable=True)
            assert compact_until_idle(src) >= 1  # every SST of the first backup replaced
            assert db.backup(dest).manifest_written
            new = dict(db.scan())
            with DbReader.open(dest, checkpoint=cp.id) as pinned:
                assert dict(pinned.scan()) == old
        finally:
            reader.close()
    with DbReader.open(dest, options=QUIET) as r:
        assert dict(r.scan()) == new
    # Once the reader is gone, the next backup's prune takes what only it needed.
    with Db.open(src, settings=SMALL) as db:
        db.put(b"more", b"x")
        db.flush(memtable=True)
        assert db.backup(dest).pruned > 0


def test_a_failed_backup_releases_its_checkpoint_and_a_rerun_completes(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", str(tmp_path / "dest")
    faults = FaultInjectingStore(open_store(str(src)), seed=0)
    settings = Settings(
        compactor=None,
        garbage_collector=None,
        retry=RetryOptions(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.01),
    )
    with Db.open(store=faults, settings=settings) as db:
        write(db, 0, 30)
        db.flush(memtable=True)
        rule = faults.add_rule("fail_before", ops="get", path_prefix="compacted/")
        with pytest.raises(ShaleError):
            db.backup(dest)
        assert rule.fired >= 1
        assert shaledb.admin.list_checkpoints(str(src), name="backup") == []
        faults.clear_rules()
        db.backup(dest)
        want = dict(db.scan())
    with DbReader.open(dest, options=QUIET) as r:
        assert dict(r.scan()) == want


def test_backups_while_the_writer_writes_compacts_and_collects(tmp_path: Path) -> None:
    """``backup_url`` (every durable write) and ``Db.backup`` (every write issued) while a writer
    keeps writing with its compactor on and a collector runs at ``min_age_s=0.2`` (it must
    exceed a writer's L0-to-manifest latency; 0 would delete a live put's staging file): each
    destination opens at a prefix of the writes that holds every one acknowledged before the
    backup began, and the incremental, pruning backups never break the destination."""
    rng = random.Random(test_seed())
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    settings = Settings(
        compactor=CompactorOptions(min_l0_ssts=2, min_merge_runs=2, poll_interval_s=0.01),
        garbage_collector=None,
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=16384,
    )
    acked = 0
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(db: Db) -> None:
        nonlocal acked
        i = 0
        try:
            while not stop.is_set():
                db.put(key(i), key(i) * rng.randint(1, 20))
                i += 1
                acked = i
                stop.wait(0.002)  # (bounds what each backup copies: the test's run time)
        except BaseException as exc:  # (reported by the test)
            errors.append(exc)

    def collector() -> None:
        try:
            with GarbageCollector.open(src, GcOptions(min_age_s=0.2)) as gc:
                while not stop.is_set():
                    gc.run_once()
                    stop.wait(0.05)
        except BaseException as exc:
            errors.append(exc)

    with Db.open(src, settings=settings) as db:
        db.put(b"~", b"")
        threads = [threading.Thread(target=writer, args=(db,)), threading.Thread(target=collector)]
        for t in threads:
            t.start()
        try:
            for round_ in range(8):
                stop.wait(0.3)  # writes, flushes and compactions age past the collector's min_age_s
                floor = acked
                if round_ % 2:
                    db.backup(dest, workers=rng.choice([1, 4]))
                else:
                    backup_url(src, dest, workers=rng.choice([1, 4]))
                ceiling = acked + 1
                with DbReader.open(dest, options=QUIET) as r:
                    got = dict(r.scan())
                got.pop(b"~", None)
                n = len(got)
                assert floor <= n <= ceiling, (round_, floor, n, ceiling)
                assert set(got) == {key(i) for i in range(n)}, round_
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors, errors
    with Db.open(dest, settings=SMALL) as restored:
        assert restored.get(key(0)) is not None


@pytest.mark.slow
def test_cli_backup_killed_at_random_points_then_run_again(tmp_path: Path) -> None:
    """``shaledb --path SRC backup DEST`` killed with SIGKILL at a random point of its copying: the
    destination opens as a writer at a prefix of the source's writes at least as new as the
    previous backup, and running the command again makes it the source's durable state."""
    rng = random.Random(test_seed())
    src, dest = tmp_path / "src", tmp_path / "dest"
    env = {**os.environ, "PYTHONPATH": str(Path(shaledb.__file__).parent.parent)}
    cmd = [sys.executable, "-m", "shaledb", "--path", str(src), "--no-progress", "backup", str(dest)]
    with Db.open(str(src), settings=SMALL) as db:
        write(db, 0, 20)
        db.backup(str(dest))
        n = 20
        for kill in range(6):
            db.flush(memtable=True)  # each backup's WAL range starts past the last one's
            write(db, n, n + 60)
            n += 60
            before = objects(dest)
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            k = rng.randint(1, 5)  # kill once k new objects landed (a backup here adds about 4 names)
            while proc.poll() is None and len(objects(dest) - before) < k:
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            where = f"kill {kill} after {len(objects(dest) - before)} new objects (exit {proc.returncode})"
            got = opened_as_writer(dest, tmp_path / "probe")
            assert got == prefix(len(got)) and len(got) <= n, where
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            with DbReader.open(str(dest), options=QUIET) as r:
                assert dict(r.scan()) == prefix(n), where

"""Backups copy in parallel, report progress, and survive a copy failing part-way."""

from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path

import pytest

from shaledb import Db, DbReader, InvalidArgument, Settings
from shaledb.clock import SYSTEM_CLOCK
from shaledb.format import paths
from shaledb.journal.backup import backup_version
from shaledb.manifest import Manifest, ManifestStore
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash

SMALL = Settings(
    compactor=None,
    garbage_collector=None,
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
)


def fill(url: str, rounds: int, tag: bytes) -> dict[bytes, bytes]:
    model = {}
    with Db.open(url, settings=SMALL) as db:
        for r in range(rounds):
            for i in range(40):
                k = b"k%04d" % (r * 40 + i)
                model[k] = tag + k * 20
                db.put(k, model[k], durable=False)
            db.flush(memtable=True)
        return dict(db.scan())


def test_parallel_backup_across_stores_reports_progress(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    want = fill(src, 12, b"a")
    dest = f"memory://backup-{uuid.uuid4().hex}"
    seen: list[tuple[int, int]] = []
    try:
        with Db.open(src, settings=SMALL) as db:
            rep = db.backup(dest, workers=8, progress=lambda n, total: seen.append((n, total)))
            with pytest.raises(InvalidArgument):
                db.backup(dest, workers=0)
        assert not rep.server_side and rep.copied == rep.objects >= 12
        # In bytes (issue 28): done grows to the bytes copied, once per object.
        assert len(seen) == rep.objects and [n for n, _ in seen] == sorted(n for n, _ in seen)
        assert seen[-1] == (rep.bytes_copied,) * 2
        assert rep.copied_paths == sorted(rep.copied_paths)
        with Db.open(dest, settings=SMALL) as bk:
            assert dict(bk.scan()) == want
    finally:
        drop_memory_store(dest.removeprefix("memory://"))


@pytest.mark.parametrize("crash_at", [1, 4, 9])
def test_a_backup_that_dies_part_way_leaves_the_last_one_and_the_next_finishes(
    tmp_path: Path, crash_at: int
) -> None:
    src = str(tmp_path / "src")
    first = fill(src, 3, b"a")
    dest = open_store(str(tmp_path / "dest"))
    ms = ManifestStore(open_store(src), SYSTEM_CLOCK, random.Random(1), author="test")
    rng = random.Random(crash_at)
    print(f"seed={crash_at}")
    base = open_store(src)
    backup_version(ms.require_latest(), base, lambda _db: base, dest, clock=SYSTEM_CLOCK, rng=rng)
    second = fill(src, 10, b"b")
    faults = FaultInjectingStore(open_store(src), seed=crash_at)
    rule = faults.add_rule("crash", ops="get", path_prefix="compacted/", nth=crash_at)
    latest = ms.require_latest()
    with pytest.raises(SimulatedCrash):
        backup_version(latest, faults, lambda _db: faults, dest, clock=SYSTEM_CLOCK, rng=rng, workers=4)
    assert rule.fired == 1
    with DbReader.open(str(tmp_path / "dest")) as r:  # the manifest goes last: still the first backup
        assert dict(r.scan()) == first
    rep = backup_version(latest, base, lambda _db: base, dest, clock=SYSTEM_CLOCK, rng=rng, workers=4)
    assert rep.manifest_written and 0 < rep.copied <= rep.objects
    with DbReader.open(str(tmp_path / "dest")) as r:
        assert dict(r.scan()) == second


@pytest.mark.parametrize("how", ["writer", "url"])
def test_a_backup_whose_checkpoint_fails_closes_what_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The checkpoint is taken after the destination (and, standalone, the source's admin
    handle) is opened; a checkpoint that failed (a closed writer, a destroyed database, a CAS
    timeout) left both open: a leaked store client per failed backup."""
    import shaledb.journal.backup as backup

    closed: list[str] = []
    opened = backup.open_dest

    def open_dest(url: str, options: object) -> object:
        dest = opened(url, options)  # type: ignore[arg-type]
        real_close = dest.close
        dest.close = lambda: (closed.append(url), real_close())[-1]  # type: ignore[method-assign]
        return dest

    def refuse(*args: object, **kwargs: object) -> object:
        raise InvalidArgument("checkpoint refused")

    monkeypatch.setattr(backup, "open_dest", open_dest)
    monkeypatch.setattr(backup, "create_checkpoint", refuse)
    monkeypatch.setattr(backup, "create_writer_checkpoint", refuse)
    src, dest = tmp_path / "src", tmp_path / "dest"
    with Db.open(str(src)) as db:
        db.put(b"k", b"v")
        with pytest.raises(InvalidArgument, match="checkpoint refused"):
            if how == "writer":
                db.backup(str(dest))
            else:
                backup.backup_url(str(src), str(dest))
    assert closed == [str(dest)]


class _CountingCopies:
    """A same-store server-side copier that counts its requests and how many ran at once.
    The first WAL copy waits (at most 10 s, not at all if they run at once) for a second to start,
    so copies that run one by one are seen as such without timing anything."""

    def __init__(self, store: ObjectStore, src: str, dest: str) -> None:
        self.store, self.src, self.dest = store, src, dest
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.wal: list[str] = []
        self.requests = 0
        self.second = threading.Event()

    def __call__(self, path: str) -> None:
        is_wal = path.startswith("wal/")
        with self.lock:
            self.requests += 1
            self.running += 1
            self.most = max(self.most, self.running) if is_wal else self.most
            if is_wal:
                self.wal.append(path)
                if self.running > 1:
                    self.second.set()
        try:
            if is_wal and not self.second.wait(10):
                self.second.set()  # none came: copies run one by one (wait only once)
            self.store.copy(f"{self.src}/{path}", f"{self.dest}/{path}")
        finally:
            with self.lock:
                self.running -= 1


def _unflushed_version(src: Path, keys: range) -> Manifest:
    """Write ``keys`` durably (one WAL object each) and return the version a checkpoint then
    pins: they are in its WAL replay range, not in L0 (closing the writer flushes later)."""
    with Db.open(str(src), settings=SMALL) as db:
        for i in keys:
            db.put(b"k%02d" % i, b"v" * 100)
        cp = db.create_checkpoint()
    return ManifestStore(open_store(str(src)), SYSTEM_CLOCK, random.Random(1), author="t").read(
        cp.manifest_id
    )


def test_a_first_same_store_backup_copies_wal_objects_in_parallel(tmp_path: Path) -> None:
    """A same-store backup copied its WAL objects one server-side copy at a time (slow on S3 with
    many of them). With no manifest at the destination yet nothing replays them until the
    manifest, written last, so a first backup copies them ``workers`` at once; an incremental
    one keeps them one by one in id order (a crash must leave the replayed run contiguous)."""
    m = _unflushed_version(tmp_path / "src", range(12))
    root = open_store(str(tmp_path))
    src = open_store(str(tmp_path / "src"))
    wal = sorted(p.path for p in src.list("wal/"))
    assert m.next_wal_id - m.replay_after_wal_id > 12
    copies = _CountingCopies(root, "src", "dest")
    dest = open_store(str(tmp_path / "dest"))
    rep = backup_version(
        m, src, lambda _db: src, dest, clock=SYSTEM_CLOCK, rng=random.Random(1), server_copy=copies, workers=4
    )
    assert rep.server_side and rep.manifest_written
    assert sorted(copies.wal) == [p for p in wal if paths.parse_wal_id(p) > m.replay_after_wal_id]
    assert 1 < copies.most <= 4, copies.most  # bounded parallelism
    assert copies.requests == rep.copied  # one request per object, none repeated
    with DbReader.open(str(tmp_path / "dest")) as r:
        assert len(dict(r.scan())) == 12

    m2 = _unflushed_version(tmp_path / "src", range(12, 20))  # more WAL past the first's
    again = _CountingCopies(root, "src", "dest")
    again.second.set()  # (an incremental backup's copies must not wait for a second one)
    backup_version(
        m2, src, lambda _db: src, dest, clock=SYSTEM_CLOCK, rng=random.Random(2), server_copy=again, workers=4
    )
    assert again.wal == sorted(again.wal) and len(again.wal) >= 8 and again.most == 1
    with DbReader.open(str(tmp_path / "dest")) as r:
        assert len(dict(r.scan())) == 20

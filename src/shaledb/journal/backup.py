"""Incremental, consistent backups (Leveled's hot backup, on an object store).

1. Pin a checkpoint of the source (the writer's ``create_checkpoint`` covers
   every write issued so far; a standalone backup covers every durable one).
2. Read the manifest it pins and list what that version needs: every SST of
   both trees, every value-journal object, and the WAL objects of its replay
   range ``(replay_after_wal_id, next_wal_id)`` (writes not yet in L0).
   Objects of a clone's ancestors are included: the backup is self-contained.
3. Copy each one the destination lacks (same name and size: objects are
   immutable, so present means identical). When source and destination live
   in one store (the same bucket, memory namespace or file system) the copy
   is server-side (``ObjectStore.copy`` on a store rooted at their common
   prefix); otherwise it is a GET and a PUT. Into an existing destination this
   runs under a job lease of ``kind`` ``"backup"`` (written before the
   destination is listed, deleted after step 5): the copies keep their source
   ids, so only the lease keeps the destination's garbage collector off them.
4. Write the destination's manifest **last**: the pinned version with every
   object owned by the destination (clone references flattened, checkpoints
   dropped). Until then the destination still opens at its previous backup.
   If the destination already holds this very version, nothing is written:
   a second backup without changes copies nothing. WAL objects are copied
   after the rest, PUT one by one in id order (GETs run ahead), because the destination's current
   manifest replays every WAL object after its replay point: a crash must leave
   them contiguous (a first backup, with no manifest at the destination yet, copies
   them ``workers`` at once like the rest). When they would sit above a gap (the source flushed since
   the last backup), a bridging manifest -- the new version without its WAL
   range -- is written before them (``_bridge``).
5. With ``prune`` (the default), delete the destination's SSTs, journal objects
   and WAL objects that its new manifest no longer references (a mirror, like
   Leveled's backup directory), except what the versions its live checkpoints
   pin need (readers of the backup keep their checkpoints).
6. Release the checkpoint.

The destination is an ordinary database: ``Db.open(dest)`` replays its WAL
range and reads its SSTs and journal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from ..admin.checkpoint import (
    create_checkpoint,
    create_writer_checkpoint,
    delete_checkpoint,
    read_checkpoint_manifest,
)
from ..admin.destruction import PENDING_RELEASE
from ..admin.handle import AdminHandle
from ..clock import SYSTEM_CLOCK, Clock
from ..compaction.compactor import COPY_KIND, JobLease
from ..engine.host import WriterHost
from ..engine.parents import ExternalStores, canonical_url
from ..errors import InvalidArgument, InvalidDbState, ObjectNotFound, ShaleError
from ..format import paths
from ..manifest.edits import Decorated, DropCheckpoint
from ..manifest.model import Checkpoint, JournalFile, Manifest, SstInfo, to_body
from ..manifest.store import ManifestStore
from ..numbers import check_flag
from ..settings import Settings
from ..store.base import ObjectStore
from ..store.parallel import DEFAULT_WORKERS, Progress, check_workers, get_in_order, run_bounded
from ..store.roots import check_disjoint
from ..store.stack import wrap_store
from ..store.url import open_store

log = logging.getLogger("shaledb.backup")


@dataclass
class BackupReport:
    """What one backup copied and wrote."""

    source_manifest_id: int = 0
    dest_manifest_id: int = 0
    checkpoint_id: str = ""
    objects: int = 0
    """Objects the backed-up version references."""
    copied: int = 0
    bytes_copied: int = 0
    already_present: int = 0
    server_side: bool = False
    manifest_written: bool = False
    pruned: int = 0
    copied_paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_manifest_id": self.source_manifest_id,
            "dest_manifest_id": self.dest_manifest_id,
            "checkpoint_id": self.checkpoint_id,
            "objects": self.objects,
            "copied": self.copied,
            "bytes_copied": self.bytes_copied,
            "already_present": self.already_present,
            "server_side": self.server_side,
            "manifest_written": self.manifest_written,
            "pruned": self.pruned,
        }


# ------------------------------------------------------------ same store


def common_root(src_url: str, dst_url: str) -> tuple[str, str, str] | None:
    """``(root_url, src_prefix, dst_prefix)`` when both databases live in one store.

    Local directories share the file system; ``memory://NAME/...`` share a
    namespace; cloud URLs share a bucket. None when they do not, or when one
    database would contain the other.
    """
    a, b = canonical_url(src_url), canonical_url(dst_url)
    pa, pb = urlsplit(a), urlsplit(b)
    if pa.scheme != pb.scheme or pa.netloc != pb.netloc or pa.query or pb.query:
        return None
    sa = [s for s in pa.path.split("/") if s]
    sb = [s for s in pb.path.split("/") if s]
    n = 0
    while n < min(len(sa), len(sb)) and sa[n] == sb[n]:
        n += 1
    if n == len(sa) or n == len(sb):
        return None  # one inside the other (or the same database)
    root = "/".join(sa[:n])
    if pa.scheme == "file":
        root_url = "file://" + (os.sep + root if root else os.sep)
    else:
        root_url = f"{pa.scheme}://{pa.netloc}" + (f"/{root}" if root else "")
    return root_url, "/".join(sa[n:]) + "/", "/".join(sb[n:]) + "/"


# ------------------------------------------------------------ the backup


def needed_objects(m: Manifest, src: ObjectStore) -> dict[str, tuple[int, int]]:
    """path -> (owning db index, size) of every object version ``m`` needs."""
    out: dict[str, tuple[int, int]] = {}
    for s in m.all_ssts():
        out[paths.sst_path(s.id)] = (s.db, s.size)
    for j in m.journal:
        out[paths.journal_object_path(j.id)] = (j.db, j.size)
    for meta in src.list(paths.WAL_DIR, offset=paths.wal_path(m.replay_after_wal_id)):
        wid = paths.parse_wal_id(meta.path)
        if wid is not None and m.replay_after_wal_id < wid < m.next_wal_id:
            out[meta.path] = (0, meta.size)
    return out


def flattened(m: Manifest) -> Manifest:
    """``m`` owning every object it references (what the destination's manifest says)."""

    def own(s: SstInfo) -> SstInfo:
        return replace(s, db=0) if s.db else s

    journal = tuple(JournalFile(j.id, j.size, j.entries, j.min_seq, j.max_seq) for j in m.journal)
    options = tuple((k, v) for k, v in m.options if k != PENDING_RELEASE)
    return replace(
        m,
        data=m.data.map_ssts(own),
        index=m.index.map_ssts(own),
        journal=journal,
        external_dbs=(),
        parent=None,
        checkpoints=(),
        destroyed_at_s=None,
        initialized=True,
        options=options,
    )


BACKUP_LEASE_EPOCH = 2**63 - 1
"""A backup's lease in its destination names the largest compactor epoch, as a bulk ingest's
does: no compactor makes it stale; it lapses only unrenewed, after :data:`BACKUP_LEASE_S`."""

BACKUP_LEASE_S = 600.0
"""How long a backup's lease in its destination lives unrenewed (renewed as objects copy)."""

BACKUP_EPOCH = "backup.writer_epoch"
"""Destination option: the writer epoch of the manifest the last backup wrote. A
destination whose epoch moved on was opened by a writer since: a fork, not a backup."""


def _content(m: Manifest) -> dict[str, Any]:
    opts = tuple((k, v) for k, v in m.options if k != BACKUP_EPOCH)
    body = to_body(replace(m, checkpoints=(), options=opts), nonce="", author="")
    for k in ("id", "nonce", "author", "writer_epoch", "compactor_epoch"):
        body.pop(k, None)
    return body


def backup_version(
    m: Manifest,
    source: ObjectStore,
    store_for: Callable[[int], ObjectStore],
    dest: ObjectStore,
    *,
    clock: Clock,
    rng: random.Random,
    server_copy: Callable[[str], None] | None = None,
    prune: bool = True,
    report: BackupReport | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
) -> BackupReport:
    """Copy what ``m`` needs into ``dest`` and write ``dest``'s manifest (module docstring, 2-5).

    ``workers`` copies run at once (``shaledb.store.parallel``); ``progress``
    is called with (bytes done, bytes to copy) after each object.
    """
    check_flag("prune", prune)  # (a truthy "no" pruned)
    rep = report or BackupReport()
    rep.source_manifest_id = m.id
    with contextlib.ExitStack() as held:
        if _check_dest(dest, clock, rng) is not None:
            # (A first backup takes none: no database at the destination yet, so no collector.)
            # The destination's garbage collector sees the copies (and a killed backup's
            # leftovers, which this one counts as copied) in no manifest until the last one is
            # written, and they keep their source ids, so nothing but a lease tells it they are
            # in flight: at a low min_age_s it deleted them and the manifest named missing
            # objects. The lease is written before the destination is listed: a pass that lists
            # the leases after that keeps all; one that listed them before had listed the objects
            # before too, so it never sees a copy (a leftover this backup counts as present goes
            # only if such a pass's delete request lands after this backup's listing).
            lease = held.enter_context(
                JobLease(
                    dest,
                    clock,
                    rng,
                    BACKUP_LEASE_EPOCH,
                    BACKUP_LEASE_S,
                    f"backup of manifest {m.id}",
                    kind=COPY_KIND,
                )
            )
            progress = _renewing(lease, progress)
        return _backup_version(
            m, source, store_for, dest, clock, rng, server_copy, prune, rep, workers, progress
        )


def _renewing(lease: JobLease, progress: Progress | None) -> Progress:
    """``progress`` that also renews ``lease`` after each object copied."""

    def renewing(done: int, total: int) -> None:
        lease.beat()
        if progress is not None:
            progress(done, total)

    return renewing


def _backup_version(
    m: Manifest,
    source: ObjectStore,
    store_for: Callable[[int], ObjectStore],
    dest: ObjectStore,
    clock: Clock,
    rng: random.Random,
    server_copy: Callable[[str], None] | None,
    prune: bool,
    rep: BackupReport,
    workers: int,
    progress: Progress | None,
) -> BackupReport:
    wanted = needed_objects(m, source)
    rep.objects = len(wanted)
    present: dict[str, int] = {}
    for d in (paths.SST_DIR, paths.JOURNAL_DIR, paths.WAL_DIR):
        for meta in dest.list(d):
            present[meta.path] = meta.size
    todo = [(path, db, size) for path, (db, size) in sorted(wanted.items()) if present.get(path) != size]
    rep.already_present = len(wanted) - len(todo)

    def server_side(db: int) -> bool:  # objects of this database, with both ends in one store
        return db == 0 and server_copy is not None

    def copy(item: tuple[str, int, int]) -> bool:
        path, db, _ = item
        if server_side(db):
            assert server_copy is not None
            server_copy(path)
            return True
        try:
            data = store_for(db).get(path)
        except ObjectNotFound:
            if path.startswith(paths.WAL_DIR):
                return False  # a WAL slot nobody filled
            raise
        dest.put(path, data)
        return True

    def held(item: tuple[str, int, int]) -> int:  # bytes a copy holds here (none if server-side)
        return 0 if server_side(item[1]) else item[2]

    total_bytes = sum(item[2] for item in todo)
    n = 0

    def done(item: tuple[str, int, int], copied: bool) -> None:
        nonlocal n
        path, db, size = item
        n += size
        if copied:
            rep.server_side = rep.server_side or server_side(db)
            rep.copied += 1
            rep.bytes_copied += size
            rep.copied_paths.append(path)
        if progress is not None:
            progress(n, total_bytes)

    # WAL objects go last and one by one in id order: the destination's current manifest
    # replays every WAL object after its replay point, so a backup that dies part-way must
    # leave them contiguous (a writer opening the destination refuses a gap as a lost object).
    wal_todo = [item for item in todo if paths.parse_wal_id(item[0]) is not None]
    rest = [item for item in todo if paths.parse_wal_id(item[0]) is None]
    for item, copied in run_bounded(copy, rest, held, workers=workers):
        done(item, copied)
    ms = ManifestStore(dest, clock, rng, author="backup")
    latest = ms.read_latest()
    if latest is not None and latest.option(BACKUP_EPOCH) != str(latest.writer_epoch):
        raise InvalidDbState(
            f"the destination {dest.describe()} holds a database that is not an untouched backup (a writer "
            "opened it since the last backup, or it never was one); back up to a new location"
        )
    new = flattened(m)
    if latest is not None and wal_todo:
        latest = _bridge(ms, latest, new, present, wal_todo)
    if server_copy is None and wal_todo:  # GETs run ahead; the PUTs stay in id order
        fetched = get_in_order(source, [item[0] for item in wal_todo], read_ahead=workers)
        try:
            for item, (path, data) in zip(wal_todo, fetched):
                if data is not None:  # (None: a WAL slot nobody filled)
                    dest.put(path, data)
                done(item, data is not None)
        finally:
            fetched.close()
    elif latest is None:
        # No manifest at the destination yet (a first backup): nothing replays these until the
        # manifest, written last, exists, so they copy like the rest, ``workers`` at once.
        for item, copied in run_bounded(copy, wal_todo, held, workers=workers):
            done(item, copied)
    else:
        # Server-side, each copy also publishes its object, and there is no rename to publish
        # them in order afterwards; nor can a manifest hide a half-done run (the replay point
        # may not go backwards). So one by one, in id order, as the comment above says.
        for item in wal_todo:
            done(item, copy(item))
    rep.copied_paths.sort()
    if latest is not None and _content(latest) == _content(new):
        rep.dest_manifest_id = latest.id
    else:
        epoch = max(new.writer_epoch, latest.writer_epoch if latest else 0)
        nxt = replace(
            new,
            id=1 if latest is None else latest.id + 1,
            writer_epoch=epoch,
            compactor_epoch=max(new.compactor_epoch, latest.compactor_epoch if latest else 0),
            checkpoints=latest.checkpoints if latest else (),  # readers of the backup keep their pins
            options=tuple(sorted((*new.options, (BACKUP_EPOCH, str(epoch))))),
        )
        ms.write_new(nxt, latest)
        rep.dest_manifest_id = nxt.id
        rep.manifest_written = True
    if prune and rep.manifest_written:
        pinned = _pinned_by_checkpoints(ms, latest, clock.now())
        doomed = []
        for path in present:
            if path in wanted or path in pinned:
                continue
            wid = paths.parse_wal_id(path)
            if wid is not None and wid > m.replay_after_wal_id:
                continue  # a fence or a later write: keep the WAL contiguous
            doomed.append(path)
        dest.delete_many(doomed)
        rep.pruned += len(doomed)
    return rep


def _first_gap(present: Mapping[str, int], after: int) -> int:
    """The first WAL id above ``after`` with no object among ``present`` paths."""
    ids = {w for w in map(paths.parse_wal_id, present) if w is not None}
    free = after + 1
    while free in ids:
        free += 1
    return free


def _bridge(
    ms: ManifestStore,
    latest: Manifest,
    new: Manifest,
    present: Mapping[str, int],
    wal_todo: list[tuple[str, int, int]],
) -> Manifest:
    """Before copying WAL objects that would sit above a gap in what ``latest`` replays, write
    ``new`` without its WAL range (its SSTs are all copied: the source's state at its last L0
    flush). A backup that dies while copying the WAL then leaves a destination that opens at
    that state plus the WAL objects copied so far (a contiguous run), instead of the previous
    backup's WAL followed by a gap, which a writer refuses as a lost WAL object."""
    first = min(w for w in (paths.parse_wal_id(item[0]) for item in wal_todo) if w is not None)
    if first <= _first_gap(present, latest.replay_after_wal_id):
        return latest  # the copies extend the run the destination replays already
    epoch = max(new.writer_epoch, latest.writer_epoch)
    mid = replace(
        new,
        id=latest.id + 1,
        writer_epoch=epoch,
        compactor_epoch=max(new.compactor_epoch, latest.compactor_epoch),
        next_wal_id=new.replay_after_wal_id + 1,
        tracked_wals=tuple(w for w in new.tracked_wals if w.id <= new.replay_after_wal_id),
        checkpoints=latest.checkpoints,
        options=tuple(sorted((*new.options, (BACKUP_EPOCH, str(epoch))))),
    )
    ms.write_new(mid, latest)
    return mid


def _pinned_by_checkpoints(ms: ManifestStore, latest: Manifest | None, now_s: float) -> set[str]:
    """Paths the versions pinned by the destination's live checkpoints need (its readers keep
    their checkpoints across backups, so pruning must not delete what those versions read)."""
    keep: set[str] = set()
    for cp in latest.checkpoints if latest is not None else ():
        if cp.expired(now_s):
            continue
        try:
            pm = ms.read(cp.manifest_id)
        except ObjectNotFound:
            continue
        keep.update(paths.sst_path(s.id) for s in pm.all_ssts())
        keep.update(paths.journal_object_path(j.id) for j in pm.journal)
        keep.update(paths.wal_path(w) for w in range(pm.replay_after_wal_id + 1, pm.next_wal_id))
    return keep


def _check_dest(dest: ObjectStore, clock: Clock, rng: random.Random) -> Manifest | None:
    """The destination's latest manifest (None: nothing there yet); InvalidDbState if it is
    not an untouched backup."""
    latest = ManifestStore(dest, clock, rng, author="backup").read_latest()
    if latest is not None and latest.option(BACKUP_EPOCH) != str(latest.writer_epoch):
        raise InvalidDbState(
            f"the destination {dest.describe()} holds a database that is not an untouched backup (a writer "
            "opened it since the last backup, or it never was one); back up to a new location"
        )
    return latest


def _server_copier(
    src_url: str | None, dest_url: str, store_options: Mapping[str, Any] | None
) -> Callable[[str], None] | None:
    if src_url is None:
        return None
    try:
        found = common_root(src_url, dest_url)
    except InvalidArgument:
        return None
    if found is None:
        return None
    root_url, sp, dp = found
    scheme = urlsplit(root_url).scheme
    try:
        root = open_store(root_url, **({} if scheme in ("file", "memory") else dict(store_options or {})))
    except ShaleError:
        return None
    from ..clock import SYSTEM_CLOCK
    from ..settings import Settings
    from ..store.stack import wrap_store

    root = wrap_store(root, Settings(), SYSTEM_CLOCK, random.Random())  # obstore itself does not retry

    def copy(path: str) -> None:
        root.copy(sp + path, dp + path)

    return copy


def check_backup_roots(src: str, dest_url: str, m: Manifest) -> None:
    """The destination's root must not nest with the source's or any of its ancestors'
    (their garbage collectors would delete the backup, or it would prune them)."""
    check_disjoint(dest_url, src, "backup source")
    for e in m.external_dbs:
        check_disjoint(dest_url, e.url, "backup source's ancestor")


def open_dest(dest_url: str, store_options: Mapping[str, Any] | None) -> ObjectStore:
    scheme = urlsplit(dest_url).scheme.lower()
    opts = {} if scheme in ("", "file", "memory") or len(scheme) == 1 else dict(store_options or {})
    return wrap_store(open_store(dest_url, **opts), Settings(), SYSTEM_CLOCK, random.Random())


@dataclass(frozen=True)
class _Source:
    """What a backup reads through: the writer's own handles, or a standalone admin handle's."""

    ms: ManifestStore
    store: ObjectStore
    parents: ExternalStores
    clock: Clock
    rng: random.Random
    url: str | None
    """The source's URL (None: not known, so no server-side copy)."""


def _copy_pinned(
    src: _Source,
    cp: Checkpoint,
    release: Callable[[], None],
    dest: ObjectStore,
    dest_url: str,
    store_options: Mapping[str, Any] | None,
    prune: bool,
    workers: int,
    progress: Progress | None,
) -> BackupReport:
    """Copy the version backup checkpoint ``cp`` pins into ``dest``, then release ``cp``
    and close ``dest`` whatever happened (module docstring, 2-6).

    ``Db.backup`` and a standalone backup differ only in how the checkpoint is taken
    and dropped (through the writer, or by a CAS of their own), so ``release`` is the
    caller's. A failed release is only logged: the checkpoint expires by itself.
    """
    rep = BackupReport(checkpoint_id=str(cp.id))
    try:
        m = read_checkpoint_manifest(src.ms, cp)
        backup_version(
            m,
            src.store,
            lambda i: src.store if i == 0 else src.parents.store_for(i, m),
            dest,
            clock=src.clock,
            rng=random.Random(src.rng.getrandbits(64)),
            server_copy=_server_copier(src.url, dest_url, store_options),
            prune=prune,
            report=rep,
            workers=workers,
            progress=progress,
        )
    finally:
        try:
            release()
        except ShaleError as exc:
            log.warning("backup: could not release checkpoint %s (it expires): %s", cp.id, exc)
        dest.close()
    return rep


def backup_from_writer(
    db: WriterHost,
    dest_url: str,
    *,
    store_options: Mapping[str, Any] | None = None,
    prune: bool = True,
    lifetime: timedelta | float = 3600.0,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
) -> BackupReport:
    """``Db.backup``: checkpoint every write issued so far, copy, release."""
    check_workers(workers)
    check_flag("prune", prune)
    own = db.parents.own_url
    if own is not None and canonical_url(dest_url) == own:
        raise InvalidArgument("a database cannot be backed up onto itself")
    check_backup_roots(own or db.store.describe(), dest_url, db.manifest)
    dest = open_dest(dest_url, store_options)
    try:
        cp = create_writer_checkpoint(db, lifetime=lifetime, name="backup")
    except BaseException:
        dest.close()  # (a closed or fenced writer: the destination was left open)
        raise

    def release() -> None:
        db.update_manifest(Decorated(DropCheckpoint(cp.id), db.decorate_manifest))

    src = _Source(db.manifests, db.store, db.parents, db.clock, db.rng, own)
    rep = _copy_pinned(src, cp, release, dest, dest_url, store_options, prune, workers, progress)
    log.info(
        "backup to %s: %d objects, %d copied (%d bytes), manifest %s",
        dest_url,
        rep.objects,
        rep.copied,
        rep.bytes_copied,
        "written" if rep.manifest_written else "unchanged",
    )
    return rep


def backup_url(
    src_url: str,
    dest_url: str,
    *,
    store_options: Mapping[str, Any] | None = None,
    prune: bool = True,
    lifetime_s: float = 3600.0,
    clock: Clock | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
) -> BackupReport:
    """A backup without a writer (``shaledb --path URL backup DEST``): every durable write."""
    check_workers(workers)
    check_flag("prune", prune)
    if canonical_url(src_url) == canonical_url(dest_url):
        raise InvalidArgument("a database cannot be backed up onto itself")
    h = AdminHandle(src_url, None, store_options, clock, None, "backup")
    try:
        check_backup_roots(src_url, dest_url, h.ms.require_latest())
        dest = open_dest(dest_url, store_options)
    except BaseException:
        h.close()
        raise
    try:
        try:
            cp = create_checkpoint(
                h.ms, clock=h.clock, rng=h.rng, timeout_s=60.0, lifetime=lifetime_s, name="backup"
            )
        except BaseException:
            dest.close()  # (a destroyed database, a CAS timeout: both handles were left open)
            raise

        def release() -> None:
            delete_checkpoint(h.ms, cp.id, timeout_s=60.0, missing_ok=True)

        src = _Source(h.ms, h.store, h.external, h.clock, h.rng, src_url)
        return _copy_pinned(src, cp, release, dest, dest_url, store_options, prune, workers, progress)
    finally:
        h.close()


__all__ = ["BackupReport", "backup_from_writer", "backup_url", "backup_version", "common_root", "flattened"]

"""The garbage collector: delete only what nothing can read any more.

A pass (see docs/design/gc.md):

0. List the compaction job leases (``compactions/*.job``) *before* reading the
   manifest. A job deletes its lease only after its commit, so a job whose
   lease we miss has already committed and the manifest read next names its
   outputs.
1. Remove expired checkpoints from the latest manifest (one CAS), and the view
   checkpoints of writer epochs older than its own (a fenced writer's: a soft
   destroy killed after fencing left them; a writer opening drops them too).
2. Active manifests: the latest, plus each one a live checkpoint pins.
3. Delete manifests that are not active, older than ``min_age_s`` and older
   than the latest (never the latest itself). A stalled writer that later
   creates a deleted id does not fork the database: ``ManifestStore.write_new``
   lists newer versions after every create and retries from the latest, where
   the writer finds it was fenced.
4. Delete WAL objects at or below the latest manifest's ``replay_after_wal_id``
   (their writes are in its SSTs) that are in no live checkpoint's replay range
   ``(replay_after_wal_id, next_wal_id)`` of its pinned manifest (a checkpoint's
   holder reads that range and no further), older than ``min_age_s`` (or
   ``wal_retention_s``, if longer, for change-feed consumers) -- except WAL
   objects an active manifest lists as value-journal files (key/value
   separation keeps them), and *fencing objects* (WAL SSTs with no entries),
   which are kept forever. A writer opening writes its fence at the
   first free WAL id, which is exactly the next id a zombie (an older writer
   still running) will try; the zombie's create collides with the fence and
   fails with ``FencedError``. If GC deleted the fence, the zombie's late
   write would *succeed* into a slot below the new writer's replay point and
   its acknowledged write would be silently lost (SlateDB #352/#1622). Fences
   are a couple of hundred bytes, one per writer open; they are recognized by
   size and confirmed by reading their properties.
   Only the first fence of each writer epoch is kept: the further fences of the
   same epoch fill the slots after it (``recovery.write_fence``, when writers
   pipeline WAL PUTs) and matter only while that writer's own objects follow;
   a zombie's PUT into a deleted one cannot be acknowledged (its PUT of the
   first fence's slot failed) and lands below the replay point.
5. Delete SSTs under ``compacted/`` that no active manifest references, older
   than ``min_age_s``, and not created after the start of a live job lease of
   the current compactor epoch (outputs of a running compaction are
   unreferenced until its commit, which may come long after ``min_age_s``);
   while a backup's lease (``kind`` ``"backup"``) is live, none at all: a
   backup's copies keep their source ids, born before any lease.
   The leases are listed again after ``compacted/``, so a job started after
   step 0 whose outputs the listing shows is known (a job deletes its lease
   only after its commit, which the manifest re-read next then shows).
   An SST of the current writer epoch younger than :data:`UNCOMMITTED_MIN_AGE_S`
   holding writes the latest manifest has not put in L0 (``max_seq >
   last_l0_seq``) is kept whatever
   ``min_age_s`` says: a writer's flush between its SST PUT and its manifest
   write (writers take no lease; at ``min_age_s=0`` the pass deleted it and the
   flush committed a manifest naming a missing SST).
5b. Delete value-journal objects under ``journal/`` that no active manifest
   lists, with the same age and job-lease rules as SSTs (journal compaction
   writes its outputs under a job lease and leaves the objects it replaced to
   this step: a live snapshot, checkpoint or reader pins a manifest that
   still lists them).
6. Delete other orphans older than ``min_age_s``: temporary objects under
   ``tmp/`` (the two-phase store's pending records keep theirs, and without
   access to the record table ``tmp/2pc/`` is left alone; a bulk load's
   staged runs under ``tmp/stage/`` follow the SSTs' job-lease rule) and stale job leases
   (past their lease, or of an older compactor epoch: those jobs can never
   commit). In a local directory, also the staging files (``<name>#<n>``) of puts
   a killed process never finished, by the same age rule: listings never show
   them, and each can be as large as an SST.

``min_age_s`` is measured from an object's creation (the later of its store
timestamp and, for SSTs, its ULID time). It may be 0: what is written and not
yet committed is protected without it -- a writer's flush by the
uncommitted-writes floor above, compactions, journal compactions and ingests
(Spark stream micro-batches from their tasks' first staged run) by their leases,
a local directory's staging files by :data:`STAGE_MIN_AGE_S`. A larger value
keeps garbage around for readers that run without a checkpoint and for
change-feed consumers (``wal_retention_s``), and covers clock skew for anything
minted on one machine and leased on another. Objects the pass did not see in its
listings are never touched, and a manifest written during the pass is re-read,
with the versions its live checkpoints pin, before SSTs are deleted.

The lifecycle steps (docs/design/checkpoints-readers-clones.md) come from
:mod:`shaledb.admin.destruction`: a pass first finishes a soft-destroyed database
whose grace period is over and whose checkpoints are gone (and then reports
``destroyed``; :meth:`run` stops), and
last detaches a clone that no longer references its ancestors' objects.

``dry_run`` computes the same plan and deletes nothing (nor removes
checkpoints). Every pass logs and returns counts per class.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..compaction.compactor import COPY_KIND, lease_kind, read_lease
from ..engine.host import WriterHost
from ..engine.sstable import read_object_meta
from ..errors import CorruptionError, InvalidArgument, NotFound, ObjectNotFound, ShaleError, Unavailable
from ..format import paths
from ..format.sst import decode_meta
from ..manifest.edits import DropExpiredCheckpoints, collectable
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..numbers import check_flag, check_seconds
from ..settings import GcOptions, Settings
from ..store.base import ObjectMeta, ObjectStore
from ..store.local_store import LocalObstoreStore
from ..store.roots import foreign_roots
from ..store.stack import close_quietly, open_stack
from ..store.twophase import TWO_PHASE_TMP_PREFIX, TwoPhaseStore
from ..store.wrappers import find_wrapper
from .destruction import LifecycleSteps

log = logging.getLogger("shaledb.gc")

_ULID_CLASSES: tuple[tuple[str, str, Callable[[str], str | None], Callable[[Manifest], set[str]]], ...] = (
    ("sst", paths.SST_DIR, paths.parse_sst_id, lambda a: {s.id for s in a.all_ssts() if s.db == 0}),
    ("journal", paths.JOURNAL_DIR, paths.parse_journal_id, lambda a: {j.id for j in a.journal if j.db == 0}),
)
"""The ULID-named object classes GC deletes when no active manifest names them (the
database's own, ``db == 0``; a clone's parents' objects are their databases' to delete)."""


FENCE_PROBE_BYTES = 1024
"""WAL objects at most this big are read to see whether they are fences."""

CLASSES = ("manifest", "wal", "sst", "journal", "tmp", "job")


@dataclass
class GcReport:
    """What one pass deleted (or, in a dry run, would delete)."""

    dry_run: bool = False
    manifest_id: int = 0
    active_manifests: list[int] = field(default_factory=list)
    checkpoints_expired: list[str] = field(default_factory=list)
    deleted: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CLASSES})
    bytes_deleted: int = 0
    fences_kept: int = 0
    in_flight_kept: int = 0
    """Unreferenced SSTs older than ``min_age_s`` kept as a writer's flush in flight (younger
    than :data:`UNCOMMITTED_MIN_AGE_S`, holding writes not yet in L0): the floor applied."""
    backup_in_progress: bool = False
    """A backup was copying into this database (its live lease, ``kind`` ``"backup"``): every
    unreferenced SST, journal object and staged run was kept, since its copies keep their
    source ids and are in no manifest until its last write (the next pass collects them)."""
    destroyed: bool = False
    """The database was soft-destroyed and is now deleted (nothing is left to collect)."""
    detached: bool = False
    """This pass detached the clone from its ancestors."""
    duration_s: float = 0.0

    def counts(self) -> dict[str, int]:
        out = {c: len(v) for c, v in self.deleted.items()}
        out["checkpoints"] = len(self.checkpoints_expired)
        return out

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.deleted.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "manifest_id": self.manifest_id,
            "active_manifests": list(self.active_manifests),
            "counts": self.counts(),
            "checkpoints_expired": list(self.checkpoints_expired),
            "deleted": {c: list(v) for c, v in self.deleted.items()},
            "bytes_deleted": self.bytes_deleted,
            "fences_kept": self.fences_kept,
            "in_flight_kept": self.in_flight_kept,
            "backup_in_progress": self.backup_in_progress,
            "destroyed": self.destroyed,
            "detached": self.detached,
            "duration_s": round(self.duration_s, 3),
        }


UNCOMMITTED_MIN_AGE_S = 300.0
"""An unreferenced SST younger than this that the current writer epoch flushed (its properties'
``writer_epoch``, which only L0 flushes set) and that holds writes no manifest has put in L0
yet (its ``max_seq`` above the latest manifest's ``last_l0_seq``) is never deleted, even at
``min_age_s=0``: it is a live writer's flush between its SST PUT and the manifest write that
names it (a fenced writer's cannot commit, and goes at once). Deleting it left that manifest
naming a missing SST (every later open failed: data loss). Such an SST is garbage only when its
writer died before committing, and that can wait as long as the default ``min_age_s``.
Compactions, ingests and rebuilds are protected by their leases."""

STAGE_MIN_AGE_S = 600.0
"""A local directory's staging file younger than this is never deleted, even at ``min_age_s=0``:
it is a put in progress (its rename or link into place comes next), and deleting it failed the
live writer's put (``ObjectNotFound``: the writer stopped). A stage is garbage only when a
process died between writing it and linking it, and that can wait ten minutes."""


class GarbageCollector:
    """Garbage collection for one database (see module docstring)."""

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        options: GcOptions | None = None,
        *,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        settings: Settings | None = None,
        store_options: Mapping[str, object] | None = None,
    ) -> GarbageCollector:
        """A standalone garbage collector for the database at ``url``.

        Raises:
            NotFound: no database there.
            InvalidArgument: neither ``url`` nor ``store`` given.
        """
        settings = settings or Settings()
        options = options or settings.garbage_collector or GcOptions()
        if not isinstance(options, GcOptions):
            raise InvalidArgument(f"options must be a GcOptions, got {type(options).__name__}")
        clock = clock or SYSTEM_CLOCK
        rng = random.Random(seed)
        st = open_stack(url, store, store_options, settings, clock, rng)
        try:
            gc = cls(
                st,
                options,
                clock=clock,
                rng=rng,
                settings=settings,
                store_options=store_options,
            )
            if gc.manifests.read_latest() is None:
                raise NotFound(f"no database at {st.describe()}")
        except BaseException:
            close_quietly(st if store is None else None)
            raise
        gc.owned_store = st if store is None else None
        return gc

    def __init__(
        self,
        store: ObjectStore,
        options: GcOptions,
        *,
        clock: Clock,
        rng: random.Random,
        settings: Settings | None = None,
        store_options: Mapping[str, object] | None = None,
    ) -> None:
        settings = settings or Settings()
        self.store = store
        self.options = options
        self.clock = clock
        self.timeout_s = settings.manifest_update_timeout_s
        self.manifests = ManifestStore(store, clock, rng, author="gc")
        self.lifecycle = LifecycleSteps(
            self.manifests,
            clock=clock,
            grace_s=options.db_delete_grace_s,
            timeout_s=self.timeout_s,
            retry=settings.retry,
            store_options=store_options,
        )
        self._fences: dict[int, int | None] = {}
        """WAL id of a fence -> its writer epoch (None: unknown)."""
        self._stop = threading.Event()
        self.owned_store: ObjectStore | None = None
        """The store :meth:`open` opened, closed by :meth:`close` (a passed-in store stays theirs)."""

    # ------------------------------------------------------------------ pass

    def run_once(self, *, dry_run: bool | None = None, min_age_s: float | None = None) -> GcReport:
        """One pass; ``dry_run`` and ``min_age_s`` override the options for this pass."""
        dry = self.options.dry_run if dry_run is None else check_flag("dry_run", dry_run)
        min_age = (
            self.options.min_age_s
            if min_age_s is None
            else check_seconds("min_age_s", min_age_s, allow_zero=True)
        )
        started = self.clock.monotonic()
        now = self.clock.now()
        cutoff = now - min_age
        report = GcReport(dry_run=dry)
        leases = list(self.store.list(paths.JOB_DIR))  # step 0: before the manifest
        m = self.manifests.read_latest()
        if m is None:
            return report
        if self.lifecycle.destroy_step(m, dry_run=dry):
            report.destroyed = True
            report.duration_s = self.clock.monotonic() - started
            return report
        m = self._expire_checkpoints(m, now, dry, report)
        report.manifest_id = m.id
        active = self._active(m, now)
        report.active_manifests = sorted(active)
        self._manifests(m, active, cutoff, dry, report)
        self._wals(m, active, min(cutoff, now - self.options.wal_retention_s), dry, report)
        live_from = self._leases(leases, m, now, cutoff, dry, report)
        window = (now, cutoff, live_from)
        for cls, directory, parse_id, ids_of in _ULID_CLASSES:
            self._unreferenced(cls, directory, parse_id, ids_of, m, active, window, dry, report)
        self._tmp(m, now, cutoff, live_from, dry, report)
        # A stage's age is its mtime, stamped by this host's clock, so the floor is measured on
        # that clock too: a collector whose clock ran a day ahead (an injected one, or skew on a
        # shared mount) took a live put's stage for abandoned and stopped its writer.
        self._stages(min(cutoff, now - STAGE_MIN_AGE_S, SYSTEM_CLOCK.now() - STAGE_MIN_AGE_S), dry, report)
        report.detached = self.lifecycle.detach_step(dry_run=dry)
        report.duration_s = self.clock.monotonic() - started
        c = report.counts()
        if report.total or c["checkpoints"]:
            log.info(
                "gc%s at manifest %d: %s %d manifests, %d WAL objects, %d SSTs, %d journal objects, "
                "%d temporary objects, %d job leases (%d bytes); %d checkpoints expired; %d fences kept",
                " (dry run)" if dry else "",
                m.id,
                "would delete" if dry else "deleted",
                c["manifest"],
                c["wal"],
                c["sst"],
                c["journal"],
                c["tmp"],
                c["job"],
                report.bytes_deleted,
                c["checkpoints"],
                report.fences_kept,
            )
        return report

    def _delete(self, cls: str, doomed: list[ObjectMeta], dry: bool, report: GcReport) -> None:
        """Delete one class's objects in bulk (one S3 request per thousand)."""
        if not doomed:
            return
        names = [meta.path for meta in doomed]
        if not dry:
            self.store.delete_many(names)
        report.deleted[cls].extend(names)
        report.bytes_deleted += sum(meta.size for meta in doomed)

    # ----------------------------------------------------------- checkpoints

    def _expire_checkpoints(self, m: Manifest, now: float, dry: bool, report: GcReport) -> Manifest:
        expired = [c for c in m.checkpoints if collectable(c, m, now)]
        if not expired:
            return m
        if dry:
            report.checkpoints_expired = [str(c.id) for c in expired]
            return replace(m, checkpoints=tuple(c for c in m.checkpoints if not collectable(c, m, now)))
        edit = DropExpiredCheckpoints(now)
        m = self.manifests.update(edit, timeout_s=self.timeout_s, current=m)
        report.checkpoints_expired = list(edit.gone)
        return m

    def _active(self, m: Manifest, now: float) -> dict[int, Manifest]:
        active = {m.id: m}
        self._add_pinned(m, now, active)
        return active

    def _add_pinned(self, m: Manifest, now: float, active: dict[int, Manifest]) -> None:
        """Add to ``active`` the versions the live checkpoints of ``m`` pin."""
        for c in m.checkpoints:
            if c.expired(now) or c.manifest_id in active:
                continue
            try:
                active[c.manifest_id] = self.manifests.read(c.manifest_id)
            except ObjectNotFound:
                if not self._still_pinned(m, c.id, c.manifest_id, now):
                    # Another collector (or an admin, or a reader moving its pin) dropped the
                    # checkpoint after ``m`` was read, and a collector deleted the version:
                    # already collected, not a missing version of a live checkpoint.
                    log.debug(
                        "checkpoint %s no longer pins manifest %d (dropped meanwhile), which is gone",
                        c.id,
                        c.manifest_id,
                    )
                    continue
                log.error(
                    "checkpoint %s pins manifest %d, which is missing: its objects cannot be protected",
                    c.id,
                    c.manifest_id,
                )

    def _still_pinned(self, m: Manifest, checkpoint_id: uuid.UUID, manifest_id: int, now: float) -> bool:
        """Whether the newest manifest after ``m`` still has the live checkpoint
        ``checkpoint_id`` on version ``manifest_id``.

        Two collectors racing: one read ``m``, the other expired (or saw deleted) the
        checkpoint and deleted the version it pinned, so the first found it missing and
        logged an ERROR about a checkpoint that no longer existed. Only a version missing
        while the latest manifest still pins it is that error (a failure to read the
        latest keeps the error too)."""
        try:
            latest = self.manifests.refresh(m)
        except ShaleError:
            return True
        return any(
            c.id == checkpoint_id and c.manifest_id == manifest_id and not c.expired(now)
            for c in latest.checkpoints
        )

    # ----------------------------------------------------------- object classes

    def _manifests(
        self, m: Manifest, active: dict[int, Manifest], cutoff: float, dry: bool, report: GcReport
    ) -> None:
        doomed = []
        for meta in self.store.list(paths.MANIFEST_DIR):
            mid = paths.parse_manifest_id(meta.path)
            if mid is None or mid >= m.id or mid in active or meta.last_modified > cutoff:
                continue
            doomed.append(meta)
        self._delete("manifest", doomed, dry, report)

    def _wals(
        self, m: Manifest, active: dict[int, Manifest], cutoff: float, dry: bool, report: GcReport
    ) -> None:
        """Step 4. Who reads a WAL object: anyone opening the database now, those above the
        latest manifest's replay point; a checkpoint's holder (a pinned reader, a Spark job, a
        backup, a clone's copy), its pinned version's replay range and nothing past it (a
        managed reader that tails the WAL past its checkpoint and finds an object gone moves to
        the latest manifest, which covers it: ``DbReader._after_missing``). Before, every
        object above the *lowest* replay point of the active manifests was kept, so one
        long-lived checkpoint -- a clone's on its parent never expires -- kept the whole WAL
        written after it (17,629 objects, 123 MiB, after 25 minutes of a busy writer)."""
        upto = m.replay_after_wal_id
        pinned = [
            (a.replay_after_wal_id, a.next_wal_id)
            for a in active.values()
            if a.id != m.id and a.replay_after_wal_id + 1 < a.next_wal_id
        ]
        journal = {paths.journal_object_path(j.id) for a in active.values() for j in a.journal if j.db == 0}
        doomed = []
        first_fence: dict[int, int] = {}
        for meta in list(self.store.list(paths.WAL_DIR)):
            wid = paths.parse_wal_id(meta.path)
            if wid is None:
                continue
            if wid > upto:
                break  # listings are sorted and ids are zero-padded: the rest are newer
            if meta.last_modified > cutoff or meta.path in journal:
                continue
            if any(lo < wid < hi for lo, hi in pinned):
                continue  # a live checkpoint's replay range
            if self._is_fence(wid, meta):
                epoch = self._fences.get(wid)
                if epoch is None or epoch not in first_fence:
                    if epoch is not None:
                        first_fence[epoch] = wid
                    report.fences_kept += 1
                    continue  # the epoch's first fence: kept forever
            doomed.append(meta)
        self._delete("wal", doomed, dry, report)

    def _is_fence(self, wid: int, meta: ObjectMeta) -> bool:
        if wid in self._fences:
            return True
        if meta.size == 0:
            self._fences[wid] = None
            return True
        if meta.size > FENCE_PROBE_BYTES:
            return False
        try:
            data = self.store.get(meta.path)
            props = decode_meta(data, len(data)).props if data else None
            fence = props is None or props.entries == 0
        except ObjectNotFound:
            return True  # gone already: nothing to delete
        except CorruptionError as exc:
            log.warning("keeping unreadable small WAL object %s: %s", meta.path, exc)
            return True
        if fence:
            self._fences[wid] = None if props is None else props.writer_epoch
        return fence

    def _leases(
        self, leases: list[ObjectMeta], m: Manifest, now: float, cutoff: float, dry: bool, report: GcReport
    ) -> float:
        """Start time of the oldest live job of the current compactor epoch (inf if none);
        deletes stale leases."""
        live_from, stale = self._live_from(leases, m, now)
        self._delete("job", [meta for meta in stale if meta.last_modified <= cutoff], dry, report)
        return live_from

    def _live_from(self, leases: list[ObjectMeta], m: Manifest, now: float) -> tuple[float, list[ObjectMeta]]:
        """(start time of the oldest live job of ``m``'s compactor epoch or later, or inf;
        the stale leases)."""
        live_from = math.inf
        stale = []
        for meta in leases:
            job = paths.parse_job_id(meta.path)
            if job is None:
                # A compactor's role lease (compaction.role) of an older epoch: its holder
                # was killed before it could delete it. The current epoch's stays.
                role = paths.parse_role_epoch(meta.path)
                if role is not None and role < m.compactor_epoch:
                    stale.append(meta)  # deleted by _leases once older than the cutoff
                continue
            try:
                data = self.store.get(meta.path)
            except ObjectNotFound:
                continue  # the job finished
            parsed = read_lease(data)
            live = (
                parsed is not None
                and parsed[0] >= m.compactor_epoch
                and meta.last_modified + parsed[1] >= now
            )
            if not live:
                stale.append(meta)
            elif lease_kind(data) == COPY_KIND:
                # A backup copying into this database: its copies keep their source ids, born
                # long before its lease (and its leftovers from a killed run, which it counts
                # as copied, may be older still), so it keeps every unreferenced object.
                live_from = -math.inf
            else:
                live_from = min(live_from, paths.ulid_time_s(job))
        return live_from, stale

    def _unreferenced(
        self,
        cls: str,
        directory: str,
        parse_id: Callable[[str], str | None],
        ids_of: Callable[[Manifest], set[str]],
        m: Manifest,
        active: dict[int, Manifest],
        window: tuple[float, float, float],
        dry: bool,
        report: GcReport,
    ) -> None:
        """Delete the ULID-named objects under ``directory`` that no active manifest names.

        ``window`` is (now, cutoff, live_from): an object modified or born after the cutoff,
        or born once a live job lease began, may belong to a writer or job not yet in
        any manifest, and is kept.

        After listing, the latest manifest is re-read *and so are the versions its live
        checkpoints pin* (added to ``active``). Versions written since ``m`` may name objects
        just listed, and a checkpoint added meanwhile may pin one of them that is no longer
        the latest: a writer's snapshot or a reader pins version V, a compaction commits V + 1
        without V's newest L0 SST, and only V names it. Reading the latest alone deleted that
        SST whenever it was older than ``min_age_s`` when the pass began (always at
        ``min_age_s=0``). A pin taken after the re-read is on a version at least as new as
        the latest read (or, from a source checkpoint, on the version that one pins), so what
        it names is in an active version or was written since the listing: the age and lease
        rules protect that, as they protect every write not yet committed.
        """
        listed = list(self.store.list(directory))
        if not listed:
            return
        now, cutoff, live_from = window
        # The leases again, after the listing: a job that wrote a listed output had its lease
        # written before it and deletes it only after its commit, so either its lease is here
        # or the manifest read next names its outputs. The leases of step 0 alone missed a
        # job started since, whose outputs were "old enough" by the collector's clock when
        # that clock ran ahead of the job's (or within the millisecond a ULID drops).
        live_from = min(live_from, self._live_from(list(self.store.list(paths.JOB_DIR)), m, now)[0])
        report.backup_in_progress = report.backup_in_progress or live_from == -math.inf
        latest = self.manifests.refresh(m)
        if latest.id not in active:
            active[latest.id] = latest
            self._add_pinned(latest, now, active)
        referenced = set().union(*(ids_of(a) for a in active.values()))
        doomed = []
        for meta in listed:
            oid = parse_id(meta.path)
            if oid is None or oid in referenced:
                continue
            born = paths.ulid_time_s(oid)
            if max(meta.last_modified, born) > cutoff or born >= live_from:
                continue
            doomed.append(meta)
        if cls == "sst":
            doomed = self._not_in_flight(doomed, latest, now, report)
        self._delete(cls, doomed, dry, report)

    def _not_in_flight(
        self, doomed: list[ObjectMeta], latest: Manifest, now: float, report: GcReport
    ) -> list[ObjectMeta]:
        """``doomed`` without the SSTs younger than :data:`UNCOMMITTED_MIN_AGE_S` that the
        latest manifest's writer epoch flushed and that hold writes it has not put in L0: a live
        writer's flush, written and not yet committed (the writer names no lease, and
        ``min_age_s`` may be 0). Only SSTs that young are read (one ranged GET each), and only
        when ``min_age_s`` is below the floor."""
        floor = now - UNCOMMITTED_MIN_AGE_S
        out = []
        kept = 0
        for meta in doomed:
            oid = paths.parse_sst_id(meta.path)
            if oid is not None and max(meta.last_modified, paths.ulid_time_s(oid)) > floor:
                try:
                    props = read_object_meta(self.store, meta.path, meta.size).props
                except ObjectNotFound:
                    continue  # gone already
                except CorruptionError as exc:
                    # Not a flush's: a PUT is whole, and a writer never commits what it cannot read.
                    log.debug("unreadable young SST %s is no write in flight: %s", meta.path, exc)
                    out.append(meta)
                    continue
                if props.writer_epoch == latest.writer_epoch != 0 and props.max_seq > latest.last_l0_seq:
                    kept += 1
                    continue
            out.append(meta)
        report.in_flight_kept += kept
        if kept:
            log.info(
                "gc kept %d unreferenced SSTs younger than %.0f s that hold writes no manifest has "
                "committed yet (a writer's flush in flight); min_age_s does not go below that floor "
                "for them, and they are collected once older if their writer died",
                kept,
                UNCOMMITTED_MIN_AGE_S,
            )
        return out

    def _tmp(
        self, m: Manifest, now: float, cutoff: float, live_from: float, dry: bool, report: GcReport
    ) -> None:
        tp: TwoPhaseStore | None = find_wrapper(self.store, TwoPhaseStore)
        pending = {r.source for r in tp.log.pending(tp.namespace)} if tp is not None else set()
        doomed = []
        metas = list(self.store.list(paths.TMP_DIR))
        # The leases again, after the listing, as for SSTs: a bulk load that began since step 0
        # and staged runs the listing shows has its lease there (it is written before them).
        if any(paths.parse_stage_id(meta.path) for meta in metas):
            live_from = min(live_from, self._live_from(list(self.store.list(paths.JOB_DIR)), m, now)[0])
        foreign = foreign_roots(m.path for m in metas)
        for root in sorted(foreign):
            log.warning(
                "gc %s: %s holds another database (a manifest); its objects are not temporaries "
                "and are left alone -- move that database out of this one's root",
                self.store.describe(),
                root,
            )
        for meta in metas:
            if foreign and meta.path.startswith(tuple(foreign)):
                continue
            if meta.path.startswith(TWO_PHASE_TMP_PREFIX) and (tp is None or meta.path in pending):
                continue
            if meta.last_modified > cutoff:
                continue
            run = paths.parse_stage_id(meta.path)
            if run is not None and paths.ulid_time_s(run) >= live_from:
                continue  # a bulk load's staged run, the load still under its lease
            doomed.append(meta)
        self._delete("tmp", doomed, dry, report)

    def _stages(self, cutoff: float, dry: bool, report: GcReport) -> None:
        """Staging files of a local directory older than ``cutoff`` (at most ``now -``
        :data:`STAGE_MIN_AGE_S`, whatever ``min_age_s`` says)."""
        local: LocalObstoreStore | None = find_wrapper(self.store, LocalObstoreStore)
        if local is None:
            return
        doomed = local.abandoned_stages(cutoff)
        if doomed and not dry:
            local.remove_stages([m.path for m in doomed])
        report.deleted["tmp"].extend(m.path for m in doomed)
        report.bytes_deleted += sum(m.size for m in doomed)

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        """Collect every ``interval_s`` until :meth:`stop`; a pass that fails with
        :class:`~shaledb.errors.Unavailable` (a store outage) is logged and the next one runs
        on schedule (a pass that fails part-way has deleted only garbage)."""
        while not self._stop.is_set():
            report = self.run_pass()
            if report is not None and report.destroyed:
                log.info("database %s was destroyed: the garbage collector stops", self.store.describe())
                return
            self.clock.wait(self._stop, self.options.interval_s)

    def run_pass(self) -> GcReport | None:
        """:meth:`run_once`, or None (logged at WARNING) when the store was unavailable."""
        try:
            return self.run_once()
        except Unavailable as exc:
            log.warning("garbage collection pass failed, next in %.1fs: %s", self.options.interval_s, exc)
            return None

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        close_quietly(self.owned_store)
        self.owned_store = None

    def __enter__(self) -> GarbageCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GarbageCollector({self.store.describe()})"


class EmbeddedGc:
    """The garbage collector as a thread of the writer (``Settings.garbage_collector``).

    Failures are logged and retried at the next interval; they never stop the writer.
    """

    def __init__(self, host: WriterHost, options: GcOptions) -> None:
        self.gc = GarbageCollector(
            host.store,
            options,
            clock=host.clock,
            rng=random.Random(host.rng.getrandbits(64)),
            settings=host.settings,
        )
        self.passes = 0
        self.last_report: GcReport | None = None
        self.last_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shaledb-gc", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        gc = self.gc
        while not gc.clock.wait(gc._stop, gc.options.interval_s):
            try:
                self.last_report = gc.run_once()
                self.passes += 1
            except ShaleError as exc:
                self.last_error = exc
                log.error(
                    "embedded garbage collection failed (retrying in %.0fs): %s", gc.options.interval_s, exc
                )
            except Exception as exc:  # never let GC take the writer down
                self.last_error = exc
                log.exception("embedded garbage collection failed")

    def wake(self) -> None:
        """GC runs on its interval; new L0 SSTs are no reason to run early."""

    def stop(self) -> None:
        self.gc.stop()
        self._thread.join()


__all__ = ["CLASSES", "EmbeddedGc", "GarbageCollector", "GcReport"]

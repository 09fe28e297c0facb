"""The end of a database's life: destroy (soft and hard), and detaching clones.

See docs/design/checkpoints-readers-clones.md (destroy). A database may hold checkpoints other
databases depend on (its clones read its SSTs through them), so it is never
simply removed:

* **Soft destroy** (:func:`destroy` with ``soft=True``): claim write
  ownership (bump ``writer_epoch`` and write a fencing WAL object, exactly as
  a new writer would, so a running writer's next write fails), delete the
  writer's checkpoint and set ``destroyed_at_s``. Nothing is deleted yet; the
  garbage collector does that (:func:`gc_destroyed_database`) once
  ``GcOptions.db_delete_grace_s`` has passed *and* no checkpoint is live,
  first removing the checkpoints the database holds in its clone parents.
* **Hard destroy** (``soft=False``): refuse while a checkpoint other than a
  writer's is live (:class:`~shaledb.errors.InvalidDbState` lists them);
  otherwise set ``destroyed_at_s`` (with a fencing epoch bump), release the
  checkpoints held in parents, delete every object, the current manifest
  last, so a crash half-way leaves a manifest that says "destroyed" and a
  retry finishes the job.

A destroyed database cannot be opened (writers, readers and checkpoint
creation raise :class:`~shaledb.errors.DatabaseDestroyed`).

**Detaching a clone** (:func:`gc_detach_clone`, GC step 8): once neither the
current manifest nor any manifest a live checkpoint pins references an SST or
journal file of another database, the clone no longer needs its ancestors.
References only ever disappear (compaction rewrites them into the clone's
own objects; nothing adds new ones after initialization), so the check is
stable. One CAS drops ``parent``/``external_dbs`` and records the
checkpoints to release in the manifest option :data:`PENDING_RELEASE`; then
each is deleted in its database; then the option is cleared. A crash at any
point is finished by the next GC run, and no checkpoint is released before
the clone's manifest stopped needing it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..clock import Clock
from ..engine.parents import ExternalStores, default_factory
from ..engine.recovery import write_fence
from ..errors import CorruptionError, InvalidDbState, NotFound, ObjectNotFound
from ..format import paths
from ..format.coding import CODECS
from ..manifest.edits import DropCheckpoint, Edit, FenceForDestroy, MarkSoftDestroyed, RemoveOption
from ..manifest.model import Checkpoint, Manifest
from ..manifest.store import ManifestStore
from ..settings import RetryOptions
from ..store.base import ObjectStore
from ..store.local_store import LocalObstoreStore
from ..store.wrappers import find_wrapper
from .checkpoint import held_by_clone

log = logging.getLogger("shaledb.lifecycle")

PENDING_RELEASE = "detach.pending_release"
"""Manifest option: JSON list of ``[url, checkpoint_id]`` still to delete in former ancestors."""


def external_refs(m: Manifest) -> bool:
    """True if ``m`` references an SST or journal file of another database."""
    return any(s.db for s in m.all_ssts()) or any(j.db for j in m.journal)


def live_checkpoints(m: Manifest, now_s: float, *, include_writer: bool = True) -> list[Checkpoint]:
    return [c for c in m.checkpoints if not c.expired(now_s) and (include_writer or c.writer_epoch is None)]


def _described(c: Checkpoint) -> str:
    """A checkpoint in a refusal: its id, and its name or the clone holding it."""
    clone = held_by_clone(c)
    if clone is not None:
        return f"{c.id} (held by the clone at {clone})"
    return f"{c.id}{f' ({c.name})' if c.name else ''}"


@dataclass(frozen=True)
class MarkHardDestroyed(Edit):
    """Hard destroy: fence the writer, drop its checkpoints and mark the database destroyed,
    refused while a user checkpoint lives (its holder may still read the data)."""

    where: str
    clock: Clock

    def apply(self, m: Manifest) -> Manifest | None:
        live = live_checkpoints(m, self.clock.now(), include_writer=False)
        if live:
            names = ", ".join(_described(c) for c in live[:5])
            clones = " (a clone's goes when that clone is destroyed)" if any(map(held_by_clone, live)) else ""
            raise InvalidDbState(
                f"database at {self.where} has {len(live)} live checkpoint(s): {names}; delete them "
                f"(or let them expire) first{clones}, or destroy softly and let the garbage "
                "collector finish"
            )
        if m.destroyed_at_s is not None:
            return None
        keep = tuple(c for c in m.checkpoints if c.writer_epoch is None)
        return replace(m, writer_epoch=m.writer_epoch + 1, checkpoints=keep, destroyed_at_s=self.clock.now())


@dataclass(frozen=True)
class DetachClone(Edit):
    """Detach a clone that no longer references its parents' objects: drop ``parent`` and
    ``external_dbs`` and record the checkpoints ``held`` elsewhere under ``PENDING_RELEASE``.

    No change while it still references them, or while a live checkpoint pins a version
    older than ``seen_id`` that was not ``checked`` (decided on a later run).
    """

    seen_id: int
    checked: frozenset[int]
    held: tuple[tuple[str, uuid.UUID], ...]
    clock: Clock

    def apply(self, m: Manifest) -> Manifest | None:
        if external_refs(m) or (m.parent is None and not m.external_dbs):
            return None
        for cp in live_checkpoints(m, self.clock.now()):
            if cp.manifest_id not in self.checked and cp.manifest_id < self.seen_id:
                return None  # pins a version we did not check: decide next run
        options = dict(m.options)
        options[PENDING_RELEASE] = json.dumps([[u, str(c)] for u, c in self.held])
        return replace(m, parent=None, external_dbs=(), options=tuple(sorted(options.items())))


def _held_elsewhere(m: Manifest) -> list[tuple[str, uuid.UUID]]:
    """Checkpoints this database holds in other databases (parent and ancestors)."""
    out: list[tuple[str, uuid.UUID]] = []
    if m.parent is not None:
        out.append((m.parent.url, m.parent.checkpoint_id))
    for e in m.external_dbs:
        if (e.url, e.checkpoint_id) not in out:
            out.append((e.url, e.checkpoint_id))
    for item in _pending(m):
        if item not in out:
            out.append(item)
    return out


def _pending(m: Manifest) -> list[tuple[str, uuid.UUID]]:
    """The manifest's :data:`PENDING_RELEASE` list (validated: manifest bytes are untrusted)."""
    raw = m.option(PENDING_RELEASE)
    if not raw:
        return []
    try:
        items = json.loads(raw)
        return [(u, uuid.UUID(c)) for u, c in items if isinstance(u, str) and isinstance(c, str)]
    except (ValueError, TypeError) as exc:
        raise CorruptionError(
            f"option {PENDING_RELEASE!r} is malformed: {exc}", paths.manifest_path(m.id)
        ) from None


def release_checkpoints(
    held: list[tuple[str, uuid.UUID]], external: ExternalStores, clock: Clock, timeout_s: float
) -> None:
    """Delete our checkpoints in other databases; a database already gone is fine."""
    for url, cid in held:
        try:
            ms = ManifestStore(external.open_url(url), clock, random.Random(), author="gc")
            ms.update(DropCheckpoint(cid), timeout_s=timeout_s)
        except NotFound:
            log.info("checkpoint %s in %s: that database no longer exists", cid, url)


# ---------------------------------------------------------------- destroy


def destroy(
    store: ObjectStore,
    *,
    soft: bool,
    clock: Clock,
    rng: random.Random,
    external: ExternalStores,
    timeout_s: float,
) -> None:
    """Destroy the database in ``store`` (see module docstring). Soft destroy is idempotent."""
    ms = ManifestStore(store, clock, rng, author="destroy")
    m = ms.require_latest()
    if soft:
        _soft_destroy(ms, m, clock, rng, timeout_s)
    else:
        _hard_destroy(ms, clock, external, timeout_s)


def _soft_destroy(ms: ManifestStore, m: Manifest, clock: Clock, rng: random.Random, timeout_s: float) -> None:
    if m.destroyed_at_s is not None:
        return

    # 1. Claim write ownership: a new epoch, then a fencing WAL object.
    m = ms.update(FenceForDestroy(), timeout_s=timeout_s)
    if m.destroyed_at_s is not None:
        return
    epoch = m.writer_epoch
    write_fence(
        ms.store,
        m,
        epoch,
        nonce=rng.getrandbits(128).to_bytes(16, "little"),
        now_ms=int(clock.now() * 1000),
        codec=CODECS["none"],
    )

    # 2-3. Delete the writer's checkpoint and mark the database destroyed.
    ms.update(MarkSoftDestroyed(epoch, clock), timeout_s=timeout_s)
    log.info("database %s soft-destroyed (writer epoch %d)", ms.store.describe(), epoch)


def _hard_destroy(ms: ManifestStore, clock: Clock, external: ExternalStores, timeout_s: float) -> None:
    m = ms.update(MarkHardDestroyed(ms.store.describe(), clock), timeout_s=timeout_s)
    delete_database(ms, m, external, clock, timeout_s)


def delete_database(
    ms: ManifestStore, m: Manifest, external: ExternalStores, clock: Clock, timeout_s: float
) -> int:
    """Release held checkpoints, then delete every object in the database's folders
    (:data:`~shaledb.format.paths.OWN_DIRS`: other files under its root are not its own and
    stay), the latest manifest last; in a local directory, then the folders left empty."""
    release_checkpoints(_held_elsewhere(m), external, clock, timeout_s)
    store = ms.store
    manifests: list[tuple[int, str]] = []
    others: list[str] = []
    for own in paths.OWN_DIRS:
        for meta in store.list(own):
            mid = paths.parse_manifest_id(meta.path)
            if mid is not None:
                manifests.append((mid, meta.path))
            else:
                others.append(meta.path)
    manifests.sort()
    # A bulk delete has no order, so the current manifest goes alone and last: until then
    # the database still reads as destroyed, and an interrupted delete can be run again.
    store.delete_many(others)
    store.delete_many([path for _, path in manifests[:-1]])
    for _, path in manifests[-1:]:
        store.delete(path)
    # A local directory keeps its folders after their objects are deleted: remove the emptied
    # ones, so a destroyed database leaves no tree of empty folders (object stores have none).
    local: LocalObstoreStore | None = find_wrapper(store, LocalObstoreStore)
    if local is not None:
        # Staging files (``<name>#<n>``) of a writer, copy or backup killed between writing
        # a stage and linking it: not objects, so the listing above skipped them, and they
        # kept their folders (a destroyed backup left ``compacted/<id>.sst#0``). The database
        # is destroyed: a stage of a process still running is of no use any more either.
        local.remove_stages([m.path for m in local.abandoned_stages(math.inf)])
        local.remove_empty_dirs()
    deleted = len(others) + len(manifests)
    log.info("deleted database %s (%d objects)", store.describe(), deleted)
    return deleted


# ------------------------------------------------------------ GC steps


@dataclass(frozen=True, slots=True)
class DestroyStatus:
    """What the garbage collector's destroy step found (``shaledb.admin.collect_lifecycle``,
    ``run-gc``): ``state`` is "active", "waiting" or "deleted", ``reason`` says why it waits."""

    state: str
    reason: str = ""


def gc_destroyed_database(
    ms: ManifestStore,
    *,
    clock: Clock,
    grace_s: float,
    external: ExternalStores,
    timeout_s: float,
    dry_run: bool = False,
    latest: Manifest | None = None,
) -> DestroyStatus:
    """GC step 2: delete a soft-destroyed database once its grace period passed and no
    checkpoint is live. "deleted" means the collector should stop for this database.
    ``latest`` saves a read when the caller just read the latest manifest."""
    m = latest or ms.read_latest()
    if m is None:
        return DestroyStatus("deleted", "no database")
    if m.destroyed_at_s is None:
        return DestroyStatus("active")
    now = clock.now()
    if now < m.destroyed_at_s + grace_s:
        return DestroyStatus("waiting", f"grace period ends in {m.destroyed_at_s + grace_s - now:.0f}s")
    live = live_checkpoints(m, now)
    if live:
        return DestroyStatus("waiting", f"{len(live)} live checkpoint(s)")
    if dry_run:
        log.info("dry run: would delete destroyed database %s", ms.store.describe())
        return DestroyStatus("waiting", "dry run")
    delete_database(ms, m, external, clock, timeout_s)
    return DestroyStatus("deleted")


def gc_detach_clone(
    ms: ManifestStore,
    *,
    clock: Clock,
    external: ExternalStores,
    timeout_s: float,
    dry_run: bool = False,
    latest: Manifest | None = None,
) -> bool:
    """GC step 8: detach a clone that references nothing of its ancestors. True if detached now."""
    m = latest or ms.read_latest()
    if m is None or not m.initialized or m.destroyed_at_s is not None:
        return False
    if m.option(PENDING_RELEASE):
        _finish_release(ms, m, external, clock, timeout_s)
        return False
    if m.parent is None and not m.external_dbs:
        return False
    if external_refs(m):
        return False
    now = clock.now()
    checked = {m.id}
    for cp in live_checkpoints(m, now):
        if cp.manifest_id in checked:
            continue
        try:
            pinned = ms.read(cp.manifest_id)
        except ObjectNotFound:
            return False  # cannot prove anything about it: try again next run
        if external_refs(pinned):
            return False
        checked.add(cp.manifest_id)
    if dry_run:
        log.info("dry run: would detach clone %s from %s", ms.store.describe(), m.parent)
        return False
    held = _held_elsewhere(m)

    cur = ms.update(DetachClone(m.id, frozenset(checked), tuple(held), clock), timeout_s=timeout_s)
    if cur.option(PENDING_RELEASE) is None:
        return False
    _finish_release(ms, cur, external, clock, timeout_s)
    log.info("clone %s detached from its parent", ms.store.describe())
    return True


def _finish_release(
    ms: ManifestStore, m: Manifest, external: ExternalStores, clock: Clock, timeout_s: float
) -> None:
    release_checkpoints(_pending(m), external, clock, timeout_s)

    ms.update(RemoveOption(PENDING_RELEASE), timeout_s=timeout_s)


__all__ = [
    "PENDING_RELEASE",
    "DestroyStatus",
    "LifecycleSteps",
    "delete_database",
    "destroy",
    "external_refs",
    "gc_destroyed_database",
    "gc_detach_clone",
    "release_checkpoints",
]


class LifecycleSteps:
    """The garbage collector's lifecycle steps for one database, for ``shaledb.admin.gc``.

    ``destroy_step`` (GC step 2, docs/design/gc.md) runs first in a pass: True means the
    database is gone and the collector should stop. ``detach_step`` (step 8)
    runs last. Both log what they do and never delete anything in a dry run.
    Parents of clones are opened by URL with ``store_options``.
    """

    def __init__(
        self,
        manifests: ManifestStore,
        *,
        clock: Clock,
        grace_s: float,
        timeout_s: float,
        retry: RetryOptions | None = None,
        store_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.manifests = manifests
        self.clock = clock
        self.grace_s = grace_s
        self.timeout_s = timeout_s
        self.external = ExternalStores(
            default_factory(retry or RetryOptions(), clock, random.Random(), store_options)
        )
        self.last_status = DestroyStatus("active")

    def destroy_step(self, latest: Manifest | None = None, *, dry_run: bool = False) -> bool:
        self.last_status = gc_destroyed_database(
            self.manifests,
            latest=latest,
            clock=self.clock,
            grace_s=self.grace_s,
            external=self.external,
            timeout_s=self.timeout_s,
            dry_run=dry_run,
        )
        if self.last_status.state == "waiting":
            log.info("destroyed database %s: %s", self.manifests.store.describe(), self.last_status.reason)
        return self.last_status.state == "deleted"

    def detach_step(self, latest: Manifest | None = None, *, dry_run: bool = False) -> bool:
        return gc_detach_clone(
            self.manifests,
            latest=latest,
            clock=self.clock,
            external=self.external,
            timeout_s=self.timeout_s,
            dry_run=dry_run,
        )

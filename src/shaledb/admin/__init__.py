"""Administration of a database by URL, without opening a writer (nothing is fenced).

    import shaledb
    cp = shaledb.admin.create_checkpoint("s3://bucket/db", lifetime="1h", name="nightly")
    shaledb.admin.refresh_checkpoint("s3://bucket/db", cp.id, lifetime=timedelta(hours=2))
    shaledb.admin.list_checkpoints("s3://bucket/db")
    shaledb.admin.delete_checkpoint("s3://bucket/db", cp.id)
    shaledb.admin.destroy("s3://bucket/db", soft=True)

Every function takes the database URL, or ``store=`` instead, plus
``store_options`` for cloud stores (also used to reach the parents of a
clone), ``clock`` and ``seed`` for tests, and ``timeout_s`` for the manifest
update. All changes are manifest CAS updates (``shaledb.admin.checkpoint``,
``shaledb.admin.destruction``), safe to run while a writer, readers, a compactor and
a garbage collector work on the database.

Errors: ``NotFound`` (no database), ``CheckpointNotFound`` (missing or expired
checkpoint), ``DatabaseDestroyed``, ``InvalidDbState`` (unfinished clone; a
hard destroy while checkpoints are live), ``InvalidArgument``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

from ..clock import Clock
from ..manifest.model import Checkpoint, Manifest
from ..store.base import ObjectStore
from . import checkpoint as _cp
from .destruction import DestroyStatus, gc_destroyed_database, gc_detach_clone
from .destruction import destroy as _destroy
from .handle import AdminHandle

DEFAULT_TIMEOUT_S = 60.0


def create_checkpoint(
    url: str | os.PathLike[str] | None = None,
    *,
    lifetime: _cp.Lifetime = None,
    source: uuid.UUID | str | Checkpoint | None = None,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Checkpoint:
    """Pin the database's current version (or ``source``'s version) with a new checkpoint.

    Without ``source`` the checkpoint also covers every write already durable
    in the WAL (its manifest's WAL range is extended to the WAL objects
    present), so a reader opened on it sees what a reader of the latest
    version would. ``lifetime``: timedelta, seconds or "7days 30min";
    None never expires.
    """
    with AdminHandle(url, store, store_options, clock, seed, "admin") as h:
        return _cp.create_checkpoint(
            h.ms,
            clock=h.clock,
            rng=h.rng,
            timeout_s=timeout_s,
            lifetime=lifetime,
            source=source,
            name=name,
            metadata=metadata,
        )


def refresh_checkpoint(
    url: str | os.PathLike[str] | None,
    checkpoint_id: uuid.UUID | str | Checkpoint,
    *,
    lifetime: _cp.Lifetime = None,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Checkpoint:
    """Set a live checkpoint's expiry to now + ``lifetime`` (None: never expires).

    ``checkpoint_id`` is its UUID or its name (:func:`find_checkpoint`).
    An expired checkpoint cannot be refreshed (the garbage collector may be
    deleting what it pinned): CheckpointNotFound.
    """
    with AdminHandle(url, store, store_options, clock, None, "admin") as h:
        return _cp.refresh_checkpoint(
            h.ms, checkpoint_id, clock=h.clock, timeout_s=timeout_s, lifetime=lifetime
        )


def delete_checkpoint(
    url: str | os.PathLike[str] | None,
    checkpoint_id: uuid.UUID | str | Checkpoint,
    *,
    missing_ok: bool = False,
    force: bool = False,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Delete a checkpoint (expired ones too). CheckpointNotFound unless ``missing_ok``.

    ``checkpoint_id`` is its UUID or the name of a live one (:func:`find_checkpoint`).
    A checkpoint a clone holds (metadata ``role=clone``) is refused with InvalidDbState
    unless ``force``: the clone reads this database's SSTs through it, and it goes by itself
    when the clone is destroyed. ``force=True`` is for a clone that is gone for good."""
    with AdminHandle(url, store, store_options, clock, None, "admin") as h:
        return _cp.delete_checkpoint(
            h.ms, checkpoint_id, timeout_s=timeout_s, missing_ok=missing_ok, force=force
        )


def find_checkpoint(
    url: str | os.PathLike[str] | None,
    checkpoint: _cp.CheckpointRef,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
) -> Checkpoint:
    """The live checkpoint ``checkpoint`` (a UUID, its text, or a name) refers to.

    Every API and CLI argument taking a checkpoint takes a name too, resolved the
    same way: a name must match exactly one live checkpoint (none:
    CheckpointNotFound listing the live names; several: InvalidArgument
    listing their ids). An expired or unknown id: CheckpointNotFound.
    """
    ref = _cp.as_checkpoint_ref(checkpoint)
    with AdminHandle(url, store, store_options, clock, None, "admin") as h:
        return _cp.live_checkpoint(h.ms.require_latest(), ref, h.clock.now(), h.ms.store.describe())


def list_checkpoints(
    url: str | os.PathLike[str] | None = None,
    *,
    name: str | None = None,
    include_expired: bool = True,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
) -> list[Checkpoint]:
    """The database's checkpoints, oldest first (only those named ``name`` if given).

    Expired checkpoints stay listed until the garbage collector removes them
    (``include_expired=False`` hides them); ``Checkpoint.expired(now)`` tells.
    """
    with AdminHandle(url, store, store_options, clock, None, "admin") as h:
        m = h.ms.require_latest()
        cps = _cp.list_checkpoints(m, name)
        if not include_expired:
            now = h.clock.now()
            cps = [c for c in cps if not c.expired(now)]
        return cps


def read_manifest(
    url: str | os.PathLike[str] | None = None,
    manifest_id: int | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
) -> Manifest:
    """A manifest version (default: the latest). NotFound if there is none."""
    with AdminHandle(url, store, store_options, None, None, "admin") as h:
        return h.ms.require_latest() if manifest_id is None else h.ms.read(manifest_id)


def destroy(
    url: str | os.PathLike[str] | None = None,
    soft: bool = True,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Destroy the database (see ``shaledb.admin.destruction``).

    ``soft=True`` fences the writer, deletes its checkpoint and marks the
    database destroyed; a garbage collector deletes it after
    ``GcOptions.db_delete_grace_s`` once no checkpoint is live. ``soft=False``
    deletes everything now, and refuses (InvalidDbState) while checkpoints
    other than the writer's are live -- e.g. a clone's.
    """
    with AdminHandle(url, store, store_options, clock, seed, "admin") as h:
        _destroy(h.store, soft=soft, clock=h.clock, rng=h.rng, external=h.external, timeout_s=timeout_s)


def collect_lifecycle(
    url: str | os.PathLike[str] | None = None,
    *,
    grace_s: float = 86400.0,
    store: ObjectStore | None = None,
    store_options: Mapping[str, object] | None = None,
    clock: Clock | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> DestroyStatus:
    """Run the garbage collector's destroy and detach steps once (what ``run-gc`` does first)."""
    with AdminHandle(url, store, store_options, clock, None, "gc") as h:
        status = gc_destroyed_database(
            h.ms, clock=h.clock, grace_s=grace_s, external=h.external, timeout_s=timeout_s
        )
        if status.state == "active":
            gc_detach_clone(h.ms, clock=h.clock, external=h.external, timeout_s=timeout_s)
        return status


__all__ = [
    "collect_lifecycle",
    "create_checkpoint",
    "delete_checkpoint",
    "destroy",
    "find_checkpoint",
    "list_checkpoints",
    "read_manifest",
    "refresh_checkpoint",
]

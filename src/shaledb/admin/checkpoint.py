"""Checkpoints: durable, optionally expiring pins on one manifest version.

A checkpoint is an entry in the manifest's ``checkpoints`` list (see
docs/design/checkpoints-readers-clones.md): ``id`` (UUID v4), ``manifest_id`` (the
version it pins), create time, optional expiry, optional name (a label, not unique)
and optional metadata.
The garbage collector keeps every object a live (unexpired) checkpoint's
manifest references, so a reader, a Spark job or a clone can read that
version for as long as the checkpoint lives.

Every change goes through :meth:`ManifestStore.update` (read latest, apply,
write ``id + 1`` create-if-absent, retry on conflict), following the procedures of
docs/design/checkpoints-readers-clones.md:

* from the current manifest ``V``: refuse an uninitialized or destroyed
  database, pin ``V + 1`` -- the very manifest that adds the checkpoint, so
  the checkpoint can ride along with other changes in the same write;
* from a source checkpoint: refuse a destroyed database or a missing or
  expired source, and reuse the source's ``manifest_id`` (never an arbitrary
  older version: only pinned versions are guaranteed to still exist).

An expired checkpoint is dead even before the garbage collector removes it:
it cannot be refreshed or used as a source, because the collector may already
be deleting what it pinned. A process that lost its checkpoint that way
creates a new one on the latest manifest (the reader does).

Times are wall-clock seconds from the injected clock; lifetimes are a
``timedelta``, seconds, or a duration string (``"7days 30min"``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta

from ..clock import Clock
from ..duration import to_seconds
from ..engine.host import WriterHost
from ..errors import (
    CheckpointNotFound,
    ClosedError,
    FencedError,
    InvalidArgument,
    InvalidDbState,
    ObjectNotFound,
)
from ..format import paths
from ..manifest.edits import Edit, destroyed, with_checkpoint, without_checkpoints
from ..manifest.model import Checkpoint, Manifest
from ..manifest.store import ManifestStore
from ..store.base import ObjectStore

Lifetime = timedelta | float | int | str | None
SCOPES = ("all", "durable")
MAX_NAME_CHARS = 256


def lifetime_seconds(lifetime: Lifetime) -> float | None:
    """Validate a lifetime: None (never expires) or a positive duration."""
    try:
        return to_seconds(lifetime, "checkpoint lifetime", allow_zero=False)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{exc} (or None for no expiry)") from None


CheckpointRef = uuid.UUID | str | Checkpoint
"""How a caller names a checkpoint: its UUID, the UUID's text, a Checkpoint, or its name."""


def as_checkpoint_ref(value: CheckpointRef) -> uuid.UUID | str:
    """A checkpoint's id, or its name (a string that is not a UUID), as the CLI takes them.

    A name is resolved against a manifest by :func:`live_checkpoint`: the one
    place both the API and the CLI (``--checkpoint``, ``--id``, ``--source``)
    turn a name into a checkpoint, so they agree on what a name means.
    """
    if isinstance(value, Checkpoint):
        return value.id
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
        if not value.strip() or len(value) > MAX_NAME_CHARS:
            raise InvalidArgument(
                f"not a checkpoint id or name: {value!r} (expected a UUID such as "
                f"01740ee5-6459-44af-9a45-85deb6e468e3, or a name of 1-{MAX_NAME_CHARS} characters)"
            )
        return value
    raise InvalidArgument(f"a checkpoint id must be a UUID or a string, got {type(value).__name__}")


def named_checkpoint(m: Manifest, name: str, now_s: float, where: str) -> Checkpoint:
    """The one live checkpoint of ``m`` named ``name``.

    Names are labels, not unique: none raises CheckpointNotFound listing the live
    names (a typo shows), several InvalidArgument listing their ids (give one).
    """
    live = [c for c in list_checkpoints(m) if not c.expired(now_s)]
    found = [c for c in live if c.name == name]
    if not found:
        names = sorted({c.name for c in live if c.name is not None})
        known = f"live names: {', '.join(map(repr, names))}" if names else "no live checkpoint has a name"
        raise CheckpointNotFound(
            f"no live checkpoint named {name!r} in the database at {where} ({known}; give a name or UUID)"
        )
    if len(found) > 1:
        ids = ", ".join(str(c.id) for c in found)
        raise InvalidArgument(
            f"{len(found)} live checkpoints are named {name!r} in the database at {where} ({ids}); "
            "give one's UUID"
        )
    return found[0]


def new_checkpoint_id(rng: random.Random) -> uuid.UUID:
    """A version-4 UUID drawn from ``rng`` (reproducible under a seeded run)."""
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def _check_name(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME_CHARS):
        raise InvalidArgument(f"checkpoint name must be a string of at most {MAX_NAME_CHARS} characters")


def _check_metadata(metadata: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if not metadata:
        return ()
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidArgument("checkpoint metadata must map strings to strings")
    return tuple(sorted(metadata.items()))


def check_usable(m: Manifest, where: str, *, allow_uninitialized: bool = False) -> None:
    """Refuse a destroyed (or, unless allowed, an uninitialized) database."""
    if m.destroyed_at_s is not None:
        raise destroyed(where, m)
    if not m.initialized and not allow_uninitialized:
        raise InvalidDbState(
            f"database at {where} is a clone whose initialization did not finish; "
            "retry Db.open_from_checkpoint to complete it"
        )


def live_checkpoint(m: Manifest, cp_id: uuid.UUID | str, now_s: float, where: str) -> Checkpoint:
    """The unexpired checkpoint ``cp_id`` of ``m`` (a name: :func:`named_checkpoint`), or
    CheckpointNotFound."""
    if isinstance(cp_id, str):
        return named_checkpoint(m, cp_id, now_s, where)
    cp = m.checkpoint(cp_id)
    if cp is None:
        raise CheckpointNotFound(f"no checkpoint {cp_id} in the database at {where}")
    if cp.expired(now_s):
        raise CheckpointNotFound(f"checkpoint {cp_id} of the database at {where} has expired")
    return cp


def make_checkpoint(
    cp_id: uuid.UUID,
    manifest_id: int,
    now_s: float,
    lifetime_s: float | None,
    *,
    name: str | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
    writer_epoch: int | None = None,
) -> Checkpoint:
    return Checkpoint(
        id=cp_id,
        manifest_id=manifest_id,
        create_time_s=now_s,
        expire_time_s=None if lifetime_s is None else now_s + lifetime_s,
        name=name,
        writer_epoch=writer_epoch,
        metadata=metadata,
    )


@dataclass(frozen=True)
class AddCheckpoint(Edit):
    """Create checkpoint ``cp_id``: the two creation procedures (see module docstring and
    docs/design/checkpoints-readers-clones.md).

    ``prepare`` adjusts the manifest first (e.g. a writer extending the WAL
    range); the checkpoint is appended to ``result`` on every attempt, so the
    last element is the one that was written. The id is fresh and random, so
    finding it means an earlier attempt of ours landed: no change then.
    """

    cp_id: uuid.UUID
    clock: Clock
    where: str
    lifetime_s: float | None
    source: uuid.UUID | str | None = None
    name: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    prepare: Callable[[Manifest], Manifest] | None = None
    result: list[Checkpoint] | None = None

    def apply(self, m: Manifest) -> Manifest | None:
        now = self.clock.now()
        mine = m.checkpoint(self.cp_id)
        if mine is not None:  # an earlier attempt of ours landed (the id is fresh and random)
            if self.result is not None:
                self.result.append(mine)
            return None
        if self.source is None:
            check_usable(m, self.where)
            manifest_id = m.id + 1
        else:
            check_usable(m, self.where, allow_uninitialized=True)
            manifest_id = live_checkpoint(m, self.source, now, self.where).manifest_id
        if self.prepare is not None:
            m = self.prepare(m)
        cp = make_checkpoint(
            self.cp_id, manifest_id, now, self.lifetime_s, name=self.name, metadata=self.metadata
        )
        if self.result is not None:
            self.result.append(cp)
        return with_checkpoint(m, cp)


@dataclass(frozen=True)
class RefreshCheckpoint(Edit):
    """Set the expiry of live checkpoint ``cp_id`` to now + ``lifetime_s`` (None: never).

    An expired checkpoint cannot be refreshed (the GC may be deleting what it pinned).
    The refreshed checkpoint is appended to ``result`` (last element: the one written).
    """

    cp_id: uuid.UUID
    clock: Clock
    where: str
    lifetime_s: float | None
    result: list[Checkpoint] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            raise destroyed(self.where, m)
        now = self.clock.now()
        cp = live_checkpoint(m, self.cp_id, now, self.where)
        clone = held_by_clone(cp)
        if clone is not None and self.lifetime_s is not None:
            # (once expired it is dead: the GC deletes the SSTs the clone reads through it)
            raise InvalidDbState(
                f"checkpoint {cp.id} in the database at {self.where} is held by the clone at "
                f"{clone} and must not expire while that clone reads this database's SSTs "
                f"through it; it goes by itself when the clone is destroyed "
                f"(shaledb.admin.destroy({clone!r}))"
            )
        new = replace(cp, expire_time_s=None if self.lifetime_s is None else now + self.lifetime_s)
        self.result.append(new)
        return with_checkpoint(m, new)


@dataclass(frozen=True)
class RemoveCheckpoint(Edit):
    """Delete checkpoint ``cp_id`` (expired ones too).

    ``found[0]`` records that an attempt saw it: a later attempt that finds it gone
    (deleted by us or by the GC) is then no change rather than CheckpointNotFound,
    which is also what ``missing_ok`` asks for.
    """

    cp_id: uuid.UUID
    where: str
    missing_ok: bool = False
    found: list[bool] = field(default_factory=lambda: [False])
    force: bool = False

    def apply(self, m: Manifest) -> Manifest | None:
        cp = m.checkpoint(self.cp_id)
        if cp is None:
            if self.found[0] or self.missing_ok:
                return None  # (gone since an earlier attempt of ours saw it: deleted by us or by GC)
            raise CheckpointNotFound(f"no checkpoint {self.cp_id} in the database at {self.where}")
        clone = held_by_clone(cp)
        if clone is not None and not self.force:
            raise InvalidDbState(
                f"checkpoint {cp.id} in the database at {self.where} is held by the clone at "
                f"{clone}, which reads this database's SSTs through it: deleting it lets the "
                f"garbage collector (or a hard destroy) delete them under the clone. It goes by "
                f"itself when that clone is destroyed (shaledb.admin.destroy({clone!r})) or no "
                f"longer needs its parent; if the clone is gone for good, delete it with "
                f"force=True (CLI: --force)"
            )
        self.found[0] = True
        return without_checkpoints(m, {self.cp_id})


def held_by_clone(cp: Checkpoint) -> str | None:
    """The URL of the clone holding ``cp`` (metadata ``role=clone`` and ``clone_url``), or None.

    A clone reads its parent's SSTs through this checkpoint until it is destroyed or
    detached, which release it themselves. Deleting it by hand let the parent's GC or a
    hard destroy delete those SSTs under the clone: every later read of the clone failed
    with ``ObjectNotFound`` (and the hard destroy's refusal, listing it among the live
    checkpoints, advised deleting it)."""
    meta = dict(cp.metadata)
    return meta.get("clone_url") if meta.get("role") == "clone" else None


@dataclass(frozen=True)
class _Request:
    """A checkpoint's arguments, checked: the standalone and the writer's creation take and
    check the same ones and build the same :class:`AddCheckpoint`; they differ only in
    ``prepare`` and in how the edit is written."""

    lifetime_s: float | None
    source: uuid.UUID | str | None
    name: str | None
    metadata: tuple[tuple[str, str], ...]

    @classmethod
    def check(
        cls,
        lifetime: Lifetime,
        source: uuid.UUID | str | Checkpoint | None,
        name: str | None,
        metadata: Mapping[str, str] | None,
    ) -> _Request:
        secs = lifetime_seconds(lifetime)
        _check_name(name)
        meta = _check_metadata(metadata)
        return cls(secs, None if source is None else as_checkpoint_ref(source), name, meta)

    def add_checkpoint(
        self,
        rng: random.Random,
        clock: Clock,
        where: str,
        prepare: Callable[[Manifest], Manifest] | None,
        out: list[Checkpoint],
    ) -> AddCheckpoint:
        """The edit creating a checkpoint with a fresh id (appended to ``out`` when written)."""
        return AddCheckpoint(
            cp_id=new_checkpoint_id(rng),
            clock=clock,
            where=where,
            lifetime_s=self.lifetime_s,
            source=self.source,
            name=self.name,
            metadata=self.metadata,
            prepare=prepare,
            result=out,
        )


def create_checkpoint(
    ms: ManifestStore,
    *,
    clock: Clock,
    rng: random.Random,
    timeout_s: float,
    lifetime: Lifetime = None,
    source: CheckpointRef | None = None,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    include_durable_wal: bool = True,
) -> Checkpoint:
    """Create a checkpoint without a writer (no fencing: any process may do this).

    From the current manifest, ``include_durable_wal`` first extends the
    pinned manifest's WAL range to every WAL object already written (found
    with one listing), so a reader opened on the checkpoint sees every write
    that was durable when it was taken. A source checkpoint's WAL range is
    the source's.
    """
    req = _Request.check(lifetime, source, name, metadata)
    out: list[Checkpoint] = []
    prepare = None
    if req.source is None and include_durable_wal:
        store = ms.store

        def prepare(m: Manifest) -> Manifest:
            return extend_wal_range(m, durable_wal_tail(store, m.next_wal_id - 1))

    ms.update(req.add_checkpoint(rng, clock, ms.store.describe(), prepare, out), timeout_s=timeout_s)
    return out[-1]


def refresh_checkpoint(
    ms: ManifestStore, cp_id: CheckpointRef, *, clock: Clock, timeout_s: float, lifetime: Lifetime = None
) -> Checkpoint:
    """Set the expiry of a live checkpoint (its id or name) to now + ``lifetime`` (None: never)."""
    secs = lifetime_seconds(lifetime)
    where = ms.store.describe()
    cid = _resolved(ms, as_checkpoint_ref(cp_id), clock.now(), where)
    edit = RefreshCheckpoint(cid, clock, where, secs)
    ms.update(edit, timeout_s=timeout_s)
    return edit.result[-1]


def delete_checkpoint(
    ms: ManifestStore,
    cp_id: CheckpointRef,
    *,
    timeout_s: float,
    missing_ok: bool = False,
    force: bool = False,
) -> bool:
    """Remove a checkpoint (expired ones too); False if it was not there and ``missing_ok``.
    A clone's checkpoint only with ``force`` (:func:`held_by_clone`). A name means the one
    live checkpoint so named (:func:`named_checkpoint`)."""
    ref = as_checkpoint_ref(cp_id)
    where = ms.store.describe()
    try:
        cid = _resolved(ms, ref, ms.clock.now(), where)
    except CheckpointNotFound:
        if missing_ok:
            return False
        raise
    edit = RemoveCheckpoint(cid, where, missing_ok, force=force)
    ms.update(edit, timeout_s=timeout_s)
    return edit.found[0]


def _resolved(ms: ManifestStore, ref: uuid.UUID | str, now_s: float, where: str) -> uuid.UUID:
    """The id ``ref`` names: a UUID as is, a name resolved on the latest manifest (as the CLI
    does; the edit then works on that id, so a retried CAS cannot pick another same-named one)."""
    if isinstance(ref, uuid.UUID):
        return ref
    return named_checkpoint(ms.require_latest(), ref, now_s, where).id


def list_checkpoints(m: Manifest, name: str | None = None) -> list[Checkpoint]:
    """The checkpoints of ``m`` (optionally only those named ``name``), oldest first."""
    cps = [c for c in m.checkpoints if name is None or c.name == name]
    return sorted(cps, key=lambda c: (c.create_time_s, str(c.id)))


# ------------------------------------------------------------- WAL ranges


def durable_wal_tail(store: ObjectStore, after: int) -> int:
    """The highest id ``t`` such that every WAL object in ``(after, t]`` exists.

    One listing from ``after``; WAL objects are written strictly in id order,
    so the contiguous run is exactly what is durable (a gap is a slot a
    crashed writer never filled: nothing after it is in this range).
    """
    tail = after
    for meta in store.list(paths.WAL_DIR, offset=paths.wal_path(after)):
        wid = paths.parse_wal_id(meta.path)
        if wid is None:
            continue
        if wid != tail + 1:
            break
        tail = wid
    return tail


def extend_wal_range(m: Manifest, last_wal_id: int) -> Manifest:
    """``m`` whose WAL range (``next_wal_id``) covers WAL objects up to ``last_wal_id``."""
    if last_wal_id + 1 <= m.next_wal_id:
        return m
    return replace(m, next_wal_id=last_wal_id + 1)


# --------------------------------------------------------------- writers


def create_writer_checkpoint(
    db: WriterHost,
    *,
    lifetime: Lifetime = None,
    source: CheckpointRef | None = None,
    name: str | None = None,
    scope: str = "all",
    metadata: Mapping[str, str] | None = None,
) -> Checkpoint:
    """``Db.create_checkpoint``: a checkpoint taken by the open writer.

    ``scope="all"`` first makes every write issued so far durable in the WAL
    (``db.flush()``); ``"durable"`` takes what is durable already. Either way
    the pinned manifest's WAL range is extended to the WAL objects the writer
    has written, so a reader opened on the checkpoint replays them: the
    checkpoint holds every write acknowledged (``"durable"``) or issued
    (``"all"``) before the call, without forcing a memtable flush to L0.
    The manifest write checks the writer's epoch, so a fenced writer cannot
    create a checkpoint of a database it no longer owns.
    """
    if scope not in SCOPES:
        raise InvalidArgument(f"scope must be one of {SCOPES}, got {scope!r}")
    req = _Request.check(lifetime, source, name, metadata)
    src = req.source
    db.check_failure()
    if db.closed:
        raise ClosedError("database is closed")
    if src is None and scope == "all":
        db.flush()
    durable_wal = db.wal.durable_wal_id
    epoch = db.epoch

    def prepare(m: Manifest) -> Manifest:
        if m.writer_epoch != epoch:
            raise FencedError(f"writer epoch {m.writer_epoch} took over; this writer (epoch {epoch}) stops")
        return db.decorate_manifest(extend_wal_range(m, durable_wal) if src is None else m)

    out: list[Checkpoint] = []
    edit = req.add_checkpoint(db.rng, db.clock, db.store.describe(), prepare, out)
    db.update_manifest(edit)  # serialized with the writer's other manifest writes; adopts the result
    return out[-1]


def read_checkpoint_manifest(ms: ManifestStore, cp: Checkpoint) -> Manifest:
    """The manifest a live checkpoint pins (its absence means the pin was broken)."""
    try:
        return ms.read(cp.manifest_id)
    except ObjectNotFound:
        raise CheckpointNotFound(
            f"checkpoint {cp.id} pins manifest {cp.manifest_id}, which no longer exists"
        ) from None


__all__ = [
    "SCOPES",
    "AddCheckpoint",
    "RefreshCheckpoint",
    "RemoveCheckpoint",
    "held_by_clone",
    "CheckpointRef",
    "as_checkpoint_ref",
    "named_checkpoint",
    "check_usable",
    "create_checkpoint",
    "create_writer_checkpoint",
    "delete_checkpoint",
    "durable_wal_tail",
    "lifetime_seconds",
    "list_checkpoints",
    "live_checkpoint",
    "refresh_checkpoint",
]

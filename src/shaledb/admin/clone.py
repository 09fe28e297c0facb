"""Clones: a new database forked from a checkpoint of another, without copying its SSTs.

``Db.open_from_checkpoint(url, parent_url, parent_checkpoint)`` runs seed
002's initialization protocol when ``url`` holds no initialized database:

1. read the clone's manifest ``M`` (may be absent) and the parent's ``M_p``;
2. refuse an uninitialized parent; if ``M`` exists it must be a clone of this
   parent, and if it is initialized there is nothing to do;
3. the clone's checkpoint id in the parent is ``M.parent.checkpoint_id`` on a
   retry, else a new UUID -- so a retry never leaks a second checkpoint;
4. a destroyed parent: delete that checkpoint from it (if any) and fail;
5. ``M_c`` is the manifest ``parent_checkpoint`` pins, or else the parent's
   current version ``M_p`` with its WAL range extended to every WAL object
   already durable (written by step 7 as ``M_p.id + 1``);
6. write the clone's manifest ``M'`` (``initialized = false``): the parent
   recorded as ``parent`` and as external database #1, ``M_c``'s SSTs and
   sorted runs with ``SstInfo.db`` remapped, its WAL range and sequence
   numbers, writer epoch ``M_c``'s + 1, no checkpoints;
7. create or update the clone's checkpoint in the parent (no expiry) pinning
   ``M_c``, and, for a clone of a clone, a checkpoint of its own in every
   older ancestor, taken from the parent's checkpoint there (same version);
8. copy the WAL objects of ``M_c``'s range into the clone;
9. set ``initialized = true``.

Every step is idempotent and the manifest writes are CAS, so a crash at any
store call is repaired by calling ``open_from_checkpoint`` again with the same
arguments. Until step 9 the clone cannot be opened as a database (writers
and readers refuse an uninitialized manifest).

Ordering choices: the clone records the checkpoint id (step 6) before the
checkpoint exists in the parent (step 7), so a crash in between leaves no
unrecorded pin in the parent. When cloning the parent's *current* version,
step 7 pins it only if it is still current (the procedure restarts
otherwise), because only a current or checkpointed version is guaranteed
to still have its objects; like ``admin.create_checkpoint``, that version
includes writes durable in the parent's WAL but not yet in its L0.

The ancestor list is flattened (see ``shaledb.engine.parents``): a clone of a clone
references its grandparent directly, through its own checkpoint there, so
the parent may later be detached or destroyed without breaking the clone.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from ..clock import SYSTEM_CLOCK, Clock
from ..engine.parents import ExternalStores, canonical_url, check_external_urls, settings_factory
from ..errors import (
    AlreadyExists,
    CheckpointNotFound,
    ConflictError,
    CorruptionError,
    DatabaseDestroyed,
    InvalidArgument,
    InvalidDbState,
    NotFound,
    ObjectNotFound,
    Unavailable,
)
from ..format import paths
from ..manifest.edits import DropCheckpoint, Edit, with_checkpoint
from ..manifest.model import ExternalDb, Manifest, ParentRef, SstInfo, Tree
from ..manifest.store import ManifestStore
from ..settings import WAL_READ_AHEAD, Settings
from ..store.base import ObjectStore
from ..store.new_root import check_new_root
from ..store.parallel import run_bounded
from ..store.roots import check_disjoint
from ..store.stack import close_quietly, wrap_store
from ..store.url import check_url_text, open_store, store_options_dict
from .checkpoint import (
    as_checkpoint_ref,
    durable_wal_tail,
    extend_wal_range,
    live_checkpoint,
    make_checkpoint,
)

T = TypeVar("T")

log = logging.getLogger("shaledb.clone")

CLONED_FROM_OPTION = "cloned_from"
"""Manifest option naming the parent a database was cloned from (kept after detaching)."""


class _Restart(Exception):
    """The parent moved on while we worked: start the procedure again from step 1."""


def _shift(s: SstInfo) -> SstInfo:
    return replace(s, db=s.db + 1)


def _shift_tree(t: Tree) -> Tree:
    return t.map_ssts(_shift)


def build_clone_manifest(
    mc: Manifest,
    parent_url: str,
    cp_id: uuid.UUID,
    ancestor_cps: dict[str, uuid.UUID],
    base: Manifest | None,
) -> Manifest:
    """The uninitialized clone manifest of step 6 (its id is set by the writer).

    External databases: #1 is the parent, #2.. the parent's own (inherited,
    each with the clone's checkpoint id there), so every ``db`` index of
    ``mc`` shifts by one.
    """
    inherited = [ExternalDb(e.url, ancestor_cps[canonical_url(e.url)]) for e in mc.external_dbs]
    externals = (ExternalDb(parent_url, cp_id), *inherited)
    if base is not None:
        for f in ("replay_after_wal_id", "last_l0_seq", "next_wal_id"):
            if getattr(mc, f) < getattr(base, f):
                raise InvalidArgument(
                    "this unfinished clone was started from a newer version of the parent; "
                    "retry open_from_checkpoint with the same parent_checkpoint"
                )
    options = dict(mc.options)
    options[CLONED_FROM_OPTION] = parent_url
    return Manifest(
        id=1 if base is None else base.id + 1,
        writer_epoch=max(mc.writer_epoch + 1, base.writer_epoch if base else 0),
        compactor_epoch=max(mc.compactor_epoch, base.compactor_epoch if base else 0),
        initialized=False,
        destroyed_at_s=None,
        next_wal_id=mc.next_wal_id,
        replay_after_wal_id=mc.replay_after_wal_id,
        last_l0_seq=mc.last_l0_seq,
        data=_shift_tree(mc.data),
        index=_shift_tree(mc.index),
        next_run_id=max(mc.next_run_id, base.next_run_id if base else 1),
        tracked_wals=mc.tracked_wals,
        checkpoints=(),
        parent=ParentRef(parent_url, cp_id),
        external_dbs=externals,
        journal=tuple(replace(j, db=j.db + 1) for j in mc.journal),
        options=tuple(sorted(options.items())),
        extra=mc.extra,
    )


def _clone_metadata(own_url: str) -> tuple[tuple[str, str], ...]:
    return (("clone_url", own_url), ("role", "clone"))


def init_clone(
    store: ObjectStore,
    own_url: str,
    parent_url: str,
    parent_store: ObjectStore,
    parent_checkpoint: uuid.UUID | str | None,
    *,
    clock: Clock,
    rng: random.Random,
    timeout_s: float,
    external: ExternalStores,
    before_create: Callable[[], None] | None = None,
) -> Manifest:
    """Run the initialization protocol (module docstring); the initialized clone manifest.

    ``before_create`` runs before the clone's first manifest is written (only then):
    the check that its root does not nest with another database's
    (:mod:`shaledb.store.new_root`)."""
    parent_url = canonical_url(parent_url)
    ms = ManifestStore(store, clock, rng, author="clone")
    pms = ManifestStore(parent_store, clock, rng, author="clone")
    deadline = clock.monotonic() + timeout_s
    while True:
        try:
            return _attempt(
                ms,
                pms,
                own_url,
                parent_url,
                parent_checkpoint,
                clock,
                rng,
                timeout_s,
                external,
                before_create,
            )
        except (_Restart, ConflictError) as exc:
            if clock.monotonic() > deadline:
                raise Unavailable(f"clone initialization did not settle within {timeout_s}s: {exc}") from None
            log.info("clone %s: restarting initialization (%s)", own_url, exc)
            clock.sleep(0.01 * rng.random())


def _attempt(
    ms: ManifestStore,
    pms: ManifestStore,
    own_url: str,
    parent_url: str,
    parent_checkpoint: uuid.UUID | str | None,
    clock: Clock,
    rng: random.Random,
    timeout_s: float,
    external: ExternalStores,
    before_create: Callable[[], None] | None = None,
) -> Manifest:
    # Steps 1-2.
    m = ms.read_latest()
    mp = pms.read_latest()
    if mp is None:
        raise NotFound(f"no database at {parent_url} to clone")
    if not mp.initialized:
        raise InvalidDbState(f"the parent {parent_url} is itself an unfinished clone; finish it first")
    if m is not None:
        if m.parent is None:
            if m.initialized and m.option(CLONED_FROM_OPTION) == parent_url:
                return m  # a clone that was detached from its parent since
            raise InvalidArgument(f"database at {own_url} exists and is not a clone of {parent_url}")
        if canonical_url(m.parent.url) != parent_url:
            raise InvalidArgument(f"database at {own_url} is a clone of {m.parent.url}, not of {parent_url}")
        if m.initialized:
            return m
    # Step 3.
    cp_id = (
        m.parent.checkpoint_id
        if m is not None and m.parent is not None
        else uuid.UUID(int=rng.getrandbits(128), version=4)
    )
    # Step 4.
    if mp.destroyed_at_s is not None:
        pms.update(DropCheckpoint(cp_id), timeout_s=timeout_s)
        raise DatabaseDestroyed(f"the parent {parent_url} was destroyed; it cannot be cloned")
    # Step 5.
    if parent_checkpoint is not None:
        src = live_checkpoint(mp, parent_checkpoint, clock.now(), parent_url)
        parent_checkpoint = src.id  # (a name resolved once: step 7 pins this very checkpoint's version)
        try:
            mc = pms.read(src.manifest_id)
        except ObjectNotFound:
            raise CheckpointNotFound(
                f"checkpoint {parent_checkpoint} of {parent_url} pins manifest {src.manifest_id}, "
                "which no longer exists"
            ) from None
    else:
        # The current version, with every WAL object already durable: step 7 writes this very
        # manifest (id + 1) in the parent, extending its WAL range, and pins it.
        tail = durable_wal_tail(pms.store, mp.next_wal_id - 1)
        mc = replace(extend_wal_range(mp, tail), id=mp.id + 1, checkpoints=())
    check_external_urls(own_url, [parent_url, *(e.url for e in mc.external_dbs)])
    # Step 6: reuse checkpoint ids recorded by an earlier attempt.
    earlier = {canonical_url(e.url): e.checkpoint_id for e in (m.external_dbs if m is not None else ())}
    ancestors = {
        canonical_url(e.url): earlier.get(canonical_url(e.url))
        or uuid.UUID(int=rng.getrandbits(128), version=4)
        for e in mc.external_dbs
    }
    if m is None:
        if before_create is not None:
            before_create()
        try:
            m = ms.create_initial(build_clone_manifest(mc, parent_url, cp_id, ancestors, None))
        except ConflictError:
            raise _Restart("another process created the clone manifest") from None
    else:
        m = ms.update(RewriteCloneManifest(mc, parent_url, cp_id, ancestors), timeout_s=timeout_s, current=m)
    # Step 7: pin M_c in the parent, then in every older ancestor.
    _pin_in_parent(pms, cp_id, mc, parent_checkpoint, own_url, parent_url, clock, timeout_s)
    for e in mc.external_dbs:
        _pin_in_ancestor(
            external, e.url, ancestors[canonical_url(e.url)], e.checkpoint_id, own_url, clock, timeout_s
        )
    # Step 8.
    _copy_wal(pms.store, ms.store, mc)
    # Step 9.
    done = ms.update(FinishCloneInit(cp_id, m.id), timeout_s=timeout_s, current=m)
    log.info("clone %s of %s (manifest %d) initialized", own_url, parent_url, mc.id)
    return done


def _pin_in_parent(
    pms: ManifestStore,
    cp_id: uuid.UUID,
    mc: Manifest,
    parent_checkpoint: uuid.UUID | None,
    own_url: str,
    parent_url: str,
    clock: Clock,
    timeout_s: float,
) -> None:
    pms.update(
        PinCloneInParent(cp_id, mc, parent_checkpoint, own_url, parent_url, clock), timeout_s=timeout_s
    )


def _pin_in_ancestor(
    external: ExternalStores,
    url: str,
    cp_id: uuid.UUID,
    source: uuid.UUID,
    own_url: str,
    clock: Clock,
    timeout_s: float,
) -> None:
    """The clone's own checkpoint in an older ancestor, on the version the parent pins there."""
    ams = ManifestStore(external.open_url(url), clock, random.Random(), author="clone")

    ams.update(PinCloneInAncestor(cp_id, source, url, own_url, clock), timeout_s=timeout_s)


@dataclass(frozen=True)
class RewriteCloneManifest(Edit):
    """Step 6 again: rebuild an unfinished clone's manifest from ``mc`` (an earlier attempt's
    manifest exists); restart if another process changed or finished it meanwhile."""

    mc: Manifest
    parent_url: str
    cp_id: uuid.UUID
    ancestors: dict[str, uuid.UUID]

    def apply(self, m: Manifest) -> Manifest | None:
        if m.initialized or m.parent is None or m.parent.checkpoint_id != self.cp_id:
            raise _Restart("the clone manifest changed")
        return build_clone_manifest(self.mc, self.parent_url, self.cp_id, self.ancestors, m)


@dataclass(frozen=True)
class PinCloneInParent(Edit):
    """Step 7 in the parent: checkpoint ``cp_id`` pins ``mc`` (the parent checkpoint's version,
    or the parent's next version ``mc``, whose WAL range this write extends).

    Restarts when the parent was destroyed, its checkpoint changed, or its current version
    moved on before it was pinned; no change when an earlier attempt already pinned it.
    """

    cp_id: uuid.UUID
    mc: Manifest
    parent_checkpoint: uuid.UUID | None
    own_url: str
    parent_url: str
    clock: Clock

    def apply(self, m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            raise _Restart("the parent was destroyed")  # step 4 of the next attempt cleans up
        now = self.clock.now()
        existing = m.checkpoint(self.cp_id)
        if self.parent_checkpoint is not None:
            manifest_id = live_checkpoint(m, self.parent_checkpoint, now, self.parent_url).manifest_id
            if manifest_id != self.mc.id:
                raise _Restart("the parent checkpoint changed")
        else:
            manifest_id = self.mc.id
            pinned = existing is not None and existing.manifest_id == self.mc.id
            if not pinned and m.id != self.mc.id - 1:
                raise _Restart("the parent's current version changed before it was pinned")
        if existing is not None and existing.manifest_id == manifest_id and existing.expire_time_s is None:
            return None
        if self.parent_checkpoint is None:
            m = extend_wal_range(m, self.mc.next_wal_id - 1)
        cp = make_checkpoint(self.cp_id, manifest_id, now, None, metadata=_clone_metadata(self.own_url))
        return with_checkpoint(m, cp)


@dataclass(frozen=True)
class PinCloneInAncestor(Edit):
    """Step 7 in an older ancestor at ``url``: checkpoint ``cp_id`` pins the version the
    parent's checkpoint ``source`` pins there (never expiring)."""

    cp_id: uuid.UUID
    source: uuid.UUID
    url: str
    own_url: str
    clock: Clock

    def apply(self, m: Manifest) -> Manifest | None:
        now = self.clock.now()
        existing = m.checkpoint(self.cp_id)
        src = m.checkpoint(self.source)
        if src is None or src.expired(now):
            if existing is not None:
                return None  # pinned by an earlier attempt (the parent may have detached since)
            raise CheckpointNotFound(
                f"the parent's checkpoint {self.source} in its ancestor {self.url} is gone; the parent "
                "no longer pins the version it references there"
            )
        if m.destroyed_at_s is not None and existing is None:
            raise DatabaseDestroyed(f"ancestor {self.url} of the parent was destroyed")
        if (
            existing is not None
            and existing.manifest_id == src.manifest_id
            and existing.expire_time_s is None
        ):
            return None
        cp = make_checkpoint(self.cp_id, src.manifest_id, now, None, metadata=_clone_metadata(self.own_url))
        return with_checkpoint(m, cp)


@dataclass(frozen=True)
class FinishCloneInit(Edit):
    """Step 9: mark the clone initialized, if its manifest is still ``manifest_id`` for ``cp_id``."""

    cp_id: uuid.UUID
    manifest_id: int

    def apply(self, m: Manifest) -> Manifest | None:
        if m.initialized:
            return None
        if m.parent is None or m.parent.checkpoint_id != self.cp_id or m.id != self.manifest_id:
            raise _Restart("the clone manifest changed during initialization")
        return replace(m, initialized=True)


def _copy_wal(src: ObjectStore, dst: ObjectStore, mc: Manifest) -> None:
    """Copy the WAL objects of ``mc``'s range (absent ones were never written), several at a time."""

    def copy(wid: int) -> None:
        path = paths.wal_path(wid)
        try:
            data = src.get(path)
        except ObjectNotFound:
            return
        try:
            dst.put(path, data, create=True)
        except AlreadyExists:
            if dst.get(path) != data:
                raise CorruptionError(
                    "a different WAL object already exists in the unfinished clone", path
                ) from None

    wids = range(mc.replay_after_wal_id + 1, mc.next_wal_id)
    for _ in run_bounded(copy, wids, lambda _: 0, workers=WAL_READ_AHEAD, name="shaledb-clone"):
        pass


def open_clone(
    cls: Callable[..., T],
    url: str | None,
    parent_url: str,
    parent_checkpoint: Any,
    *,
    settings: Settings | None,
    store: ObjectStore | None,
    parent_store: ObjectStore | None,
    clock: Clock | None,
    seed: int | None,
    store_options: Mapping[str, Any] | None,
) -> T:
    """``Db.open_from_checkpoint``: initialize the clone if needed, then open it as a writer."""
    if settings is None:
        settings = Settings()
    elif not isinstance(settings, Settings):
        raise InvalidArgument(f"settings must be a shaledb.Settings, got {type(settings).__name__}")
    if not isinstance(parent_url, str) or not parent_url:
        raise InvalidArgument("parent_url must name the database to clone")
    clock = clock or SYSTEM_CLOCK
    rng = random.Random(seed)
    if store is None:
        if url is None:
            raise InvalidArgument("give the clone's URL or a store")
        check_url_text(url)  # "" fell through to store.describe(): an AttributeError traceback
    own_url = canonical_url(url) if url else store.describe()  # type: ignore[union-attr]
    parent = canonical_url(parent_url)
    if own_url == parent:
        raise InvalidArgument("a database cannot be a clone of itself")
    check_disjoint(own_url, parent, "parent")
    cp = None if parent_checkpoint is None else as_checkpoint_ref(parent_checkpoint)
    factory = settings_factory(settings, clock, store_options)
    owned = store is None
    if store is None:
        assert url is not None
        store = open_store(url, **store_options_dict(store_options))
    wrapped = wrap_store(store, settings, clock, rng)
    preset = {parent: wrap_store(parent_store, settings, clock, rng)} if parent_store is not None else None
    external = ExternalStores(factory, own_url=own_url, preset=preset)
    try:
        pstore = external.open_url(parent)  # the preset one, or opened (and later closed) here
        init_clone(
            wrapped,
            own_url,
            parent,
            pstore,
            cp,
            clock=clock,
            rng=rng,
            timeout_s=settings.manifest_update_timeout_s,
            external=external,
            before_create=lambda: check_new_root(
                url,
                wrapped,
                store_options,
                settings,
                clock,
                ancestors_reachable=owned or store_options is not None,  # (new_root's docstring)
            ),
        )
        db = cls(wrapped, settings, clock, rng, False, external=external)
    except BaseException:
        close_quietly(external, wrapped if owned else None)
        raise
    # The writer class (``Db``, above this layer) closes the store on close when it opened it.
    cast(Any, db).owns_store = owned
    return db


__all__ = ["CLONED_FROM_OPTION", "build_clone_manifest", "init_clone", "open_clone"]

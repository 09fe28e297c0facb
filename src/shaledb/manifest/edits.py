"""Named, typed manifest changes: one class per kind of change.

Every manifest version is written by :meth:`shaledb.manifest.store.ManifestStore.update`,
which reads the latest manifest, calls ``edit.apply`` on it and writes the result with
create-if-absent; on a conflict it re-reads and applies the same edit again. So an edit
is a value that says *what* changes (its fields) and ``apply`` says *how*, on whatever
manifest is latest: it returns the next manifest (its id is set by the store), None when
nothing needs to change, or raises (e.g. ``FencedError``) to abort the update.

``apply`` may run several times (once per conflict); an edit that reports something back
to its caller does it through an explicit field (a list it appends to), and the last
value is the one of the attempt that was written.

Edits that need only the manifest model live here; edits whose logic belongs to a higher
layer (checkpoint creation, clone initialization, bulk ingest, the writer's view pins,
journal compaction) are named :class:`Edit` subclasses in their role's module, so this
package stays below them (docs/architecture.md).
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..clock import Clock
from ..errors import DatabaseDestroyed, FencedError, InvalidArgument
from .model import Checkpoint, JournalFile, Manifest
from .options import OPT_COMPACTOR_RELEASED


def destroyed(where: str, m: Manifest) -> DatabaseDestroyed:
    """The error for opening, checkpointing or ingesting into a destroyed database, with the way
    to use its location again (a user who destroyed a database to start over was told only
    "was destroyed", and ``put`` went on refusing for the day of the grace period)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(m.destroyed_at_s or 0))
    return DatabaseDestroyed(
        f"database at {where} was destroyed ({when}); to create a new one there, delete its objects "
        "now with 'shaledb --path URL destroy --hard' (shaledb.admin.destroy(url, soft=False)) or let the "
        "garbage collector do it after GcOptions.db_delete_grace_s; or choose another location"
    )


class Edit(ABC):
    """One kind of manifest change (see module docstring)."""

    @abstractmethod
    def apply(self, m: Manifest) -> Manifest | None:
        """The manifest that follows ``m`` (same id: the store sets it), or None for no change."""


def with_checkpoint(m: Manifest, cp: Checkpoint) -> Manifest:
    """``m`` with ``cp`` added, or replacing the checkpoint with the same id."""
    others = tuple(c for c in m.checkpoints if c.id != cp.id)
    return replace(m, checkpoints=(*others, cp))


def without_checkpoints(m: Manifest, ids: set[uuid.UUID]) -> Manifest:
    return replace(m, checkpoints=tuple(c for c in m.checkpoints if c.id not in ids))


@dataclass(frozen=True)
class NoChange(Edit):
    """Change nothing: the update returns the latest manifest.

    A writer uses it to adopt the latest version through its serialized update path
    (which pins the view with one more write when the version is not pinned yet).
    """

    def apply(self, m: Manifest) -> Manifest | None:
        return None


@dataclass(frozen=True)
class Decorated(Edit):
    """``edit``, then ``decorate`` on its result when it changed something.

    A role committing inside the writer passes its result through the writer's
    ``decorate_manifest`` so the new view is pinned by the same CAS.
    """

    edit: Edit
    decorate: Callable[[Manifest], Manifest]

    def apply(self, m: Manifest) -> Manifest | None:
        nxt = self.edit.apply(m)
        return None if nxt is None else self.decorate(nxt)


@dataclass(frozen=True)
class AllOf(Edit):
    """``edits`` applied in turn, in one manifest version; None if none of them changes anything."""

    edits: tuple[Edit, ...]

    def apply(self, m: Manifest) -> Manifest | None:
        out: Manifest | None = None
        for edit in self.edits:
            nxt = edit.apply(m if out is None else out)
            if nxt is not None:
                out = nxt
        return out


@dataclass(frozen=True)
class SettleWal(Edit):
    """A writer closing with nothing outside L0 moves ``replay_after_wal_id`` up to
    ``upto``, its last durable WAL object.

    The objects after its last flush hold no writes (its opening fence, and the
    slots it fenced beside it), yet until a flush moves the replay point every
    later open lists and reads each of them again, and the garbage collector keeps
    them: a database opened and closed without writes -- what every bulk ingest's
    claim does -- grew one more object to read at each open, for ever. Nothing
    changes if another writer took over (its epoch owns the replay point) or the
    point is there already.

    ``journal``: the writer's value-journal files up to ``upto`` that no flush recorded
    (a WAL object holding separated values whose segment was written again one slot on,
    after an older writer's fence took its slot; or one replayed at open). They are
    recorded in the same version: below the replay point, an object the manifest does
    not list as a journal file is garbage, and the values in it would be lost.
    """

    epoch: int
    upto: int
    journal: tuple[JournalFile, ...] = ()

    def apply(self, m: Manifest) -> Manifest | None:
        if m.writer_epoch != self.epoch or m.replay_after_wal_id >= self.upto:
            return None
        have = {j.id for j in m.journal}
        return replace(
            m,
            replay_after_wal_id=self.upto,
            next_wal_id=max(m.next_wal_id, self.upto + 1),
            tracked_wals=tuple(w for w in m.tracked_wals if w.id > self.upto),
            journal=m.journal + tuple(j for j in self.journal if j.id not in have),
        )


@dataclass(frozen=True)
class ClaimWriterEpoch(Edit):
    """A writer opening the database takes the next writer epoch (fencing the previous writer).

    Refuses an uninitialized clone and a destroyed database. ``extra`` adjusts the
    claimed manifest with the new epoch (e.g. the opening writer's own view checkpoint).
    """

    where: str
    extra: Callable[[Manifest, int], Manifest] | None = None

    def apply(self, m: Manifest) -> Manifest | None:
        if not m.initialized:
            raise InvalidArgument(
                f"database at {self.where} is a clone whose initialization did not finish: "
                "open it with Db.open_from_checkpoint to complete it"
            )
        if m.destroyed_at_s is not None:
            raise destroyed(self.where, m)
        nxt = replace(m, writer_epoch=m.writer_epoch + 1)
        return self.extra(nxt, nxt.writer_epoch) if self.extra is not None else nxt


@dataclass(frozen=True)
class ClaimCompactorEpoch(Edit):
    """A compactor starting takes the next compactor epoch, fencing older compactors' commits
    (and clearing a released epoch's mark: the role is held again).

    ``lapsed`` is a standby's claim: the epoch whose role lease it saw lapse (or released).
    If the manifest's epoch is no longer that one, another compactor claimed the role between
    the standby's look and its write, and this raises ``FencedError`` instead of bumping the
    epoch again: two standbys that saw one lapse fenced the first claimer (a wasted fence and
    a lost job). None (``takeover=True``, ``--takeover``, an embedded compactor) claims whatever
    the epoch is."""

    lapsed: int | None = None

    def apply(self, m: Manifest) -> Manifest | None:
        if self.lapsed is not None and m.compactor_epoch != self.lapsed:
            raise FencedError(
                f"compactor epoch {m.compactor_epoch} was claimed after epoch {self.lapsed} lapsed"
            )
        options = tuple((k, v) for k, v in m.options if k != OPT_COMPACTOR_RELEASED)
        return replace(m, compactor_epoch=m.compactor_epoch + 1, options=options)


@dataclass(frozen=True)
class ReleaseCompactorEpoch(Edit):
    """A compactor closing gives its role up: the manifest records its epoch as released,
    so the embedded compactor it fenced may claim again. Nothing if another took over."""

    epoch: int

    def apply(self, m: Manifest) -> Manifest | None:
        if m.compactor_epoch != self.epoch or m.option(OPT_COMPACTOR_RELEASED) == str(self.epoch):
            return None
        options = dict(m.options)
        options[OPT_COMPACTOR_RELEASED] = str(self.epoch)
        return replace(m, options=tuple(sorted(options.items())))


@dataclass(frozen=True)
class DropCheckpoint(Edit):
    """Remove checkpoint ``cp_id`` if present (idempotent: nothing to do when it is gone)."""

    cp_id: uuid.UUID

    def apply(self, m: Manifest) -> Manifest | None:
        return without_checkpoints(m, {self.cp_id}) if m.checkpoint(self.cp_id) else None


@dataclass(frozen=True)
class DropCheckpoints(Edit):
    """Remove every checkpoint in ``ids`` (a reader closing); nothing to do when none is left."""

    ids: frozenset[uuid.UUID]

    def apply(self, m: Manifest) -> Manifest | None:
        if not any(c.id in self.ids for c in m.checkpoints):
            return None
        return replace(m, checkpoints=tuple(c for c in m.checkpoints if c.id not in self.ids))


def collectable(c: Checkpoint, m: Manifest, now_s: float) -> bool:
    """Whether GC removes checkpoint ``c`` of ``m``: expired at ``now_s``, or a view checkpoint of
    a writer epoch older than ``m``'s. That writer was fenced (its manifest writes fail), and the
    epoch claim of a writer opening drops such checkpoints in the same update; one that fenced
    without claiming -- a soft destroy killed after its first step -- left them pinning their
    versions for good."""
    return c.expired(now_s) or (c.writer_epoch is not None and c.writer_epoch < m.writer_epoch)


@dataclass(frozen=True)
class DropExpiredCheckpoints(Edit):
    """GC: remove the checkpoints :func:`collectable` at ``now_s``; ``gone`` receives their ids
    (last attempt)."""

    now_s: float
    gone: list[str] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        self.gone.clear()
        keep = []
        for c in m.checkpoints:
            if collectable(c, m, self.now_s):
                self.gone.append(str(c.id))
            else:
                keep.append(c)
        return replace(m, checkpoints=tuple(keep)) if self.gone else None


@dataclass(frozen=True)
class FenceForDestroy(Edit):
    """Soft destroy, step 1: a new writer epoch fences the running writer (none if destroyed)."""

    def apply(self, m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            return None
        return replace(m, writer_epoch=m.writer_epoch + 1)


@dataclass(frozen=True)
class MarkSoftDestroyed(Edit):
    """Soft destroy, steps 2-3: drop the writer's checkpoints and mark the database destroyed.

    Only while the epoch claimed in step 1 is still current: a writer that opened the
    database since is not destroyed under its feet (``FencedError``).
    """

    epoch: int
    clock: Clock

    def apply(self, m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            return None
        if m.writer_epoch != self.epoch:
            raise FencedError(
                f"a writer (epoch {m.writer_epoch}) opened the database while it was being destroyed; "
                "stop it and destroy again"
            )
        keep = tuple(c for c in m.checkpoints if c.writer_epoch is None)
        return replace(m, checkpoints=keep, destroyed_at_s=self.clock.now())


@dataclass(frozen=True)
class RemoveOption(Edit):
    """Remove database option ``key`` (nothing to do when it is not set)."""

    key: str

    def apply(self, m: Manifest) -> Manifest | None:
        if m.option(self.key) is None:
            return None
        return replace(m, options=tuple((k, v) for k, v in m.options if k != self.key))


__all__ = [
    "ClaimCompactorEpoch",
    "ClaimWriterEpoch",
    "collectable",
    "ReleaseCompactorEpoch",
    "Decorated",
    "DropCheckpoint",
    "DropCheckpoints",
    "DropExpiredCheckpoints",
    "Edit",
    "FenceForDestroy",
    "MarkSoftDestroyed",
    "NoChange",
    "RemoveOption",
    "with_checkpoint",
    "without_checkpoints",
]

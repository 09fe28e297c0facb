"""How the writer keeps the garbage collector away from the SSTs it reads.

Reads in the writer never lock: they use a *view* (memtables plus one
manifest version's SSTs). Compaction replaces SSTs, and a garbage collector in
any process deletes SSTs that no *active* manifest references: the latest one
and those named by live checkpoints (docs/design/gc.md). So the writer keeps a
checkpoint (``writer_epoch`` set: a writer checkpoint, see
docs/design/checkpoints-readers-clones.md) on the manifest its view comes from:

* Opening bumps the epoch and, in the same CAS, drops the checkpoints of older
  writers and adds ours, pointing at the version being written.
* Whenever the writer's L0 SSTs or sorted runs change (its own flush, a commit
  of its embedded compactor, or a standalone compactor's commit it picks up)
  the new view gets a new checkpoint in the manifest write that creates (or
  adopts) it. The writer's own writes carry it for free; adopting another
  process's change costs one extra manifest write, and only when the SST set
  changed.
* Snapshots and scans take a reference on the view's checkpoint; an old
  checkpoint stays non-expiring while referenced. The checkpoint a write
  supersedes is left as it is by that write (readers may still take it until
  the write is confirmed) and handled by the next one. Unreferenced old checkpoints
  are given an expiry ``grace_s`` ahead at the writer's next manifest write (a
  point lookup holds its view without a reference for at most one read, so a
  grace of a store timeout covers it); the garbage collector then removes
  them. An old checkpoint whose objects the current one pins too (an L0 flush
  only adds SSTs) protects nothing and is dropped at once, so the list stays
  short: it grows only with compactions during the last ``grace_s``. With no
  manifest writes (an idle writer) released checkpoints linger until the next
  write or ``close()``; that costs space, never safety.

Only manifest writes that change the SST set create checkpoints, so manifest
traffic stays what the flushes and compactions already cause.

The checkpoint for a new view names the id of the manifest being written:
``ManifestStore.update`` assigns ``id + 1`` to whatever the mutator returns,
so mutators must return manifests derived from their argument with its id
unchanged (``dataclasses.replace``) and :meth:`ViewPins.decorate` names
``nxt.id + 1``.
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass, replace

from ..clock import Clock
from ..errors import FencedError
from ..manifest.edits import Edit
from ..manifest.model import Checkpoint, Manifest

SstSet = frozenset[str]
_UNKNOWN: SstSet = frozenset({"?"})


def referenced_objects(m: Manifest) -> SstSet:
    """The ids of every SST and journal object ``m`` references (what a pin protects)."""
    ids = {f"{s.db}/{s.id}" for s in m.all_ssts()}
    ids.update(f"{j.db}/j/{j.id}" for j in m.journal)
    return frozenset(ids)


def _new_id(rng: random.Random, epoch: int) -> uuid.UUID:
    """A checkpoint id from the injected rng, mixed with the writer's epoch so that writers
    opened with the same ``seed=`` (tests, reproducible runs) still draw different ids."""
    return uuid.UUID(int=rng.getrandbits(128) ^ epoch, version=4)


def _uuid_of(k: int) -> uuid.UUID:
    return uuid.UUID(int=k)


@dataclass(frozen=True)
class RepinView(Edit):
    """One more write that pins the latest version with the writer's view checkpoints
    (:meth:`ViewPins.decorate`); no change when it is pinned already."""

    pins: ViewPins

    def apply(self, m: Manifest) -> Manifest | None:
        nxt = self.pins.decorate(m)
        return None if nxt is m else nxt


@dataclass(frozen=True)
class StripPins(Edit):
    """At close: drop this writer's unreferenced view checkpoints (:meth:`ViewPins.strip`)."""

    pins: ViewPins

    def apply(self, m: Manifest) -> Manifest | None:
        return self.pins.strip(m)


class ViewPins:
    """The writer's checkpoints and their reference counts. Thread-safe."""

    def __init__(self, clock: Clock, rng: random.Random, *, grace_s: float) -> None:
        self.clock = clock
        self.rng = rng
        self.grace_s = grace_s
        self.epoch: int | None = None
        self.current: Checkpoint | None = None
        self._current_set: SstSet | None = None
        # Checkpoints added by decorate() whose manifest write has not been confirmed
        # (normally one; several if writes race outside the writer's manifest lock).
        self._pending: dict[uuid.UUID, tuple[Checkpoint, SstSet]] = {}
        self._refs: dict[int, int] = {}
        """References per checkpoint, keyed by the id's ``int``: every scan takes and drops
        one, and an int hashes in C where ``UUID.__hash__`` is a Python call (four per scan)."""
        self._pinned: dict[uuid.UUID, SstSet] = {}
        """What each of our checkpoints pins (for the ones this process created)."""
        self._sets: dict[int, SstSet] = {}
        self._lock = threading.Lock()

    def _set_of(self, m: Manifest) -> SstSet:
        s = self._sets.get(m.id)
        if s is None:
            s = referenced_objects(m)
            if len(self._sets) > 32:
                self._sets.clear()
            self._sets[m.id] = s
        return s

    # ------------------------------------------------------------ manifests

    def on_claim(self, nxt: Manifest, epoch: int) -> Manifest:
        """The epoch-bump CAS at open: our first checkpoint (``claim_writer_epoch``'s hook)."""
        with self._lock:
            self.epoch = epoch
        return self.decorate(nxt)

    def decorate(self, nxt: Manifest) -> Manifest:
        """``nxt`` with this writer's checkpoints brought up to date (see module docstring).

        Raises FencedError if ``nxt`` belongs to a newer writer epoch.
        """
        epoch = self.epoch
        if epoch is None:
            return nxt
        if nxt.writer_epoch != epoch:
            raise FencedError(f"writer epoch {nxt.writer_epoch} took over; this writer (epoch {epoch}) stops")
        now = self.clock.now()
        objects = referenced_objects(nxt)
        with self._lock:
            cur = self.current
            keep_current = cur is not None and objects == self._current_set
            live_set = objects if not keep_current else self._current_set
            cur_set = None if cur is None else self._pinned.get(cur.id)
            out: list[Checkpoint] = []
            changed = False
            have_current = False
            for c in nxt.checkpoints:
                if c.writer_epoch is None or c.writer_epoch > epoch:
                    out.append(c)
                elif c.writer_epoch < epoch:
                    changed = True  # an older writer's pin: that writer is fenced
                elif cur is not None and c.id == cur.id and keep_current:
                    have_current = True
                    out.append(c)
                elif cur is not None and c.id == cur.id:
                    # Superseded by this write, but acquire() hands it out until confirm()
                    # switches to the new one: a reader may take it meanwhile, so it is
                    # expired or dropped by a later write, when its references are known.
                    out.append(c)
                elif self._refs.get(c.id.int, 0) > 0:
                    if c.expire_time_s is not None:
                        c = replace(c, expire_time_s=None)
                        changed = True
                    out.append(c)
                elif (live_set is not None and self._pinned.get(c.id, _UNKNOWN) <= live_set) or (
                    cur_set is not None and self._pinned.get(c.id, _UNKNOWN) <= cur_set
                ):
                    changed = True  # the new view (or the kept current one) pins all it pinned
                    self._pinned.pop(c.id, None)
                elif c.expire_time_s is None:
                    out.append(replace(c, expire_time_s=now + self.grace_s))
                    changed = True
                elif c.expired(now):
                    changed = True
                    self._pinned.pop(c.id, None)
                else:
                    out.append(c)
            if not have_current:
                taken = {c.id for c in nxt.checkpoints}
                cp_id = _new_id(self.rng, epoch)
                while cp_id in taken:  # two processes opened with one seed= draw the same ids
                    cp_id = _new_id(self.rng, epoch)
                cp = Checkpoint(
                    id=cp_id,
                    manifest_id=nxt.id + 1,
                    create_time_s=now,
                    writer_epoch=epoch,
                )
                out.append(cp)
                if len(self._pending) >= 16:
                    self._pending.pop(next(iter(self._pending)))
                self._pending[cp.id] = (cp, objects)
                if len(self._pinned) > 1024:  # entries of CAS attempts that lost
                    keep_ids = {*map(_uuid_of, self._refs), *self._pending, *(c.id for c in out)}
                    self._pinned = {k: v for k, v in self._pinned.items() if k in keep_ids}
                self._pinned[cp.id] = objects
                changed = True
        return replace(nxt, checkpoints=tuple(out)) if changed else nxt

    def confirm(self, m: Manifest) -> None:
        """``m`` was written (or adopted): make its new checkpoint current, if any."""
        with self._lock:
            if not self._pending:
                return
            found = [self._pending.pop(c.id) for c in m.checkpoints if c.id in self._pending]
            if found:
                self.current, self._current_set = found[-1]

    def covers(self, m: Manifest) -> bool:
        """Whether ``m``'s SSTs are pinned by our current checkpoint, present in ``m``."""
        with self._lock:
            cur = self.current
            if cur is None or self._set_of(m) != self._current_set:
                return False
            return any(c.id == cur.id for c in m.checkpoints)

    def strip(self, m: Manifest) -> Manifest | None:
        """``m`` without this writer's unreferenced checkpoints (at close); None if unchanged."""
        with self._lock:
            epoch = self.epoch
            keep = tuple(
                c for c in m.checkpoints if c.writer_epoch != epoch or self._refs.get(c.id.int, 0) > 0
            )
            self.current = None
            self._current_set = None
        if m.writer_epoch != epoch or len(keep) == len(m.checkpoints):
            return None
        return replace(m, checkpoints=keep)

    # ------------------------------------------------------------ references

    def acquire(self) -> uuid.UUID | None:
        """A reference on the current view's checkpoint (call under the db lock)."""
        with self._lock:
            cur = self.current
            if cur is None:
                return None
            k = cur.id.int
            self._refs[k] = self._refs.get(k, 0) + 1
            return cur.id

    def release(self, cp_id: uuid.UUID | None) -> None:
        if cp_id is None:
            return
        with self._lock:
            k = cp_id.int
            n = self._refs.get(k, 0) - 1
            if n > 0:
                self._refs[k] = n
            else:
                self._refs.pop(k, None)

    def refs(self) -> dict[uuid.UUID, int]:
        with self._lock:
            return {_uuid_of(k): n for k, n in self._refs.items()}


__all__ = ["ViewPins", "referenced_objects"]

"""Range tombstones in a compaction: what is dropped, what is kept, where it goes.

* **Covered entries.** A version ``(key, s)`` under a tombstone ``t`` with
  ``s < t`` is dropped when no reader of the output can see it: with no
  history window, always (snapshots and checkpoints read the old SSTs of the
  manifest they pinned, as for overwritten versions; see ``executor.py``); with
  a window whose floor is ``f``, when such a ``t <= f`` exists (every reader the
  window allows sees the tombstone).
* **The tombstones.** Without a window only each fragment's newest seq is kept
  (the others hide nothing the newest does not), and at the bottom of the tree
  none: nothing older is left to hide. With a window, the seqs above the floor
  are kept, plus the newest at or below it except at the bottom.
* **Placement.** Each output SST carries the fragments of the keys it *owns* in
  the run: a run's reader looks for key ``k`` in the first SST whose last key is
  ``>= k``, so SST ``j`` owns ``(last_{j-1}, last_j]`` and its first key is lowered
  to the first fragment it holds. Fragments past the last point key go to the
  last SST (its last key raised to their end, an inclusive bound one key too
  wide, which only costs a lookup of that key a probe), or to an SST of
  tombstones only. A compaction whose sources hold range tombstones runs as one
  key range, so no SST ever has to claim a bound between two ranges.
"""

from __future__ import annotations

from collections.abc import Callable

from ..format.range_dels import EMPTY, Fragments, merge_fragments, successor
from ..format.sst import SstBuilder, SstMeta
from ..manifest.model import SstInfo
from .scheduler import CompactionSpec

Columns = tuple[list[bytes], list[int], bytes, list[bytes]]


def source_fragments(spec: CompactionSpec, meta: Callable[[SstInfo], SstMeta]) -> Fragments:
    """Every range tombstone of ``spec``'s sources, fragmented."""
    return merge_fragments(meta(s).range_dels for s in spec.ssts if s.range_dels)


def has_range_dels(spec: CompactionSpec) -> bool:
    return any(s.range_dels for s in spec.ssts)


def drop_covered(cols: Columns, frags: Fragments, floor: int | None) -> Columns:
    """``cols`` (key order) without the versions no reader can see under ``frags``."""
    keys, seqs, kinds, pays = cols
    if not keys or not frags:
        return cols
    starts, ends, all_seqs = frags.starts, frags.ends, frags.seqs
    n = len(starts)
    i = 0
    keep: list[int] = []
    for j, k in enumerate(keys):
        while i < n and ends[i] <= k:
            i += 1
        if i < n and starts[i] <= k:
            s = seqs[j]
            # the newest tombstone every allowed reader sees: at most ``floor`` (a window)
            top = next((q for q in all_seqs[i] if floor is None or q <= floor), 0)
            if top > s:
                continue
        keep.append(j)
    if len(keep) == len(keys):
        return cols
    return (
        list(map(keys.__getitem__, keep)),
        list(map(seqs.__getitem__, keep)),
        bytes(map(kinds.__getitem__, keep)),
        list(map(pays.__getitem__, keep)),
    )


def retained(frags: Fragments, floor: int | None, bottom: bool) -> Fragments:
    """The tombstones the output keeps (see module docstring)."""
    if not frags:
        return EMPTY
    if floor is None:
        return EMPTY if bottom else frags.at(None)
    pieces = []
    for s, e, ss in zip(frags.starts, frags.ends, frags.seqs):
        above = [q for q in ss if q > floor]
        below = [q for q in ss if q <= floor]
        for q in above + ([] if bottom or not below else below[:1]):
            pieces.append((s, e, q))
    return Fragments.build(pieces)


class Placer:
    """Hands each output SST of one run the fragments it owns (module docstring)."""

    def __init__(self, frags: Fragments) -> None:
        self.frags = frags
        self.prev_last: bytes | None = None
        self.done = not frags

    def attach(self, b: SstBuilder, last_key: bytes | None, final: bool) -> None:
        """Give ``b`` (whose last point key is ``last_key``; None: no point entries)
        its fragments; ``final``: it is the run's last SST."""
        if self.done:
            return
        lo = None if self.prev_last is None else successor(self.prev_last)
        hi = None if final or last_key is None else successor(last_key)
        mine = self.frags.clip(lo, hi)
        if last_key is not None:
            self.prev_last = last_key
        if final:
            self.done = True
        if mine:
            b.set_range_dels(mine, mine.starts[0], mine.ends[-1] if final else None)

    @property
    def pending(self) -> bool:
        """Fragments past the last SST emitted so far remain."""
        if self.done:
            return False
        lo = None if self.prev_last is None else successor(self.prev_last)
        return bool(self.frags.clip(lo, None))

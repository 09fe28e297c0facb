"""Index terms of range-deleted keys: removed from the index tree by compaction.

A range delete writes one entry, never an index tombstone per key (that would cost a
scan of the range at write time). ``index_query`` hides the terms of range-deleted
keys by asking the data tree's range tombstones (``engine/indexes.py``), so the terms
must leave the index tree before the last data tombstone covering them does. Here:

* **Cleaning.** When the data tree of an indexed database holds range tombstones
  newer than the manifest option :data:`OPT_CLEANED`, the compactor schedules a
  *full* index-tree compaction (every L0 SST and run: the bottom) that drops each
  index entry ``(field, term, key)`` at seq ``s`` whose data key a data range
  tombstone newer than ``s`` covers (:func:`drop_deleted_terms`). Its commit sets
  :data:`OPT_CLEANED` to ``X``, the newest seq of the data SSTs it read the
  tombstones from. That is sound because memtables flush in sequence order: once
  an SST with seq ``X`` is in the manifest, every write at or below ``X`` -- every
  index entry a tombstone at or below ``X`` could hide -- is in that manifest's SSTs.
* **History.** With a history window the index tree keeps its versions like the
  data tree (so ``index_query`` reads at a time-travel snapshot), and a clean only
  applies tombstones at or below the window's floor.
* **Keeping the data tombstones until then.** At the bottom of the data tree a
  range tombstone is normally dropped; on an indexed database only one at or below
  :data:`OPT_CLEANED` is (``range_dels.retained``'s ``keep_above``), so an index
  query never loses the tombstone that hides a stale term.

Cost: one rewrite of the index tree per compactor pass that finds new range
tombstones (not per range delete: several flushed ones are cleaned at once).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import CorruptionError
from ..format.journal import decode_index_key
from ..format.range_dels import Fragments, merge_fragments
from ..format.sst import SstMeta
from ..manifest.model import Manifest, SstInfo
from ..manifest.options import OPT_INDEXED

OPT_CLEANED = "index.range_dels_cleaned"
"""Every index entry a data range tombstone at or below this seq hides is gone from the index tree."""

Columns = tuple[list[bytes], list[int], bytes, list[bytes]]


def cleaned_seq(m: Manifest) -> int:
    return int(m.option(OPT_CLEANED) or 0)


def data_range_del_ssts(m: Manifest) -> tuple[SstInfo, ...]:
    """The data tree's SSTs holding range tombstones."""
    return tuple(s for s in m.data.ssts() if s.range_dels)


def cleaning_due(
    m: Manifest, meta: Callable[[SstInfo], SstMeta], floor: int | None = None
) -> tuple[tuple[SstInfo, ...], int] | None:
    """``(data SSTs with range tombstones, X)`` when the index tree needs cleaning up to X,
    the newest data range tombstone (read from the SSTs' range-del blocks: an SST's own
    max seq would grow as compaction adds newer rows to it, and clean again for nothing).
    With a history window (``floor``) only tombstones at or below the floor count: a
    time-travel read above the floor may still need the terms a newer one hides."""
    if m.option(OPT_INDEXED) != "1":
        return None
    ssts = data_range_del_ssts(m)
    if not ssts:
        return None
    cleaned = cleaned_seq(m)
    if max(s.max_seq for s in ssts) <= cleaned:
        return None  # (no metadata read)
    upto = max(max(meta(s).range_dels.tops, default=0) for s in ssts)
    if floor is not None:
        upto = min(upto, floor)
    return (ssts, upto) if upto > cleaned else None


def keep_above(m: Manifest) -> int | None:
    """For a data-tree compaction: range tombstones above this seq stay even at the bottom
    (None: not an indexed database, the bottom drops them all)."""
    return cleaned_seq(m) if m.option(OPT_INDEXED) == "1" else None


def data_fragments(ssts: tuple[SstInfo, ...], meta: Callable[[SstInfo], SstMeta]) -> Fragments:
    return merge_fragments(meta(s).range_dels for s in ssts)


def drop_deleted_terms(cols: Columns, frags: Fragments, floor: int | None = None) -> Columns:
    """Index rows without those whose data key a range tombstone newer than the row covers
    (with a history window, one at or below its ``floor``: every reader the window allows
    sees that tombstone)."""
    keys, seqs, kinds, pays = cols
    if not keys or not frags:
        return cols
    keep: list[int] = []
    for i, ik in enumerate(keys):
        try:
            key = decode_index_key(ik)[2]
        except CorruptionError:
            keep.append(i)  # not an index key of this layout: leave it
            continue
        if frags.covering(key, floor) <= seqs[i]:
            keep.append(i)
    if len(keep) == len(keys):
        return cols
    return (
        [keys[i] for i in keep],
        [seqs[i] for i in keep],
        bytes(kinds[i] for i in keep),
        [pays[i] for i in keep],
    )


__all__ = [
    "OPT_CLEANED",
    "cleaned_seq",
    "cleaning_due",
    "data_fragments",
    "data_range_del_ssts",
    "drop_deleted_terms",
    "keep_above",
]

"""Bases for hot merges above the bottom: compaction folds them instead of piling operands.

A compaction above the bottom of the tree cannot fold a merge whose base (the put
it builds on) lies in an older sorted run outside its sources: without the base the
operator cannot run, so the merge stays a list of operands, and every compaction
above the bottom -- which, with a history window, also drops the versions below the
floor -- hands a longer list to the next one until a compaction finally reaches the
bottom. A hot counter over an old base therefore grows in space and in read cost.

Here the executor reads such a key's versions from the runs *below* its sources
(:attr:`CompactionSpec.below`, set by the compactor) when its newest merge holds at
least :data:`FETCH_AT_OPERANDS` operands, adds them as the oldest source, completes
the merge chain onto the base it finds, and leaves them out of the output (they stay
where they are): the merge is then self-contained and folded like any other. Cost:
one ranged read of a block per such key and run (consecutive keys share it), only
for keys with that many operands. Keys whose SST below holds range tombstones are
left alone (their base may be deleted by a tombstone the compaction does not see).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from ..engine.columns import Columns
from ..errors import CorruptionError
from ..format import paths
from ..format.block import Block
from ..format.merge import decode_merge, operand_count
from ..format.row import KIND_MERGE
from ..format.sst import SstMeta, decode_data_block
from ..manifest.model import SortedRun, SstInfo
from ..store.base import ObjectStore

FETCH_AT_OPERANDS = 64
"""A base-less merge with this many operands gets its base read from the runs below."""


def hot_keys(cols: Columns) -> list[bytes]:
    """Keys (in order) whose newest version is a merge without a base holding at least
    :data:`FETCH_AT_OPERANDS` operands (``cols``: completed, a key's versions newest first)."""
    keys, _seqs, kinds, pays = cols
    out: list[bytes] = []
    prev = None
    for i, k in enumerate(keys):
        if k == prev:
            continue
        prev = k
        hot = kinds[i] == KIND_MERGE and operand_count(pays[i]) >= FETCH_AT_OPERANDS
        if hot and decode_merge(pays[i])[0] is None:
            out.append(k)
    return out


class BelowReader:
    """Versions of keys in the sorted runs below a compaction's sources (newest first)."""

    def __init__(
        self,
        runs: Sequence[SortedRun],
        meta: Callable[[SstInfo], SstMeta],
        store_for: Callable[[SstInfo], ObjectStore],
    ) -> None:
        self.runs = runs
        self.meta = meta
        self.store_for = store_for
        self._blocks: dict[tuple[str, int], Block] = {}

    def _block(self, info: SstInfo, bi: int) -> Block:
        ck = (info.id, bi)
        b = self._blocks.get(ck)
        if b is None:
            offs = self.meta(info).index.offsets
            path = paths.sst_path(info.id)
            raw = self.store_for(info).get_range(path, offs[bi], offs[bi + 1])
            try:
                b = decode_data_block(raw)
            except CorruptionError as exc:
                raise exc.with_path(path) from exc
            if len(self._blocks) > 64:
                self._blocks.clear()
            self._blocks[ck] = b
        return b

    def versions(self, key: bytes) -> list[tuple[int, int, bytes]] | None:
        """``(seq, kind, payload)`` of ``key`` below, newest first, down to its base;
        None when a range tombstone below could hide them, or when the runs below hold
        no base (the key is left alone: without a base nothing can be folded, and a
        merge completed over operands that stay below would count them twice)."""
        out: list[tuple[int, int, bytes]] = []
        for run in self.runs:
            i = bisect_left([s.last_key for s in run.ssts], key)
            if i >= len(run.ssts) or run.ssts[i].first_key > key:
                continue
            info = run.ssts[i]
            if info.range_dels:
                return None
            meta = self.meta(info)
            bi = bisect_left(meta.index.keys, key)
            found: list[tuple[int, int, bytes]] = []
            while bi < len(meta.index.keys):
                b = self._block(info, bi)
                lo, hi = bisect_left(b.keys, key), bisect_right(b.keys, key)
                found += [(int(b.seqs[j]), b.kinds[j], b.payload(j)) for j in range(lo, hi)]
                if hi < len(b.keys):
                    break
                bi += 1
            for e in found:
                out.append(e)
                if e[1] != KIND_MERGE or decode_merge(e[2])[0] is not None:
                    return out  # the base: nothing older matters
        return None


def below_rows(cols: Columns, reader: BelowReader) -> Columns:
    """The versions below of the hot keys of ``cols`` (an extra oldest source)."""
    keys: list[bytes] = []
    seqs: list[int] = []
    kinds = bytearray()
    pays: list[bytes] = []
    for k in hot_keys(cols):
        vs = reader.versions(k)
        if not vs:
            continue
        for s, t, p in vs:
            keys.append(k)
            seqs.append(s)
            kinds.append(t)
            pays.append(p)
    return keys, seqs, bytes(kinds), pays


def without(cols: Columns, extra: Columns) -> Columns:
    """``cols`` without the rows of ``extra`` (by key and seq)."""
    gone = set(zip(extra[0], extra[1]))
    keys, seqs, kinds, pays = cols
    keep = [i for i in range(len(keys)) if (keys[i], seqs[i]) not in gone]
    return (
        [keys[i] for i in keep],
        [seqs[i] for i in keep],
        bytes(kinds[i] for i in keep),
        [pays[i] for i in keep],
    )


__all__ = ["FETCH_AT_OPERANDS", "BelowReader", "below_rows", "hot_keys", "without"]

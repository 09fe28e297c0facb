"""Rows as columns, merged newest-first: the primitives compaction and bulk reads share.

A *source* is one L0 SST or one sorted run; :class:`SourceCursor` reads one
forward within a key range with large ranged GETs, block by block, handing out
rows as columns (keys, seqs, kinds, payloads). :func:`chunk_cuts` splits a
range into chunks of similar input size at block boundaries;
:func:`merge_columns` keeps the newest version of each key across sources;
:func:`drop_dead` drops tombstones and expired entries (at the bottom of the
tree: a checkpoint read is one); :func:`drop_covered` drops what range
tombstones hide. They live in the engine, below both the compaction executor
(``compaction/executor.py``) and the bulk checkpoint reads (``bulk/read.py``,
``bulk/read_arrow.py``), which import them from here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from operator import eq

from ..errors import CorruptionError
from ..format import paths
from ..format.block import Block
from ..format.range_dels import Fragments
from ..format.row import FLAG_EXPIRY, FLAG_INDEXED, KIND_TOMBSTONE, TYPE_MASK, payload_expiry
from ..format.sst import SstMeta, decode_data_block
from ..keys import key_after
from ..manifest.model import SstInfo
from ..store.base import ObjectStore

Columns = tuple[list[bytes], list[int], bytes, list[bytes]]
"""keys, seqs, kinds, payloads of rows in key order."""

_EMPTY: Columns = ([], [], b"", [])


def block_span(meta: SstMeta, lo: bytes | None, hi: bytes | None) -> tuple[int, int]:
    """First and end block of an SST that may hold keys in ``[lo, hi)`` (its index keys
    are the blocks' last keys)."""
    keys = meta.index.keys
    first = 0 if lo is None else bisect_left(keys, lo)
    end = len(keys) if hi is None else min(len(keys), bisect_left(keys, hi) + 1)
    return first, end


class SourceCursor:
    """Reads one source (a sorted run's SSTs, or one L0 SST) forward within ``[lo, hi)``.

    Compaction and the bulk checkpoint read (``export``) both merge sources
    chunk by chunk through it: large ranged GETs (``read_ahead`` bytes of the
    blocks the range needs), blocks decoded one at a time, rows handed out as
    columns.
    """

    def __init__(
        self,
        ssts: Sequence[SstInfo],
        lo: bytes | None,
        hi: bytes | None,
        *,
        meta: Callable[[SstInfo], SstMeta],
        store_for: Callable[[SstInfo], ObjectStore],
        read_ahead: int,
    ) -> None:
        self.lo = lo
        self.hi = hi
        self.meta = meta
        self.store_for = store_for
        self.read_ahead = read_ahead
        self.ssts = [
            s
            for s in ssts
            if (hi is None or s.first_key < hi) and (lo is None or s.last_key >= lo) and s.entries
        ]
        self.si = -1
        self.sst_meta: SstMeta | None = None
        self.bi = 0
        self.end_block = 0
        self.buf_start = 0
        self.buf = b""
        self.blk: Block | None = None
        self.pos = 0
        self.bytes_read = 0
        self.rows = 0

    def blocks(self) -> list[tuple[bytes, int]]:
        """``(last_key, stored_size)`` of the blocks this cursor will read (for chunking)."""
        out: list[tuple[bytes, int]] = []
        for info in self.ssts:
            meta = self.meta(info)
            keys, offs = meta.index.keys, meta.index.offsets
            first, end = block_span(meta, self.lo, self.hi)
            out.extend((keys[i], offs[i + 1] - offs[i]) for i in range(first, end))
        return out

    def _next_sst(self) -> bool:
        self.si += 1
        if self.si >= len(self.ssts):
            self.sst_meta = None
            return False
        meta = self.meta(self.ssts[self.si])
        self.sst_meta = meta
        self.bi, self.end_block = block_span(meta, self.lo, self.hi)
        self.buf = b""
        self.buf_start = 0
        return True

    def _load_block(self) -> bool:
        while self.sst_meta is None or self.bi >= self.end_block:
            if not self._next_sst():
                return False
        offs = self.sst_meta.index.offsets
        start, end = offs[self.bi], offs[self.bi + 1]
        info = self.ssts[self.si]
        path = paths.sst_path(info.id)
        if not (self.buf_start <= start and end <= self.buf_start + len(self.buf)):
            # Read ahead: this block and the following ones this range needs.
            stop = self.bi + 1
            limit = start + self.read_ahead
            while stop < self.end_block and offs[stop + 1] <= limit:
                stop += 1
            data = self.store_for(info).get_range(path, start, offs[stop])
            if len(data) != offs[stop] - start:
                raise CorruptionError(
                    f"read {len(data)} bytes at {start}, expected {offs[stop] - start}", path
                )
            self.bytes_read += len(data)
            self.buf, self.buf_start = data, start
        rel = start - self.buf_start
        try:
            blk = decode_data_block(self.buf[rel : rel + end - start])
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        self.bi += 1
        self.blk = blk
        self.pos = 0 if self.lo is None else bisect_left(blk.keys, self.lo)
        return True

    def take(self, upto: bytes | None) -> Columns:
        """Rows with key < ``upto`` (and < hi); ``upto`` None: to the end of the range."""
        bound = self.hi if upto is None or (self.hi is not None and self.hi < upto) else upto
        keys: list[bytes] = []
        seqs: list[int] = []
        kinds = bytearray()
        pays: list[bytes] = []
        while True:
            if self.blk is None and not self._load_block():
                break
            b = self.blk
            assert b is not None
            bk = b.keys
            pos = self.pos
            end = len(bk) if bound is None else bisect_left(bk, bound, pos)
            if end > pos:
                keys += bk[pos:end]
                seqs += b.seqs[pos:end]
                kinds += b.kinds[pos:end]
                pays += b.payloads(pos, end)
            if end < len(bk):
                self.pos = end
                break
            self.blk = None
        self.rows += len(keys)
        return keys, seqs, bytes(kinds), pays


def chunk_cuts(
    blocks: list[tuple[bytes, int]], target: int, lo: bytes | None, hi: bytes | None
) -> list[bytes]:
    """Exclusive bounds after every ``target`` bytes of ``blocks`` (sorted here), strictly inside (lo, hi)."""
    blocks.sort()
    cuts: list[bytes] = []
    acc = 0
    for k, size in blocks:
        acc += size
        if acc >= target:
            c = key_after(k)
            if (hi is None or c < hi) and (lo is None or c > lo) and (not cuts or c > cuts[-1]):
                cuts.append(c)
            acc = 0
    return cuts


def _has_duplicates(keys: list[bytes]) -> bool:
    return len(keys) > 1 and any(map(eq, keys, keys[1:]))


def merge_columns(cols: list[Columns]) -> Columns:
    """The newest version of each key; ``cols`` are sources oldest first, each in
    key order with a repeated key's versions newest first (see module docstring)."""
    nonempty = [c for c in cols if c[0]]
    if not nonempty:
        return _EMPTY
    if len(nonempty) == 1 and not _has_duplicates(nonempty[0][0]):
        return nonempty[0]
    all_k: list[bytes] = []
    all_s: list[int] = []
    all_t = bytearray()
    all_p: list[bytes] = []
    newest: dict[bytes, int] = {}
    for k, s, t, p in nonempty:
        base = len(all_k)
        n = len(k)
        all_k += k
        all_s += s
        all_t += t
        all_p += p
        # Reversed: within a source the first (newest) version of a key wins.
        newest.update(zip(reversed(k), range(base + n - 1, base - 1, -1)))
    keys = sorted(newest)
    idx = list(map(newest.__getitem__, keys))
    return (
        keys,
        list(map(all_s.__getitem__, idx)),
        bytes(map(all_t.__getitem__, idx)),
        list(map(all_p.__getitem__, idx)),
    )


def drop_dead(cols: Columns, *, bottom: bool, now_ms: int) -> Columns:
    """Drop tombstones (bottom only) and expired entries (tombstones elsewhere)."""
    keys, seqs, kinds, pays = cols
    if not kinds or kinds.count(0) == len(kinds):
        return cols
    drop: set[int] = set()
    change: dict[int, int] = {}
    for i, t in enumerate(kinds):
        if not t:
            continue
        if t & TYPE_MASK == KIND_TOMBSTONE:
            if bottom:
                drop.add(i)
        elif t & FLAG_EXPIRY:
            expires = payload_expiry(t, pays[i])
            if expires is not None and expires <= now_ms:
                if bottom:
                    drop.add(i)
                else:
                    change[i] = KIND_TOMBSTONE | (t & FLAG_INDEXED)
    if not drop and not change:
        return cols
    if change:
        kb = bytearray(kinds)
        pays = list(pays)
        for i, t in change.items():
            kb[i] = t
            pays[i] = b""
        kinds = bytes(kb)
    if drop:
        keep = [i for i in range(len(keys)) if i not in drop]
        return (
            list(map(keys.__getitem__, keep)),
            list(map(seqs.__getitem__, keep)),
            bytes(map(kinds.__getitem__, keep)),
            list(map(pays.__getitem__, keep)),
        )
    return keys, seqs, kinds, pays


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


__all__ = [
    "Columns",
    "SourceCursor",
    "block_span",
    "chunk_cuts",
    "drop_covered",
    "drop_dead",
    "merge_columns",
]

"""Range tombstones: ``delete_range(start, end)`` as one entry, and their fragments.

A range tombstone ``(start, end, seq)`` hides every version of every key ``k``
with ``start <= k < end`` and a sequence number below ``seq``. In a WAL SST it is
one entry: key ``start``, kind ``KIND_RANGE_DEL``, payload ``end``. In a table SST
the tombstones live in one *range-del block* as a **fragmented** list
(RocksDB's layout): the tombstones are cut at every start and end so the
fragments never overlap, and each fragment lists the sequence numbers of the
tombstones covering it, newest first. A reader then finds whether a key is
covered, and by which sequence number at a snapshot, with one binary search
whatever the number of tombstones. Spec: docs/format/range-dels.md.

Block payload::

    u32 n                       fragments
    u32 key_off[2n + 1]         start_0, end_0, start_1, end_1, ... in the key blob
    u32 seq_off[n + 1]          fragment i's seqs are seq[seq_off[i] : seq_off[i + 1]]
    u64 seq[m]                  per fragment descending, m = seq_off[n] >= n
    key blob

Pure functions, no I/O.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, pairwise

from ..errors import CorruptionError
from .coding import check_offsets, pack_u32s, pack_u64s, u32_array, u64_array
from .row import KIND_TOMBSTONE

FLAG_RANGE = 0x40
"""Kind bit: with type TOMBSTONE, the entry is a range tombstone (payload = end key)."""
KIND_RANGE_DEL = KIND_TOMBSTONE | FLAG_RANGE

_U32 = struct.Struct("<I")

RangeDel = tuple[bytes, bytes, int]
"""``(start, end, seq)``: keys in ``[start, end)`` older than ``seq`` are deleted."""


def successor(key: bytes) -> bytes:
    """The smallest key greater than ``key``."""
    return key + b"\0"


class Fragments:
    """Non-overlapping range fragments in key order, each with its seqs newest first."""

    __slots__ = ("ends", "seqs", "starts", "tops")

    def __init__(self, starts: list[bytes], ends: list[bytes], seqs: list[tuple[int, ...]]) -> None:
        self.starts = starts
        self.ends = ends
        self.seqs = seqs
        self.tops = [s[0] for s in seqs]
        """Each fragment's newest seq (the answer when no snapshot caps it)."""

    def __len__(self) -> int:
        return len(self.starts)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fragments) and (self.starts, self.ends, self.seqs) == (
            other.starts,
            other.ends,
            other.seqs,
        )

    def __hash__(self) -> int:
        return hash((tuple(self.starts), tuple(self.ends), tuple(self.seqs)))

    def __repr__(self) -> str:
        return f"Fragments({list(zip(self.starts, self.ends, self.seqs))!r})"

    @property
    def count(self) -> int:
        """Fragment-seq pairs (what the block stores)."""
        return sum(map(len, self.seqs))

    @classmethod
    def build(cls, dels: Iterable[RangeDel]) -> Fragments:
        """Fragment ``dels`` (any order, overlapping, empty ranges ignored)."""
        items = sorted({d for d in dels if d[0] < d[1]})
        if not items:
            return EMPTY
        bounds = sorted({b for s, e, _ in items for b in (s, e)})
        # Sweep the boundaries; ``active`` holds the tombstones covering the current piece.
        starts: list[bytes] = []
        ends: list[bytes] = []
        seqs: list[tuple[int, ...]] = []
        active: list[RangeDel] = []
        i = 0
        for lo, hi in pairwise(bounds):
            active = [d for d in active if d[1] > lo]
            while i < len(items) and items[i][0] <= lo:
                if items[i][1] > lo:
                    active.append(items[i])
                i += 1
            if active:
                ss = tuple(sorted({d[2] for d in active}, reverse=True))
                if ends and ends[-1] == lo and seqs[-1] == ss:
                    ends[-1] = hi  # the same tombstones: extend the previous fragment
                else:
                    starts.append(lo)
                    ends.append(hi)
                    seqs.append(ss)
        return cls(starts, ends, seqs)

    def tombstones(self) -> Iterator[RangeDel]:
        """Every ``(start, end, seq)`` piece (one per fragment and seq)."""
        for s, e, ss in zip(self.starts, self.ends, self.seqs):
            for q in ss:
                yield s, e, q

    def covering(self, key: bytes, seq: int | None = None) -> int:
        """The newest seq (at most ``seq``) of a tombstone covering ``key``; 0 if none."""
        i = bisect_right(self.starts, key) - 1
        if i < 0 or key >= self.ends[i]:
            return 0
        if seq is None:
            return self.tops[i]
        for q in self.seqs[i]:
            if q <= seq:
                return q
        return 0

    def clip(self, lo: bytes | None, hi: bytes | None) -> Fragments:
        """The fragments cut to ``[lo, hi)`` (None: unbounded)."""
        out_s: list[bytes] = []
        out_e: list[bytes] = []
        out_q: list[tuple[int, ...]] = []
        for s, e, ss in zip(self.starts, self.ends, self.seqs):
            if lo is not None and e <= lo:
                continue
            if hi is not None and s >= hi:
                break
            s2 = s if lo is None or s >= lo else lo
            e2 = e if hi is None or e <= hi else hi
            if s2 < e2:
                out_s.append(s2)
                out_e.append(e2)
                out_q.append(ss)
        return Fragments(out_s, out_e, out_q) if out_s else EMPTY

    def at(self, seq: int | None) -> Fragments:
        """Only the newest seq visible at ``seq`` per fragment (what a read needs)."""
        if seq is None:
            return Fragments(self.starts, self.ends, [(t,) for t in self.tops])
        s_: list[bytes] = []
        e_: list[bytes] = []
        q_: list[tuple[int, ...]] = []
        for s, e, ss in zip(self.starts, self.ends, self.seqs):
            for q in ss:
                if q <= seq:
                    s_.append(s)
                    e_.append(e)
                    q_.append((q,))
                    break
        return Fragments(s_, e_, q_)

    def keep(self, pred: Sequence[int]) -> Fragments:
        """Fragments whose seqs are filtered to those in ``pred`` (a set-like)."""
        return Fragments.build(d for d in self.tombstones() if d[2] in pred)


EMPTY = Fragments([], [], [])


def encode_range_dels(frags: Fragments) -> bytes:
    """The range-del block payload of ``frags`` (non-empty)."""
    n = len(frags)
    keys = [k for pair in zip(frags.starts, frags.ends) for k in pair]
    key_off = array("I", accumulate(map(len, keys), initial=0))
    seq_off = array("I", accumulate(map(len, frags.seqs), initial=0))
    flat = array("Q", [q for ss in frags.seqs for q in ss])
    return b"".join((_U32.pack(n), pack_u32s(key_off), pack_u32s(seq_off), pack_u64s(flat), b"".join(keys)))


def decode_range_dels(payload: bytes) -> Fragments:
    """Inverse of :func:`encode_range_dels`; ``CorruptionError`` on any damage."""
    size = len(payload)
    if size < 4:
        raise CorruptionError("range-del block is truncated")
    (n,) = _U32.unpack_from(payload, 0)
    if n == 0 or 4 + 4 * (3 * n + 2) > size:
        raise CorruptionError(f"range-del block claims {n} fragments in {size} bytes")
    key_off = u32_array(payload, 4, 2 * n + 1, "range-del keys")
    pos = 4 + 4 * (2 * n + 1)
    seq_off = u32_array(payload, pos, n + 1, "range-del seqs")
    pos += 4 * (n + 1)
    m = seq_off[-1]
    check_offsets(seq_off, m, "range-del seqs")
    flat = u64_array(payload, pos, m, "range-del seqs")
    pos += 8 * m
    if pos + key_off[-1] != size:
        raise CorruptionError("range-del key blob length mismatch")
    check_offsets(key_off, key_off[-1], "range-del keys")
    blob = payload[pos:]
    keys = [blob[a:b] for a, b in pairwise(key_off)]
    starts, ends = keys[0::2], keys[1::2]
    seqs: list[tuple[int, ...]] = []
    for a, b in pairwise(seq_off):
        ss = tuple(flat[a:b])
        if not ss or any(x <= y for x, y in pairwise(ss)) or ss[-1] == 0:
            raise CorruptionError("range-del fragment seqs are empty, zero or not descending")
        seqs.append(ss)
    for i in range(n):
        if starts[i] >= ends[i] or (i and ends[i - 1] > starts[i]):
            raise CorruptionError("range-del fragments are empty, overlapping or out of order")
    return Fragments(starts, ends, seqs)


def merge_fragments(parts: Iterable[Fragments]) -> Fragments:
    """One fragment list holding every tombstone of ``parts``."""
    ps = [p for p in parts if p]
    if not ps:
        return EMPTY
    if len(ps) == 1:
        return ps[0]
    return Fragments.build(d for p in ps for d in p.tombstones())

"""Range tombstones on the read path and in the writer's memtable.

``delete_range(start, end)`` is one entry ``(start, seq, KIND_RANGE_DEL, end)``
(``format/range_dels.py``). The memtable keeps them beside its dict
(``Memtable.rdels``); a table SST keeps them fragmented in its range-del block
(``SstReader.range_dels``, and ``SstInfo.range_dels`` counts them so a read opens
only the SSTs that have some). A stored version ``(key, s)`` is hidden when a
tombstone covering ``key`` has a seq ``t`` with ``s < t <= read seq``: so
snapshots, time-travel snapshots and readers of checkpoints need nothing more
than the sequence number they read at.

* A lookup asks every source it visits (memtables, L0 SSTs whose range holds
  the key, the one SST of each run that could hold it) for its newest
  covering tombstone: one binary search per source that has tombstones, however
  many there are.
* A scan merges the fragments of the sources that overlap its range into one
  list (visible at its seq, cut to its range) and walks it beside the rows with a
  cursor: constant work per row.

Nothing here runs when the view has no range tombstones: plain reads pay one
attribute test.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from ..format.range_dels import EMPTY, KIND_RANGE_DEL, Fragments, merge_fragments
from ..format.row import KIND_MERGE, KIND_TOMBSTONE
from ..manifest.model import SstInfo
from .memtable import Entry, Memtable
from .merging import put_entries
from .sstable import Row, TableCache

Probe = Callable[[TableCache, SstInfo, bytes, "int | None", dict[int, tuple[int, int]]], "Entry | None"]


class _View(Protocol):
    """What these functions read of ``reads.ReadView`` (which imports this module)."""

    @property
    def mem(self) -> Memtable: ...

    @property
    def imms(self) -> tuple[Memtable, ...]: ...

    @property
    def l0(self) -> tuple[SstInfo, ...]: ...

    @property
    def runs(self) -> Sequence[Any]: ...

    @property
    def sst_rdels(self) -> bool: ...


def has_range_dels(view: _View) -> bool:
    """Whether any source of ``view`` holds a range tombstone."""
    return bool(view.sst_rdels or view.mem.rdels or any(m.rdels for m in view.imms))


def ranged_lookup(view: _View, tables: TableCache, key: bytes, seq: int | None, probe: Probe) -> Entry | None:
    """``reads.lookup`` for a view with range tombstones: the newest entry of ``key``
    at ``seq``, or a tombstone entry at the covering range tombstone's seq."""
    top = 0  # newest covering range tombstone seen so far
    found: Entry | None = None
    for m in (view.mem, *view.imms):
        if m.rdels:
            top = max(top, m.range_frags().covering(key, seq))
        e = m.get(key, seq)
        if e is not None:
            found = e
            break
    if found is None:
        queries: dict[int, tuple[int, int]] = {}
        for info in view.l0:
            if key < info.first_key or key > info.last_key:
                continue
            if info.range_dels:
                top = max(top, tables.reader(info).range_dels.covering(key, seq))
            found = probe(tables, info, key, seq, queries)
            if found is not None:
                break
        else:
            for run in view.runs:
                fi = run.find(key)
                if fi is None:
                    continue
                if fi.range_dels:
                    top = max(top, tables.reader(fi).range_dels.covering(key, seq))
                found = probe(tables, fi, key, seq, queries)
                if found is not None:
                    break
    if top and (found is None or found[0] < top):
        return (top, KIND_TOMBSTONE, b"")
    return found


def scan_fragments(
    view: _View, tables: TableCache, start: bytes | None, end: bytes | None, seq: int | None
) -> Fragments:
    """The tombstones a scan of ``[start, end)`` at ``seq`` must honour, one list."""
    parts: list[Fragments] = [m.range_frags() for m in (view.mem, *view.imms) if m.rdels]
    for info in view.l0:
        if not info.range_dels:
            continue
        if (end is not None and info.first_key >= end) or (start is not None and info.last_key < start):
            continue
        parts.append(tables.reader(info).range_dels)
    for run in view.runs:
        if run.rdels:
            parts.extend(tables.reader(i).range_dels for i in run.covering(start, end) if i.range_dels)
    if not parts:
        return EMPTY
    return merge_fragments(p.clip(start, end) for p in parts).at(seq)


def drop_covered(rows: Iterable[Row], frags: Fragments, reverse: bool) -> Iterator[Row]:
    """``rows`` (one version per key, in scan order) without those a tombstone of
    ``frags`` (from :func:`scan_fragments`: one seq per fragment) hides."""
    starts, ends, tops = frags.starts, frags.ends, frags.tops
    n = len(starts)
    if reverse:
        i = n - 1
        for row in rows:
            k = row[0]
            while i >= 0 and starts[i] > k:
                i -= 1
            if i >= 0 and k < ends[i] and row[1] < tops[i]:
                continue
            yield row
        return
    i = 0
    for row in rows:
        k = row[0]
        while i < n and ends[i] <= k:
            i += 1
        if i < n and starts[i] <= k and row[1] < tops[i]:
            continue
        yield row


def split_range_dels(keys: list[bytes], ents: list[Entry]) -> tuple[list[bytes], list[Entry], list[Entry]]:
    """A batch's point entries apart from its range tombstones ``(seq, kind, end)``
    (key lists stay aligned with ``ents``)."""
    pk: list[bytes] = []
    pe: list[Entry] = []
    rd: list[Entry] = []
    out_k: list[bytes] = []
    for k, e in zip(keys, ents):
        if e[1] == KIND_RANGE_DEL:
            out_k.append(k)
            rd.append(e)
        else:
            pk.append(k)
            pe.append(e)
    keys[:] = out_k  # the range tombstones' start keys, aligned with ``rd``
    return pk, pe, rd


def apply_to_memtable(mem: Memtable, keys: list[bytes], ents: list[Entry]) -> None:
    """Put a batch that may hold range tombstones into ``mem`` (WAL replay, writers).

    The tombstones go first: a batch's point writes after its range deletes stand
    (``WriteBatch.delete_range``), and a merge among them stacks onto the tombstone,
    not onto the older entry it deletes (``merging.put_entry``)."""
    starts = list(keys)
    pk, pe, rd = split_range_dels(starts, ents)
    for s, (q, _kind, end) in zip(starts, rd):
        mem.add_range_del(s, end, q)
    if pk:
        if any(e[1] == KIND_MERGE for e in pe):
            put_entries(mem, pk, pe)
        else:
            mem.put_many(pk, pe)


def covering_seq(view: _View, tables: TableCache, key: bytes, seq: int | None) -> int:
    """The newest seq (at most ``seq``) of a range tombstone of ``view`` covering ``key``; 0 if none."""
    top = 0
    for m in (view.mem, *view.imms):
        if m.rdels:
            top = max(top, m.range_frags().covering(key, seq))
    for info in view.l0:
        if info.range_dels and info.first_key <= key <= info.last_key:
            top = max(top, tables.reader(info).range_dels.covering(key, seq))
    for run in view.runs:
        if run.rdels:
            fi = run.find(key)
            if fi is not None and fi.range_dels:
                top = max(top, tables.reader(fi).range_dels.covering(key, seq))
    return top


def batch_ranges(
    keys: list[bytes], kinds: list[int], payloads: list[bytes]
) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """A batch's point keys and its range tombstones' ``(start, end)`` (the conflict log's view)."""
    points: list[bytes] = []
    ranges: list[tuple[bytes, bytes]] = []
    for k, t, p in zip(keys, kinds, payloads):
        if t == KIND_RANGE_DEL:
            ranges.append((k, p))
        else:
            points.append(k)
    return points, ranges


def drop_covered_chunk(
    keys: Sequence[bytes], seqs: Any, kinds: bytes, payloads: Sequence[bytes], frags: Fragments
) -> tuple[Sequence[bytes], Any, bytes, Sequence[bytes]]:
    """One block's rows (key order, one version per key) without those ``frags`` (one seq
    per fragment) hides: two bisects per fragment over the block, a row test only inside
    a fragment, so rows between tombstones keep the block-at-a-time path."""
    if not keys:
        return keys, seqs, kinds, payloads
    starts, ends, tops = frags.starts, frags.ends, frags.tops
    i = max(0, bisect_right(starts, keys[0]) - 1)
    last = keys[-1]
    hidden: list[int] = []
    while i < len(starts) and starts[i] <= last:
        lo, hi = bisect_left(keys, starts[i]), bisect_left(keys, ends[i])
        t = tops[i]
        hidden.extend(j for j in range(lo, hi) if seqs[j] < t)
        i += 1
    if not hidden:
        return keys, seqs, kinds, payloads
    gone = set(hidden)
    keep = [j for j in range(len(keys)) if j not in gone]
    return (
        [keys[j] for j in keep],
        array("Q", [seqs[j] for j in keep]),
        bytes(kinds[j] for j in keep),
        [payloads[j] for j in keep],
    )

"""Folding over objects in sequence order, straight from the journal (Leveled's ``sqn_order``).

The journal files of a view's manifest hold every write up to its
``last_l0_seq`` in sequence order (the manifest lists them by sequence);
newer writes are in the view's memtables. Each journal entry of the data tree
is checked against the view: it is yielded only if it is the key's current,
live version at the snapshot's sequence number (a write of a key twice in
one batch yields the later one). Values come from the journal objects
themselves, one whole-object GET each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ..engine.reads import ReadView, Visibility, lookup
from ..engine.sstable import TableCache
from ..errors import CorruptionError
from ..format import paths
from ..format.block import Block
from ..format.row import FLAG_INDEX_TREE, KIND_VALUE, TYPE_MASK, decode_payload
from ..format.sst import decode_data_block, decode_meta
from ..store.base import ObjectStore


def journal_blocks(data: bytes, path: str) -> Iterator[tuple[int, int, Block]]:
    """``(offset, length, Block)`` of every data block of a journal object."""
    if not data:
        return
    try:
        meta = decode_meta(data, len(data))
        offs = meta.index.offsets
        blocks = [
            (offs[i], offs[i + 1] - offs[i], decode_data_block(data[offs[i] : offs[i + 1]]))
            for i in range(len(meta.index))
        ]
    except CorruptionError as exc:
        raise exc.with_path(path) from exc
    yield from blocks


def last_of_batch(keys: Sequence[bytes], seqs: Sequence[int]) -> list[bool]:
    """For each entry of a block: False if a later entry has the same key and seq."""
    keep = [True] * len(keys)
    seen: set[tuple[bytes, int]] = set()
    for i in range(len(keys) - 1, -1, -1):
        ks = (keys[i], seqs[i])
        if ks in seen:
            keep[i] = False
        else:
            seen.add(ks)
    return keep


def fold_sequence_order(
    view: ReadView,
    seq: int,
    tables: TableCache,
    vis: Visibility,
    store_for: Callable[[int], ObjectStore],
    start: bytes | None,
    end: bytes | None,
) -> Iterator[tuple[int, bytes, bytes]]:
    """``(seq, key, value)`` of the current entries, in sequence order (module docstring)."""
    m = view.manifest

    def current(key: bytes, s: int) -> bool:
        e = lookup(view, tables, key, seq)
        return e is not None and e[0] == s and vis.alive(e[1], e[2])

    for jf in m.journal:
        if jf.min_seq > seq:
            break
        path = paths.journal_object_path(jf.id)
        data = store_for(jf.db).get(path)
        for _off, _len, b in journal_blocks(data, path):
            last = last_of_batch(b.keys, b.seqs)
            keys, seqs, kinds = b.keys, b.seqs, b.kinds
            for i in range(len(b)):
                kind = kinds[i]
                if kind & FLAG_INDEX_TREE or kind & TYPE_MASK != KIND_VALUE or not last[i]:
                    continue
                k = keys[i]
                s = seqs[i]
                if s > seq or (start is not None and k < start) or (end is not None and k >= end):
                    continue
                if current(k, s):
                    try:
                        value = decode_payload(kind, b.payload(i))[0]
                    except CorruptionError as exc:
                        raise exc.with_path(path) from exc
                    yield s, k, value
    rows = [
        (s, k, kind, payload)
        for mem in (view.mem, *view.imms)
        for k, s, kind, payload in mem.items_in(start, end, seq)
        if s > m.last_l0_seq
    ]
    rows.sort(key=lambda r: r[0])
    for s, k, kind, payload in rows:
        if current(k, s):
            v = vis.value(k, kind, payload)
            if v is not None:
                yield s, k, v


__all__ = ["fold_sequence_order", "journal_blocks", "last_of_batch"]

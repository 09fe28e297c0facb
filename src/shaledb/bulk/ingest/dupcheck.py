"""Duplicate keys across an ingest's parts, found once whatever the partitioning.

Each part's writer refuses a key given twice within its own rows. Parts whose
key ranges overlap (input that was not range-partitioned) can still share a
key, and which copy won would then depend on partition numbers: the commit
instead merges the keys of every group of overlapping parts, reading them
back from the parts' SSTs one block at a time, and refuses the ingest naming
the key. Range-partitioned parts (the store exchange, ``repartitionByRange``)
are disjoint and cost nothing here.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from ...engine.cache import LruCache
from ...engine.sstable import SstReader, read_sst_meta
from ...errors import InvalidArgument
from ...store.base import ObjectStore
from .model import IngestPart


def overlapping_groups(parts: Sequence[IngestPart]) -> list[list[IngestPart]]:
    """The groups (two parts or more) of parts whose key ranges overlap, transitively."""
    live = sorted((p for p in parts if p.ssts), key=lambda p: (p.ssts[0].first_key, p.partition))
    groups: list[list[IngestPart]] = []
    end = b""
    for p in live:
        if groups and p.ssts[0].first_key <= end:
            groups[-1].append(p)
            end = max(end, p.ssts[-1].last_key)
        else:
            groups.append([p])
            end = p.ssts[-1].last_key
    return [g for g in groups if len(g) > 1]


def _keys(store: ObjectStore, part: IngestPart, cache: LruCache) -> Iterator[tuple[bytes, int]]:
    for info in part.ssts:
        reader = SstReader(info, store, read_sst_meta(store, info), cache, 4)
        for keys, *_ in reader.chunks(None, None):
            for k in keys:
                yield k, part.partition


def check_cross_duplicates(store: ObjectStore, parts: Sequence[IngestPart], on_duplicate: str) -> None:
    """Raise InvalidArgument naming a key that two parts both hold (nothing is committed)."""
    cache = LruCache(16 << 20)
    for group in overlapping_groups(parts):
        prev: tuple[bytes, int] | None = None
        for item in heapq.merge(*(_keys(store, p, cache) for p in group)):
            if prev is not None and item[0] == prev[0]:
                how = (
                    "use on_duplicate='last' or 'first' with order_by to keep one"
                    if on_duplicate == "error"
                    else f"on_duplicate={on_duplicate!r} is decided by order_by within a partition, so "
                    "every copy of a key must reach the same one: use shaledb.spark.ingest or "
                    "repartitionByRange(key)"
                )
                raise InvalidArgument(
                    f"key {item[0]!r:.80} appears more than once in this ingest (in partitions {prev[1]} and "
                    f"{item[1]}); nothing was committed; {how}"
                )
            prev = item


__all__ = ["check_cross_duplicates", "overlapping_groups"]

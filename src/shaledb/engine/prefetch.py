"""Warming the block cache for a batch of point lookups in a few parallel reads.

``get_many`` of a thousand keys that miss the cache used to read one block per
key, up to ``workers`` at a time: on S3 that is dozens of round trips. Here
the keys are first grouped by the SST (and block) each lookup will read: the
tables' metadata is opened in parallel, each key that passes the table's
filter names its block, and neighbouring blocks of one SST are fetched as one
ranged GET (a *span*, at most ``max_span_bytes`` and with gaps of at most
``max_gap_bytes``), all spans in parallel. The lookups that follow then find
their blocks cached. It only reads ahead: a block that fails to decode here
is left out, and the lookup reads it itself (and reports any damage).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

from ..errors import CorruptionError
from ..format.sst import decode_data_block
from ..manifest.model import SstInfo
from .sstable import SstReader, TableCache

if TYPE_CHECKING:
    from .reads import ReadView

T = TypeVar("T")
R = TypeVar("R")

MAX_SPAN_BYTES = 1 << 20
"""Largest ranged GET of neighbouring blocks (one S3 request, about one round trip)."""
MAX_GAP_BYTES = 64 << 10
"""Blocks this close are read in one GET, the bytes between them read and dropped."""
SAMPLE_KEYS = 16
"""Keys looked at first: if all their blocks are cached, nothing is prefetched."""


def candidate_ssts(view: ReadView, keys: Iterable[bytes]) -> dict[str, tuple[SstInfo, list[bytes]]]:
    """For each SST a lookup of some key may read: ``(info, keys)``. Keys held by a
    memtable are left out (their lookups stop there)."""
    mems = (view.mem, *view.imms)
    l0 = view.l0
    runs = view.runs
    out: dict[str, tuple[SstInfo, list[bytes]]] = {}
    for k in keys:
        if any(m.get(k) is not None for m in mems):
            continue
        for info in l0:
            if info.first_key <= k <= info.last_key:
                out.setdefault(info.id, (info, []))[1].append(k)
        for run in runs:
            found = run.find(k)
            if found is not None:
                out.setdefault(found.id, (found, []))[1].append(k)
    return out


def _any_missing(view: ReadView, tables: TableCache, sample: list[bytes]) -> bool:
    """True if a lookup of some key of ``sample`` would read a block that is not cached
    (or open an SST that is not)."""
    for info, ks in candidate_ssts(view, sample).values():
        if tables.cache.get((info.id, "meta")) is None:
            return True
        if _blocks(tables.reader(info), ks):
            return True
    return False


def _blocks(r: SstReader, keys: list[bytes]) -> list[int]:
    """The blocks of ``r`` the lookups of ``keys`` read first, not cached yet."""
    idx = r.index.keys
    n = len(idx)
    bloom = r.bloom
    wanted: set[int] = set()
    for k in keys:
        if bloom is not None and not bloom.may_contain(*bloom.query(k)):
            continue
        i = bisect_left(idx, k)
        if i < n:
            wanted.add(i)
    return [i for i in sorted(wanted) if r.cache.get((r.id, i)) is None]


def spans(
    r: SstReader, blocks: list[int], max_span_bytes: int = MAX_SPAN_BYTES, max_gap_bytes: int = MAX_GAP_BYTES
) -> Iterator[tuple[int, int, list[int]]]:
    """``(start, end, blocks)``: the ranged GETs that read ``blocks`` (sorted) of ``r``."""
    cur: list[int] = []
    start = end = 0
    for i in blocks:
        s, e = r.index.block_span(i)
        if cur and (s - end > max_gap_bytes or e - start > max_span_bytes):
            yield start, end, cur
            cur = []
        if not cur:
            start = s
        cur.append(i)
        end = e
    if cur:
        yield start, end, cur


def _fetch_span(r: SstReader, start: int, end: int, blocks: list[int]) -> None:
    data = r.store.get_range(r.path, start, end)
    for i in blocks:
        s, e = r.index.block_span(i)
        try:
            b = decode_data_block(data[s - start : e - start])
        except CorruptionError:
            continue  # the lookup reads the block again and reports the damage
        r.cache.put((r.id, i), b, b.nbytes)


def prefetch_points(view: ReadView, tables: TableCache, keys: list[bytes], pool: ThreadPoolExecutor) -> int:
    """Read into the cache, in parallel, the blocks the lookups of ``keys`` will read;
    returns how many ranged GETs it made. Nothing is read when the blocks would not
    fit in half the cache (the lookups would evict each other's blocks)."""
    step = max(1, len(keys) // SAMPLE_KEYS)
    if not _any_missing(view, tables, keys[::step]):
        return 0  # a warm cache: the lookups need no store reads, so spend no time here
    groups = candidate_ssts(view, keys)
    if not groups:
        return 0
    infos = [info for info, _ in groups.values()]
    readers = _parallel(pool, tables.reader, infos)
    budget = tables.cache.capacity_bytes // 2
    todo: list[tuple[SstReader, int, int, list[int]]] = []
    total = 0
    for r, (_, ks) in zip(readers, groups.values()):
        for start, end, blocks in spans(r, _blocks(r, ks)):
            todo.append((r, start, end, blocks))
            total += end - start
    if not todo or total > budget:
        return 0
    _parallel(pool, lambda t: _fetch_span(*t), todo)
    return len(todo)


def _parallel(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: list[T]) -> list[R]:
    futures = [pool.submit(fn, x) for x in items]
    wait(futures)  # all of them, even after a failure: none may outlive the caller's pin
    return [f.result() for f in futures]

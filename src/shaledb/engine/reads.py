"""The read path: point lookups and merged scans over one consistent view.

A :class:`ReadView` is an immutable picture of what a reader may see: the
mutable memtable, the frozen memtables (newest first) and one manifest
version's L0 SSTs and sorted runs. Writers swap in a new view; a read takes
the current one once and never locks.

Sources are searched newest first: memtables, L0 (newest first), sorted runs
(newest first). A lookup stops at the first version it finds; a scan merges
the sources with ``heapq.merge`` (stable, so on equal keys the newer source
wins) and keeps the first version of each key. ``seq`` caps visibility for
snapshots. A lookup hashes the key once per filter version it meets (flushed
and compacted SSTs: BLAKE2b; bulk-loaded ones: wordmix) and reuses the hash and
probe mask for every SST's bloom filter.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from itertools import chain
from operator import itemgetter
from typing import Any, Generic, NamedTuple, TypeVar

from ..errors import ClosedError, CorruptionError
from ..format.range_dels import Fragments
from ..format.row import (
    EXTRA_FLAGS,
    FLAG_EXPIRY,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    TYPE_MASK,
    decode_extras,
)
from ..manifest.model import Manifest, SortedRun, SstInfo, Tree
from ..numbers import MAX_INT, check_int
from ..store.parallel import SharedPool
from .history import has_versions
from .memtable import Memtable
from .merging import Folder, complete, fold_payload
from .prefetch import prefetch_points
from .range_tombstones import (
    covering_seq,
    drop_covered,
    drop_covered_chunk,
    has_range_dels,
    ranged_lookup,
    scan_fragments,
)
from .scan_ahead import SCAN_AHEAD_POOL
from .sstable import Row, TableCache

PointerResolver = Callable[[bytes, bytes], bytes]
"""Resolves a value-journal pointer payload (key, pointer) to the value."""


T = TypeVar("T")


class Release:
    """Calls ``fn`` once: when called, or when the last reference goes (``__del__``).

    A scan's generator holds one in its frame, so dropping the generator -- even
    one that never started, whose ``finally`` never runs -- releases the pin;
    cheaper per scan than ``weakref.finalize`` (issue 30: a 100-key scan's fixed
    cost). ``list.pop`` makes "once" hold across threads.
    """

    __slots__ = ("_fns",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fns = [fn]

    def __call__(self) -> None:
        try:
            fn = self._fns.pop()
        except IndexError:
            return
        fn()

    def __del__(self) -> None:
        self()


class Scan(Generic[T]):
    """An iterator (of ``(key, value)`` for scans; heads, keys or objects for folds)
    that pins its snapshot until exhausted or closed.

    ``iter(scan)`` hands out the underlying iterator itself, so a ``for``
    loop pays no wrapper call per row; the pin is released when the rows run
    out, on ``close()`` / ``with``, or when the generator is garbage collected
    (even if it never started). Without ``release`` (a snapshot's scan: the
    snapshot holds the pin) the rows are handed out as they are.

    :meth:`of_chunks` takes the rows a list at a time (a block's worth, or a
    short scan's whole result, from ``scan_chunks``) and hands them out through
    ``itertools.chain``: no Python frame runs per row, only per chunk.
    """

    __slots__ = ("_gen", "_release", "_src")

    def __init__(
        self,
        it: Iterator[T],
        release: Callable[[], None] | None = None,
        ended: Callable[[], str | None] | None = None,
    ) -> None:
        if ended is not None:
            it = while_open(it, ended)
        if release is None:
            self._release: Release | None = None
            self._gen: Iterator[T] = it
            self._src: Iterator[Any] = it
            return
        self._release = rel = Release(release)
        self._gen = self._src = _released_after(it, rel)

    @classmethod
    def of_chunks(
        cls,
        chunks: Iterator[Iterable[T]],
        release: Callable[[], None] | None = None,
        ended: Callable[[], str | None] | None = None,
    ) -> Scan[T]:
        """The rows of ``chunks`` (lists, or row iterators), pinned as :class:`Scan` pins.

        Closing the scan mid-chunk empties the chunk being handed out (a list
        this scan built) or closes it (an iterator), so no row comes after ``close()``.
        ``ended()`` is asked before each chunk is read: a message (the scan's handle
        was closed) stops the scan with ``ClosedError``.
        """
        self = cls.__new__(cls)
        if release is None:
            self._release = None
            self._src = src = _closing_chunks(chunks, None, ended)
        else:
            self._release = rel = Release(release)
            self._src = src = _closing_chunks(chunks, rel, ended)
        self._gen = chain.from_iterable(src)
        return self

    def __iter__(self) -> Iterator[T]:
        return self._gen

    def __repr__(self) -> str:
        rel = self._release
        return "Scan(done: its view released)" if rel is not None and not rel._fns else "Scan(open)"

    def __next__(self) -> T:
        return next(self._gen)

    def close(self) -> None:
        close = getattr(self._src, "close", None)
        if close is not None:
            close()
        if self._release is not None:
            self._release()

    def __enter__(self) -> Scan[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _released_after(it: Iterator[T], release: Release) -> Generator[T, None, None]:
    try:
        yield from it
    finally:
        release()


def while_open(items: Iterator[T], ended: Callable[[], str | None]) -> Generator[T, None, None]:
    """``items``, asking ``ended()`` before each is read: a message (the scan's handle was
    closed) stops them with ``ClosedError`` instead of reading what the close released.
    ``items`` is closed at the end, at once (its read-ahead GETs stop), not when collected."""
    items = iter(items)
    pull = items.__next__
    try:
        while True:
            why = ended()
            if why is not None:
                raise ClosedError(f"{why}: a scan cannot go on after its handle is closed")
            try:
                item = pull()
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def _closing_chunks(
    chunks: Iterator[Iterable[T]], release: Release | None, ended: Callable[[], str | None] | None = None
) -> Generator[Iterable[T], None, None]:
    """``chunks`` one by one (each after ``ended()`` says the handle is open: :func:`while_open`);
    at the end, on ``close()`` or when collected: the chunk being read is emptied or closed,
    then ``release`` called."""
    cur: Iterable[T] = ()
    src = chunks if ended is None else while_open(chunks, ended)
    try:
        for cur in src:
            yield cur
    finally:
        close_src = getattr(src, "close", None)
        if close_src is not None:
            close_src()
        if type(cur) is list:
            cur.clear()
        else:
            close = getattr(cur, "close", None)
            if close is not None:
                close()
        if release is not None:
            release()


class RunIndex:
    """A sorted run with its SSTs' last keys ready for bisection."""

    __slots__ = ("last_keys", "rdels", "run", "ssts")

    def __init__(self, run: SortedRun) -> None:
        self.run = run
        self.ssts = run.ssts
        self.last_keys = [s.last_key for s in run.ssts]
        self.rdels = any(s.range_dels for s in run.ssts)

    def find(self, key: bytes) -> SstInfo | None:
        i = bisect_left(self.last_keys, key)
        if i < len(self.ssts) and self.ssts[i].first_key <= key:
            return self.ssts[i]
        return None

    def covering(self, start: bytes | None, end: bytes | None) -> list[SstInfo]:
        lo = 0 if start is None else bisect_left(self.last_keys, start)
        out = []
        for s in self.ssts[lo:]:
            if end is not None and s.first_key >= end:
                break
            out.append(s)
        return out


class ReadView:
    """Memtables plus one manifest version (see module docstring)."""

    __slots__ = ("imms", "l0", "manifest", "mem", "runs", "sst_rdels", "tree_name")

    def __init__(
        self,
        mem: Memtable,
        imms: tuple[Memtable, ...],
        manifest: Manifest,
        tree: str = "data",
        runs: tuple[RunIndex, ...] | None = None,
    ) -> None:
        self.mem = mem
        self.imms = imms
        self.manifest = manifest
        self.tree_name = tree
        t: Tree = manifest.tree(tree)
        self.l0 = t.l0
        self.runs = runs if runs is not None else tuple(RunIndex(r) for r in t.runs)
        self.sst_rdels = any(s.range_dels for s in self.l0) or any(r.rdels for r in self.runs)
        """Whether an SST of the view holds range tombstones (engine/range_tombstones.py)."""

    def memtables(self) -> tuple[Memtable, ...]:
        return (self.mem, *self.imms)


def check_limit(limit: object) -> None:
    """A scan or query limit is None or a non-negative int (bool is not a count)."""
    if limit is not None and not (type(limit) is int and 0 <= limit <= MAX_INT):
        check_int("limit", limit, minimum=0)  # (raises: it builds its message up front, per call)


class Visibility:
    """Turns stored entries into user values: tombstones, expiry, pointers, merges
    (``folder``: the handle's merge operator, ``shaledb.engine.merging``)."""

    __slots__ = ("folder", "now_ms", "resolve")

    def __init__(
        self, now_ms: Callable[[], int], resolve: PointerResolver | None, folder: Folder | None = None
    ) -> None:
        self.now_ms = now_ms
        self.resolve = resolve
        self.folder = folder if folder is not None else Folder(None, None)

    def value(self, key: bytes, kind: int, payload: bytes) -> bytes | None:
        """The value, or None when the entry hides the key (tombstone, expired)."""
        if kind == 0:
            return payload
        t = kind & TYPE_MASK
        if t == KIND_TOMBSTONE:
            return None
        if t == KIND_MERGE:  # complete (``lookup``) or the oldest version there is
            return fold_payload(self.folder, key, payload, self.value)
        if kind & EXTRA_FLAGS:
            body, _meta, expires, _terms = decode_extras(kind, payload)
            if expires is not None and expires <= self.now_ms():
                return None
        else:
            body = payload
        if t == KIND_POINTER:
            if self.resolve is None:
                raise CorruptionError("entry points into a value journal but none is configured")
            return self.resolve(key, body)
        return body

    def alive(self, kind: int, payload: bytes) -> bool:
        """False for tombstones and expired entries (no journal read)."""
        if kind & TYPE_MASK == KIND_TOMBSTONE:
            return False
        if kind & FLAG_EXPIRY:
            expires = decode_extras(kind, payload)[2]
            return expires is None or expires > self.now_ms()
        return True


class ReadAt(NamedTuple):
    """What a read reads: one view through a table cache and visibility rules, at
    ``seq`` (None: the newest version). A handle builds one per read; the read
    functions below take it instead of four arguments each."""

    view: ReadView
    tables: TableCache
    vis: Visibility
    seq: int | None


class Span(NamedTuple):
    """Which keys a range read visits: ``[start, end)`` (None: unbounded), in
    ``reverse`` order or not, at most ``limit`` of them (None: all)."""

    start: bytes | None
    end: bytes | None
    reverse: bool = False
    limit: int | None = None


def lookup(view: ReadView, tables: TableCache, key: bytes, seq: int | None) -> tuple[int, int, bytes] | None:
    """The newest stored entry ``(seq, kind, payload)`` for ``key``, or None. A merge
    entry comes back self-contained: with every operand and the base below it (a range
    tombstone between a merge and older versions is its base: ``existing`` None)."""
    if view.sst_rdels or view.mem.rdels or (view.imms and has_range_dels(view)):
        found = ranged_lookup(view, tables, key, seq, _probe)
        if found is None or found[1] != KIND_MERGE:
            return found
        floor = covering_seq(view, tables, key, seq)
        if floor > found[0]:
            return (floor, KIND_TOMBSTONE, b"")
        return complete(view.memtables(), view.l0, view.runs, tables, key, seq, found, floor)
    # The hot path of every get: calls are the cost here, so the memtable's dict, the
    # pinned readers and the runs' bisection are used in place (Memtable.get,
    # TableCache.reader, RunIndex.find say the same thing at length).
    mem = view.mem
    e = mem.d.get(key)
    if e is not None and seq is not None and e[0] > seq:
        e = mem.get(key, seq)
    if e is not None:
        return e if e[1] != KIND_MERGE else _complete(view, tables, key, seq, e)
    for imm in view.imms:
        e = imm.get(key, seq)
        if e is not None:
            return e if e[1] != KIND_MERGE else _complete(view, tables, key, seq, e)
    queries: dict[int, tuple[int, int]] = {}  # the key's (hash, probe mask) per kind of filter
    pinned = tables.pinned
    for info in view.l0:
        if key < info.first_key or key > info.last_key:
            continue
        r = pinned.get(info.id) or tables.reader(info)
        found = r.get(key, seq, queries)
        if found is not None:
            return found if found[1] != KIND_MERGE else _complete(view, tables, key, seq, found)
    for run in view.runs:
        ssts = run.ssts
        i = bisect_left(run.last_keys, key)
        if i == len(ssts):
            continue
        info = ssts[i]
        if info.first_key > key:
            continue
        r = pinned.get(info.id) or tables.reader(info)
        found = r.get(key, seq, queries)
        if found is not None:
            return found if found[1] != KIND_MERGE else _complete(view, tables, key, seq, found)
    return None


def _complete(
    view: ReadView, tables: TableCache, key: bytes, seq: int | None, e: tuple[int, int, bytes]
) -> tuple[int, int, bytes]:
    return complete(view.memtables(), view.l0, view.runs, tables, key, seq, e)


GET_MANY_THREADS = 16
"""Threads of the process-wide pool behind ``get_many`` (shared by every database)."""

_READ_POOL = SharedPool(GET_MANY_THREADS, "shaledb-get")


def read_pool() -> AbstractContextManager[ThreadPoolExecutor]:
    """The pool behind ``get_many`` and the index writes' prefetch (fork-safe), leased:
    ``with read_pool() as pool`` submits to it (:meth:`SharedPool.lease`)."""
    return _READ_POOL.lease()


def acquire_pools() -> None:
    """A handle opened: the shared read pools (``get_many``'s, scans' read-ahead) stay
    until it calls :func:`release_pools`."""
    _READ_POOL.acquire()
    SCAN_AHEAD_POOL.acquire()


def release_pools() -> None:
    """A handle closed: when no other is open, the shared read pools' threads end."""
    _READ_POOL.release()
    SCAN_AHEAD_POOL.release()


def get_many(
    view: ReadView, tables: TableCache, vis: Visibility, keys: list[bytes], seq: int | None, workers: int
) -> list[bytes | None]:
    """The values of ``keys`` (checked) in ``view`` at ``seq``, in order.

    On an object store a lookup that misses the block cache waits a round trip
    for each block it reads, so the keys are split into up to ``workers``
    contiguous slices looked up in parallel (obstore releases the GIL while it
    waits). Contiguous, so that neighbouring keys of a sorted batch share one
    thread and its cached blocks. In memory the threads only take turns.
    """

    def run(chunk: list[bytes]) -> list[bytes | None]:
        out: list[bytes | None] = []
        for k in chunk:
            e = lookup(view, tables, k, seq)
            out.append(None if e is None else e[2] if e[1] == 0 else vis.value(k, e[1], e[2]))
        return out

    n = min(workers, len(keys))
    if n <= 1:
        return run(keys)
    step = -(-len(keys) // n)
    with read_pool() as pool:
        prefetch_points(view, tables, keys, pool)  # the blocks the lookups read, in a few parallel GETs
        futures = [pool.submit(run, keys[i : i + step]) for i in range(0, len(keys), step)]
        wait(futures)  # all of them, even after a failure: none may outlive the caller's pin
    return [v for f in futures for v in f.result()]


def _probe(
    tables: TableCache, info: SstInfo, key: bytes, seq: int | None, queries: dict[int, tuple[int, int]]
) -> tuple[int, int, bytes] | None:
    """``key``'s newest entry in one SST, unless its filter rules the key out.

    ``queries`` caches the key's hash and probe mask per kind of filter
    (``BloomFilter.mask_key``) across the SSTs of one lookup.
    """
    return tables.reader(info).get(key, seq, queries)


def _lazy_rows(
    tables: TableCache, info: SstInfo, start: bytes | None, end: bytes | None, reverse: bool
) -> Iterator[Row]:
    r = tables.reader(info)
    if reverse:
        yield from r.rows_reversed(start, end)
    else:
        yield from r.rows(start, end)


def _run_rows(
    tables: TableCache, run: RunIndex, start: bytes | None, end: bytes | None, reverse: bool
) -> Iterator[Row]:
    ssts = run.covering(start, end)
    if reverse:
        ssts.reverse()
    for info in ssts:
        yield from _lazy_rows(tables, info, start, end, reverse)


def sources(
    view: ReadView, tables: TableCache, start: bytes | None, end: bytes | None, seq: int | None, reverse: bool
) -> list[Iterator[Row]]:
    """One row iterator per source overlapping ``[start, end)``, newest first."""
    out: list[Iterator[Row]] = [m.items_in(start, end, seq, reverse) for m in (view.mem, *view.imms) if m.d]
    for info in view.l0:
        if (end is not None and info.first_key >= end) or (start is not None and info.last_key < start):
            continue
        out.append(_lazy_rows(tables, info, start, end, reverse))
    for run in view.runs:
        if run.covering(start, end):
            out.append(_run_rows(tables, run, start, end, reverse))
    return out


def merge_rows(srcs: list[Iterator[Row]], reverse: bool) -> Iterable[Row]:
    if len(srcs) == 1:
        return srcs[0]
    return heapq.merge(*srcs, key=itemgetter(0), reverse=reverse)


def visible_rows(
    view: ReadView, tables: TableCache, start: bytes | None, end: bytes | None, seq: int | None, reverse: bool
) -> Iterator[Row]:
    """The newest version of each key in ``[start, end)`` at ``seq`` (tombstones
    included), without the keys a range tombstone deletes."""
    rows = newest_rows(merge_rows(sources(view, tables, start, end, seq, reverse), reverse), seq)
    if has_range_dels(view):
        frags = scan_fragments(view, tables, start, end, seq)
        if frags:
            return drop_covered(rows, frags, reverse)
    return rows


def visible(at: ReadAt, span: Span) -> Iterator[Row]:
    """:func:`visible_rows` of a handle's read (``span``'s limit is the caller's to apply)."""
    return visible_rows(at.view, at.tables, span.start, span.end, at.seq, span.reverse)


def newest_rows(rows: Iterable[Row], seq: int | None) -> Iterator[Row]:
    """The first (newest) version of each key visible at ``seq``, tombstones included."""
    prev = None
    if seq is None:
        for row in rows:
            k = row[0]
            if k != prev:
                prev = k
                yield row
        return
    for row in rows:
        k = row[0]
        if k == prev or row[1] > seq:
            continue
        prev = k
        yield row


def scan_items(at: ReadAt, span: Span) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` pairs in ``span`` visible in ``at``."""
    return chain.from_iterable(scan_chunks(at, span))


def scan_chunks(at: ReadAt, span: Span) -> Iterator[Iterable[tuple[bytes, bytes]]]:
    """:func:`scan_items` in pieces: lists of a block's pairs (one list for a short
    limited scan) when one source holds the span (``_only_ssts``), else one iterator
    of merged pairs (``Scan.of_chunks``)."""
    view, tables, vis, seq = at
    start, end, reverse, limit = span
    if limit is not None and limit <= 0:
        return iter(())
    frags = scan_fragments(view, tables, start, end, seq) if has_range_dels(view) else None
    only = _only_ssts(view, start, end)
    if only is not None:
        return _scan_ssts(tables, vis, only, start, end, seq, reverse, limit, frags or None)
    return iter((_scan_merged(view, tables, vis, start, end, seq, reverse, limit),))


def _scan_merged(
    view: ReadView,
    tables: TableCache,
    vis: Visibility,
    start: bytes | None,
    end: bytes | None,
    seq: int | None,
    reverse: bool,
    limit: int | None,
) -> Iterator[tuple[bytes, bytes]]:
    rows = visible_rows(view, tables, start, end, seq, reverse)
    n = 0
    value = vis.value
    for k, _s, kind, payload in rows:
        if kind == 0:
            yield k, payload
        else:
            if kind == KIND_MERGE:  # the operands below this one are in other rows: look up
                e = lookup(view, tables, k, seq)
                assert e is not None
                kind, payload = e[1], e[2]
            v = value(k, kind, payload)
            if v is None:
                continue
            yield k, v
        n += 1
        if limit is not None and n >= limit:
            return


def _only_ssts(view: ReadView, start: bytes | None, end: bytes | None) -> list[SstInfo] | None:
    """The SSTs of the one source that holds the range, when the memtables are empty.

    One L0 SST or one sorted run never repeats a key (a memtable flush keeps
    the newest entry per key; compaction and ingest write one version), so
    such a scan needs no merge and no de-duplication: the common case after
    a reopen, a compaction or a bulk load.
    """
    if view.mem.d or (view.imms and any(m.d for m in view.imms)) or has_versions(view.manifest):
        return None  # (a history window: SSTs may hold several versions of a key)
    found: list[SstInfo] | None = None
    for s in view.l0:
        if (end is not None and s.first_key >= end) or (start is not None and s.last_key < start):
            continue
        if found is not None:
            return None
        found = [s]
    for r in view.runs:
        ssts = r.covering(start, end)
        if ssts:
            if found is not None:
                return None
            found = ssts
    return found


ONE_LIST_ROWS = 1024
"""A scan limited to at most this many rows gets them as one list (``_scan_ssts``)."""


def _scan_ssts(
    tables: TableCache,
    vis: Visibility,
    infos: list[SstInfo],
    start: bytes | None,
    end: bytes | None,
    seq: int | None,
    reverse: bool,
    limit: int | None,
    frags: Fragments | None = None,
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Lists of pairs from SSTs of one source, one per block (see ``_only_ssts``); ``frags``:
    range tombstones to honour (``scan_fragments``), applied a fragment at a time.
    Each list is new (``Scan.of_chunks`` empties the one it hands out on close).

    A scan with a small ``limit`` (at most ``ONE_LIST_ROWS``) gets one list of all its
    rows: a 100-key scan meets about four blocks, and each list handed out costs a
    trip through three generators and ``chain``.
    """
    left = limit
    value = vis.value
    one: list[tuple[bytes, bytes]] | None = [] if limit is not None and limit <= ONE_LIST_ROWS else None
    for info in reversed(infos) if reverse else infos:
        r = tables.reader(info)
        capped = seq is not None and info.max_seq > seq
        blocks = r.chunks_reversed(start, end, left) if reverse else r.chunks(start, end, left)
        for keys, seqs, kinds, payloads in blocks:
            if frags is not None:
                keys, seqs, kinds, payloads = drop_covered_chunk(keys, seqs, kinds, payloads, frags)
                if not keys:
                    continue
            if reverse:
                keys, seqs, kinds, payloads = keys[::-1], seqs[::-1], kinds[::-1], payloads[::-1]
            out = [] if one is None else one  # (a short scan's rows all go to ``one``)
            if not capped and kinds.count(0) == len(kinds):
                if left is not None and len(keys) > left:
                    keys, payloads = keys[:left], payloads[:left]
                out += zip(keys, payloads)
                got = len(keys)
            else:
                was = len(out)
                for k, s, kind, p in zip(keys, seqs, kinds, payloads):
                    if capped and s > seq:  # type: ignore[operator]
                        continue
                    v = p if kind == 0 else value(k, kind, p)
                    if v is not None:
                        out.append((k, v))
                got = len(out) - was
                if left is not None and got > left:
                    del out[was + left :]
                    got = left
            if left is not None:
                left -= got
                if left <= 0:
                    yield out
                    return
            if one is None:
                yield out
    if one:
        yield one

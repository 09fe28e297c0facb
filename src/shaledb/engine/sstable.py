"""SST objects in the store: metadata, cached blocks and read-ahead; new objects.

An :class:`SstReader` is opened from one ranged read of the object's tail
(footer, properties, index, filter). Data blocks come through the shared
:class:`~shaledb.engine.cache.LruCache`; a miss fetches a whole read-ahead chunk
(``Settings.sst_read_ahead_bytes``), caches it raw and decodes only the block
asked for, so a cold SST costs a few large GETs instead of one per block.
With a disk cache below the store, a point read's miss keeps the block's whole
disk-cache part the same way (one disk read per part after a restart).
A block that fails its checksum is re-read from the store once (the cached
copy may be the damaged one) before ``CorruptionError`` names the object.

:func:`read_object_meta` is the one tail read every role uses (readers,
compaction, export, journal scoring); :func:`put_new_sst` the one way a new
table SST gets its id (flush, compaction, ingest, journal compaction);
:class:`SstSplitter` the one rule for where a run's SSTs end (compaction
outputs, bulk ingest).
"""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future

from ..errors import AlreadyExists, CorruptionError, ShaleError
from ..format import paths
from ..format.block import Block
from ..format.journal import pointers_into
from ..format.sst import SstBuilder, SstMeta, SstProps, decode_data_block, decode_meta, parse_footer
from ..manifest.model import JournalFile, Manifest, SstInfo
from ..store.base import ObjectStore
from ..store.disk_cache import part_bytes_below
from ..store.parallel import completed, in_background, run_bounded
from .cache import LruCache
from .scan_ahead import ChunkFetches, Cursor, ScanAheadLimits
from .sst_rows import IN_PLACE_READS, block_in_chunk, keys_of, rows_of

log = logging.getLogger(__name__)

TAIL_READ_BYTES = 64 * 1024
PIN_WORKERS = 16
"""Tail reads in flight while :meth:`TableCache.pin` opens a database's SSTs."""

Row = tuple[bytes, int, int, bytes]
Chunk = tuple[Sequence[bytes], "array[int]", bytes, Sequence[bytes]]
"""Columns of consecutive rows of one block: keys, seqs, kinds, payloads."""
StoreResolver = Callable[[int], ObjectStore]
"""Maps ``SstInfo.db`` (0 = this database, i > 0 = an external database) to its store."""


def read_object_meta(store: ObjectStore, path: str, size: int) -> SstMeta:
    """Footer, properties, index and filter of the SST-format object at ``path``
    (one ranged GET of its tail; a second when the metadata is larger)."""
    try:
        tail = store.get_range(path, max(0, size - TAIL_READ_BYTES), size)
        if len(tail) != min(size, TAIL_READ_BYTES):
            raise CorruptionError(f"object is shorter than the {size} bytes the manifest records")
        footer = parse_footer(tail, size)
        if footer.meta_start < size - len(tail):
            tail = store.get_range(path, footer.meta_start, size)
        return decode_meta(tail, size)
    except CorruptionError as exc:
        raise exc.with_path(path) from exc


def read_sst_meta(store: ObjectStore, info: SstInfo) -> SstMeta:
    """:func:`read_object_meta` of a table SST."""
    return read_object_meta(store, paths.sst_path(info.id), info.size)


def _put_new(
    store: ObjectStore,
    data: bytes | bytearray | memoryview,
    path_of: Callable[[str], str],
    new_id: Callable[[], str],
) -> str:
    """Write ``data`` under a fresh id from ``new_id``; the id.

    Ids are ULIDs with 80 random bits, so the create-if-absent write fails only
    on a collision (or a bad RNG): another id is drawn, a few times at most.
    """
    path = ""
    for _ in range(8):
        oid = new_id()
        path = path_of(oid)
        try:
            store.put(path, data, create=True)
        except AlreadyExists:
            continue
        return oid
    raise AlreadyExists(path)


def put_new_sst(
    store: ObjectStore, data: bytes | bytearray | memoryview, props: SstProps, new_id: Callable[[], str]
) -> SstInfo:
    """Write ``data`` as a new table SST under an id from ``new_id`` and describe it."""
    return SstInfo(
        id=_put_new(store, data, paths.sst_path, new_id),
        size=len(data),
        first_key=props.first_key,
        last_key=props.last_key,
        entries=props.entries,
        min_seq=props.min_seq,
        max_seq=props.max_seq,
        range_dels=props.range_dels,
    )


def put_new_journal(
    store: ObjectStore, builder: SstBuilder, new_id: Callable[[], str], values: list[tuple[int, int]]
) -> tuple[JournalFile, list[bytes]]:
    """Finish ``builder`` as a new journal object under an id from ``new_id``: its
    record, and pointers to the values at ``(entry number, value length)`` in ``values``."""
    offsets, ends = builder.block_layout()
    data, props = builder.finish_buffer()
    ref = _put_new(store, data, paths.journal_path, new_id)
    record = JournalFile(ref, len(data), props.entries, props.min_seq, props.max_seq)
    return record, pointers_into(ref, offsets, ends, values, data)


class SstSplitter:
    """Cuts sorted rows into table SSTs of at most ``limit`` estimated bytes.

    An SST takes rows while its estimated size stays within the limit; a row
    larger than the limit gets an SST of its own; with ``keys`` given, one
    key's versions never straddle two SSTs (a reader of a run then finds a key
    in one SST). ``new_builder`` opens an SST, ``emit`` takes a full one.
    """

    def __init__(
        self, limit: int, new_builder: Callable[[], SstBuilder], emit: Callable[[SstBuilder], None]
    ) -> None:
        self.limit = limit
        self.new_builder = new_builder
        self.emit = emit
        self.builder: SstBuilder | None = None

    def place(
        self,
        cum: Sequence[int],
        n: int,
        fill: Callable[[SstBuilder, int, int], None],
        keys: Sequence[bytes] | None = None,
    ) -> None:
        """Place rows ``0..n`` whose running entry sizes are ``cum`` (a list or a
        numpy array; it is only indexed and bisected): ``fill(builder, lo, hi)``
        adds rows ``[lo, hi)`` to the SST being built (one call per SST)."""
        limit = self.limit
        pos = 0
        while pos < n:
            if self.builder is None:
                self.builder = self.new_builder()
            b = self.builder
            base = cum[pos - 1] if pos else 0
            j = bisect_right(cum, base + limit - b.estimated_size, pos)
            if j == pos:
                if b.entries:
                    self.finish()
                    continue
                j = pos + 1  # one row larger than the limit gets an SST of its own
            if keys is not None:
                while j < n and keys[j] == keys[j - 1]:
                    j += 1  # never split one key's versions
            fill(b, pos, j)
            pos = j
            if pos < n or b.estimated_size >= limit:
                self.finish()

    def finish(self) -> None:
        """Emit the SST being built, if it has rows."""
        b = self.builder
        self.builder = None
        if b is not None and b.entries:
            self.emit(b)


class SstReader:
    __slots__ = (
        "ahead",
        "bloom",
        "cache",
        "data_end",
        "entries",
        "id",
        "index",
        "info",
        "part",
        "path",
        "props",
        "range_dels",
        "read_ahead",
        "seen",
        "store",
    )

    def __init__(
        self,
        info: SstInfo,
        store: ObjectStore,
        meta: SstMeta,
        cache: LruCache,
        read_ahead: int,
        ahead: ChunkFetches | None = None,
    ) -> None:
        self.info = info
        self.id = info.id
        self.store = store
        self.path = paths.sst_path(info.id)
        self.props = meta.props
        self.index = meta.index
        self.bloom = meta.bloom
        self.range_dels = meta.range_dels
        self.data_end = meta.footer.meta_start
        self.cache = cache
        self.entries = cache.entries
        self.read_ahead = read_ahead
        self.ahead = ahead
        """Scans' read-ahead of further chunks (``engine.scan_ahead``); None: none."""
        self.seen = bytearray(len(meta.index.keys))
        """How many scans read each block in place (``engine.sst_rows``), up to ``IN_PLACE_READS``."""
        self.part = part_bytes_below(store)
        """The disk cache's part size when ``store`` has one below it, else 0: a point
        read's miss then keeps the block's whole part in memory (:meth:`_fetch_block`)."""

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + (self.bloom.nbytes if self.bloom else 0) + len(self.seen) + 512

    # ----------------------------------------------------------------- blocks

    def block(self, i: int, *, read_ahead: bool = False) -> Block:
        """Data block ``i``, through the cache.

        A miss reads just the block for point lookups (random reads of a store
        larger than the cache must not drag in megabytes each), and a whole
        read-ahead chunk for scans, which will want the next blocks too.
        """
        key = (self.id, i)
        item = self.entries.get(key)
        if item is None:
            return self._load(i, key, read_ahead)
        try:
            self.entries.move_to_end(key)
        except KeyError:  # evicted meanwhile: still ours to read, once
            pass
        self.cache.hits += 1
        b: Block = item[0]
        return b

    def _load(self, i: int, key: tuple[str, int], read_ahead: bool) -> Block:
        """Block ``i`` (cache key ``key``) on a cache miss: from its cached read-ahead
        chunk if there is one, else from the store; decoded and cached.

        The first touch of a block is most of a cold scan's time (issue 30), so the
        chunk is probed in place and the stored block decoded in one call.
        """
        self.cache.misses += 1
        offs = self.index.offsets
        start = offs[i]
        end = offs[i + 1]
        ra = self.read_ahead
        stored: bytes | None = None
        if end - start < ra:
            cs = start - start % ra
            ckey = (self.id, "chunk", cs // ra)
            item = self.entries.get(ckey)
            if item is not None and end - cs <= item[1]:
                stored = item[0][start - cs : end - cs]
                try:
                    self.entries.move_to_end(ckey)
                except KeyError:
                    pass
                self.cache.hits += 1
        part = self.part
        if stored is None and part:
            stored = self._from_parts(start, end)
            if stored is not None:
                self.cache.hits += 1
        try:
            b = decode_data_block(self._fetch(start, end, read_ahead) if stored is None else stored)
        except CorruptionError:
            # The cached chunk or part may be the damaged copy: read the block itself once more.
            self.cache.discard((self.id, "chunk", start // self.read_ahead if self.read_ahead else -1))
            for n in range(start // part, (end - 1) // part + 1) if part else ():
                self.cache.discard((self.id, "part", n))
            try:
                b = decode_data_block(self.store.get_range(self.path, start, end))
            except CorruptionError as exc:
                raise exc.with_path(self.path) from exc
        self.cache.put(key, b, b.nbytes)
        return b

    def _fetch(self, start: int, end: int, read_ahead: bool) -> bytes:
        ra = self.read_ahead
        if ra <= end - start:
            return self._fetch_block(start, end)
        ci = start // ra
        cs = ci * ra
        ce = min(self.data_end, cs + ra)
        if end > ce:
            return self._fetch_block(start, end)
        ckey = (self.id, "chunk", ci)
        chunk: bytes | None = self.cache.get(ckey)
        if chunk is None:
            if not read_ahead:
                return self._fetch_block(start, end)
            chunk = self.store.get_range(self.path, cs, ce)
            if len(chunk) != ce - cs:
                raise CorruptionError(f"read {len(chunk)} bytes at {cs}, expected {ce - cs}", self.path)
            self.cache.put(ckey, chunk, len(chunk))
        return chunk[start - cs : end - cs]

    def _fetch_block(self, start: int, end: int) -> bytes:
        """The stored block at ``[start, end)`` for a point read.

        With a disk cache below (``self.part``), the block's whole parts: the
        disk cache reads and checks a part as one file either way, and a miss
        fetches whole parts from the store, so keeping them in memory as
        ``(id, "part", n)`` lets their other blocks load with no disk cache
        lookup at all. A restart on a warm disk cache then pays one lookup per
        part instead of one per block. Of a block that crosses parts, only the
        parts not in memory are read.
        """
        part = self.part
        if not part:
            return self.store.get_range(self.path, start, end)
        n0, n1 = start // part, (end - 1) // part
        entries = self.entries
        while n0 < n1 and (self.id, "part", n0) in entries:
            n0 += 1
        while n1 > n0 and (self.id, "part", n1) in entries:
            n1 -= 1
        ps, pe = n0 * part, min(self.data_end, (n1 + 1) * part)
        data = self.store.get_range(self.path, ps, pe)
        if len(data) != pe - ps:
            raise CorruptionError(f"read {len(data)} bytes at {ps}, expected {pe - ps}", self.path)
        put = self.cache.put
        if pe - ps <= part:
            put((self.id, "part", n0), data, len(data))
        else:
            for off in range(0, pe - ps, part):
                piece = data[off : off + part]
                put((self.id, "part", n0 + off // part), piece, len(piece))
        if ps <= start and end <= pe:
            return data[start - ps : end - ps]
        stored = self._from_parts(start, end)
        # None: a part evicted meanwhile (or a cache too small to hold one).
        return self.store.get_range(self.path, start, end) if stored is None else stored

    def _from_parts(self, start: int, end: int) -> bytes | None:
        """The block at ``[start, end)`` from the parts in memory, or None if one is missing."""
        part = self.part
        n = start // part
        entries = self.entries
        key = (self.id, "part", n)
        item = entries.get(key)
        if item is None:
            return None
        data: bytes = item[0]
        off = start - n * part
        try:
            entries.move_to_end(key)
        except KeyError:
            pass
        if end - start <= len(data) - off:
            return data[off : off + end - start]
        pieces = [data[off:]]
        need = end - start - len(pieces[0])
        while need > 0:
            if len(data) < part:
                return None  # a short part is the last: the block cannot go on past it
            n += 1
            item = entries.get((self.id, "part", n))
            if item is None:
                return None
            data = item[0]
            pieces.append(data[:need])
            need -= len(pieces[-1])
        return b"".join(pieces)

    # ------------------------------------------------------------------ reads

    def get(
        self, key: bytes, seq: int | None, queries: dict[int, tuple[int, int]]
    ) -> tuple[int, int, bytes] | None:
        """:meth:`find` for point lookups, with the filter consulted only on a block-cache miss.

        A cached block answers faster than the filter (one bisect against a
        hash and a 512-bit mask in Python), so the filter is only asked when
        the alternative is a read from the store. ``queries`` caches the key's
        hash and probe mask per kind of filter (``BloomFilter.mask_key``)
        across the SSTs of one lookup. The cache's entries are read in place
        (one tuple, two C calls): this runs once per SST a lookup visits.
        """
        ikeys = self.index.keys
        i = bisect_left(ikeys, key)
        if i == len(ikeys):
            return None
        ck = (self.id, i)
        entries = self.entries
        item = entries.get(ck)
        if item is not None:
            try:
                entries.move_to_end(ck)
            except KeyError:  # evicted meanwhile: still ours to read, once
                pass
            self.cache.hits += 1
            b: Block = item[0]
        else:
            bloom = self.bloom
            if bloom is not None:
                q = queries.get(bloom.mask_key)
                if q is None:
                    q = queries[bloom.mask_key] = bloom.query(key)
                if not bloom.may_contain(*q):
                    return None
            b = self.block(i)
        keys = b.keys
        j = bisect_left(keys, key)
        if j == len(keys):
            return self.find(key, seq)  # (not for a table SST's block: its index key is its last key)
        if keys[j] != key:
            return None
        if seq is None or b.seqs[j] <= seq:
            pays = b.pays
            if pays is not None:
                return b.seqs[j], b.kinds[j], pays[j]
            vo = b.val_off
            return b.seqs[j], b.kinds[j], b.vals[vo[j] : vo[j + 1]]
        return self.find(key, seq)

    def find(self, key: bytes, seq: int | None = None) -> tuple[int, int, bytes] | None:
        """``(seq, kind, payload)`` of the newest version of ``key`` visible at ``seq``."""
        idx = self.index
        i = bisect_left(idx.keys, key)
        n = len(idx.keys)
        while i < n:
            b = self.block(i)
            keys = b.keys
            j = bisect_left(keys, key)
            if j == len(keys):
                i += 1  # only when a key's versions straddle blocks
                continue
            if keys[j] != key:
                return None
            if seq is None:
                return b.seqs[j], b.kinds[j], b.payload(j)
            seqs = b.seqs
            m = len(keys)
            while j < m and keys[j] == key:
                if seqs[j] <= seq:
                    return seqs[j], b.kinds[j], b.payload(j)
                j += 1
            if j < m:
                return None
            i += 1
        return None

    def chunks(self, start: bytes | None, end: bytes | None, rows: int | None = None) -> Iterator[Chunk]:
        """Per block, the columns of the rows with ``start <= key < end``, in key order.

        Scans consume whole blocks at a time, so the per-row work stays in C
        (slicing, ``zip``); blocks are fetched with read-ahead, and further chunks
        kept in flight ahead of the scan (``engine.scan_ahead``; ``rows``: about how
        many rows the caller wants, None: all). The cache is probed in place (as
        :meth:`block` does), and only the first block is searched for ``start``.
        """
        idx = self.index
        n = len(idx.keys)
        i = 0 if start is None else bisect_left(idx.keys, start)
        return self._holding_cursor(lambda held: self._chunks(i, n, start, end, rows, held))

    def _holding_cursor(self, run: Callable[[list[Cursor] | None], Iterator[Chunk]]) -> Iterator[Chunk]:
        """``run``'s chunks, then the read-ahead cursor it opened (into ``held``) closed,
        also when the scan stops early; ``held`` is None when this reader reads no ahead."""
        held: list[Cursor] | None = (
            [] if self.ahead is not None and self.ahead.on and self.read_ahead > 0 else None
        )
        try:
            yield from run(held)
        finally:
            if held:
                held[0].close()

    def _chunks(
        self,
        i: int,
        n: int,
        start: bytes | None,
        end: bytes | None,
        rows: int | None,
        held: list[Cursor] | None,
    ) -> Iterator[Chunk]:
        entries = self.entries
        sid = self.id
        seen = self.seen
        cur: Cursor | None = None
        while i < n:
            ck = (sid, i)
            if held is not None and (cur is not None or ck not in entries):
                if cur is None:  # the scan's first miss: from here it reads ahead
                    assert self.ahead is not None  # (``held`` is None without it)
                    last = n - 1 if end is None else min(n - 1, bisect_left(self.index.keys, end))
                    cur = self.ahead.cursor(self, i, last, False, rows)
                    held.append(cur)
                cur.at(i)
            item = entries.get(ck)
            if item is None:
                at = None if seen[i] >= IN_PLACE_READS else block_in_chunk(self, i)
                if at is not None:  # one of the first scans to meet the block: its rows in place
                    seen[i] += 1
                    m = at[2][2]
                    lo, hi = 0, m
                    split = None
                    if start is not None or end is not None:
                        split = keys_of(at)
                        if start is not None:
                            lo = bisect_left(split, start)
                        if end is not None and split[-1] >= end:
                            hi = bisect_left(split, end)
                    while lo < hi:  # (in pieces of what the caller still wants)
                        top = hi if rows is None or rows <= 0 else min(hi, lo + rows)
                        yield rows_of(at, lo, top, split)
                        if rows is not None:
                            rows -= top - lo
                        lo = top
                    if hi < m:
                        return
                    start = None
                    i += 1
                    continue
                b: Block = self._load(i, ck, True)
            else:
                b = item[0]
                try:
                    entries.move_to_end(ck)
                except KeyError:
                    pass
                self.cache.hits += 1
            keys = b.keys
            m = len(keys)
            lo = 0 if start is None else bisect_left(keys, start)
            hi = m if end is None or not m or keys[-1] < end else bisect_left(keys, end)
            if lo < hi:
                pays = b.pays
                yield (
                    keys[lo:hi],
                    b.seqs[lo:hi],
                    b.kinds[lo:hi],
                    b.payloads(lo, hi) if pays is None else pays[lo:hi],
                )
                if rows is not None:
                    rows -= hi - lo
            if hi < m:
                return
            start = None
            i += 1

    def chunks_reversed(
        self, start: bytes | None, end: bytes | None, rows: int | None = None
    ) -> Iterator[Chunk]:
        """Like :meth:`chunks`, blocks last to first, each chunk still in key order."""
        idx = self.index
        n = len(idx.keys)
        i = n - 1 if end is None else min(n - 1, bisect_left(idx.keys, end))
        return self._holding_cursor(lambda held: self._chunks_reversed(i, start, end, rows, held))

    def _chunks_reversed(
        self, i: int, start: bytes | None, end: bytes | None, rows: int | None, held: list[Cursor] | None
    ) -> Iterator[Chunk]:
        entries = self.entries
        cur: Cursor | None = None
        while i >= 0:
            if held is not None and (cur is not None or (self.id, i) not in entries):
                if cur is None:  # the scan's first miss: from here it reads ahead
                    assert self.ahead is not None  # (``held`` is None without it)
                    first = 0 if start is None else bisect_left(self.index.keys, start)
                    cur = self.ahead.cursor(self, first, i, True, rows)
                    held.append(cur)
                cur.at(i)
            b = self.block(i, read_ahead=True)
            keys = b.keys
            lo = 0 if start is None else bisect_left(keys, start)
            hi = len(keys) if end is None else bisect_left(keys, end)
            if lo < hi:
                yield keys[lo:hi], b.seqs[lo:hi], b.kinds[lo:hi], b.payloads(lo, hi)
            if lo > 0:
                return
            i -= 1

    def rows(self, start: bytes | None, end: bytes | None) -> Iterator[Row]:
        """Rows with ``start <= key < end`` in key order (newest version first)."""
        for keys, seqs, kinds, payloads in self.chunks(start, end):
            yield from zip(keys, seqs, kinds, payloads)

    def rows_reversed(self, start: bytes | None, end: bytes | None) -> Iterator[Row]:
        """Rows with ``start <= key < end`` in descending key order.

        Versions of one key come newest first here too (callers merge on key
        and take the first version), so runs of equal keys are kept in order.
        """
        held: list[Row] = []  # the versions of the smallest key so far: newer ones may be in the block before
        for keys, seqs, kinds, payloads in self.chunks_reversed(start, end):
            rows = list(zip(keys, seqs, kinds, payloads))
            if held:
                k = held[0][0]
                j = len(rows)
                while j > 0 and rows[j - 1][0] == k:
                    j -= 1
                held = rows[j:] + held
                rows = rows[:j]
                if not rows:
                    continue
                yield from held
            k0 = rows[0][0]
            j = 0
            while j < len(rows) and rows[j][0] == k0:
                j += 1
            held = rows[:j]
            yield from _reverse_keys_keep_versions(rows[j:])
        yield from held

    def all_rows(self) -> Iterator[Row]:
        return self.rows(None, None)


def _reverse_keys_keep_versions(rows: list[Row]) -> Iterator[Row]:
    """Reverse key order while keeping each key's versions newest first."""
    i = len(rows) - 1
    while i >= 0:
        j = i
        k = rows[i][0]
        while j > 0 and rows[j - 1][0] == k:
            j -= 1
        yield from rows[j : i + 1]
        i = j - 1


class TableCache:
    """Opens SST readers on demand and keeps them pinned while their SSTs are live.

    A reader holds an SST's index and filter, which every lookup in it needs:
    they are pinned in memory (outside the block cache's budget, so data
    blocks never push them out) from the first open until :meth:`retain` sees
    the SST leave the database. :meth:`pin` opens many at once, their tail
    reads in parallel: a database opened on S3 pays one round trip for all of
    them instead of one per SST at its first lookup.
    """

    def __init__(
        self, resolve: StoreResolver, cache: LruCache, read_ahead: int, scan: ScanAheadLimits | None = None
    ) -> None:
        self.resolve = resolve
        self.cache = cache
        self.read_ahead = read_ahead
        self.pinned: dict[str, SstReader] = {}
        self.ahead = ChunkFetches(scan or ScanAheadLimits(), cache, self.pinned.__contains__)
        """Scans' read-ahead and SST warm-up (``scan``: the handle's options; None: the defaults)."""

    def reader(self, info: SstInfo) -> SstReader:
        r = self.pinned.get(info.id)
        if r is not None:
            return r
        old: SstReader | None = self.cache.get((info.id, "meta"))  # unpinned, read by an older snapshot
        if old is not None:
            return old
        store = self.resolve(info.db)
        meta = read_sst_meta(store, info)
        r = SstReader(info, store, meta, self.cache, self.read_ahead, self.ahead)
        return self.pinned.setdefault(info.id, r)

    def pin(self, infos: Iterable[SstInfo], workers: int = PIN_WORKERS) -> None:
        """Open the readers of ``infos`` not open yet, ``workers`` tail reads at a time.

        Best effort: an SST whose metadata cannot be read now is left to its
        first lookup, which raises the error where a read can report it.
        """
        todo = [i for i in infos if i.id not in self.pinned]
        if not todo:
            return

        def open_one(info: SstInfo) -> None:
            try:
                self.reader(info)
            except ShaleError as exc:
                log.debug("could not pin SST %s on open: %s", info.id, exc)

        for _ in run_bounded(open_one, todo, lambda _: TAIL_READ_BYTES, workers=workers, name="shaledb-pin"):
            pass

    def pin_meanwhile(self, manifest: Manifest) -> Future[None]:
        """:meth:`pin` the database's own SSTs of ``manifest`` in a background thread, while
        opening goes on (the fence, the checkpoint, the WAL replay do not need them).

        Only its own: a parent's store is resolved from a view that does not exist
        yet, and the opener pins the rest once it does.
        """
        own = [i for i in manifest.all_ssts() if i.db == 0]
        return in_background(lambda: self.pin(own), name="shaledb-pin") if own else completed(None)

    def retain(self, infos: Iterable[SstInfo]) -> None:
        """Unpin readers of SSTs not in ``infos`` (the live set after a manifest change).

        An unpinned reader moves to the block cache, where a snapshot or
        checkpoint still reading its SST finds it until it ages out.
        """
        live = {i.id for i in infos}
        for sst_id in [k for k in list(self.pinned) if k not in live]:
            r = self.pinned.pop(sst_id, None)
            if r is not None:
                self.cache.put((sst_id, "meta"), r, r.nbytes)

    def evict(self, sst_id: str) -> None:
        self.pinned.pop(sst_id, None)
        self.cache.discard_where(lambda k: isinstance(k, tuple) and k and k[0] == sst_id)

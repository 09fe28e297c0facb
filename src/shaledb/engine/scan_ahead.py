"""Scans keep the next chunks of an SST in flight ahead of their cursor.

A scan that misses the block cache reads its SST a read-ahead chunk at a
time (``Settings.sst_read_ahead_bytes``, ``SstReader._fetch``): on S3 a long
cold scan then waits one round trip per chunk, and a block that straddles
two chunks costs one more. Here each scan over an SST that misses the
cache (a :class:`Cursor`, made by ``SstReader.chunks`` at the first miss)
fetches chunks ahead of it in parallel on a small shared pool:

* A scan that stays within its first chunk makes no request beyond it (one
  GET for that chunk, as before). When the cursor enters its next
  chunk, that chunk and a *window* of the chunks after it are fetched in
  parallel; the window doubles (1, 2, 4 ... chunks) with each chunk the scan
  enters, up to ``scan_read_ahead_max_bytes`` (and a quarter of the block
  cache, so read-ahead cannot evict itself), with at most
  ``scan_read_ahead_max_in_flight`` of the scan's GETs in flight. A scan
  with an end key reads ahead only up to the block that holds it.
* Each fetch covers its chunk plus the rest of the block straddling its end
  (and, for the chunk a forward scan enters after its first, the start of the
  block it enters on); the chunk lands in the block cache as the block read
  would have put it there, the straddling blocks decoded, so crossing a chunk
  edge costs no GET of its own (it used to cost one).
* Closing a scan early (``Scan.close``, a ``limit`` reached, the end key
  met) cancels its fetches not yet started; those already on the wire (at
  most ``scan_read_ahead_max_in_flight``) finish into the cache.
* A failed fetch is raised, as the store raised it, when the cursor reaches
  that chunk, the error a read of it would have given; a scan closed before
  reaching it never sees it. Nothing waits on a fetch that has not started:
  the cursor cancels it and reads the chunk itself, so a busy pool delays no
  scan and cannot deadlock one.

And across scans (**warm-up**): short scans scattered over one SST each find
a different chunk cold and wait a round trip for it, one after another. Once
scans have started cold in ``WARM_AFTER_COLD_STARTS`` different chunks of an
SST whose data is at most ``scan_warm_sst_max_bytes``, and waited for each
longer than a read from memory would take (``WARM_MIN_WAIT_S``), its other
chunks are fetched in parallel (about one round trip for all of them), while
the SSTs warmed this way and still live fit in half the block cache: a working
set larger than that would only evict itself. A local directory warms too: a
chunk read there lands in fresh memory, and its page faults (about 0.7 ms per
MiB) made the first scans into each chunk the slowest 3-8% of short scans
(their p99 about 10x their p50; docs/benchmarks.md, "scan tail latency").
``0`` turns either part off.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CorruptionError
from ..format.sst import decode_data_block
from ..store.parallel import SharedPool
from .cache import LruCache

if TYPE_CHECKING:
    from .sstable import SstReader

SCAN_AHEAD_THREADS = 16
"""Threads of the process-wide pool that runs scans' read-ahead GETs (shared by every database)."""
WARM_AFTER_COLD_STARTS = 2
"""Scans starting cold in this many different chunks of one SST warm the rest of it ..."""
WARM_MIN_WAIT_S = 0.00025
"""... if they waited at least this long for each of those chunks, on average: a round
trip to an object store (S3: 10-50 ms), or a local directory's read of a 1 MiB chunk into
fresh memory (0.6-0.9 ms, mostly page faults, on the benchmark machine). A read shorter
than this came from memory already in place, where warming would only spend CPU. It was
4 ms (object stores only) until the scan tail measurements of issue 30."""


class ScanAheadLimits(NamedTuple):
    """The scan read-ahead options of a handle (``Settings`` / ``DbReaderOptions``, same names)."""

    scan_read_ahead_max_bytes: int = 8 << 20
    scan_read_ahead_max_in_flight: int = 4
    scan_warm_sst_max_bytes: int = 32 << 20


def limits_of(options: object) -> ScanAheadLimits:
    """The scan read-ahead options of a ``Settings`` or ``DbReaderOptions``."""
    return ScanAheadLimits(*(getattr(options, name) for name in ScanAheadLimits._fields))


SCAN_AHEAD_POOL = SharedPool(SCAN_AHEAD_THREADS, "shaledb-scan")
"""Held by open handles (``engine.reads.acquire_pools``): its threads end when the last closes."""


def chunk_range(r: SstReader, ci: int) -> tuple[int, int]:
    """Bytes ``[start, end)`` of read-ahead chunk ``ci`` of ``r`` (as ``SstReader._fetch`` cuts them)."""
    cs = ci * r.read_ahead
    return cs, min(r.data_end, cs + r.read_ahead)


def fetch_chunk(r: SstReader, ci: int, left: bool = False) -> None:
    """Read chunk ``ci`` of ``r`` into the block cache in one ranged GET, with the rest
    of the block straddling its end (decoded into the cache too) and, if ``left`` and
    it is not cached, the start of the block straddling its start (a scan going
    forward enters the chunk there). A straddling block that fails to decode is left
    out: the block read fetches it itself and reports the damage.

    The chunk is cached with the end of the straddling block on it (the block read
    slices it from its start, so a longer chunk serves it alike): no copy of a
    megabyte, unless the GET began before the chunk.
    """
    cs, ce = chunk_range(r, ci)
    offs = r.index.offsets
    first = bisect_right(offs, cs) - 1  # the block holding the chunk's first byte
    last = bisect_right(offs, ce - 1) - 1  # ... and its last
    lo = offs[first] if left and offs[first] < cs and not _cached(r.cache, (r.id, first)) else cs
    hi = max(ce, offs[last + 1])
    data = r.store.get_range(r.path, lo, hi)
    if len(data) != hi - lo:
        raise CorruptionError(f"read {len(data)} bytes at {lo}, expected {hi - lo}", r.path)
    chunk = data if lo == cs else data[cs - lo :]
    r.cache.put((r.id, "chunk", ci), chunk, len(chunk))
    for b in {first, last}:
        s, e = offs[b], offs[b + 1]
        if lo <= s < cs or e > ce:
            try:
                block = decode_data_block(data[s - lo : e - lo])
            except CorruptionError:
                continue
            r.cache.put((r.id, b), block, block.nbytes)


def _cached(cache: LruCache, key: tuple[str, object, int] | tuple[str, int]) -> bool:
    return key in cache.entries  # (no recency or hit count: only asking)


class ChunkFetches:
    """The read-ahead GETs of one handle's SSTs: in flight (shared by its scans, so two
    scans never fetch one chunk twice at once) and the warm-up bookkeeping."""

    def __init__(
        self,
        limits: ScanAheadLimits,
        cache: LruCache,
        live: Callable[[str], bool],
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.limits = limits
        self.now = now
        """Seconds, for timing cold reads (a test may pass its own)."""
        self.cache = cache
        self.live = live
        """Whether an SST is still in the database (warmed SSTs count against the budget while live)."""
        self.on = limits.scan_read_ahead_max_bytes > 0 or limits.scan_warm_sst_max_bytes > 0
        """Whether scans get a cursor at all (both parts off: the reads of before)."""
        self.window_cap_bytes = min(limits.scan_read_ahead_max_bytes, cache.capacity_bytes // 4)
        self._lock = threading.Lock()
        self._flying: dict[tuple[str, int], Future[None]] = {}
        self._pid = os.getpid()
        self._cold_starts: dict[str, tuple[frozenset[int], int, float]] = {}
        """Per SST not warmed: the chunks scans started cold in, how many such starts, and
        the seconds their reads took."""
        self._warmed: dict[str, int] = {}
        self.warm_ups = 0
        """SSTs warmed so far (a statistic)."""

    def cursor(self, r: SstReader, first: int, last: int, reverse: bool, rows: int | None = None) -> Cursor:
        """A cursor for a scan that reads blocks ``first`` to ``last`` of ``r`` (in
        ``reverse`` from ``last``) and wants about ``rows`` rows (None: all), made
        at its first block-cache miss. For ``on`` and an ``r`` with read-ahead
        chunks only."""
        return Cursor(self, r, first, last, reverse, rows)

    # -------------------------------------------------------------- fetches

    def submit(self, r: SstReader, ci: int) -> Future[None] | None:
        """Start fetching chunk ``ci`` unless it is cached or already in flight; the
        new fetch, or None."""
        key = (r.id, ci)
        if _cached(self.cache, (r.id, "chunk", ci)):
            return None
        # The lease ends outside the lock: the last lease out (the last handle closed
        # meanwhile) shuts the pool down and waits for its fetches, whose done callbacks
        # take the lock (held across it, the scan and the pool thread waited for ever).
        with SCAN_AHEAD_POOL.lease() as pool, self._lock:
            self._after_fork()
            if key in self._flying:
                return None
            f = pool.submit(fetch_chunk, r, ci)  # (its left edge: the chunk before's right one)
            self._flying[key] = f
        f.add_done_callback(lambda done: self._forget(key, done))
        return f

    def _forget(self, key: tuple[str, int], f: Future[None]) -> None:
        with self._lock:
            if self._flying.get(key) is f:
                del self._flying[key]

    def flying(self, r: SstReader, ci: int) -> Future[None] | None:
        """The fetch of chunk ``ci`` of ``r`` in flight, if any."""
        if self._pid != os.getpid():
            with self._lock:
                self._after_fork()
        return self._flying.get((r.id, ci))

    def _after_fork(self) -> None:
        # In a forked child the parent's fetches never finish (their threads are not
        # there): forget them, or a scan would wait for one forever.
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._flying = {}

    # -------------------------------------------------------------- warm-up

    def may_warm(self, r: SstReader) -> bool:
        """Whether ``r`` may yet be warmed (its size, the options, not warmed already)."""
        size = r.data_end
        return (
            0 < size <= self.limits.scan_warm_sst_max_bytes
            and size <= self.cache.capacity_bytes // 2
            and (r.id not in self._warmed)
        )

    def cold_start(self, r: SstReader, ci: int) -> None:
        """A scan starts in chunk ``ci`` of ``r``, not cached, and is about to read it:
        count it, and warm the rest of the SST (beside that read) once scans have
        started cold in enough different chunks of it and the earlier ones waited for
        their reads longer than memory answers (see ``WARM_MIN_WAIT_S``).
        :meth:`waited` records the read's time."""
        size = r.data_end
        with self._lock:
            if r.id in self._warmed:
                return
            seen, n, waited = self._cold_starts.get(r.id, (frozenset(), 0, 0.0))
            self._cold_starts[r.id] = (seen | {ci}, n + 1, waited)
            if len(seen | {ci}) < WARM_AFTER_COLD_STARTS or waited < n * WARM_MIN_WAIT_S:
                return
            for sid in [s for s in self._warmed if not self.live(s)]:
                del self._warmed[sid]
            if sum(self._warmed.values()) + size > self.cache.capacity_bytes // 2:
                return
            self._warmed[r.id] = size
            del self._cold_starts[r.id]
            if len(self._cold_starts) > 1024:  # SSTs that never warmed: forget the dead ones
                for sid in [s for s in self._cold_starts if not self.live(s)]:
                    del self._cold_starts[sid]
            self.warm_ups += 1
        for c in range(-(-size // r.read_ahead)):
            if c != ci:  # (the scan reads that one now)
                self.submit(r, c)

    def waited(self, r: SstReader, waited_s: float) -> None:
        """A cold start's read of ``r`` (see :meth:`cold_start`) took ``waited_s``."""
        with self._lock:
            got = self._cold_starts.get(r.id)
            if got is not None:
                self._cold_starts[r.id] = (got[0], got[1], got[2] + waited_s)


def _fetched(f: Future[None]) -> bool:
    return f.done() and not f.cancelled() and f.exception() is None


def wait_for(f: Future[None]) -> bool:
    """True once the fetch is done (its error raised); False when it had not started:
    then it is cancelled, and the caller reads the chunk itself."""
    if f.cancel():
        return False
    f.result()
    return True


class Cursor:
    """Read-ahead of one scan over one SST (see the module docstring)."""

    __slots__ = ("ci", "end", "entered", "fetches", "near", "own", "r", "step", "window_cap")

    def __init__(
        self, fetches: ChunkFetches, r: SstReader, first: int, last: int, reverse: bool, rows: int | None
    ) -> None:
        """Made at the scan's first block-cache miss (``first`` in a forward scan,
        ``last`` in reverse): a scan of cached blocks never needs one."""
        self.fetches = fetches
        self.r = r
        ra = r.read_ahead
        offs = r.index.offsets
        self.step = -1 if reverse else 1
        self.end = offs[first] // ra if reverse else (offs[last + 1] - 1) // ra
        """The last chunk the scan can read, going its way (its end key's)."""
        self.near: int | None = None
        """While the scan has not passed it: the chunk where its ``rows`` likely end
        (the SST's average row size, plus a quarter); nothing is read ahead past it."""
        if rows is not None:
            span = (rows + rows // 4 + 1) * (r.data_end // max(1, r.info.entries) + 1)
            self.near = (offs[last + 1] - span) // ra if reverse else (offs[first] + span) // ra
        self.ci = -1
        self.entered = 0
        self.window_cap = fetches.window_cap_bytes // ra
        """Chunks the window may grow to; 0: no read-ahead (a cache too small to keep it)."""
        self.own: dict[int, Future[None]] = {}

    def at(self, i: int) -> None:
        """The scan is about to read block ``i``: keep chunks ahead in flight, and
        wait for (or raise the error of) a fetch of the chunk the block needs."""
        r = self.r
        offs = r.index.offsets
        ra = r.read_ahead
        # The chunk that holds the part of block ``i`` the scan reaches last going this way:
        # a block straddling two chunks is counted in the one its cursor enters next.
        ci = (offs[i + 1] - 1) // ra if self.step > 0 else offs[i] // ra
        if ci == self.ci:
            return
        self.ci = ci
        fetches = self.fetches
        if self.entered == 0:  # the scan's first chunk: no read-ahead yet
            self.entered = 1
            if _cached(r.cache, (r.id, i)) or _cached(r.cache, (r.id, "chunk", ci)):
                return
            f = fetches.flying(r, ci)
            if (f is not None and wait_for(f)) or not fetches.may_warm(r):
                return  # (else the block read fetches the chunk, as before)
            fetches.cold_start(r, ci)
            t0 = fetches.now()
            fetch_chunk(r, ci)  # the GET the block read would make, timed
            fetches.waited(r, fetches.now() - t0)
            return
        self.entered += 1
        if self.near is not None and (ci - self.near) * self.step > 0:
            self.near = None  # more rows than the estimate: read ahead to the end
        own = self.own
        for c in [c for c, f in own.items() if c != ci and _fetched(f)]:
            del own[c]  # (in the cache now; a failed one stays, to be raised if the scan gets there)
        f = own.pop(ci, None) or fetches.flying(r, ci)
        if self.window_cap <= 0:  # no read-ahead: the block read fetches the chunk, as before
            if f is not None:
                wait_for(f)
            return
        # The chunk needed now is read in this thread (a fetch just handed to the pool
        # may not have started yet); the window ahead goes out first, beside it.
        need = f is None and not _cached(r.cache, (r.id, "chunk", ci))
        window = min(1 << min(self.entered - 2, 30), self.window_cap)
        room = fetches.limits.scan_read_ahead_max_in_flight - sum(1 for g in own.values() if not g.done())
        room -= 1 if need or f is not None else 0
        for d in range(1, window + 1):
            if room <= 0:
                break
            c = ci + d * self.step
            if (c - self.end) * self.step > 0 or (self.near is not None and (c - self.near) * self.step > 0):
                break
            if c in own:
                continue
            g = fetches.submit(r, c)
            if g is not None:
                own[c] = g
                room -= 1
        if f is not None and wait_for(f):
            return
        if need or not _cached(r.cache, (r.id, "chunk", ci)):
            fetch_chunk(r, ci, left=self.step > 0)  # (the block entering it may be the first chunk's last)

    def close(self) -> None:
        """Cancel this scan's fetches that have not started."""
        for f in self.own.values():
            f.cancel()
        self.own.clear()

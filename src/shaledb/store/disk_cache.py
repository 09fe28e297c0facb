"""A host-local disk cache of immutable object parts (``Settings.disk_cache_dir``).

On S3 every block-cache miss is a ranged GET of tens of milliseconds, and a
restarted process starts with an empty block cache. This cache keeps the parts
of objects it has read on local disk, so a restarted writer, a reader or a
compactor on the same host reads them from disk instead of the store.

What is cached: only objects that never change once written -- table SSTs
(``compacted/``) and value-journal objects (``journal/``), both named by random
ULIDs, so a name means the same bytes forever. WAL objects, manifests, fencing
objects, leases and temporaries are never cached: they are the protocols' state
and must always be read from the store. The store stays the only durable
medium: an entry may vanish at any time (eviction, another process, a damaged
file) and the read then simply goes to the store.

Layout: an object is cut into aligned parts of :data:`PART_BYTES`; a read of
``[start, end)`` takes the parts it covers from the cache and fetches each run
of missing parts in one ranged GET (``get_ranges`` fetches all runs of a call
in one call), then stores them. The last part of an object is shorter; a part
is never stored empty. Keys are the store's description (its URL), the path
and the part size and number, so databases sharing a cache directory never meet.
A table reader's point read asks for the block's whole part and keeps it in
its memory cache (``SstReader._fetch_block``), so a restarted process reads
each part from disk once, not once per block; a read of one part takes a short
path here, and a whole part is read straight into the bytes returned.

Storage is the ``diskcache`` library (SQLite index in WAL mode, one file per
part), which is safe for threads and for processes sharing one directory, and
survives ``kill -9``: a part's file is written before its index row commits, so
a killed writer leaves at worst an orphan file, never a row pointing at half a
file. Each stored part carries a CRC32C per 4 KiB, seeded with its key, and
every read checks the pieces it returns: a damaged or misplaced part is
deleted and read from the store again, never served. The bound is
``diskcache``'s ``size_limit`` (index and files together); it evicts the
least recently *stored* parts, which costs a read no SQLite write (an LRU
order would make every hit a write transaction that the processes sharing the
directory contend on; the memory block cache in front
already keeps what is hot). Deleting an object through the store drops its
parts; objects deleted elsewhere (another host's GC) age out.

Any failure of the cache itself (a full disk, a locked or damaged index) is
logged and counted, and the read goes to the store: the cache can make reads
slower, never wrong or failing. ``diskcache`` is the ``cache`` extra.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import struct
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidArgument, NotSupported, PermissionDenied, ShaleError
from ..format import paths
from ..format.coding import crc32c_extend
from .base import ObjectStore
from .wrappers import StoreWrapper, find_wrapper

log = logging.getLogger(__name__)

PART_BYTES = 64 * 1024
"""Size of one cached part: a few blocks, one file on disk. A point-read miss
fetches one part (64 KiB costs the same round trip as 4 KiB on S3); a warm
read reads and checks one 64 KiB file."""

CACHED_PREFIXES: tuple[str, ...] = (paths.SST_DIR, paths.JOURNAL_DIR)
"""Objects that never change once written (random ULID names): the only ones cached."""

CHECK_BYTES = 4096
"""Each stored part carries a CRC32C per this many bytes, so a read checks only
the bytes it returns (a 4 KiB range of a 64 KiB part: 1-2 CRCs, not 16; a
whole part, what a table reader asks for: all 16)."""

_CRC = struct.Struct("<I")
_MAX_PIECES = PART_BYTES // CHECK_BYTES
_TIMEOUT_S = 2.0
"""How long one cache call waits for the SQLite lock another process holds
before the cache is skipped for that call (a write skipped, a read missed)."""


def cacheable(path: str) -> bool:
    """True for objects whose bytes never change (table SSTs, journal objects)."""
    return path.startswith(CACHED_PREFIXES)


def _import_diskcache() -> Any:
    try:
        import diskcache
    except ImportError as exc:
        raise NotSupported(
            "disk_cache_dir needs the 'diskcache' package: pip install 'shaledb[cache]'"
        ) from exc
    return diskcache


class DiskCache:
    """One cache directory: checked parts in a ``diskcache.Cache`` bounded at ``size_bytes``.

    Thread-safe; processes may open the same directory at once (the last one
    opened sets the bound). Counters are this process's view.
    """

    def __init__(self, directory: str, size_bytes: int) -> None:
        dc = _import_diskcache()
        self.directory = directory
        self.size_bytes = size_bytes
        self._timeout_error: type[BaseException] = dc.Timeout
        self._cache = dc.Cache(
            directory,
            timeout=_TIMEOUT_S,
            size_limit=size_bytes,
            eviction_policy="least-recently-stored",
            disk_min_file_size=0,  # every part in its own file: the index stays small
            tag_index=True,  # drop an object's parts by its tag
            statistics=False,  # counting in SQLite would make every read a write
        )
        self._lock = threading.Lock()
        self.refs = 0
        self.corrupt = 0
        self.errors = 0

    # ------------------------------------------------------------------ entries

    @staticmethod
    def _seal(key: str, data: bytes) -> bytes:
        """The count of :data:`CHECK_BYTES` pieces, a CRC32C of each (seeded with the key), ``data``."""
        seed = crc32c_extend(0, key.encode())
        n = -(-len(data) // CHECK_BYTES)
        crcs = [crc32c_extend(seed, data[i * CHECK_BYTES : (i + 1) * CHECK_BYTES]) for i in range(n)]
        return struct.pack(f"<{n + 1}I", n, *crcs) + data

    def _failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self.errors += 1
            first = self.errors == 1
        if first or isinstance(exc, self._timeout_error):
            log.warning("disk cache %s: %s failed, reading from the store: %r", self.directory, what, exc)

    def get(self, key: str, lo: int = 0, hi: int = PART_BYTES) -> tuple[bytes, int] | None:
        """``(bytes [lo, hi) of the part under key, the part's length)`` if present and intact.

        Reads only the header and the checked pieces covering ``[lo, hi)`` from
        the part's file (a point read needs a 4 KiB block, not 64 KiB) and checks
        them; a part that fails is deleted and None returned, as for a part that
        is not there.
        """
        try:
            fh = self._cache.get(key, read=True)
        except Exception as exc:  # noqa: BLE001 - a cache failure is a miss, never an error
            self._failed("get", exc)
            return None
        if fh is None:
            return None
        try:
            with fh:
                got = self._read_checked(fh, key, lo, hi)
        except OSError as exc:
            self._failed("read", exc)
            return None
        except Exception:  # noqa: BLE001 - not a part this module wrote: damaged
            got = None
        if got is None:
            self._damaged(key)
        return got

    @staticmethod
    def _read_checked(fh: Any, key: str, lo: int, hi: int) -> tuple[bytes, int] | None:
        if lo == 0 and hi >= PART_BYTES:
            return DiskCache._read_whole(fh, key)
        head = fh.read(_CRC.size * (_MAX_PIECES + 1))
        if len(head) < _CRC.size:
            return None
        n = _CRC.unpack_from(head)[0]
        start = _CRC.size * (n + 1)
        size = os.fstat(fh.fileno()).st_size - start
        if not 0 < n <= _MAX_PIECES or size <= 0 or n != -(-size // CHECK_BYTES):
            return None
        hi = min(hi, size)
        if lo >= hi:
            return b"", size
        i0, i1 = lo // CHECK_BYTES, -(-hi // CHECK_BYTES)
        a = i0 * CHECK_BYTES
        fh.seek(start + a)
        span = fh.read(min(i1 * CHECK_BYTES, size) - a)
        seed = crc32c_extend(0, key.encode())
        for i in range(i0, i1):
            off = (i - i0) * CHECK_BYTES
            piece = span[off : off + CHECK_BYTES]
            if not piece or crc32c_extend(seed, piece) != _CRC.unpack_from(head, _CRC.size * (i + 1))[0]:
                return None
        return span[lo - a : hi - a], size

    @staticmethod
    def _read_whole(fh: Any, key: str) -> tuple[bytes, int] | None:
        """A whole part (what a reader keeps in memory): its bytes read straight into
        the object returned (no copy to cut the header off), every piece checked."""
        fd = fh.fileno()
        head = os.pread(fd, _CRC.size * (_MAX_PIECES + 1), 0)
        if len(head) < _CRC.size:
            return None
        n = _CRC.unpack_from(head)[0]
        if not 0 < n <= _MAX_PIECES or len(head) < _CRC.size * (n + 1):
            return None
        data = os.pread(fd, PART_BYTES + 1, _CRC.size * (n + 1))
        size = len(data)
        if size == 0 or n != -(-size // CHECK_BYTES):
            return None
        seed = crc32c_extend(0, key.encode())
        crcs = struct.unpack_from(f"<{n}I", head, _CRC.size)
        for i in range(n):
            a = i * CHECK_BYTES
            if crc32c_extend(seed, data[a : a + CHECK_BYTES]) != crcs[i]:
                return None
        return data, size

    def _damaged(self, key: str) -> None:
        with self._lock:
            self.corrupt += 1
        log.warning("disk cache %s: dropped a damaged entry (%s)", self.directory, key)
        try:
            self._cache.delete(key)
        except Exception as exc:  # noqa: BLE001
            self._failed("delete", exc)

    def put(self, key: str, data: bytes, tag: str) -> None:
        try:
            self._cache.set(key, self._seal(key, data), tag=tag)
        except Exception as exc:  # noqa: BLE001 - a full disk or a busy index skips the write
            self._failed("set", exc)

    def drop(self, tag: str) -> None:
        """Delete every part stored with ``tag`` (one object's parts)."""
        try:
            self._cache.evict(tag)
        except Exception as exc:  # noqa: BLE001
            self._failed("evict", exc)

    def volume_bytes(self) -> int:
        """Bytes the cache takes on disk (index and part files), as ``diskcache`` counts them."""
        try:
            return int(self._cache.volume())
        except Exception as exc:  # noqa: BLE001
            self._failed("volume", exc)
            return -1

    def close(self) -> None:
        self._cache.close()


_open: dict[str, DiskCache] = {}
_open_lock = threading.Lock()


def acquire(directory: str | os.PathLike[str], size_bytes: int) -> DiskCache:
    """The process's :class:`DiskCache` of ``directory`` (opened on first use, counted).

    Every store of the process that names the same directory shares one
    ``diskcache.Cache`` (one SQLite connection per thread). A later caller's
    bound replaces the earlier one.
    """
    given = os.fspath(directory)
    try:
        real = os.path.realpath(given)
    except OSError as exc:  # a symbolic link on the way this user may not read
        raise _unusable(given, exc) from exc
    with _open_lock:
        cache = _open.get(real)
        if cache is None:
            try:
                os.makedirs(real, exist_ok=True)
                cache = DiskCache(real, size_bytes)
            except NotSupported:
                raise
            except OSError as exc:
                raise _unusable(real, exc) from exc
            except sqlite3.Error as exc:
                raise _unusable(real, _probe(real) or exc) from exc
            _open[real] = cache
        elif cache.size_bytes != size_bytes:
            try:
                cache._cache.reset("size_limit", size_bytes)
                cache.size_bytes = size_bytes
            except Exception as exc:  # noqa: BLE001
                cache._failed("resize", exc)
        cache.refs += 1
        return cache


def _unusable(directory: str, exc: BaseException) -> ShaleError:
    """The error for a cache directory that cannot be opened: PermissionDenied for a refused
    permission (EACCES, EPERM: fix the set-up, as for a database's directory), else
    InvalidArgument (a file in the way, a bad path); both name the directory.

    The refusal was a bare ``PermissionError`` traceback from ``realpath``, and
    ``InvalidArgument`` or a bare ``sqlite3.OperationalError`` ("unable to open database
    file") from creating the directory or the cache's index inside it."""
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return PermissionDenied(
            f"disk_cache_dir {directory!r} cannot be used: {exc.strerror} (errno {exc.errno}); "
            "check the permissions of the directory and its parents for the user this process runs as"
        )
    return InvalidArgument(f"disk_cache_dir {directory!r} cannot be used: {exc}")


def _probe(directory: str) -> OSError | None:
    """Why a file cannot be made in ``directory``, or None: the SQLite index's error says
    only "unable to open database file", without the OS error that tells a refused
    permission from anything else."""
    try:
        fd, name = tempfile.mkstemp(prefix=".probe-", dir=directory)
    except OSError as exc:
        return exc
    os.close(fd)
    os.unlink(name)
    return None


def release(cache: DiskCache) -> None:
    """Undo one :func:`acquire`; the last release closes the directory's cache."""
    with _open_lock:
        cache.refs -= 1
        if cache.refs > 0:
            return
        if _open.get(cache.directory) is cache:
            del _open[cache.directory]
    try:
        cache.close()
    except Exception as exc:  # noqa: BLE001 - releasing must finish
        log.warning("could not close disk cache %s: %r", cache.directory, exc)


def part_bytes_below(store: object) -> int:
    """:data:`PART_BYTES` if a :class:`DiskCachedStore` is in ``store``'s chain of
    wrappers, else 0: readers align point reads to parts only where a part is
    what the cache reads anyway."""
    return PART_BYTES if find_wrapper(store, DiskCachedStore) is not None else 0


class DiskCachedStore(StoreWrapper):
    """Serves ranged reads of immutable objects from a :class:`DiskCache`, fetching misses.

    Sits under the retrying wrapper and above the accounting one, so a hit is
    no request in the counts and a miss is counted as the GET it makes.
    ``hits``/``misses`` count parts; ``bytes_read`` counts bytes served from disk.
    """

    def __init__(self, inner: ObjectStore, cache: DiskCache, root: str | None = None) -> None:
        super().__init__(inner)
        self.cache = cache
        self.root = inner.describe() if root is None else root
        self.hits = 0
        self.misses = 0
        self.bytes_read = 0
        self._closed = False

    def _key(self, path: str, part: int) -> str:
        # The part size is in the key: a build with another size never misreads these parts.
        return f"{self.root}\n{path}\n{PART_BYTES}:{part}"

    def _tag(self, path: str) -> str:
        return f"{self.root}\n{path}"

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if end <= start or not cacheable(path):
            return self.inner.get_range(path, start, end)
        p = start // PART_BYTES
        if (end - 1) // PART_BYTES != p:
            return self._read(path, [(start, end)])[0]
        # One part (a reader's point read asks for a whole one): the short path.
        base = p * PART_BYTES
        got = self.cache.get(self._key(path, p), start - base, end - base)
        if got is None:
            self.misses += 1
            parts: dict[int, tuple[int, bytes, int]] = {}
            self._fetch(path, [p], parts)
            return self._assemble(parts, start, end)
        self.hits += 1
        self.bytes_read += len(got[0])
        return got[0]

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if not ranges or not cacheable(path) or any(e <= s for s, e in ranges):
            return self.inner.get_ranges(path, ranges)
        return self._read(path, ranges)

    def _read(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """``ranges`` of ``path``: cached parts from disk, runs of missing parts in one call."""
        need: dict[int, tuple[int, int]] = {}  # part -> the span of it the ranges cover
        for s, e in ranges:
            for p in range(s // PART_BYTES, (e - 1) // PART_BYTES + 1):
                base = p * PART_BYTES
                lo, hi = max(s - base, 0), min(e - base, PART_BYTES)
                if p in need:
                    lo, hi = min(lo, need[p][0]), max(hi, need[p][1])
                need[p] = (lo, hi)
        parts: dict[int, tuple[int, bytes, int]] = {}  # part -> (offset of piece, piece, part length)
        missing: list[int] = []
        last = None  # the object's last part, once a short part shows where it ends
        for p in sorted(need):
            if last is not None and p > last:
                parts[p] = (0, b"", 0)
                continue
            lo, hi = need[p]
            got = self.cache.get(self._key(path, p), lo, hi)
            if got is None:
                missing.append(p)
                continue
            piece, size = got
            parts[p] = (lo, piece, size)
            self.bytes_read += len(piece)
            if size < PART_BYTES:
                last = p
        if last is not None:
            missing = [p for p in missing if p < last]
        self.hits += len(parts)
        self.misses += len(missing)
        if missing:
            self._fetch(path, missing, parts)
        return [self._assemble(parts, s, e) for s, e in ranges]

    def _fetch(self, path: str, missing: list[int], parts: dict[int, tuple[int, bytes, int]]) -> None:
        """Fetch ``missing`` parts, each run of adjacent ones in one range, and store them."""
        runs: list[tuple[int, int]] = []  # [first part, last part + 1)
        for p in missing:
            if runs and runs[-1][1] == p:
                runs[-1] = (runs[-1][0], p + 1)
            else:
                runs.append((p, p + 1))
        spans = [(a * PART_BYTES, b * PART_BYTES) for a, b in runs]
        if len(spans) == 1:
            got = [self.inner.get_range(path, *spans[0])]
        else:
            got = self.inner.get_ranges(path, spans)
        tag = self._tag(path)
        for (a, b), data in zip(runs, got):
            for p in range(a, b):
                piece = bytes(data[(p - a) * PART_BYTES : (p - a + 1) * PART_BYTES])
                parts[p] = (0, piece, len(piece))
                if piece:  # past the object's end: nothing to keep
                    self.cache.put(self._key(path, p), piece, tag)

    @staticmethod
    def _assemble(parts: Mapping[int, tuple[int, bytes, int]], start: int, end: int) -> bytes:
        first = start // PART_BYTES
        last = (end - 1) // PART_BYTES
        out: list[bytes] = []
        for p in range(first, last + 1):
            off, piece, size = parts[p]
            base = p * PART_BYTES
            a, b = max(start - base, 0), min(end - base, PART_BYTES)
            out.append(piece[a - off : b - off])
            if size < PART_BYTES:
                break  # the object ends in this part
        return out[0] if len(out) == 1 else b"".join(out)

    def delete(self, path: str) -> None:
        self.inner.delete(path)
        if cacheable(path):
            self.cache.drop(self._tag(path))

    def delete_many(self, paths_: Sequence[str]) -> None:
        self.inner.delete_many(paths_)
        for p in paths_:
            if cacheable(p):
                self.cache.drop(self._tag(p))

    def stats(self) -> dict[str, int]:
        """Counters for ``Db.metrics()``: parts hit and missed, damaged parts dropped, failures."""
        return {
            "disk_cache_hits_total": self.hits,
            "disk_cache_misses_total": self.misses,
            "disk_cache_bytes_read_total": self.bytes_read,
            "disk_cache_corrupt_total": self.cache.corrupt,
            "disk_cache_errors_total": self.cache.errors,
            "disk_cache_bytes": self.cache.volume_bytes(),
            "disk_cache_limit_bytes": self.cache.size_bytes,
        }

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            if not self._closed:
                self._closed = True
                release(self.cache)


__all__ = [
    "CACHED_PREFIXES",
    "PART_BYTES",
    "DiskCache",
    "DiskCachedStore",
    "acquire",
    "cacheable",
    "part_bytes_below",
    "release",
]

"""Following value-journal pointers: one ranged GET, cached.

A pointer (``format/journal.py``) names a journal object by its ref (a WAL id
or a ULID), the stored block and the entry's index in it, and (version 2) the
value's byte range in that block and a CRC32C of key and value. The ref does
not say which database owns the object: a clone's manifest lists its
ancestors' journal files with ``JournalFile.db`` (see
``shaledb.engine.parents``), so the resolver keeps a ``ref -> db`` map filled
from the manifests it is shown. Refs are unique across a clone's lineage (WAL
ids grow along it, ULIDs are unique) and an entry never changes, so the map
only grows; a ref it does not know is this database's own (db 0).

A version 1 pointer reads and decodes its whole stored block, which goes into
the shared LRU cache under ``("journal", db, ref, block_off)``. A version 2
pointer reads only the value's bytes (a batch of a hundred 4 KiB values is one
400 KiB block: a get read 100 times its bytes), checks them against the
pointer's CRC and caches them under ``("journal-value", db, ref, offset)``,
the value's own offset in the object: the two kinds of entry have distinct
keys and a value is never taken for a block. A version 2 read served by a
block already cached (read for a version 1 pointer into it) reads nothing,
and one whose block is at most ``whole_block_max_bytes``
(``Settings.journal_whole_block_max_bytes``; 0 by default) reads and caches
the whole block, as version 1 does: on a store with long round trips the
block's other values then cost no round trip.
The disk cache below (``store/disk_cache.py``) caches aligned parts of
objects whatever range is asked, so it needs no such care. A damaged or
missing object raises ``CorruptionError`` naming it: the value is lost, the
key and its head stay readable from the ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..engine.cache import LruCache
from ..errors import CorruptionError, ObjectNotFound
from ..format import paths
from ..format.block import Block
from ..format.journal import Pointer, decode_pointer, value_crc
from ..format.row import decode_payload
from ..format.sst import decode_data_block
from ..manifest.model import Manifest
from ..store.base import ObjectStore


class JournalResolver:
    """Reads the values behind pointers (``Visibility.resolve``). Thread-safe."""

    def __init__(
        self,
        store_for: Callable[[int], ObjectStore],
        cache: LruCache,
        manifest: Callable[[], Manifest] | None = None,
        whole_block_max_bytes: int = 0,
    ) -> None:
        self._store_for = store_for
        self._whole_block_max = whole_block_max_bytes
        self._cache = cache
        self._manifest = manifest
        self._dbs: dict[str, int] = {}
        self._seen = -1
        self._lock = threading.Lock()
        self.reads = 0
        """Ranged GETs of journal blocks or values (cache misses)."""
        self.bytes_read = 0
        """Bytes those GETs returned."""

    def note(self, m: Manifest) -> None:
        """Learn the journal files of ``m`` (their owning databases)."""
        if m.id == self._seen:
            return
        with self._lock:
            for j in m.journal:
                self._dbs.setdefault(j.id, j.db)
            self._seen = m.id

    def note_files(self, files: tuple[tuple[str, int], ...]) -> None:
        with self._lock:
            for ref, db in files:
                self._dbs.setdefault(ref, db)

    def db_of(self, ref: str) -> int:
        d = self._dbs.get(ref)
        if d is not None:
            return d
        if self._manifest is not None:
            self.note(self._manifest())
        return self._dbs.get(ref, 0)

    def exists(self, ref: str) -> bool:
        """Whether journal object ``ref`` is in its store (one HEAD request)."""
        try:
            self._store_for(self.db_of(ref)).head(paths.journal_object_path(ref))
            return True
        except ObjectNotFound:
            return False

    def checker(self) -> Callable[[str], bool]:
        """:meth:`exists` remembering each object's answer (for one fold)."""
        seen: dict[str, bool] = {}

        def check(ref: str) -> bool:
            ok = seen.get(ref)
            if ok is None:
                ok = seen[ref] = self.exists(ref)
            return ok

        return check

    def resolve(self, key: bytes, body: bytes) -> bytes:
        """The value a POINTER entry's body points at (``key`` is checked)."""
        return self.read(key, decode_pointer(body))

    def read(self, key: bytes, p: Pointer) -> bytes:
        db = self.db_of(p.ref)
        if p.value_off is not None:
            b: Block | None = self._cache.get(("journal", db, p.ref, p.block_off))
            if b is not None:
                block = b  # the whole block is cached already
            elif p.block_len > self._whole_block_max:
                return self.value(db, key, p, p.value_off)
            else:
                block = self.block(db, p.ref, p.block_off, p.block_len)
        else:
            block = self.block(db, p.ref, p.block_off, p.block_len)
        i = p.index
        if i >= len(block) or block.keys[i] != key:
            raise CorruptionError(
                f"journal entry {i} at offset {p.block_off} does not hold key {key[:32]!r}",
                paths.journal_object_path(p.ref),
            )
        try:
            value = decode_payload(block.kinds[i], block.payload(i))[0]
        except CorruptionError as exc:
            raise exc.with_path(paths.journal_object_path(p.ref)) from exc
        if len(value) != p.value_len:
            raise CorruptionError(
                f"journal value is {len(value)} bytes, the pointer says {p.value_len}",
                paths.journal_object_path(p.ref),
            )
        return value

    def value(self, db: int, key: bytes, p: Pointer, value_off: int) -> bytes:
        """A version 2 pointer's value: one ranged GET of its own bytes, checked
        against the pointer's CRC32C of key and value, cached on its own."""
        start = p.block_off + value_off
        ck = ("journal-value", db, p.ref, start)
        v: bytes | None = self._cache.get(ck)
        if v is not None:
            return v
        path = paths.journal_object_path(p.ref)
        try:
            raw = self._store_for(db).get_range(path, start, start + p.value_len) if p.value_len else b""
        except ObjectNotFound:
            raise CorruptionError("value-journal object is missing", path) from None
        self.reads += 1
        self.bytes_read += len(raw)
        if len(raw) != p.value_len:
            raise CorruptionError(f"read {len(raw)} bytes at {start}, expected {p.value_len}", path)
        if value_crc(key, raw) != p.value_crc:
            raise CorruptionError(
                f"journal value at offset {start} fails its CRC32C (key {key[:32]!r})", path
            )
        self._cache.put(ck, raw, len(raw) + 64)
        return raw

    def block(self, db: int, ref: str, off: int, length: int) -> Block:
        ck = ("journal", db, ref, off)
        b: Block | None = self._cache.get(ck)
        if b is not None:
            return b
        path = paths.journal_object_path(ref)
        try:
            raw = self._store_for(db).get_range(path, off, off + length)
            self.reads += 1
            self.bytes_read += len(raw)
            if len(raw) != length:
                raise CorruptionError(f"read {len(raw)} bytes at {off}, expected {length}")
            b = decode_data_block(raw)
        except ObjectNotFound:
            raise CorruptionError("value-journal object is missing", path) from None
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        self._cache.put(ck, b, b.nbytes)
        return b


__all__ = ["JournalResolver"]

"""Following value-journal pointers: one ranged GET of a stored block, cached.

A pointer (``format/journal.py``) names a journal object by its ref (a WAL id
or a ULID), the stored block and the entry's index in it. The ref does not
say which database owns the object: a clone's manifest lists its ancestors'
journal files with ``JournalFile.db`` (see ``shaledb.engine.parents``), so the
resolver keeps a ``ref -> db`` map filled from the manifests it is shown.
Refs are unique across a clone's lineage (WAL ids grow along it, ULIDs are
unique) and an entry never changes, so the map only grows; a ref it does not
know is this database's own (db 0).

Decoded blocks go into the shared LRU cache under ``("journal", db, ref,
offset)``. A damaged or missing object raises ``CorruptionError`` naming it:
the value is lost, the key and its head stay readable from the ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..engine.cache import LruCache
from ..errors import CorruptionError, ObjectNotFound
from ..format import paths
from ..format.block import Block
from ..format.journal import Pointer, decode_pointer
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
    ) -> None:
        self._store_for = store_for
        self._cache = cache
        self._manifest = manifest
        self._dbs: dict[str, int] = {}
        self._seen = -1
        self._lock = threading.Lock()
        self.reads = 0
        """Ranged GETs of journal blocks (cache misses)."""

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

    def block(self, db: int, ref: str, off: int, length: int) -> Block:
        ck = ("journal", db, ref, off)
        b: Block | None = self._cache.get(ck)
        if b is not None:
            return b
        path = paths.journal_object_path(ref)
        try:
            raw = self._store_for(db).get_range(path, off, off + length)
            self.reads += 1
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

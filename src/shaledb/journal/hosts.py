"""Where journal compaction runs: in the writer, or in another process.

:class:`EmbeddedHost` commits through the writer's host
(``shaledb.engine.host.WriterHost``: serialized with the writer's flushes and
its compactor's commits, the new view pinned by the same CAS);
:class:`StandaloneHost` (``shaledb compact-journal``) commits with a
plain manifest CAS, which the running writer adopts at its next poll.
"""

from __future__ import annotations

import random
import threading
from typing import Any, ClassVar, Protocol

from ..clock import Clock
from ..engine.cache import LruCache
from ..engine.host import WriterHost
from ..engine.parents import ExternalStores, settings_factory
from ..engine.sstable import TableCache
from ..manifest.edits import Decorated, Edit
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..settings import Settings
from ..store.base import ObjectStore


class CompactionHost(Protocol):
    """What journal compaction needs from its environment (writer or standalone)."""

    store: ObjectStore
    clock: Clock
    rng: random.Random
    settings: Settings
    tables: TableCache
    lock: threading.Lock

    def store_for(self, db: int) -> ObjectStore: ...

    def latest(self) -> Manifest: ...

    def update(self, edit: Edit) -> Manifest: ...

    def check_open(self) -> None: ...


class EmbeddedHost:
    """Journal compaction inside the writer: commits go through the writer's ``update_manifest``."""

    def __init__(self, db: WriterHost) -> None:
        self.db = db
        self.store = db.store
        self.clock = db.clock
        self.rng = random.Random(db.rng.getrandbits(64))
        self.settings = db.settings
        self.tables = db.tables
        self.lock = db.journal_lock

    def store_for(self, db: int) -> ObjectStore:
        return self.db.store_for(db)

    def latest(self) -> Manifest:
        return self.db.refresh_manifest()

    def update(self, edit: Edit) -> Manifest:
        return self.db.update_manifest(Decorated(edit, self.db.decorate_manifest))

    def check_open(self) -> None:
        self.db.check_open()


class StandaloneHost:
    """Journal compaction by another process (``shaledb compact-journal``): plain manifest CAS."""

    _locks: ClassVar[dict[str, threading.Lock]] = {}
    _locks_guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        store: ObjectStore,
        *,
        settings: Settings,
        clock: Clock,
        rng: random.Random,
        store_options: dict[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng
        self.settings = settings
        self.manifests = ManifestStore(store, clock, random.Random(rng.getrandbits(64)), author="journal")
        self.external = ExternalStores(settings_factory(settings, clock, store_options))
        self._manifest: Manifest | None = None
        self.tables = TableCache(self.store_for, LruCache(64 * 1024 * 1024), settings.sst_read_ahead_bytes)
        with self._locks_guard:
            self.lock = self._locks.setdefault(store.describe(), threading.Lock())

    def store_for(self, db: int) -> ObjectStore:
        if db == 0:
            return self.store
        return self.external.store_for(db, self._manifest or self.latest())

    def latest(self) -> Manifest:
        self._manifest = self.manifests.require_latest()
        self.tables.retain(self._manifest.all_ssts())
        return self._manifest

    def update(self, edit: Edit) -> Manifest:
        self._manifest = self.manifests.update(
            edit, timeout_s=self.settings.manifest_update_timeout_s, current=self._manifest
        )
        return self._manifest

    def check_open(self) -> None:
        return None


__all__ = ["CompactionHost", "EmbeddedHost", "StandaloneHost"]

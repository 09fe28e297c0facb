"""What a writer's background roles may ask of the writer they run in.

The writer (``shaledb.db.writer.Db``) starts its roles -- the memtable
flusher, the embedded compactor, garbage collector and journal compactor --
and runs writer-side procedures (checkpoints, backups, ledger rebuilds). Each
of them depends on one of these small typed protocols, never on ``Db``: ``Db``
builds one host object that satisfies them and hands it over, so the roles sit
below the class that composes them and nothing imports ``Db`` back. The hooks
live on the host, not on ``Db``'s public surface.
"""

from __future__ import annotations

import random
import threading
from typing import Protocol

from ..clock import Clock
from ..manifest.edits import Edit
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..settings import Settings
from ..store.base import ObjectStore
from ..store.metrics import WriterMetrics
from .history import History
from .memtable import Memtable
from .parents import ExternalStores
from .sstable import TableCache
from .wal import WalWriter


class ManifestHost(Protocol):
    """Commits through the writer: serialized with its other manifest writes, the result
    adopted as its read view."""

    @property
    def manifest(self) -> Manifest: ...

    def refresh_manifest(self) -> Manifest:
        """Pick up other processes' changes; raises ``FencedError`` if a newer writer took over."""
        ...

    def update_manifest(self, edit: Edit, *, current: Manifest | None = None) -> Manifest:
        """Write a version from this process and make it the read view (wrap ``edit`` in
        ``manifest.edits.Decorated`` with :meth:`decorate_manifest`, so the view is pinned by the
        same CAS)."""
        ...

    def decorate_manifest(self, m: Manifest) -> Manifest:
        """``m`` with the writer's view checkpoints, so the new view is pinned by the same CAS."""
        ...


class WriterHost(ManifestHost, Protocol):
    """Everything a writer-side role may use (see module docstring)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def tables(self) -> TableCache: ...

    @property
    def manifests(self) -> ManifestStore: ...

    @property
    def parents(self) -> ExternalStores:
        """The stores of a clone's ancestors."""
        ...

    @property
    def wal(self) -> WalWriter: ...

    @property
    def epoch(self) -> int: ...

    @property
    def codec(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def metrics_state(self) -> WriterMetrics:
        """The writer's counters and histograms (``Db.metrics()``)."""
        ...

    @property
    def history(self) -> History | None:
        """Marks and window of time-travel reads; None when ``history_retention_s`` is 0."""
        ...

    @property
    def seq(self) -> int:
        """The newest sequence number assigned."""
        ...

    @property
    def journal_lock(self) -> threading.Lock:
        """Held by one journal compaction or ledger rebuild at a time."""
        ...

    def store_for(self, db_index: int) -> ObjectStore:
        """The store holding objects with ``db == db_index`` (0: this database)."""
        ...

    def check_failure(self) -> None:
        """Raise the error a background failure left (``FencedError`` or ``ClosedError``)."""
        ...

    def check_open(self) -> None:
        """Raise ``ClosedError`` once the writer is closing, else as :meth:`check_failure`."""
        ...

    def flush(self, *, memtable: bool = False) -> None:
        """Make every write issued so far durable (and, with ``memtable``, flushed to L0)."""
        ...

    def flush_first(self) -> bool:
        """Whether background compaction should hold off for a moment: writers are waiting
        for memtables to reach L0 and L0 is still shallow (``shaledb.engine.admission``)."""
        ...


class FlushHost(WriterHost, Protocol):
    """What the memtable flusher needs besides :class:`WriterHost`."""

    @property
    def closing(self) -> bool:
        """``close()`` started: the final flush must not wait for a compactor."""
        ...

    @property
    def indexed(self) -> bool:
        """Secondary-index entries were written (recorded as a database option)."""
        ...

    def failed(self) -> bool:
        """A background failure stopped the writer."""
        ...

    @property
    def compactor_paused(self) -> bool:
        """The embedded compactor is paused: another compactor holds the role."""
        ...

    def oldest_imm(self) -> Memtable | None:
        """The frozen memtable to flush next."""
        ...

    def is_pending(self, mem: Memtable) -> bool:
        """``mem`` is still a frozen memtable waiting for its L0 flush."""
        ...

    def install_flushed(self, imm: Memtable, m: Manifest) -> None:
        """``imm`` reached L0 in manifest ``m``: drop it from the read view."""
        ...


__all__ = ["FlushHost", "ManifestHost", "WriterHost"]

"""``Db``: the writer and its public API.

This module orchestrates; the parts live in their own modules: ``wal`` (the
WAL buffer and flusher), ``flush`` (memtables to L0), ``recovery`` (epoch,
fence, replay), ``reader`` (lookups and scans), ``memtable``, ``sstable``.

Concurrency: one write lock orders sequence numbers, memtable inserts and the
WAL buffer, so WAL order is sequence order. Reads never lock: they take the
current :class:`~shaledb.engine.reads.ReadView`, which writers replace wholesale.
Background threads (WAL flusher, memtable flusher, and the embedded compactor
and garbage collector when enabled) report failures through ``_fail``; after
one, writes raise (``FencedError`` if another writer took over, else
``ClosedError`` with the cause) and so do reads (``ClosedError``): the memtable
may hold writes whose WAL object never landed, which a read would have served.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import random
import threading
import uuid
import weakref
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import wait
from contextlib import contextmanager
from datetime import datetime, timedelta
from itertools import repeat
from typing import TYPE_CHECKING, Any, Unpack

from ..admin.checkpoint import create_writer_checkpoint
from ..admin.clone import open_clone
from ..admin.gc import EmbeddedGc
from ..clock import SYSTEM_CLOCK, Clock
from ..compaction import EmbeddedCompactor
from ..engine.admission import flush_first
from ..engine.allocator import fix_mmap_threshold
from ..engine.cache import LruCache
from ..engine.flush import MemtableFlusher
from ..engine.history import HISTORY_PIN, History, resolve_retention, to_millis
from ..engine.indexes import current_terms, current_value, plan_index_changes, prefetch_old_terms
from ..engine.latch import Latch
from ..engine.memtable import ENTRY_OVERHEAD, Entry, Memtable, new_memtable
from ..engine.merging import (
    MAX_STACK,
    OPT_MERGE_OPERATOR,
    Folder,
    check_operator,
    complete,
    put_entries,
    put_entry,
    stack,
    stack_base,
    stack_size,
)
from ..engine.parents import ExternalStores, canonical_url, settings_factory
from ..engine.pins import RepinView, StripPins, ViewPins
from ..engine.range_tombstones import apply_to_memtable, batch_ranges, covering_seq, has_range_dels
from ..engine.reads import ReadView, Scan, Visibility, acquire_pools, release_pools
from ..engine.recovery import claim_wal_window, claim_writer_epoch, confirm_and_replay, write_fence
from ..engine.scan_ahead import limits_of
from ..engine.sstable import TableCache
from ..engine.wal import WalWriter, wal_object_bytes
from ..errors import ClosedError, FencedError, ForkedHandle, InvalidArgument, MergeOperatorMissing, ShaleError
from ..format.coding import CODECS
from ..format.merge import decode_merge, one_operand
from ..format.range_dels import KIND_RANGE_DEL
from ..format.row import FLAG_INDEX_TREE, FLAG_TERMS, KIND_MERGE, KIND_VALUE, encode_payload
from ..journal.backup import BackupReport, backup_from_writer
from ..journal.compaction import (
    EmbeddedHost,
    EmbeddedJournalCompactor,
    JournalCompactionReport,
    compact_journal,
)
from ..journal.rebuild import rebuild_ledger
from ..journal.resolver import JournalResolver
from ..keys import MAX_KEY_BYTES, MAX_VALUE_BYTES, BytesLike, check_key, check_value
from ..manifest.edits import AllOf, Edit, NoChange, SettleWal
from ..manifest.model import Checkpoint, Manifest
from ..manifest.options import OPT_INDEXED
from ..manifest.store import ManifestStore
from ..merge import as_operator
from ..numbers import check_flag
from ..settings import Settings
from ..store.base import ObjectStore
from ..store.metrics import WriterMetrics
from ..store.new_root import check_new_root
from ..store.parallel import completed
from ..store.stack import close_quietly, open_stack
from . import writers
from .batch import IndexTerms, WriteBatch, WriteHandle
from .interrupts import interrupts_deferred
from .mapping import as_url, handle_url, run_close_hooks, warn_unclosed
from .queries import Queries, SnapshotQueries

if TYPE_CHECKING:
    from ..engine.changes import ChangeFeed, Cursor, FeedOptions
    from .txn import ConflictLog, Transaction

log = logging.getLogger("shaledb.db")

_OPEN, _CLOSING, _CLOSED = 0, 1, 2

_WRITERS: weakref.WeakSet[Db] = weakref.WeakSet()
"""Open writers of this process: a forked child must not write through them."""


def _orphan_writers_after_fork() -> None:
    """In a forked child, stop the parent's writers from writing (``os.register_at_fork``).

    The child inherits the handle but none of its threads. A durable put writes its WAL
    object on the caller's thread, so the child's put used to land under the parent's
    epoch at the slot the parent writes next: acknowledged in the child, invisible to the
    parent, whose next write then failed with a ``CorruptionError``; the child's
    ``close()`` waited forever for the flusher thread. Reads keep working in the child.
    """
    for db in list(_WRITERS):
        db._failure = ForkedHandle(
            f"{db!r} was opened by process {db._pid}; this process ({os.getpid()}) is a "
            "fork of it and cannot write through it (its background threads did not "
            "survive the fork). Open a shaledb.DbReader, or a Db (fencing the parent's), "
            "in the child; or start children with the 'spawn' method"
        )
        writers.release(getattr(db, "_writer_claim", None), db)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_orphan_writers_after_fork)


def _flush_writers_at_exit() -> None:
    """At interpreter exit, make the writes of writers never closed durable in the WAL.

    The WAL thread is a daemon: a script that ended without ``close()`` used to lose
    every ``durable=False`` write still buffered, silently (a RocksDB or sqlite3 user
    expects a process exit to keep unsynced writes). A WAL flush is what a crash would
    have needed; the next open replays it. Handles of another process (a fork) are left.
    """
    for db in list(_WRITERS):
        if db._pid != os.getpid() or db._state != _OPEN or db._failure is not None:
            continue
        pending = db._seq > db.wal.durable_seq
        try:
            db.flush()
        except Exception as exc:  # noqa: BLE001 - exiting: report, go on with the others
            log.warning("%r was not closed, and flushing it at exit failed: %s", db, exc)
            continue
        if pending:
            log.warning("%r was not closed: its writes not yet durable were flushed at exit", db)


def _warn_unclosed_writers_at_exit() -> None:
    """A ``ResourceWarning`` for each writer of this process never closed (``warn_unclosed``);
    registered before the flush above, so it runs after it (``atexit`` runs last in, first
    out): a ``-W error::ResourceWarning`` raising here cannot keep a write from the WAL."""
    for db in list(_WRITERS):
        if db._pid == os.getpid() and db._state == _OPEN:
            warn_unclosed(db)


atexit.register(_warn_unclosed_writers_at_exit)
atexit.register(_flush_writers_at_exit)


class Snapshot(SnapshotQueries):
    """A consistent, read-only view of the database at one sequence number; close it
    (or use ``with``) when done. Its reads are :class:`~shaledb.db.queries.Queries`'."""


@dataclasses.dataclass(frozen=True)
class RecordMergeOperator(Edit):
    """The first merge records the operator's ``name`` in the manifest, or checks it against
    the one recorded since (``record`` is :meth:`Db._record_operator`: it needs the writer's
    operator and view pins)."""

    name: str
    record: Callable[[Manifest, str], Manifest | None]

    def apply(self, m: Manifest) -> Manifest | None:
        return self.record(m, self.name)


class Db(Queries):
    """A database opened for writing (the single writer). Thread-safe.

    Reads -- ``get``, ``scan``, heads, secondary indexes, folds, ``db[k]``,
    ``k in db`` and ordered iteration -- are :class:`~shaledb.db.queries.Queries`';
    writes, snapshots, transactions, checkpoints, journal maintenance and
    backups are the writer's own.
    """

    _txn_log: ConflictLog | None = None
    """Keys written while a transaction is open (``shaledb.db.txn``); None when none is."""
    _history: History | None = None
    """Marks and window of time-travel reads (``shaledb.engine.history``); None: retention 0."""
    _registered = False
    """Known to the exit and fork hooks, holding the shared read pools (``_start_background``)."""
    _stalled_writers = 0
    """Writers waiting in :meth:`_admit_locked` for memory (``shaledb.engine.admission``)."""

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        create_if_missing: bool = True,
        store_options: Mapping[str, object] | None = None,
    ) -> Db:
        """Open (or create) the database at ``url`` and fence any older writer.

        Use the handle as a context manager (``with shaledb.open(url) as db:``) or ``close()`` it:
        closing flushes the WAL and memtable to the store and stops background work.

        Args:
            url: where the database lives: a local directory (``"./db"``, a ``pathlib.Path``,
                ``file:///abs/path``), ``memory://NAME``, ``s3://bucket/prefix``,
                ``gs://bucket/prefix`` or ``az://container/prefix`` (docs/store.md).
            settings: a :class:`~shaledb.Settings` (its defaults when None).
            store: an opened ObjectStore to use instead of opening ``url`` (wrappers, tests).
            clock: the time source (tests pass a manual clock).
            seed: seeds the handle's random choices, for reproducible runs.
            create_if_missing: False raises NotFound where no database exists yet.
            store_options: cloud store options (``endpoint``, ``region``, ``allow_http``,
                credentials, any obstore config key); without them the ``AWS_*``, ``GOOGLE_*``
                and ``AZURE_*`` environment variables apply.

        Raises:
            InvalidArgument: a malformed URL or option; a second writer of the database in
                this process; a bucket in another region than configured; a new database whose
                root would lie inside another database's, or contain one (checked only when
                creating, :mod:`shaledb.store.new_root`).
            NotFound: no database and ``create_if_missing=False``; ``BucketNotFound`` for a
                missing bucket; ``DatabaseDestroyed`` for a destroyed database.
            PermissionDenied: credentials missing or refused (cloud), or the OS refused access.
            EndpointUnreachable: the endpoint refused the connection or does not resolve.
            Unavailable: the store kept failing until the retry budget was spent (retry later).
            CorruptionError: a stored object the open reads is damaged (names it).
        """
        return cls._open(
            url,
            settings=settings,
            store=store,
            clock=clock,
            seed=seed,
            create_if_missing=create_if_missing,
            store_options=store_options,
        )

    @classmethod
    def _open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        create_if_missing: bool = True,
        store_options: Mapping[str, object] | None = None,
        latest: Manifest | None = None,
    ) -> Db:
        """:meth:`open`; ``latest``: a version of the manifest the caller just read (bulk
        ingest's begin), tried first by the epoch claim instead of reading it again. Only a
        hint: the claim is a CAS, so a newer version makes it re-read and retry."""
        if settings is None:
            settings = Settings()
        elif not isinstance(settings, Settings):
            raise InvalidArgument(f"settings must be a shaledb.Settings, got {type(settings).__name__}")
        url = as_url(url)
        clock = clock or SYSTEM_CLOCK
        rng = random.Random(seed)
        claim = writers.claim(canonical_url(url) if store is None and url else None)
        try:
            wrapped = open_stack(url, store, store_options, settings, clock, rng)
            external = ExternalStores(
                settings_factory(settings, clock, store_options),
                own_url=url,
            )

            def check_root() -> None:
                reachable = store is None or store_options is not None  # a passed store's bucket: not ours
                check_new_root(url, wrapped, store_options, settings, clock, ancestors_reachable=reachable)

            try:
                db = cls(
                    wrapped,
                    settings,
                    clock,
                    rng,
                    create_if_missing,
                    external=external,
                    before_create=check_root,
                    latest=latest,
                )
            except BaseException:
                close_quietly(external, wrapped if store is None else None)
                raise
            db.owns_store = store is None
            db._url = handle_url(url, store)
        except BaseException:
            writers.release(claim)
            raise
        writers.attach(claim, db)
        return db

    @classmethod
    def opened(cls, url: str | os.PathLike[str]) -> Db | None:
        """The writer this process has open on the database at ``url``, or None.

        One process opens one writer per database, and an open writer's threads keep it
        alive until it is closed: a handle dropped without ``close()`` (an exception between
        open and close, a notebook cell run again) would otherwise block every later
        ``Db.open(url)`` of the process. ``shaledb.Db.opened(url).close()`` frees it.
        Any spelling of the URL finds it (relative or absolute paths of one directory).
        Handles opened on an explicit ``store=`` are not found (they are not registered).
        """
        key = canonical_url(as_url(url))
        handle = writers.open_handle(key)
        return handle if isinstance(handle, Db) else None

    @classmethod
    def open_from_checkpoint(
        cls,
        url: str | os.PathLike[str] | None,
        parent_url: str | os.PathLike[str],
        parent_checkpoint: uuid.UUID | str | Checkpoint | None = None,
        *,
        settings: Settings | None = None,
        store: ObjectStore | None = None,
        parent_store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        store_options: Mapping[str, object] | None = None,
    ) -> Db:
        """Open the clone at ``url`` of the database at ``parent_url``, creating it if needed.

        A new clone starts as the parent's version pinned by
        ``parent_checkpoint`` (its id or name; None: the parent's current
        version), references the parent's SSTs without copying them (only
        WAL objects are copied) and writes only to its own root. Creation
        follows the clone protocol (docs/design/checkpoints-readers-clones.md)
        and is safe to retry after a crash at any step; an initialized clone
        simply opens. See ``shaledb.admin.clone``.
        """
        url = as_url(url)
        claim = writers.claim(canonical_url(url) if store is None and url else None)
        try:
            db = open_clone(
                cls,
                url,
                as_url(parent_url),
                parent_checkpoint,
                settings=settings,
                store=store,
                parent_store=parent_store,
                clock=clock,
                seed=seed,
                store_options=store_options,
            )
        except BaseException:
            writers.release(claim)
            raise
        db._url = handle_url(url, store)
        writers.attach(claim, db)
        return db

    def __init__(
        self,
        store: ObjectStore,
        settings: Settings,
        clock: Clock,
        rng: random.Random,
        create_if_missing: bool,
        *,
        external: ExternalStores | None = None,
        before_create: Callable[[], None] | None = None,
        latest: Manifest | None = None,
    ) -> None:
        if settings.malloc_mmap_threshold_bytes is not None:
            fix_mmap_threshold(settings.malloc_mmap_threshold_bytes)
        self.settings = settings
        self.owns_store = False
        self._url: str | None = None  # set by the openers (handle_url)
        self._close_hooks: list[Callable[[], None]] = []  # (run_close_hooks: shaledb.aio's pool)
        """Whether :meth:`close` closes ``store``: ``open`` opened it (a passed-in store stays theirs)."""
        self.external = external or ExternalStores(settings_factory(settings, clock, None))
        self.store = store
        self.clock = clock
        self.rng = rng
        self.codec = CODECS[settings.compression]
        self.metrics_state = WriterMetrics()
        self._m_puts = self._m_put_bytes = self._m_gets = self._m_scans = 0  # shaledb.store.metrics
        self._lock = threading.Lock()
        self._state = _OPEN
        self.closing = False
        """Set when close() starts: the final flush must not wait for a compactor."""
        self._close_done = threading.Event()
        """Set when ``close`` has finished (a second, concurrent close waits for it)."""
        self._closer: int | None = None
        """The thread running the first close (a close it makes again returns at once)."""
        self._close_finished = False
        """``_close`` ran to its end (a KeyboardInterrupt may cut it short: then the next
        ``close`` runs it again)."""
        self._pools_released = False
        self._failure: BaseException | None = None
        self._pid = os.getpid()
        self._feeds: weakref.WeakSet[ChangeFeed] = weakref.WeakSet()
        """Change feeds made by :meth:`changes`: detached (ClosedError) when this closes."""
        self.cache = LruCache(settings.block_cache_bytes)
        self.tables = TableCache(
            self._resolve_store, self.cache, settings.sst_read_ahead_bytes, limits_of(settings)
        )
        self.journal = JournalResolver(
            self._resolve_store, self.cache, lambda: self.manifest, settings.journal_whole_block_max_bytes
        )
        self.merge_operator = as_operator(settings.merge_operator)
        self._check_operand = None if self.merge_operator is None else self.merge_operator.check_operand
        self._merge_recorded = False
        """Whether the manifest names the operator (checked once, by the first merge)."""
        self.vis = Visibility(lambda: int(self.clock.now() * 1000), self.journal.resolve)
        self._tables, self._vis, self._journal = self.tables, self.vis, self.journal  # (Queries reads these)
        self._index_lock = threading.Lock()
        self._journal_lock = threading.Lock()
        self.manifests = ManifestStore(store, clock, rng, author="writer")
        self._space = threading.Condition(self._lock)
        self._background: list[Any] = []
        # Serializes this process's manifest writes with adopting their result as the view.
        self._mlock = threading.RLock()
        self.pins = ViewPins(clock, rng, grace_s=max(60.0, settings.retry.timeout_s))

        m = claim_writer_epoch(
            self.manifests,
            timeout_s=settings.manifest_update_timeout_s,
            create_if_missing=create_if_missing,
            extra=lambda nxt, e: claim_wal_window(self.pins.on_claim(nxt, e), settings.wal_max_in_flight),
            before_create=before_create,
            latest=latest,
        )
        # The SSTs' index and filter blocks depend on nothing the fence and the replay do:
        # fetch them meanwhile (open_in_parallel False: one call at a time, pinned below).
        pin = settings.pin_metadata_on_open
        pinning = self.tables.pin_meanwhile(m) if pin and settings.open_in_parallel else completed(None)
        try:
            self.pins.confirm(m)
            self.epoch = m.writer_epoch
            self.vis.folder = Folder(self.merge_operator, m.option(OPT_MERGE_OPERATOR))  # checks the name
            fence_id, fence_rec = write_fence(
                store,
                m,
                self.epoch,
                nonce=rng.getrandbits(128).to_bytes(16, "little"),
                now_ms=int(clock.now() * 1000),
                codec=self.codec,
            )
            threshold = settings.value_separation_threshold
            m, replay = confirm_and_replay(
                self.manifests,
                m,
                self.epoch,
                fence_rec.id,
                verify=settings.track_and_verify_wals,
                mode=settings.wal_recovery_mode,
                threshold=threshold,
                read_ahead=settings.wal_read_ahead,
                parallel=settings.open_in_parallel,
            )
        except BaseException:
            wait([pinning])  # no fetch outlives a failed open (the caller may close the store)
            raise
        for note in replay.skipped:
            log.warning("recovery: %s", note)
        log.info(
            "opened %s as writer epoch %d at manifest %d%s: replayed %d WAL objects, %d entries",
            store.describe(),
            self.epoch,
            m.id,
            f" (after writer epoch {self.epoch - 1})" if self.epoch > 1 else "",
            len(replay.objects),
            len(replay.keys),
        )
        self.manifest = m
        self._seq = max(m.last_l0_seq, replay.max_seq)
        retention = resolve_retention(settings.history_retention_s, m, store.describe())
        if retention != settings.history_retention_s:
            settings = self.settings = settings.replace(history_retention_s=retention)
        mem = new_memtable()
        if settings.history_retention_s:  # keep every version (shaledb.engine.history)
            mem.pin(HISTORY_PIN)
        self._indexed = m.option(OPT_INDEXED) == "1"
        if replay.keys:
            keep = [i for i, e in enumerate(replay.ents) if e[0] > m.last_l0_seq]
            keys = [replay.keys[i] for i in keep]
            ents = [replay.ents[i] for i in keep]
            sub = mem.sub
            assert sub is not None
            for k, e in zip(keys, ents):
                if e[1] & FLAG_INDEX_TREE:
                    sub.put(k, (e[0], e[1] & ~FLAG_INDEX_TREE, e[2]))
                    self._indexed = True
                elif e[1] == KIND_RANGE_DEL:
                    mem.add_range_del(k, e[2], e[0])
                else:
                    put_entry(mem, k, e)  # a merge stacks (shaledb.engine.merging)
                    if e[1] & FLAG_TERMS:
                        self._indexed = True
                mem.nbytes += len(k) + len(e[2]) + ENTRY_OVERHEAD
            mem.locs.update(replay.locs)
        self._mem = mem
        if settings.history_retention_s:
            self._history = History(
                settings.history_retention_s, m, self._seq, int(clock.now() * 1000), replay.marks
            )
        self._imms: tuple[Memtable, ...] = ()
        self._unflushed = mem.nbytes
        self._freeze_bytes = settings.l0_sst_size_bytes
        """A write that leaves the memtable at least this big freezes it: the size bound, or 0
        once its writes span ``l0_max_wal_objects`` WAL objects (:meth:`_wal_limit_reached`)."""
        self._view = ReadView(self._mem, self._imms, m)
        pinning.result()  # the early pin's own SSTs (an error is its bug: a fetch error only skips one)
        if pin:
            self.tables.pin(m.all_ssts())  # every SST's index and filter, in parallel (the rest, if any)
        # Every thread this open starts is stopped if the rest of it fails (a Ctrl-C anywhere
        # below, a failed salvage flush or manifest update): before, a failure after the WAL
        # writer started left its threads running in a handle nobody had. Each start itself
        # holds Ctrl-C back (shaledb.db.interrupts): one raised inside Thread.start() left that
        # thread running where even this cleanup could not reach it.
        try:
            with interrupts_deferred():
                self.wal = WalWriter(
                    store=store,
                    clock=clock,
                    rng=rng,
                    lock=self._lock,
                    epoch=self.epoch,
                    next_id=fence_id + 1,
                    durable_seq=self._seq,
                    flush_interval_s=settings.flush_interval_s,
                    max_buffer_bytes=wal_object_bytes(settings),
                    codec=self.codec,
                    block_size=settings.block_size_bytes,
                    on_failure=self._fail,
                    threshold=threshold,
                    max_in_flight=settings.wal_max_in_flight,
                )
            self.wal.sink = mem.locs
            # The replayed objects count toward the limit: after a slow writer died, the next
            # write freezes what they held.
            self.wal.limit_id = self._wal_limit(replay.objects[0].id if replay.objects else fence_id + 1)
            self.wal.on_limit = self._wal_limit_reached
            if fence_id + 1 >= self.wal.limit_id:
                self._freeze_bytes = 0
            self.wal.note_written([*replay.objects, fence_rec])
            if threshold is not None:
                self.wal.note_journal(replay.journal)
            self._host: _WriterHost = _WriterHost(self)
            with interrupts_deferred():
                self.flusher = MemtableFlusher(self._host, self._fail)
            if replay.skipped:
                # Salvaged: persist what was recovered and move replay_after_wal_id
                # past the damage, so later opens start there. Also when nothing was
                # recovered (damage in the first object): otherwise the next open
                # stops at the same damage and drops everything written after it.
                with self._lock:
                    self._freeze_locked(even_if_empty=True)
                self.flush(memtable=True)
            self._start_background()
        except BaseException:
            self._stop_started()
            raise

    def _start_background(self) -> None:
        """Pin the opened view, then start the embedded compactor and garbage collector."""
        self._ensure_view_pinned()
        s = self.settings
        with interrupts_deferred():
            if s.compactor is not None:
                self._background.append(EmbeddedCompactor(self._host, s.compactor))
            if s.garbage_collector is not None:
                self._background.append(EmbeddedGc(self._host, s.garbage_collector))
            if s.journal.compaction_interval_s is not None:
                self._background.append(EmbeddedJournalCompactor(self._host, s.journal.compaction_interval_s))
            _WRITERS.add(self)  # (once open: the exit and fork hooks expect a whole writer)
            acquire_pools()  # (released by close: the shared read threads end with the last handle)
            self._registered = True

    def _stop_started(self) -> None:
        """Stop the threads a failed open started (background services, flusher, WAL writer)."""
        for svc in reversed(self._background):
            svc.stop()
        if hasattr(self, "flusher"):
            self.flusher.stop()
        if hasattr(self, "wal"):
            self.wal.stop()
        if self._registered:  # (a Ctrl-C held back to the end of the open: all of it ran)
            _WRITERS.discard(self)
            release_pools()

    def _ensure_view_pinned(self) -> None:
        """The manifest read after fencing may have SSTs our opening checkpoint does not pin."""
        with self._mlock:
            if not self.pins.covers(self.manifest):
                self._update_manifest(NoChange())

    def _resolve_store(self, db_index: int) -> ObjectStore:
        """The store holding objects of ``db == db_index`` (a clone's parents: ``shaledb.engine.parents``)."""
        if db_index == 0:
            return self.store
        return self.external.store_for(db_index, self.manifest)

    def create_checkpoint(
        self,
        lifetime: timedelta | float | None = None,
        source: uuid.UUID | str | Checkpoint | None = None,
        name: str | None = None,
        scope: str = "all",
        *,
        metadata: Mapping[str, str] | None = None,
    ) -> Checkpoint:
        """Pin the current version: a :class:`~shaledb.manifest.model.Checkpoint`.

        ``scope="all"`` includes every write issued before the call (the WAL is
        flushed first); ``"durable"`` only writes already durable. ``lifetime``
        (timedelta or seconds; None: never expires), ``source`` (an existing
        checkpoint's id or name: reuse its version), ``name`` (a label) and ``metadata``
        are stored with it. See ``shaledb.admin.checkpoint``.
        """
        return create_writer_checkpoint(
            self._host, lifetime=lifetime, source=source, name=name, scope=scope, metadata=metadata
        )

    # ---------------------------------------------------------------- writes

    def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        durable: bool = True,
        ttl: timedelta | float | str | None = None,
        metadata: BytesLike | None = None,
        indexes: IndexTerms | None = None,
    ) -> WriteHandle:
        """Set ``key`` to ``value``; durable when it returns unless ``durable=False``."""
        if durable is not True and durable is not False:
            check_flag("durable", durable)
        if ttl is not None or metadata is not None or indexes is not None:
            return self.write(
                WriteBatch().put(key, value, ttl=ttl, metadata=metadata, indexes=indexes), durable=durable
            )
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_BYTES:
            key = check_key(key)
        if type(value) is not bytes or len(value) > MAX_VALUE_BYTES:
            value = check_value(value)
        n = len(key) + len(value) + ENTRY_OVERHEAD
        with self._lock:
            if (
                self._state
                or self._failure is not None
                or self._unflushed > self.settings.max_unflushed_bytes
            ) and not self._indexed:
                self._admit_locked()
            if not self._indexed:
                seq = self._seq = self._seq + 1
                self._m_puts += 1
                self._m_put_bytes += n - ENTRY_OVERHEAD
                if self._txn_log is not None:  # open transactions see this write (shaledb.db.txn)
                    self._txn_log.admit(seq, (key,))
                if self._history is not None:
                    self._history.note(seq, int(self.clock.now() * 1000))
                e = (seq, 0, value)
                mem = self._mem
                mem.put(key, e)
                wal = self.wal
                n0 = len(wal.keys)
                try:  # (Ctrl-C between two columns: see WalWriter.rewind_locked)
                    wal.keys.append(key)
                    wal.seqs.append(seq)
                    wal.kinds.append(0)
                    wal.pays.append(value)
                except BaseException:
                    wal.rewind_locked(n0)
                    raise
                mem.nbytes += n
                wal.nbytes += n
                self._unflushed += n
                latch = wal.pending
                if wal.nbytes >= wal.max_buffer_bytes:
                    wal.cut_full_locked()
                if mem.nbytes >= self._freeze_bytes:
                    self._freeze_locked()
            else:
                seq = -1
        if seq < 0:  # a database with index terms: every write looks up the key's terms
            return self._write_indexed(WriteBatch().put(key, value), durable)
        if durable:
            self.wal.wait_durable(seq, latch=latch)
        return WriteHandle(self.wal, seq)

    def merge(self, key: BytesLike, operand: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Merge ``operand`` into ``key``'s value with ``Settings.merge_operator``, without
        reading it: reads and compaction fold it in later (``shaledb.engine.merging``).
        On a database with index terms the merge is folded now instead (one lookup of the
        key, as every indexed write does for its old terms): ``plan_index_changes``."""
        if durable is not True and durable is not False:
            check_flag("durable", durable)
        k = key if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES else check_key(key)
        op = operand if type(operand) is bytes and len(operand) <= MAX_VALUE_BYTES else check_value(operand)
        if not self._merge_recorded:
            self._check_merges()
        if self._check_operand is not None:
            self._check_operand(op)
        if self._indexed:  # folded at write time to keep the index exact (plan_index_changes)
            return self._write_indexed(WriteBatch().merge(k, op), durable)
        n = len(k) + len(op) + ENTRY_OVERHEAD
        with self._lock:
            if (
                self._state
                or self._failure is not None
                or self._unflushed > self.settings.max_unflushed_bytes
            ):
                self._admit_locked()
            if self._indexed:  # the first indexed write raced with this one
                seq = -1
            else:
                seq, latch = self._merge_locked(k, op, n)
        if seq < 0:
            return self._write_indexed(WriteBatch().merge(k, op), durable)
        if durable:
            self.wal.wait_durable(seq, latch=latch)
        return WriteHandle(self.wal, seq)

    def _merge_locked(self, k: bytes, op: bytes, n: int) -> tuple[int, Latch]:
        """``merge`` under the write lock on a database without index terms: (seq, latch)."""
        mem = self._mem
        e = stack(stack_base(mem, k), self._seq + 1, [op])
        if stack_size(e) >= MAX_STACK:  # fold the stack (may raise: then nothing is applied)
            floor = covering_seq(self._view, self.tables, k, None) if has_range_dels(self._view) else 0
            full = complete(self._imms, self._view.l0, self._view.runs, self.tables, k, None, e, floor)
            e = (e[0], 0, self.vis.value(k, full[1], full[2]) or b"")
        if self._txn_log is not None:  # may raise TransactionConflict: then nothing is applied
            self._txn_log.admit(self._seq + 1, (k,))
        if self._history is not None:
            self._history.note(self._seq + 1, int(self.clock.now() * 1000))
        seq = self._seq = self._seq + 1
        self._m_puts += 1
        self._m_put_bytes += n - ENTRY_OVERHEAD
        mem.put(k, e)
        wal = self.wal
        pay = one_operand(op)
        n0 = len(wal.keys)
        try:  # (Ctrl-C between two columns: see WalWriter.rewind_locked)
            wal.keys.append(k)
            wal.seqs.append(seq)
            wal.kinds.append(KIND_MERGE)
            wal.pays.append(pay)
        except BaseException:
            wal.rewind_locked(n0)
            raise
        mem.nbytes += n
        wal.nbytes += n
        self._unflushed += n
        latch = wal.pending
        if wal.nbytes >= wal.max_buffer_bytes:
            wal.cut_full_locked()
        if mem.nbytes >= self._freeze_bytes:
            self._freeze_locked()
        return seq, latch

    def _check_batch_operands(self, kinds: bytes | bytearray | list[int], payloads: list[bytes]) -> None:
        """Every merge operand of a batch, checked by the operator before anything is applied."""
        check = self._check_operand
        assert check is not None
        for t, p in zip(kinds, payloads):
            if t == KIND_MERGE:
                for operand in decode_merge(p)[1]:
                    check(operand)

    def _check_merges(self) -> None:
        """Merges need an operator; the first one records its name in the manifest."""
        op = self.merge_operator
        if op is None:
            raise MergeOperatorMissing("merge needs Settings(merge_operator=...) (see shaledb.merge)")
        if not self._merge_recorded:
            if self.manifest.option(OPT_MERGE_OPERATOR) is None:
                self._update_manifest(RecordMergeOperator(op.name, self._record_operator))
            self._merge_recorded = True

    def _record_operator(self, m: Manifest, name: str) -> Manifest | None:
        recorded = m.option(OPT_MERGE_OPERATOR)
        if recorded is not None:
            check_operator(self.merge_operator, recorded)
            return None
        opts = tuple(sorted({**dict(m.options), OPT_MERGE_OPERATOR: name}.items()))
        return self._decorate_manifest(dataclasses.replace(m, options=opts))

    def delete(self, key: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Remove ``key`` (a tombstone; absent keys are fine)."""
        return self.write(WriteBatch().delete(key), durable=durable)

    def __setitem__(self, key: BytesLike, value: BytesLike) -> None:
        """``db[key] = value``: a durable :meth:`put`."""
        self.put(key, value)

    def __delitem__(self, key: BytesLike) -> None:
        """``del db[key]``: a durable :meth:`delete`, or KeyError when the key is absent
        (a lookup first: not atomic with concurrent writers of the key)."""
        if self.get(key) is None:
            raise KeyError(key)
        self.delete(key)

    def delete_range(self, start: BytesLike, end: BytesLike, *, durable: bool = True) -> WriteHandle:
        """Remove every key in ``[start, end)``: one range tombstone, however many keys
        it covers (see ``docs/format/range-dels.md``)."""
        return self.write(WriteBatch().delete_range(start, end), durable=durable)

    def write(self, batch: WriteBatch, *, durable: bool = True) -> WriteHandle:
        """Apply ``batch`` atomically under one sequence number."""
        if not isinstance(batch, WriteBatch):
            raise InvalidArgument(f"write() takes a WriteBatch, got {type(batch).__name__}")
        if durable is not True and durable is not False:
            check_flag("durable", durable)
        keys = batch._keys
        if not keys:
            with self._lock:
                self._admit_locked(check_space=False)
                return WriteHandle(self.wal, self._seq)
        kinds = batch._kinds
        payloads = batch._payloads
        plain = batch._plain()  # only put_many's puts: no merge, range or extras; bytes counted
        if plain:
            if self._indexed:
                return self._write_indexed(batch, durable)
            n = batch._counted
        else:
            if KIND_MERGE in kinds:
                self._check_merges()
                if self._check_operand is not None:
                    self._check_batch_operands(kinds, payloads)
            if self._indexed or any("indexes" in x for _, x in batch._extras or ()):
                return self._write_indexed(batch, durable)
            if batch._extras:  # (the batch's own lists stay as built: a copy is finished)
                kinds, payloads = list(kinds), list(payloads)
                self._finish_extras(batch, kinds, payloads)
                n = sum(map(len, keys)) + sum(map(len, payloads))
            else:
                n = batch._entry_bytes()
        n += ENTRY_OVERHEAD * len(keys)
        with self._lock:
            indexed = self._indexed
            if not indexed:
                if (
                    self._state
                    or self._failure is not None
                    or self._unflushed > self.settings.max_unflushed_bytes
                ):
                    self._admit_locked()
                latch = self.wal.pending  # before _apply_locked, which may seal the buffer
                seq = self._apply_locked(keys, kinds, payloads, n, ranged=batch._ranged, plain=plain)
        if indexed:  # the first indexed write raced with this one: take the indexed path
            return self._write_indexed(batch, durable)
        if durable:
            self.wal.wait_durable(seq, latch=latch)
        return WriteHandle(self.wal, seq)

    def _apply_locked(
        self,
        keys: list[bytes],
        kinds: list[int],
        payloads: list[bytes],
        n: int,
        index: tuple[list[bytes], list[int], list[bytes]] | None = None,
        *,
        ranged: bool = False,
        plain: bool = False,
    ) -> int:
        """Apply one batch under the write lock (admission already checked); its seq.
        ``ranged``: the batch holds range tombstones (``engine/range_tombstones.py``);
        ``plain``: every entry is a plain put (``WriteBatch._plain``)."""
        if self._txn_log is not None:  # may raise TransactionConflict: then nothing is applied
            if ranged:
                self._txn_log.admit(self._seq + 1, *batch_ranges(keys, kinds, payloads))
            else:
                self._txn_log.admit(self._seq + 1, keys)
        if self._history is not None:
            self._history.note(self._seq + 1, int(self.clock.now() * 1000))
        seq = self._seq = self._seq + 1
        self._m_puts += len(keys)
        self._m_put_bytes += n - ENTRY_OVERHEAD * len(keys)
        # (a plain batch's kinds are all KIND_VALUE: not read)
        ents: list[Entry] = list(zip(repeat(seq), repeat(KIND_VALUE) if plain else kinds, payloads))
        mem = self._mem
        if ranged:
            apply_to_memtable(mem, keys, ents)  # (merges stack onto the batch's range tombstones)
        elif not plain and KIND_MERGE in kinds:
            put_entries(mem, keys, ents)  # merges stack on the memtable's entries, in order
        else:
            mem.put_many(keys, ents)
        wal = self.wal
        n0 = len(wal.keys)
        try:  # (Ctrl-C between two columns: see WalWriter.rewind_locked)
            wal.keys += keys
            wal.seqs += array("Q", (seq,)) * len(keys)
            wal.kinds += bytes(len(keys)) if plain else bytes(kinds)  # (KIND_VALUE is 0)
            wal.pays += payloads
            if index is not None and index[0]:
                ikeys, ikinds, ipays = index
                sub = mem.sub
                assert sub is not None
                sub.put_many(ikeys, [(seq, k, p) for k, p in zip(ikinds, ipays)])
                wal.keys += ikeys
                wal.seqs += array("Q", (seq,)) * len(ikeys)
                wal.kinds += bytes(k | FLAG_INDEX_TREE for k in ikinds)
                wal.pays += ipays
        except BaseException:
            wal.rewind_locked(n0)
            raise
        mem.nbytes += n
        wal.nbytes += n
        self._unflushed += n
        if wal.nbytes >= wal.max_buffer_bytes:
            wal.cut_full_locked()
        if mem.nbytes >= self._freeze_bytes:
            self._freeze_locked()
        return seq

    def _finish_extras(self, batch: WriteBatch, kinds: list[int], payloads: list[bytes]) -> None:
        """Encode metadata and expiry (computed now) into rich entries' payloads."""
        now_ms = int(self.clock.now() * 1000)
        for i, extra in batch._extras or ():
            expires = now_ms + extra["ttl_ms"] if "ttl_ms" in extra else None
            flags, payload = encode_payload(extra["value"], extra.get("metadata"), expires)
            kinds[i] = (kinds[i] & 0x03) | flags
            payloads[i] = payload

    @contextmanager
    def batch(self, *, durable: bool = True) -> Iterator[WriteBatch]:
        """``with db.batch() as b: b.put(...)`` -- committed atomically on clean exit;
        adding to ``b`` after that raises ``ClosedError`` (it would never be written)."""
        b = WriteBatch()
        yield b
        self.write(b, durable=durable)
        b._seal()

    def _admit_locked(self, check_space: bool = True) -> None:
        """Raise if writes are not allowed; wait while unflushed bytes are over budget."""
        stalled = None
        while True:
            if self._failure is not None:
                raise self._failure_error()
            if self._state != _OPEN:
                raise ClosedError("database is closed")
            if not check_space or self._unflushed <= self.settings.max_unflushed_bytes:
                if stalled is not None:
                    self.metrics_state.write_stall_s.observe(self.clock.monotonic() - stalled)
                return
            if stalled is None:
                stalled = self.clock.monotonic()
                self.metrics_state.write_stalls += 1
            self.flusher.notify()
            self._stalled_writers += 1  # the embedded compactor yields to the flusher meanwhile
            try:
                self._space.wait(0.1)
            finally:
                self._stalled_writers -= 1

    def _wal_limit_reached(self) -> None:
        """The WAL cut the object that makes the memtable span ``l0_max_wal_objects``
        (under the db lock): the next write freezes it."""
        self._freeze_bytes = 0

    def _wal_limit(self, first: int) -> int:
        """The WAL id at which a memtable whose writes start at ``first`` is frozen
        (``Settings.l0_max_wal_objects``; never when 0)."""
        limit = self.settings.l0_max_wal_objects
        return first + limit if limit else 1 << 64

    def _freeze_locked(self, *, even_if_empty: bool = False) -> None:
        mem = self._mem
        if not mem.d and not mem.rdels and not even_if_empty:
            return
        # Calls first, then plain assignments: a KeyboardInterrupt (Ctrl-C raises it in the
        # main thread at a call) cannot leave the frozen memtable both in ``_imms`` and
        # still taking writes as ``_mem`` (its later writes would be dropped with it).
        fresh = new_memtable()
        if self._history is not None:
            fresh.pin(HISTORY_PIN)
        imms = (mem, *self._imms)
        view = ReadView(fresh, imms, self.manifest, runs=self._view.runs)
        mem.wal_id = self.wal.seal_locked()
        limit = self._wal_limit(mem.wal_id + 1)
        self.wal.limit_id = limit
        self._freeze_bytes = self.settings.l0_sst_size_bytes
        mem.last_seq = self._seq
        self._imms = imms
        self._mem = fresh
        self.wal.sink = fresh.locs
        self._view = view
        self.flusher.notify()

    # ------------------------------------- hooks for the roles (see _WriterHost)

    def _oldest_imm(self) -> Memtable | None:
        imms = self._imms
        return imms[-1] if imms else None

    def _is_pending(self, mem: Memtable) -> bool:
        return any(x is mem for x in self._imms)

    def _install_flushed(self, imm: Memtable, m: Manifest) -> None:
        """A frozen memtable reached L0 in manifest ``m``: drop it from the view."""
        with self._lock:
            self._imms = tuple(x for x in self._imms if x is not imm)
            self._unflushed -= imm.nbytes
            self._set_manifest_locked(m)
            self._space.notify_all()
        for svc in self._background:
            wake = getattr(svc, "wake", None)
            if wake is not None:
                wake()  # a new L0: the embedded compactor may have work

    def _set_manifest_locked(self, m: Manifest) -> None:
        self.pins.confirm(m)
        if m.id < self.manifest.id:
            return
        runs = self._view.runs if m.data.runs == self.manifest.data.runs else None
        self.journal.note(m)
        self.manifest = m
        self._view = ReadView(self._mem, self._imms, m, runs=runs)
        self.tables.retain(m.all_ssts())

    def refresh_manifest(self) -> Manifest:
        """Pick up manifest changes by other processes; fail if fenced."""
        m = self.manifests.refresh(self.manifest)
        if m.writer_epoch != self.epoch:
            raise FencedError(
                f"writer epoch {m.writer_epoch} took over; this writer (epoch {self.epoch}) stops"
            )
        if m.id > self.manifest.id:
            with self._mlock:
                if self.pins.covers(m):
                    with self._lock:
                        self._set_manifest_locked(m)
                else:  # new SSTs (a standalone compactor): pin them before reading them
                    m = self._update_manifest(NoChange(), current=m)
        return m

    def _decorate_manifest(self, m: Manifest) -> Manifest:
        """Adjust a manifest the writer is about to write: its view checkpoints (``shaledb.engine.pins``).

        ``m`` must keep the id of the manifest it was derived from.
        """
        return self.pins.decorate(m)

    def _update_manifest(self, edit: Edit, *, current: Manifest | None = None) -> Manifest:
        """Write a manifest version from this process and make it the read view.

        Serialized with the writer's other manifest writes. ``edit`` should
        pass its result through :meth:`_decorate_manifest` (the L0 flush and
        the embedded compactor do) so the new view is pinned by the same CAS;
        if the result is not pinned (``edit`` changed nothing while another
        process changed the SSTs), one more write pins it.
        """
        timeout = self.settings.manifest_update_timeout_s
        with self._mlock:
            m = self.manifests.update(edit, timeout_s=timeout, current=current or self.manifest)
            with self._lock:
                self.pins.confirm(m)
                if self.pins.epoch is None or self.pins.covers(m):
                    self._set_manifest_locked(m)
                    return m
            m = self.manifests.update(RepinView(self.pins), timeout_s=timeout, current=m)
            with self._lock:
                self._set_manifest_locked(m)
            return m

    def _failed(self) -> bool:
        return self._failure is not None

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise self._failure_error()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = exc
                # Reads stop too: the memtable may hold writes whose WAL object never landed
                # (the failed write's own, those queued behind it), and a read serving them
                # showed a value the reopened database does not have.
                self._closed = True
                if isinstance(exc, FencedError):
                    self.metrics_state.fenced += 1
            self._space.notify_all()
        # Logged after the failure is recorded: a write racing this call must already see it.
        if first and isinstance(exc, FencedError):
            log.warning("writer epoch %d of %s was fenced: %s", self.epoch, self.store.describe(), exc)
        elif first:
            log.error("writer of %s stops after a background failure: %r", self.store.describe(), exc)

    @property
    def _closed_message(self) -> str:  # type: ignore[override]  # (Queries': a class attribute)
        """Why reads refuse: closed, or stopped by a failure (``_fail``)."""
        f = self._failure
        if f is None or self._state == _CLOSED:
            return "database is closed"
        if isinstance(f, FencedError):
            return (
                f"this writer was fenced ({f}); its reads stop too, as it may hold writes that "
                "never became durable and misses the newer writer's"
            )
        return str(self._failure_error())

    def _failure_error(self) -> BaseException:
        f = self._failure
        if isinstance(f, FencedError):
            return FencedError(str(f))
        if isinstance(f, ForkedHandle):
            return ForkedHandle(str(f))
        err = ClosedError(
            f"database stopped after a background failure: {type(f).__name__}: {f}; this handle "
            "takes no more writes or reads (it may hold writes that never became durable): close it and "
            "open the database again (once the store answers)"
        )
        err.__cause__ = f
        return err

    # ----------------------------------------------------------------- reads

    def snapshot(self, *, at_seq: int | None = None, at_time: datetime | None = None) -> Snapshot:
        """A consistent read-only view; close it (or use ``with``) when done.

        ``at_seq`` / ``at_time`` (a timezone-aware datetime) read the database
        as it was then, within ``Settings.history_retention_s``; earlier
        raises :class:`~shaledb.errors.HistoryUnavailable` naming the oldest
        readable point. See ``shaledb.engine.history``.
        """
        if at_seq is None and at_time is None:
            view, seq, cp = self._pin()
            return Snapshot(self, view, seq, cp)
        return self._snapshot_at(at_seq, at_time)

    def _snapshot_at(self, at_seq: int | None, at_time: datetime | None) -> Snapshot:
        if at_seq is not None and at_time is not None:
            raise InvalidArgument("give at_seq or at_time, not both")
        h = self._history
        if h is None:
            raise InvalidArgument("time-travel reads need Settings.history_retention_s > 0")
        at_ms = None if at_time is None else to_millis(at_time)
        if at_seq is not None and (isinstance(at_seq, bool) or not isinstance(at_seq, int) or at_seq < 0):
            raise InvalidArgument(f"at_seq must be a sequence number (int >= 0), got {at_seq!r}")
        with self._lock:
            if self._state == _CLOSED:
                raise ClosedError("database is closed")
            now_ms = int(self.clock.now() * 1000)
            with h.lock:  # (the flush thread prunes the marks)
                seq = h.resolve(at_ms, now_ms) if at_ms is not None else at_seq
                assert seq is not None
                if seq > self._seq:
                    raise InvalidArgument(f"at_seq {seq} is newer than the newest write (seq {self._seq})")
                h.check_seq(seq, now_ms)
            view = self._view
            view.mem.pin(seq)
            cp = self.pins.acquire()
        return Snapshot(self, view, seq, cp)

    def transaction(self, isolation: str = "snapshot", *, durable: bool = True) -> Transaction:
        """An optimistic transaction: ``with db.transaction("serializable") as txn: ...``.

        Reads see the snapshot taken now plus the transaction's own writes;
        the writes are applied as one batch at commit (``durable`` as in
        :meth:`write`). A commit that conflicts with a write committed since
        the snapshot raises :class:`~shaledb.errors.TransactionConflict` and
        writes nothing. See ``shaledb.db.txn`` for the isolation levels.
        """
        from .txn import begin

        return begin(self, isolation, durable)

    def _pin(self) -> tuple[ReadView, int, uuid.UUID | None]:
        """Pin the current view: its memtable versions at ``seq`` and its SSTs' checkpoint."""
        with self._lock:
            if self._state == _CLOSED:
                raise ClosedError("database is closed")
            view = self._view
            seq = self._seq
            view.mem.pin(seq)
            cp = self.pins.acquire()
        return view, seq, cp

    def _unpin(self, mem: Memtable, seq: int, cp: uuid.UUID | None = None) -> None:
        with self._lock:
            mem.unpin(seq)
        self.pins.release(cp)

    # ---------------------------------------------------------------- writes

    def _write_indexed(self, batch: WriteBatch, durable: bool) -> WriteHandle:
        """A write to a database with index terms: old terms are read, changes planned
        and applied while holding the index lock (see ``shaledb.engine.indexes``)."""
        db = self
        with db._index_lock:
            with db._lock:
                db._admit_locked(check_space=False)
                db._indexed = True
            tables, vis = db.tables, db.vis
            prefetch_old_terms(db._view, tables, batch._keys)  # a batch's cold keys in parallel GETs
            plan = plan_index_changes(  # reads the batch's lists, keeps none of them
                batch._keys,
                batch._kinds,
                batch._payloads,
                dict(batch._extras or ()),
                lambda k: current_terms(db._view, tables, vis, k),
                int(db.clock.now() * 1000),
                old_value=lambda k: current_value(db._view, tables, vis, k),
                fold=vis.folder.fold,  # merges fold at write time (plan_index_changes)
            )
            n = sum(map(len, plan.keys)) + sum(map(len, plan.index_keys))
            n += sum(map(len, plan.payloads)) + sum(map(len, plan.index_payloads))
            n += ENTRY_OVERHEAD * (len(plan.keys) + len(plan.index_keys))
            with db._lock:
                if db._state or db._failure is not None or db._unflushed > db.settings.max_unflushed_bytes:
                    db._admit_locked()
                latch = db.wal.pending  # before _apply_locked, which may seal the buffer
                seq = db._apply_locked(
                    plan.keys,
                    plan.kinds,
                    plan.payloads,
                    n,
                    (plan.index_keys, plan.index_kinds, plan.index_payloads),
                    ranged=batch._ranged,
                )
        if durable:
            db.wal.wait_durable(seq, latch=latch)
        return WriteHandle(db.wal, seq)

    # ---------------------------------------------------------- maintenance

    def compact_journal(
        self, *, max_runs: int | None = None, objects: Sequence[str] | None = None
    ) -> JournalCompactionReport:
        """Score the journal and rewrite the most rewarding runs of objects (see
        ``shaledb.journal.compaction``). Repeats until no run beats its
        target (or ``max_runs``). ``objects`` forces one run: these consecutive
        journal objects, whatever their scores. Returns scores, runs, bytes
        rewritten and bytes reclaimed; ``busy`` if another call is running.
        """
        if self.closed:
            raise ClosedError("database is closed")
        return compact_journal(EmbeddedHost(self._host), max_runs=max_runs, objects=objects)

    def rebuild_ledger(self, *, force: bool = False) -> dict[str, int]:
        """Rebuild the ledger (data and index trees) from the value journal (see
        ``shaledb.journal.rebuild``); exact when the journal is complete and
        compacted under the ``retain`` strategy."""
        return rebuild_ledger(self._host, force=force)

    def backup(
        self,
        dest_url: str,
        *,
        store_options: Mapping[str, object] | None = None,
        prune: bool = True,
        lifetime: timedelta | float = 3600.0,
        workers: int = 8,
        progress: Callable[[int, int], None] | None = None,
    ) -> BackupReport:
        """Incremental, consistent backup to ``dest_url`` (``shaledb.journal.backup``).

        Pins a checkpoint of everything written so far, copies every object
        its version references that the destination lacks (server-side when
        both live in one store; ``workers`` copies at once), then writes the
        destination's manifest; the destination opens as a database. A second
        backup without changes copies nothing. ``progress(done, total)`` is
        called after each object copied, in bytes (of the bytes to copy).
        """
        return backup_from_writer(
            self._host,
            dest_url,
            store_options=store_options,
            prune=prune,
            lifetime=lifetime,
            workers=workers,
            progress=progress,
        )

    # ------------------------------------------------------ flush and close

    def flush(self, *, memtable: bool = False) -> None:
        """Make every write so far durable; with ``memtable=True`` also write it to L0."""
        check_flag("memtable", memtable)
        with self._lock:
            self._admit_locked(check_space=False)
            seq = self._seq
            target = None
            if memtable:
                self._freeze_locked()
                target = self._imms[0] if self._imms else None
        self.wal.wait_durable(seq)
        if target is not None:
            self.flusher.wait_flushed(target)

    def close(self) -> None:
        """Flush the WAL and memtable to the store and stop background work. A close
        while another thread's close runs returns when that one has finished."""
        me = threading.get_ident()
        with self._lock:
            # (not ``_state``: a close a KeyboardInterrupt cut short, below, is not finished)
            first = not self._close_finished and not self.closing
            failed = self._failure is not None
            self.closing = True
            if first:
                self._closer = me
                if self._close_done.is_set():  # an interrupted close's
                    self._close_done = threading.Event()
            elif self._closer == me:
                return  # called again inside the first close (a signal handler, a callback)
            done = self._close_done
        if not first:
            # Before, every close that came before the first one left _OPEN ran it all
            # again: the shared read pools were released once per call, so another open
            # handle's pools counted no user and shut down, and the store closed twice.
            done.wait()
            return
        try:
            self._close(failed)
        except KeyboardInterrupt:
            # Ctrl-C during the close (its flush, a join, the manifest write): the next
            # close() runs it again, every step of it repeatable. Before, that close took
            # itself for a nested one and returned at once, leaving the handle half closed:
            # ``closed`` False, its threads running, the writer's claim held (reopening the
            # database in this process was refused).
            with self._lock:
                self.closing = False
                self._closer = None
            raise
        finally:
            done.set()

    def _close(self, failed: bool) -> None:
        for feed in list(self._feeds):
            feed.detach(f"{self!r} was closed: open the change feed from another handle (or open_changes)")
        error: BaseException | None = None
        if not failed and self._state == _OPEN:  # (_CLOSING: an interrupted close, run again)
            try:
                self.flush(memtable=True)
            except ShaleError as exc:
                error = exc
        with self._lock:
            self._state = _CLOSING
            self._space.notify_all()
        for svc in reversed(self._background):
            svc.stop()
        with self._journal_lock:
            pass  # a running journal compaction sees the state and stops before committing
        self.flusher.stop()
        self.wal.stop()
        if not failed and self._failure is None:
            self._tidy_manifest(settle=error is None)
        with self._lock:
            self._state = _CLOSED
            self._closed = True
            released, self._pools_released = self._pools_released, True
        writers.release(getattr(self, "_writer_claim", None), self)
        if not released:  # once: a count of open handles (an interrupt may leave them held)
            release_pools()
        self.cache.clear()
        close_quietly(self.external, self.store if self.owns_store else None)
        self._close_finished = True
        run_close_hooks(self._close_hooks)
        if error is not None:
            # A handle whose failure was already raised closes quietly (``failed``); a fence
            # found only by this last flush has just lost buffered writes: say so.
            raise error

    def _tidy_manifest(self, *, settle: bool) -> None:
        """At close, one manifest write (none if nothing changes): drop this writer's
        unreferenced view checkpoints and, when ``settle`` and nothing is left outside
        L0, move the replay point past its WAL objects (:class:`SettleWal`)."""
        edits: list[Edit] = [StripPins(self.pins)]
        with self._lock:
            mem = self._mem
            drained = not (self._imms or mem.d or mem.rdels or (mem.sub is not None and mem.sub.d))
        if settle and drained:
            upto = self.wal.durable_wal_id
            edits.append(SettleWal(self.epoch, upto, tuple(self.wal.drain_journal(upto))))
        try:
            self.manifests.update(
                AllOf(tuple(edits)), timeout_s=self.settings.manifest_update_timeout_s, current=self.manifest
            )
        except ShaleError as exc:
            log.warning(
                "could not write the manifest at close (its view checkpoints stay until they expire): %s", exc
            )

    def __enter__(self) -> Db:
        if self._closed:  # closed, or stopped by a failure: every call inside would raise
            raise ClosedError(self._closed_message)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- misc

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    def stats(self) -> dict[str, int]:
        """Counters for monitoring and tests."""
        m = self.manifest
        return {
            "seq": self._seq,
            "durable_seq": self.wal.durable_seq,
            "writer_epoch": self.epoch,
            "manifest_id": m.id,
            "l0_ssts": len(m.data.l0),
            "sorted_runs": len(m.data.runs),
            "memtable_bytes": self._mem.nbytes,
            "immutable_memtables": len(self._imms),
            "unflushed_bytes": self._unflushed,
            "cache_bytes": self.cache.size_bytes,
            "cache_hits": self.cache.hits,
            "cache_misses": self.cache.misses,
            "next_wal_id": self.wal.next_id,
            "index_ssts": sum(1 for _ in m.index.ssts()),
            "journal_files": len(m.journal),
            "journal_bytes": sum(j.size for j in m.journal),
            "journal_block_reads": self.journal.reads,
        }

    def metrics(self) -> dict[str, object]:
        """Counters, gauges and histograms for monitoring (``shaledb.store.metrics``; exporters there)."""
        from ..store.metrics import collect

        return collect(self)

    def changes(self, since: Cursor | str | None = None, **options: Unpack[FeedOptions]) -> ChangeFeed:
        """A :class:`~shaledb.engine.changes.ChangeFeed` of committed writes after ``since``
        (a cursor or its string; None: from the start; "latest": only new writes)."""
        from ..engine.changes import open_feed

        if self.closing or self._state != _OPEN:
            raise ClosedError("database is closed")
        feed = open_feed(self.store, since, self.clock, **options)
        with self._lock:  # (close marks itself closing under it, then detaches the feeds it holds)
            gone = self.closing or self._state != _OPEN
            if not gone:
                self._feeds.add(feed)  # (detached when this handle closes)
        if gone:  # closed meanwhile: a feed registered now was never detached, and followed on
            feed.close()
            raise ClosedError("database is closed")
        return feed

    @property
    def url(self) -> str | None:
        """The canonical URL this writer was opened on (a path as an absolute ``file://``
        URL), never with credentials; None when opened on an explicit ``store=``."""
        return self._url

    def __repr__(self) -> str:
        closed = ", closed" if self._state == _CLOSED else ", stopped" if self._failure is not None else ""
        return f"Db({self.store.describe()}, epoch={self.epoch}{closed})"


__all__ = ["Db", "Scan", "Snapshot", "WriteHandle"]


class _WriterHost:
    """What ``Db`` lets its roles use (the protocols of ``shaledb.engine.host``): the
    roles hold this, never the ``Db``, so the writer's hooks stay off its public surface."""

    def __init__(self, db: Db) -> None:
        self._db = db
        self.store = db.store
        self.settings = db.settings
        self.clock = db.clock
        self.rng = db.rng
        self.tables = db.tables
        self.manifests = db.manifests
        self.parents = db.external
        self.wal = db.wal
        self.epoch = db.epoch
        self.codec = db.codec
        self.journal_lock = db._journal_lock
        self.metrics_state = db.metrics_state
        self.vis = db.vis
        self.journal = db.journal
        self.store_for = db._resolve_store
        self.refresh_manifest = db.refresh_manifest
        self.update_manifest = db._update_manifest
        self.decorate_manifest = db._decorate_manifest
        self.check_failure = db._check_failure
        self.flush = db.flush
        self.failed = db._failed
        self.oldest_imm = db._oldest_imm
        self.is_pending = db._is_pending
        self.install_flushed = db._install_flushed

    @property
    def manifest(self) -> Manifest:
        return self._db.manifest

    @property
    def closed(self) -> bool:
        return self._db.closed

    @property
    def closing(self) -> bool:
        return self._db.closing

    @property
    def indexed(self) -> bool:
        return self._db._indexed

    @property
    def compactor_paused(self) -> bool:
        return any(isinstance(s, EmbeddedCompactor) and s.fenced is not None for s in self._db._background)

    @property
    def history(self) -> History | None:
        return self._db._history

    @property
    def seq(self) -> int:
        return self._db._seq

    def flush_first(self) -> bool:
        db = self._db
        s = db.settings
        return flush_first(db._stalled_writers, len(db.manifest.data.l0), s.l0_max_ssts, db.closing)

    def check_open(self) -> None:
        if self._db._state != _OPEN:
            raise ClosedError("the database is closing: journal compaction stops")
        self._db._check_failure()

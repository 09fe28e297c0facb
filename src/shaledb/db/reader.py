"""``DbReader``: a read-only client of a database, in any process.

The protocol: docs/design/checkpoints-readers-clones.md.

A reader never writes data and never fences the writer. It reads one
*version* of the database: the SSTs of a manifest, plus the WAL objects after
that manifest's ``replay_after_wal_id``, which it replays into in-memory
tables (each bounded by ``max_memtable_bytes``; the writer's backpressure
bounds how many there are).

Three ways to open one:

* ``DbReader.open(url, checkpoint=<id>)`` reads exactly the version that
  checkpoint pins: its manifest's SSTs and the WAL objects in the manifest's
  range ``(replay_after_wal_id, next_wal_id)``. It never refreshes and never
  writes to the store. The checkpoint's owner keeps it alive.
* ``DbReader.open(url)`` (the default, a *managed* checkpoint) creates its own
  checkpoint on the latest manifest with ``checkpoint_lifetime``, and then,
  every ``manifest_poll_interval``:

  1. probes for a newer manifest (one GET of ``manifest/<id + 1>``, no LIST);
  2. re-establishes its checkpoint when the set of SSTs (or the replayed WAL
     range) changed -- one CAS adds the new checkpoint and removes old ones --
     and purges in-memory tables the new manifest's SSTs now contain;
  3. otherwise extends the checkpoint's expiry once half its lifetime has
     passed (not on every poll: slatedb#1750);
  4. probes for the next WAL object (one GET of ``wal/<next id>``) and
     replays each one found. One that went missing after the writer flushed
     it to L0 moves the view to the manifest holding that L0 SST; only a
     slot no manifest covers (a crashed writer's) is skipped.

  If its checkpoint expired (a store outage longer than the lifetime) or
  vanished, it re-establishes from the latest manifest by itself instead of
  failing for good (slatedb#1888). Close deletes its checkpoints.
* ``DbReaderOptions(establish_checkpoint=False)`` follows the latest manifest
  like a managed reader but writes nothing; only the garbage collector's
  minimum age protects what it reads. Meant for one-shot tools.

Snapshots and scans of a managed reader keep the checkpoint their view came
from: a re-established checkpoint retires the old one, which is deleted only
once no snapshot or scan uses it (until then its expiry keeps being extended).

Values in the value journal (key/value separation) are read through the
same pointer resolver as the writer's; ``head``, ``index_query`` and
``scan_heads`` answer from the ledger (and the replayed WAL), as the writer's do.

Reads are monotonic: a newer view always holds everything an older one did
(new SSTs contain the WAL objects they replace, and tables are only purged
once the manifest's SSTs cover them).

For parallel readers of one checkpoint (the Spark data source),
:meth:`DbReader.key_ranges` lists the key ranges of the version's SSTs and
:meth:`DbReader.split_points` cuts the key space into ranges of similar size.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from ..admin.checkpoint import (
    as_checkpoint_ref,
    check_usable,
    live_checkpoint,
    make_checkpoint,
    new_checkpoint_id,
    read_checkpoint_manifest,
)
from ..clock import SYSTEM_CLOCK, Clock
from ..duration import to_seconds
from ..engine.cache import LruCache
from ..engine.history import HISTORY_PIN, OPT_RETENTION, manifest_seq, to_millis
from ..engine.memtable import ENTRY_OVERHEAD, Entry, Memtable, new_memtable
from ..engine.merging import OPT_MERGE_OPERATOR, Folder
from ..engine.parents import ExternalStores, StoreFactory, canonical_url, settings_factory
from ..engine.range_tombstones import apply_to_memtable
from ..engine.reads import ReadView, Visibility, acquire_pools, lookup, release_pools
from ..engine.scan_ahead import limits_of
from ..engine.sstable import TableCache
from ..engine.wal_read import fetch_wal_objects
from ..errors import ClosedError, DatabaseDestroyed, InvalidArgument, ObjectNotFound, ShaleError
from ..format import paths
from ..format.row import FLAG_INDEX_TREE, KIND_MERGE
from ..format.wal import EpochGate, decode_wal_object
from ..journal.resolver import JournalResolver
from ..keys import split_points
from ..manifest.edits import DropCheckpoints, Edit
from ..manifest.model import Checkpoint, Manifest, SstInfo
from ..manifest.store import ManifestStore
from ..merge import as_operator
from ..option_names import renamed
from ..settings import DbReaderOptions, Settings
from ..store.base import ObjectStore
from ..store.parallel import completed
from ..store.stack import close_quietly, open_stack
from .interrupts import interrupts_deferred
from .mapping import as_url, handle_url, run_close_hooks, warn_unclosed
from .queries import Queries, SnapshotQueries

if TYPE_CHECKING:
    from ..engine.changes import ChangeFeed, Cursor, FeedOptions

log = logging.getLogger("shaledb.reader")

_READERS: weakref.WeakSet[DbReader] = weakref.WeakSet()
"""Readers opened in this process: the ones never closed are reported at exit."""


def _warn_unclosed_readers_at_exit() -> None:
    """A ``ResourceWarning`` for each reader of this process never closed (``warn_unclosed``)."""
    for reader in list(_READERS):
        if reader._pid == os.getpid() and not reader._closed:
            warn_unclosed(reader)


atexit.register(_warn_unclosed_readers_at_exit)

_UNSET: Any = object()


CheckpointChanges = Callable[[Manifest, float], tuple[list[Checkpoint], set[uuid.UUID]]]
"""A reader's maintenance of its own checkpoints in a manifest at a time: (kept, dropped ids)."""


@dataclass(frozen=True)
class AddReaderCheckpoint(Edit):
    """A reader's new checkpoint ``cp_id`` on the latest manifest (pinning ``id + 1``), with its
    other checkpoints maintained by ``changes`` in the same CAS (the reader procedure of
    docs/design/checkpoints-readers-clones.md). ``made`` receives (checkpoint, dropped ids)
    per attempt; the last is the one written. Finding ``cp_id`` means an earlier attempt landed.
    """

    cp_id: uuid.UUID
    clock: Clock
    where: str
    lifetime_s: float | None
    name: str | None
    changes: CheckpointChanges
    made: list[tuple[Checkpoint, set[uuid.UUID]]] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        if m.checkpoint(self.cp_id) is not None:
            return None  # an earlier attempt of ours landed
        check_usable(m, self.where)
        now = self.clock.now()
        keep, dropped = self.changes(m, now)
        cp = make_checkpoint(
            self.cp_id, m.id + 1, now, self.lifetime_s, name=self.name, metadata=(("role", "reader"),)
        )
        self.made.append((cp, dropped))
        return replace(m, checkpoints=(*keep, cp))


@dataclass(frozen=True)
class MaintainReaderCheckpoints(Edit):
    """A reader's checkpoints extended or dropped by ``changes`` (see ``DbReader._checkpoint_changes``);
    ``dropped`` receives the dropped ids per attempt (last: the one written)."""

    clock: Clock
    changes: CheckpointChanges
    dropped: list[set[uuid.UUID]] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        now = self.clock.now()
        keep, dropped = self.changes(m, now)
        self.dropped.append(dropped)
        return replace(m, checkpoints=tuple(keep))


class _Table:
    """An in-memory table of replayed WAL entries and the WAL ids it holds."""

    __slots__ = ("first_merge_wal", "first_wal", "last_wal", "mem")

    def __init__(self, first_wal: int) -> None:
        self.mem = new_memtable()
        self.first_wal = first_wal
        self.last_wal = first_wal - 1
        self.first_merge_wal: int | None = None
        """The first WAL id whose merge operands this table holds (None: it holds none)."""


class _ObjectGone(Exception):
    """A WAL object a table rebuild needs was collected (``DbReader._head_after``)."""

    def __init__(self, wid: int) -> None:
        super().__init__(wid)
        self.wid = wid


def _sst_key(m: Manifest) -> tuple[Any, ...]:
    """What makes a reader re-establish: the SST set and the replayed WAL range."""
    return (
        tuple((s.id, s.db) for s in m.data.l0),
        tuple((r.id, tuple(s.id for s in r.ssts)) for r in m.data.runs),
        tuple((s.id, s.db) for s in m.index.ssts()),
        m.replay_after_wal_id,
    )


class ReaderSnapshot(SnapshotQueries):
    """A consistent view of a reader at one sequence number; close it when done.
    Its reads are :class:`~shaledb.db.queries.Queries`'."""


class DbReader(Queries):
    """A read-only client of one database (see module docstring). Thread-safe.

    Its reads are :class:`~shaledb.db.queries.Queries`', on the current view.
    """

    _closed_message = "reader is closed"

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        checkpoint: uuid.UUID | str | Checkpoint | None = None,
        *,
        options: DbReaderOptions | None = None,
        manifest_poll_interval_s: timedelta | float | str | None = None,
        checkpoint_lifetime_s: timedelta | float | str | None = _UNSET,
        manifest_poll_interval: timedelta | float | str | None = None,
        checkpoint_lifetime: timedelta | float | str | None = _UNSET,
        max_memtable_bytes: int | None = None,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        store_options: Mapping[str, object] | None = None,
        store_factory: StoreFactory | None = None,
    ) -> DbReader:
        """Open a reader of the database at ``url`` (or ``store``).

        ``checkpoint`` (a UUID, its string, a Checkpoint, or a name) fixes the version
        read; without it the reader maintains its own checkpoint. The keyword
        options override fields of ``options`` and have their names:
        ``manifest_poll_interval_s`` and ``checkpoint_lifetime_s`` take seconds,
        a timedelta or a duration string such as ``"500ms"`` (lifetime None: no
        expiry); ``manifest_poll_interval`` and ``checkpoint_lifetime`` are
        their old, deprecated spellings. ``store_options`` configure cloud stores (also used for the
        parents of a clone); ``store_factory`` opens parents by URL instead.

        Raises NotFound (no database), CheckpointNotFound (missing or expired
        checkpoint), DatabaseDestroyed, InvalidDbState (unfinished clone).
        """
        opts = options if options is not None else DbReaderOptions()
        if not isinstance(opts, DbReaderOptions):
            raise InvalidArgument(f"options must be a DbReaderOptions, got {type(opts).__name__}")
        changes: dict[str, Any] = {}
        given = {"manifest_poll_interval_s": manifest_poll_interval_s}
        if checkpoint_lifetime_s is not _UNSET:
            given["checkpoint_lifetime_s"] = checkpoint_lifetime_s
        if manifest_poll_interval is not None:
            given["manifest_poll_interval"] = manifest_poll_interval
        if checkpoint_lifetime is not _UNSET:
            given["checkpoint_lifetime"] = checkpoint_lifetime
        if given["manifest_poll_interval_s"] is None:
            del given["manifest_poll_interval_s"]
        for old in ("manifest_poll_interval", "checkpoint_lifetime"):
            renamed(given, old, old + "_s", "DbReader.open")
        if "manifest_poll_interval_s" in given:
            changes["manifest_poll_interval_s"] = to_seconds(
                given["manifest_poll_interval_s"], "manifest_poll_interval_s"
            )
        if "checkpoint_lifetime_s" in given:
            changes["checkpoint_lifetime_s"] = to_seconds(
                given["checkpoint_lifetime_s"], "checkpoint_lifetime_s"
            )
        if max_memtable_bytes is not None:
            changes["max_memtable_bytes"] = max_memtable_bytes
        if changes:
            opts = replace(opts, **changes)
        url = as_url(url)
        clock = clock or SYSTEM_CLOCK
        rng = random.Random(seed)
        settings = Settings(
            retry=opts.retry,
            compactor=None,
            garbage_collector=None,
            disk_cache_dir=opts.disk_cache_dir,
            disk_cache_bytes=opts.disk_cache_bytes,
        )
        cp_id = None if checkpoint is None else as_checkpoint_ref(checkpoint)
        wrapped = open_stack(url, store, store_options, settings, clock, rng)
        factory = store_factory or settings_factory(opts, clock, store_options)
        external = ExternalStores(
            factory, own_url=canonical_url(url) if url else None, owns_opened=store_factory is None
        )
        try:
            reader = cls(wrapped, opts, clock, rng, external, cp_id)
        except BaseException:
            close_quietly(external, wrapped if store is None else None)
            raise
        reader.owns_store = store is None
        reader._url = handle_url(url, store)
        return reader

    def __init__(
        self,
        store: ObjectStore,
        options: DbReaderOptions,
        clock: Clock,
        rng: random.Random,
        external: ExternalStores,
        checkpoint_id: uuid.UUID | str | None,
    ) -> None:
        self.options = options
        self.store = store
        self.owns_store = False
        """Whether :meth:`close` closes ``store``: ``open`` opened it (a passed-in store stays theirs)."""
        self.clock = clock
        self.rng = rng
        self._where = store.describe()
        self._ms = ManifestStore(store, clock, rng, author="reader")
        self._external = external
        self._cache = LruCache(options.block_cache_bytes)
        self._tables = TableCache(
            self._resolve_store, self._cache, options.sst_read_ahead_bytes, limits_of(options)
        )
        self._journal = JournalResolver(
            self._resolve_store,
            self._cache,
            lambda: self._view.manifest,
            options.journal_whole_block_max_bytes,
        )
        self._vis = Visibility(lambda: int(self.clock.now() * 1000), self._journal.resolve)
        self._lock = threading.Lock()  # state; never held across store calls
        self._maint = threading.RLock()  # serializes polls (held across store calls)
        self._closed = False
        self._url: str | None = None  # set by open (handle_url)
        self._close_hooks: list[Callable[[], None]] = []  # (run_close_hooks: shaledb.aio's pool)
        self._pinned_wal_end: int | None = None
        """A pinned reader's: the WAL objects of its version end before this id (``changes``)."""
        self._closing = False
        """Set (under ``_lock``) when ``close`` begins: no change feed is handed out after."""
        self._closer: int | None = None
        """The thread running the first ``close``; ``_close_done`` is set when it finishes."""
        self._close_done = threading.Event()
        self._mode = (
            "pinned"
            if checkpoint_id is not None
            else ("managed" if options.establish_checkpoint else "latest")
        )
        self._own: dict[uuid.UUID, Checkpoint] = {}
        self._refs: dict[uuid.UUID, int] = {}
        self._current: uuid.UUID | None = None
        self._wal_tables: list[_Table] = []
        self._seq = 0
        self._next_wal = 1
        self._gap_checked: tuple[int, int] | None = None
        self._gate = EpochGate()
        self._dead_wal: set[int] = set()
        """WAL ids the gate refused (a dead writer's objects): a table replayed again skips them."""
        self._skipped_wal: set[int] = set()
        """WAL ids a crashed writer left empty (:meth:`_after_missing` moved past them)."""
        """Skips a crashed writer's objects after the next writer's fence (WAL ids only grow)."""
        self.last_error: BaseException | None = None
        """The last failure of a background poll (polling carries on regardless)."""
        self.counters = {"polls": 0, "reestablished": 0, "refreshed": 0, "wal_objects": 0}
        self._feeds: weakref.WeakSet[ChangeFeed] = weakref.WeakSet()
        """Change feeds made by :meth:`changes`: detached (ClosedError) when this closes."""
        if checkpoint_id is not None:
            self._open_pinned(checkpoint_id)
        else:
            latest = self._ms.require_latest()
            check_usable(latest, self._where)
            self._latest = latest
            # Index and filter blocks need nothing from the checkpoint CAS or the WAL replay:
            # fetch them meanwhile instead of one round trip after the other.
            pinning = self._pin_meanwhile(latest)
            try:
                m = self._establish(latest) if self._mode == "managed" else latest
                self._install_manifest(m, pin=False)
                self._poll_wal()
            finally:
                wait([pinning])
            pinning.result()
            self._install_pins(m)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Ctrl-C held back while the poll thread starts (shaledb.db.interrupts), then raised
        # with the reader closed: one raised inside Thread.start() left the poll thread
        # refreshing the reader's checkpoint for the rest of the process (nothing could
        # reach it), so the garbage collector never freed what it pinned.
        try:
            with interrupts_deferred():
                if self._mode != "pinned" and options.background_poll:
                    self._thread = threading.Thread(target=self._run, name="shaledb-reader", daemon=True)
                    self._thread.start()
                acquire_pools()  # (released by close: the shared read threads end with the last handle)
                self._pid = os.getpid()
                _READERS.add(self)
        except BaseException:
            if self in _READERS:  # all of it ran (a Ctrl-C held back to its end): a whole reader
                self.close()
            elif self._thread is not None:  # (a thread that could not start: nothing else to undo)
                self._stop.set()
            raise

    def _open_pinned(self, cp_id: uuid.UUID | str) -> None:
        latest = self._ms.require_latest()
        if not latest.initialized:
            check_usable(latest, self._where)  # an unfinished clone (a destroyed database may still be read)
        cp = live_checkpoint(latest, cp_id, self.clock.now(), self._where)
        m = read_checkpoint_manifest(self._ms, cp)
        self._latest = latest
        self._current = cp.id
        self._pinned_wal_end = m.next_wal_id
        pinning = self._pin_meanwhile(m)  # beside the WAL's GETs
        try:
            self._install_manifest(m, pin=False)
            wids = range(m.replay_after_wal_id + 1, m.next_wal_id)
            with fetch_wal_objects(self.store, wids, self.options.wal_read_ahead) as fetched:
                for wid, (_, data) in zip(wids, fetched):
                    if data is not None:  # None: a slot a crashed writer never filled
                        self._apply_wal(wid, data)
        finally:
            wait([pinning])
        pinning.result()
        self._install_pins(m)

    def _pin_meanwhile(self, m: Manifest) -> Future[None]:
        """Start pinning ``m``'s SSTs (index and filter) while opening goes on
        (``TableCache.pin_meanwhile``); :meth:`_install_pins` pins the rest."""
        if not self.options.open_in_parallel or not self.options.pin_metadata_on_open:
            return completed(None)  # one call at a time: _install_pins pins them all (if it pins)
        return self._tables.pin_meanwhile(m)

    def _install_pins(self, m: Manifest) -> None:
        self._tables.retain(m.all_ssts())
        if self.options.pin_metadata_on_open:
            self._tables.pin(m.all_ssts())  # index and filter of new SSTs, in parallel, off the read path

    def _resolve_store(self, index: int) -> ObjectStore:
        if index == 0:
            return self.store
        return self._external.store_for(index, self._view.manifest)

    # ----------------------------------------------------------------- reads

    def _lost(self, key: bytes, exc: ObjectNotFound) -> tuple[int, int, bytes] | None:
        if self._mode == "pinned":
            raise exc
        # The view's SSTs were collected (e.g. our checkpoint expired): move to the latest version.
        log.warning("reader %s: an SST of its view is gone; re-establishing", self._where)
        self._poll(force=True)
        return lookup(self._view, self._tables, key, None)

    def snapshot(self, *, at_seq: int | None = None, at_time: datetime | None = None) -> ReaderSnapshot:
        """A consistent view that keeps its version pinned until closed.

        ``at_seq`` / ``at_time`` read as of then, within the writer's history
        window (``shaledb.engine.history``; times map through the manifest's marks).
        """
        if at_seq is None and at_time is None:
            view, seq, cp = self._pin()
        else:
            view, seq, cp = self._pin(at_seq, None if at_time is None else to_millis(at_time), True)
        return ReaderSnapshot(self, view, seq, cp)

    def _pin(
        self, at_seq: int | None = None, at_ms: int | None = None, past: bool = False
    ) -> tuple[ReadView, int, uuid.UUID | None]:
        with self._lock:
            self._check_open()
            view = self._view
            seq = self._seq
            if past:
                seq = manifest_seq(view.manifest, seq, at_seq, at_ms, int(self.clock.now() * 1000))
            cp = self._current if self._mode == "managed" else None
            view.mem.pin(seq)
            if cp is not None:
                self._refs[cp] = self._refs.get(cp, 0) + 1
        return view, seq, cp

    def _unpin(self, mem: Memtable, seq: int, cp: uuid.UUID | None) -> None:
        with self._lock:
            mem.unpin(seq)
            if cp is not None:
                n = self._refs.get(cp, 0) - 1
                if n > 0:
                    self._refs[cp] = n
                else:
                    self._refs.pop(cp, None)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("reader is closed")

    # ------------------------------------------------------ version details

    @property
    def manifest(self) -> Manifest:
        """The manifest whose SSTs the current view reads."""
        return self._view.manifest

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint the current view is pinned by (None when following the latest)."""
        with self._lock:
            if self._current is None:
                return None
            return self._own.get(self._current) or self._latest.checkpoint(self._current)

    @property
    def seq(self) -> int:
        """The highest sequence number the reader has seen."""
        return self._seq

    def key_ranges(self) -> list[tuple[bytes, bytes, int]]:
        """``(first_key, last_key, size_bytes)`` of every SST of the view's data tree, by key.

        L0 SSTs may overlap each other and the sorted runs; entries still only
        in the WAL (replayed into memory) are not listed. For planning, not
        for correctness: any key may also live in memory.
        """
        ssts: list[SstInfo] = list(self._view.manifest.data.ssts())
        ssts.sort(key=lambda s: (s.first_key, s.last_key))
        return [(s.first_key, s.last_key, s.size) for s in ssts]

    def split_points(self, n: int) -> list[bytes]:
        """At most ``n - 1`` ascending keys cutting the key space into ``n`` ranges of similar size.

        The ranges ``[None, p0), [p0, p1), ..., [pk, None)`` cover every key, so
        scanning each with its own reader (same checkpoint) and concatenating
        gives the full scan. Sizes are estimated from SST sizes, assuming
        each SST's bytes are spread evenly over its key range at SST
        boundaries; fewer points come back when there are too few SSTs.
        """
        return split_points(self.key_ranges(), n)

    # ------------------------------------------------------------- polling

    def refresh(self) -> None:
        """Poll once now: new manifest, checkpoint maintenance, new WAL objects.

        A reader on a fixed checkpoint has nothing to refresh. Raises what
        the poll met (a background poll logs it and carries on instead).
        """
        if self._mode == "pinned":
            return
        self._poll(force=False)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.clock.wait(self._stop, self.options.manifest_poll_interval_s)
            if self._stop.is_set():
                return
            try:
                self._poll(force=False)
                self.last_error = None
            except ClosedError:
                return
            except Exception as exc:  # noqa: BLE001 - polling must survive outages (slatedb#1888)
                self.last_error = exc
                log.warning("reader %s: poll failed (will retry): %s", self._where, exc)

    def _poll(self, *, force: bool) -> None:
        with self._maint:
            self._check_open()
            self.counters["polls"] += 1
            latest = self._ms.refresh(self._latest)
            self._latest = latest
            if latest.destroyed_at_s is not None:
                # Keep serving the current view, but do not keep a destroyed database alive:
                # the checkpoint is left to expire so the garbage collector can finish.
                raise DatabaseDestroyed(f"database at {self._where} was destroyed")
            view_m = self._view.manifest
            if self._mode == "latest":
                if force or _sst_key(latest) != _sst_key(view_m):
                    self._follow(latest)
            else:
                now = self.clock.now()
                cur = self._own.get(self._current) if self._current is not None else None
                lost = cur is None or cur.expired(now) or latest.checkpoint(cur.id) is None
                if force or lost or _sst_key(latest) != _sst_key(view_m):
                    if lost and not force:
                        log.warning(
                            "reader %s: its checkpoint expired or vanished; re-establishing", self._where
                        )
                    self._follow(latest)
                elif self._refresh_due(now):
                    self._refresh_expiry(latest)
            self._note_operator(self._latest)
            self._poll_wal()

    def _note_operator(self, m: Manifest) -> None:
        """Take the merge operator's name from ``m`` when the view has none yet.

        The first merge records it in a manifest that changes no SST, which moves no view:
        a reader opened before that merge raised ``MergeOperatorMissing`` on the merges it
        replayed until the writer's next L0 flush. (The writer records the name before it
        writes the merge, so a poll that read the manifest just before can still replay the
        merge without it: the next poll folds it.)
        """
        name = m.option(OPT_MERGE_OPERATOR)
        if name is not None and self._vis.folder.recorded is None:
            folder = Folder(as_operator(self.options.merge_operator), name)  # checks the name
            with self._lock:
                self._vis.folder = folder

    def _refresh_due(self, now: float) -> bool:
        life = self.options.checkpoint_lifetime_s
        with self._lock:
            cur = self._own.get(self._current) if self._current is not None else None
            idle_retired = any(c != self._current and not self._refs.get(c) for c in self._own)
        if life is None:
            return idle_retired  # nothing expires: delete unused retired checkpoints now
        return cur is not None and cur.expire_time_s is not None and now >= cur.expire_time_s - life / 2

    def _checkpoint_changes(self, m: Manifest, now: float) -> tuple[list[Checkpoint], set[uuid.UUID]]:
        """Our checkpoints in ``m`` after maintenance: held ones extended, idle retired ones dropped.

        An expired checkpoint is dropped, never extended: the garbage collector
        may already be deleting what it pinned, so it must not come back.
        """
        life = self.options.checkpoint_lifetime_s
        with self._lock:
            held = {c for c in self._own if c == self._current or self._refs.get(c)}
        dropped = set(self._own) - held
        out = []
        for c in m.checkpoints:
            if c.id in self._own and c.expired(now):
                dropped.add(c.id)
            if c.id in dropped:
                continue
            if c.id in held and life is not None:
                c = replace(c, expire_time_s=now + life)
            out.append(c)
        return out, dropped

    def _establish(self, hint: Manifest) -> Manifest:
        """A new checkpoint on the latest manifest, in one CAS (the reader procedure of
        docs/design/checkpoints-readers-clones.md)."""
        new_id = new_checkpoint_id(self.rng)
        life = self.options.checkpoint_lifetime_s
        edit = AddReaderCheckpoint(
            new_id, self.clock, self._where, life, self.options.checkpoint_name, self._checkpoint_changes
        )
        latest = self._ms.update(edit, timeout_s=self.options.manifest_update_timeout_s, current=hint)
        cp, dropped = edit.made[-1]
        m = latest if latest.id == cp.manifest_id else self._ms.read(cp.manifest_id)
        with self._lock:
            for c in dropped:
                self._own.pop(c, None)
            for c in list(self._own):
                now_cp = latest.checkpoint(c)
                if now_cp is None:
                    self._own.pop(c)
                else:
                    self._own[c] = now_cp
            self._own[cp.id] = latest.checkpoint(cp.id) or cp
            self._current = cp.id
        self._latest = latest
        self.counters["reestablished"] += 1
        return m

    def _refresh_expiry(self, hint: Manifest) -> None:
        edit = MaintainReaderCheckpoints(self.clock, self._checkpoint_changes)
        m = self._ms.update(edit, timeout_s=self.options.manifest_update_timeout_s, current=hint)
        dropped_box = edit.dropped
        with self._lock:
            for c in list(self._own):
                now_cp = m.checkpoint(c)
                if now_cp is None or c in dropped_box[-1]:
                    self._own.pop(c)
                else:
                    self._own[c] = now_cp
        self._latest = m
        self.counters["refreshed"] += 1

    def _follow(self, latest: Manifest) -> None:
        """Move the view to ``latest`` (a managed reader first checkpoints it)."""
        if self._mode == "latest":
            check_usable(latest, self._where)
            self._install_manifest(latest)
        else:
            self._install_manifest(self._establish(latest))

    def _install_manifest(self, m: Manifest, *, pin: bool = True) -> None:
        """Read ``m``'s SSTs from now on; drop tables its SSTs cover (``pin``: and pin them now)."""
        floor = m.replay_after_wal_id
        again = False
        try:
            head = self._head_after(m)
        except _ObjectGone as gone:
            # Collected since ``m`` was read: a newer manifest covers it. Move to that one, as a
            # poll that finds an object collected does (before, the check below never matched
            # the empty table this case returned, so the old table stayed and its operands were
            # folded twice).
            latest = self._ms.refresh(m if m.id >= self._latest.id else self._latest)
            self._latest = latest
            if latest.replay_after_wal_id >= gone.wid:
                log.info(
                    "reader %s: WAL %d was flushed and collected; moving to manifest %d",
                    self._where,
                    gone.wid,
                    latest.id,
                )
                self._follow(latest)
                return
            head, again = None, True  # (no manifest covers it: replay from the floor on)
        with self._lock:
            tables = [t for t in self._wal_tables if t.last_wal > floor]
            if again:
                self._next_wal = floor + 1
                tables = []
            elif head is not None and tables and tables[0].last_wal == head.last_wal:
                tables[0] = head
            if self._next_wal <= floor:
                self._next_wal = floor + 1
                tables = []
            self._wal_tables = tables or [_Table(self._next_wal)]
            self._seq = max(self._seq, m.last_l0_seq)
            self._view = self._make_view(m)
            op = as_operator(self.options.merge_operator)
            self._vis.folder = Folder(op, m.option(OPT_MERGE_OPERATOR))  # checks the name
        self._journal.note(m)
        if pin:
            self._install_pins(m)

    def _make_view(self, m: Manifest) -> ReadView:
        tables = self._wal_tables
        if not tables:
            tables = self._wal_tables = [_Table(self._next_wal)]
        mems = [t.mem for t in tables]
        old = getattr(self, "_view", None)
        runs = old.runs if old is not None and old.manifest.data.runs == m.data.runs else None
        return ReadView(mems[-1], tuple(reversed(mems[:-1])), m, runs=runs)

    # ------------------------------------------------------------------ WAL

    def _poll_wal(self) -> None:
        """Replay every WAL object present from the next id on (GET probes, no LIST).

        Each run of objects found doubles the GETs sent at once, up to
        ``wal_read_ahead``, so a reader far behind pays about one round trip
        per batch while an idle poll still sends one GET.

        A reader far behind a busy writer can stay in this loop for seconds
        (objects keep arriving about as fast as it replays them), longer than
        its checkpoint's lifetime, so a managed reader maintains its
        checkpoint here too, not only at the start of a poll: an expired
        checkpoint lets the garbage collector delete the view's SSTs and the
        WAL objects not yet replayed (see :meth:`_after_missing`).
        """
        ahead = 1
        while True:
            first = self._next_wal
            wids = range(first, first + ahead)
            whole = True
            with fetch_wal_objects(self.store, wids, ahead) as fetched:
                for wid, (_, data) in zip(wids, fetched):
                    if wid != self._next_wal:  # the view moved past (or back to) other objects
                        whole = False
                        break
                    if data is None:
                        # Only the first GET of a batch came after the manifest _after_missing
                        # reasons from; a later one that missed is probed again.
                        if wid == first and not self._after_missing(wid):
                            return
                        whole = False
                        break
                    self._apply_wal(wid, data)
                    if self._mode == "managed":
                        self._maintain_during_replay()
            ahead = min(2 * ahead, self.options.wal_read_ahead) if whole else 1

    def _maintain_during_replay(self) -> None:
        """The checkpoint maintenance of a poll, between two replayed WAL objects.

        Extends the checkpoint once due; one that expired anyway (a replay
        step or manifest write slower than half the lifetime) is replaced by a checkpoint on
        the latest manifest, which also becomes the view.
        """
        now = self.clock.now()
        with self._lock:
            cur = self._own.get(self._current) if self._current is not None else None
        if cur is None or cur.expired(now):
            self._follow(self._ms.refresh(self._latest))
        elif self._refresh_due(now):
            self._refresh_expiry(self._latest)

    def _after_missing(self, wid: int) -> bool:
        """WAL object ``wid`` is missing: True to go on probing (from ``self._next_wal``),
        False to wait for it.

        Within one writer WAL objects appear strictly in id order, so when the
        manifest read before the GET (``self._latest``) already counts ids
        beyond ``wid``, the object was written and deleted since, or its slot
        was left empty by a crashed writer. The latest manifest, read now,
        tells the two apart:

        * Deleted: the writer flushed ``wid``'s memtable to an L0 SST and the
          garbage collector deleted the object -- which it does only once
          some manifest's ``replay_after_wal_id`` reached ``wid`` (our
          checkpoint expired during a long replay, or a follow-latest reader
          has none). ``wid``'s writes are then only in that manifest's SSTs,
          so the view moves to it (dropping the tables it covers) and replay
          goes on after its replay point. Skipping ``wid`` instead lost those
          writes, and for good: the table that holds the objects before and
          after ``wid`` still held older values of its keys, which shadow the
          L0 SST after that manifest is installed, because the table also
          holds objects past its replay point and so is kept (the reader
          process tests' flake, seed 2159074111).
        * Never written: the latest manifest does not cover ``wid``, and as
          ``replay_after_wal_id`` never decreases no manifest covered it at
          the GET either, so no collector deleted it: it is a slot a crashed
          writer left empty, and the next object present (one listing, once
          per (id, manifest)) follows it.
        """
        hint = self._latest
        if hint.next_wal_id <= wid + 1 or self._gap_checked == (wid, hint.id):
            return False
        latest = self._ms.refresh(hint)
        self._latest = latest
        if latest.replay_after_wal_id >= wid:
            log.info(
                "reader %s: WAL %d was flushed and collected; moving to manifest %d",
                self._where,
                wid,
                latest.id,
            )
            self._follow(latest)
            return True
        self._gap_checked = (wid, latest.id)
        for meta in self.store.list(paths.WAL_DIR, offset=paths.wal_path(wid)):
            nxt = paths.parse_wal_id(meta.path)
            if nxt is not None and nxt > wid:
                log.warning(
                    "reader %s: WAL %s is missing; continuing at %s", self._where, paths.wal_path(wid), nxt
                )
                with self._lock:
                    self._skipped_wal.update(range(wid, nxt))
                    self._next_wal = nxt
                return True
        return False

    def _head_after(self, m: Manifest) -> _Table | None:
        """The first table ``m`` leaves, replayed again without the objects ``m``'s SSTs
        hold, when it holds some (None: no such table, or it needs no replay).

        Tables are cut by size, the writer's memtables (and so its L0 SSTs) elsewhere, so
        a new manifest's L0 often covers the first objects of a table that goes on after
        them. The table is kept for its later objects, and its entries from the covered ones
        are then in two places. Equal puts and deletes shadow each other harmlessly, but a
        memtable stacks a key's merge operands without their sequence numbers: a lookup
        folded the table's operands onto the L0 value that already held the first of them
        (``+a+a+b`` for ``+a``, ``+b``). The table is therefore rebuilt from its uncovered
        objects when a covered one gave it merge operands: GETs of those objects, once per
        such manifest, before the view moves (reads stay monotonic). If one of them is gone (collected after
        a newer manifest covered it), raises :class:`_ObjectGone`: the caller moves to the
        manifest that covers it.
        """
        floor = m.replay_after_wal_id
        with self._lock:
            head = next((t for t in self._wal_tables if t.last_wal > floor), None)
        if (
            head is None
            or head.first_wal > floor
            or head.first_merge_wal is None
            or head.first_merge_wal > floor
        ):
            return None  # (no operand of a covered object is in the table: nothing twice)
        t = _Table(floor + 1)
        wids = range(floor + 1, head.last_wal + 1)
        with fetch_wal_objects(self.store, wids, self.options.wal_read_ahead) as fetched:
            for wid, (_, data) in zip(wids, fetched):
                if data is None:
                    if wid in self._skipped_wal:
                        continue  # a slot a crashed writer left empty (see _after_missing)
                    raise _ObjectGone(wid)
                if wid not in self._dead_wal:
                    keys, ents = decode_wal_object(data, paths.wal_path(wid))
                    with self._lock:
                        self._replay_into(t, wid, keys, ents, m)
                t.last_wal = wid
        self.counters["wal_objects"] += len(wids)
        return t

    def _apply_wal(self, wid: int, data: bytes) -> None:
        if self._gate.admit(data, paths.wal_path(wid)):
            keys, ents = decode_wal_object(data, paths.wal_path(wid))
        else:
            keys, ents = [], []  # a dead writer's object after a newer fence: nothing to apply
            self._dead_wal.add(wid)
        with self._lock:
            t = self._wal_tables[-1]
            self._replay_into(t, wid, keys, ents, self._view.manifest)
            mem = t.mem
            t.last_wal = wid
            self._next_wal = wid + 1
            if mem.nbytes >= self.options.max_memtable_bytes:
                self._wal_tables.append(_Table(wid + 1))
                self._view = self._make_view(self._view.manifest)
        self.counters["wal_objects"] += 1

    def _replay_into(self, t: _Table, wid: int, keys: list[bytes], ents: list[Entry], m: Manifest) -> None:
        """Apply WAL object ``wid``'s entries newer than ``m``'s L0 SSTs to ``t`` (under ``_lock``)."""
        floor = m.last_l0_seq
        if ents and ents[0][0] <= floor:
            pairs = [(k, e) for k, e in zip(keys, ents) if e[0] > floor]
            keys = [p[0] for p in pairs]
            ents = [p[1] for p in pairs]
        mem = t.mem
        if any(e[1] & FLAG_INDEX_TREE for e in ents):
            sub = mem.sub
            assert sub is not None
            for k, e in zip(keys, ents):
                if e[1] & FLAG_INDEX_TREE:
                    sub.put(k, (e[0], e[1] & ~FLAG_INDEX_TREE, e[2]))
            pairs = [(k, e) for k, e in zip(keys, ents) if not e[1] & FLAG_INDEX_TREE]
            keys = [p[0] for p in pairs]
            ents = [p[1] for p in pairs]
        if keys:
            if HISTORY_PIN not in mem.pins and m.option(OPT_RETENTION) is not None:
                mem.pin(HISTORY_PIN)  # the writer keeps history: so do the replayed tables
            apply_to_memtable(mem, keys, ents)  # range tombstones, then points (merges stack)
            if t.first_merge_wal is None and any(e[1] == KIND_MERGE for e in ents):
                t.first_merge_wal = wid  # (what _head_after asks: one pass per object until then)
            mem.nbytes += sum(map(len, keys)) + sum(len(e[2]) for e in ents) + ENTRY_OVERHEAD * len(keys)
            self._seq = max(self._seq, *(e[0] for e in ents))

    # ---------------------------------------------------------------- close

    def close(self) -> None:
        """Stop polling and delete the reader's own checkpoints (errors are logged). A close
        while another thread's close runs returns when that one has finished (``Db.close``)."""
        me = threading.get_ident()
        with self._lock:
            if self._closed:
                return
            first = not self._closing
            self._closing = True
            if first:
                self._closer = me
            elif self._closer == me:
                return  # called again inside the first close (a change feed's detach callback)
        if not first:
            # Before, a close that began before the first one finished ran it again: one more
            # update dropping checkpoints already dropped (a manifest read, or a conflicting
            # write when both read the same version), and the store closed twice.
            self._close_done.wait()
            return
        try:
            self._close()
        finally:
            self._close_done.set()

    def _close(self) -> None:
        for feed in list(self._feeds):
            feed.detach(f"{self!r} was closed: open the change feed from another handle (or open_changes)")
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._maint:
            with self._lock:
                self._closed = True
                own = set(self._own) if self._mode == "managed" else set()
            release_pools()
            if own:
                try:
                    self._ms.update(
                        DropCheckpoints(frozenset(own)), timeout_s=self.options.manifest_update_timeout_s
                    )
                except ShaleError as exc:
                    log.warning(
                        "reader %s: could not delete its checkpoints (they expire): %s", self._where, exc
                    )
        self._cache.clear()
        close_quietly(self._external, self.store if self.owns_store else None)
        run_close_hooks(self._close_hooks)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> DbReader:
        self._check_open()  # (as a closed file refuses ``with``: every call inside would raise)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int | str]:
        """Counters for monitoring and tests."""
        with self._lock:
            tables = list(self._wal_tables)
            own = len(self._own)
        m = self._view.manifest
        return {
            "mode": self._mode,
            "manifest_id": m.id,
            "seq": self._seq,
            "next_wal_id": self._next_wal,
            "memtables": len(tables),
            "memtable_bytes": sum(t.mem.nbytes for t in tables),
            "own_checkpoints": own,
            "l0_ssts": len(m.data.l0),
            "sorted_runs": len(m.data.runs),
            **self.counters,
        }

    def metrics(self) -> dict[str, object]:
        """Counters and gauges for monitoring, named as :meth:`shaledb.Db.metrics` names them
        (``*_total`` counters; exported the same way, ``shaledb.store.metrics.PrometheusCollector``):
        gets and scans, block-cache hits and misses, the version read (manifest, sequence
        number, L0 SSTs, sorted runs, replayed tables), the polls and WAL objects replayed, and
        this handle's store requests, errors, bytes, disk-cache figures and request latencies."""
        from ..store.metrics import store_metrics

        stats = self.stats()
        out: dict[str, object] = {
            "gets_total": self._m_gets,
            "scans_total": self._m_scans,
            "cache_hits_total": self._cache.hits,
            "cache_misses_total": self._cache.misses,
            "polls_total": stats["polls"],
            "reestablished_total": stats["reestablished"],
            "refreshed_total": stats["refreshed"],
            "wal_objects_replayed_total": stats["wal_objects"],
            "manifest_id": stats["manifest_id"],
            "seq": stats["seq"],
            "l0_ssts": stats["l0_ssts"],
            "sorted_runs": stats["sorted_runs"],
            "memtables": stats["memtables"],
            "memtable_bytes": stats["memtable_bytes"],
            "own_checkpoints": stats["own_checkpoints"],
        }
        out.update(store_metrics(self.store))
        return out

    def changes(self, since: Cursor | str | None = None, **options: Unpack[FeedOptions]) -> ChangeFeed:
        """A :class:`~shaledb.engine.changes.ChangeFeed` of committed writes after ``since``
        (a cursor or its string; None: from the start; "latest": only new writes).

        A reader pinned at a checkpoint reads that version only, and so does its feed: it
        ends after the last write the checkpoint holds (``follow`` or not), and
        ``"latest"`` is that end. Before, it went on into writes made after the
        checkpoint, which the reader's reads never show. Follow later writes with an
        unpinned reader, ``Db.changes`` or ``open_changes``."""
        from ..engine.changes import Cursor, open_feed

        if self._closing:
            raise ClosedError(self._closed_message)
        if since == "latest" and self._pinned_wal_end is not None:
            since = Cursor(self._pinned_wal_end, self.seq + 1)  # (nothing newer in this version)
        feed = open_feed(self.store, since, self.clock, self._pinned_wal_end, **options)
        with self._lock:  # (close marks itself closing under it, then detaches the feeds it holds)
            gone = self._closing
            if not gone:
                self._feeds.add(feed)  # (detached when this handle closes)
        if gone:  # closed meanwhile: a feed registered now was never detached, and followed on
            feed.close()
            raise ClosedError(self._closed_message)
        return feed

    @property
    def url(self) -> str | None:
        """The canonical URL this reader was opened on (a path as an absolute ``file://``
        URL), never with credentials; None when opened on an explicit ``store=``."""
        return self._url

    def __repr__(self) -> str:
        closed = ", closed" if self._closed else ""
        return f"DbReader({self._where}, mode={self._mode}{closed})"


__all__ = ["DbReader", "DbReaderOptions", "ReaderSnapshot"]

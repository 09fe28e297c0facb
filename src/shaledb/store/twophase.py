"""Create-if-absent for stores without conditional writes: the two-phase write.

This is the two-phase CAS protocol (docs/design/manifest-and-fencing.md), with SQLite as
the transactional store. A conditional put of ``dst``:

1. writes the payload to a temporary object ``tmp/2pc/<uuid>.<crc32c>``;
2. inserts the record ``(destination=dst, source=tmp, committed=0)``; the
   destination is the primary key, so a second writer's insert fails and it
   gets :class:`~shaledb.errors.AlreadyExists`. **This insert is the commit
   point**: once it succeeded the write is durable and will become visible;
3. copies the temporary object to ``dst``;
4. marks the record committed;
5. deletes the temporary object.

A writer that stops after step 2 leaves a pending record that anyone can roll
forward (steps 3-5): :meth:`TwoPhaseStore.recover` does it for all of them,
and every read of a destination (get, ranges, head, attributes, and list of a
prefix) first rolls forward a pending record for it. So reads are
linearizable: nobody can see a destination absent while another writer was
told it exists. A writer that stops before step 2 leaves only an orphan
temporary object, which :meth:`TwoPhaseStore.sweep_orphans` removes.

Other operations keep the record table honest: an overwriting put or copy
first rolls forward a pending record for the destination (or the pending data
would later clobber the overwrite), and ``delete`` removes the record before
the object, so a crash in between leaves an object without a record, which a
create still treats as existing. Not linearizable: a ``delete`` racing with a
``create=True`` of the same path, or an overwrite racing a create (the engine
never does either: it only creates fresh names and only deletes old,
unreferenced ones).

The record table is keyed by a namespace (the inner store's description), so
one SQLite file can serve several databases. The file must be on a local
filesystem shared by every process using the store (SQLite WAL mode, a busy
timeout): a single host, like the seed's DynamoDB but without its reach.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import google_crc32c

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AlreadyExists, CorruptionError, InvalidArgument, ObjectNotFound, Unavailable
from ..format.paths import TMP_DIR, check_prefix, check_relative_path
from .base import ObjectMeta, ObjectStore
from .wrappers import StoreWrapper

_log = logging.getLogger(__name__)

TWO_PHASE_TMP_PREFIX = f"{TMP_DIR}2pc/"
"""Where temporary objects of two-phase writes live, under the store root."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS shaledb_twophase (
    namespace   TEXT NOT NULL,
    destination TEXT NOT NULL,
    source      TEXT NOT NULL,
    committed   INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    PRIMARY KEY (namespace, destination)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS shaledb_twophase_pending
    ON shaledb_twophase (namespace, destination) WHERE committed = 0;
"""


@dataclass(frozen=True, slots=True)
class Record:
    """One row of the record table."""

    destination: str
    source: str
    committed: bool


class SqliteCasLog:
    """The record table of the two-phase write, in a SQLite file.

    Each thread gets its own connection (sqlite3 connections are not shared
    across threads); every statement autocommits, so the insert of step 2 is
    one atomic transaction. WAL mode lets readers run beside a writer;
    ``synchronous=FULL`` by default because the insert is the commit point of a
    write the caller is told is durable.
    """

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_s: float = 30.0,
        synchronous: str = "FULL",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise InvalidArgument("the two-phase record database needs a file path")
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise InvalidArgument("synchronous must be FULL, EXTRA or NORMAL")
        self.path = os.path.abspath(path)
        self._timeout = busy_timeout_s
        self._clock = clock
        self._sync = synchronous.upper()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._run(lambda c: self._when_unlocked(lambda: c.executescript(_SCHEMA)))

    def describe(self) -> str:
        return f"sqlite://{self.path}"

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            try:
                self._when_unlocked(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute(f"PRAGMA synchronous={self._sync}")
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _when_unlocked(self, fn: Callable[[], object]) -> object:
        """Run ``fn``, retrying "database is locked" up to the busy timeout.

        SQLite skips its busy handler where waiting could deadlock: switching a
        fresh file to WAL mode, or creating the table, while other processes
        open the same new file. Those statements then fail at once, so several
        processes opening one new record file race; a retry settles it (both
        statements are idempotent).
        """
        deadline = self._clock.monotonic() + self._timeout
        pause_s = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or self._clock.monotonic() >= deadline:
                    raise
            self._clock.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.05)

    def _run(self, fn: Callable[[sqlite3.Connection], object]) -> object:
        try:
            return fn(self._conn())
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise Unavailable(f"two-phase record database {self.path}: {exc}") from exc

    def get(self, namespace: str, destination: str) -> Record | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT source, committed FROM shaledb_twophase WHERE namespace=? AND destination=?",
                (namespace, destination),
            ).fetchone()
        )
        if row is None:
            return None
        assert isinstance(row, tuple)
        return Record(destination, str(row[0]), bool(row[1]))

    def pending(self, namespace: str, prefix: str = "") -> list[Record]:
        """Pending records whose destination starts with ``prefix``."""
        rows = self._run(
            lambda c: c.execute(
                "SELECT destination, source FROM shaledb_twophase WHERE namespace=? AND committed=0 "
                "AND destination >= ? ORDER BY destination",
                (namespace, prefix),
            ).fetchall()
        )
        out = []
        assert isinstance(rows, list)
        for dst, src in rows:
            if not str(dst).startswith(prefix):
                break
            out.append(Record(str(dst), str(src), False))
        return out

    def insert(self, namespace: str, destination: str, source: str, now: float) -> bool:
        """Step 2: claim ``destination``; False if another write holds it."""
        try:
            self._run(
                lambda c: c.execute(
                    "INSERT INTO shaledb_twophase (namespace, destination, source, committed, created_at) "
                    "VALUES (?, ?, ?, 0, ?)",
                    (namespace, destination, source, now),
                )
            )
        except sqlite3.IntegrityError:
            return False
        return True

    def commit(self, namespace: str, destination: str, source: str) -> None:
        self._run(
            lambda c: c.execute(
                "UPDATE shaledb_twophase SET committed=1 WHERE namespace=? AND destination=? AND source=?",
                (namespace, destination, source),
            )
        )

    def remove(self, namespace: str, destination: str) -> None:
        self._run(
            lambda c: c.execute(
                "DELETE FROM shaledb_twophase WHERE namespace=? AND destination=?", (namespace, destination)
            )
        )

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


StepHook = Callable[[str, str], None]
"""Called as ``hook(step, destination)`` after each protocol step; tests crash there."""


class TwoPhaseStore(StoreWrapper):
    """Adds create-if-absent to ``inner`` with the two-phase write.

    ``inner`` needs no conditional writes of its own (it is typically wrapped
    in :class:`~shaledb.store.wrappers.NoConditionalStore` in tests). ``rng``
    names temporary objects; ``step_hook`` is called after each step
    (``tmp_written``, ``record_inserted``, ``copied``, ``committed``,
    ``tmp_deleted``) so tests can crash between them.
    """

    def __init__(
        self,
        inner: ObjectStore,
        log: SqliteCasLog | str,
        *,
        namespace: str | None = None,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
        step_hook: StepHook | None = None,
    ) -> None:
        super().__init__(inner)
        self.log = log if isinstance(log, SqliteCasLog) else SqliteCasLog(log)
        self._owns_log = not isinstance(log, SqliteCasLog)
        self.namespace = namespace if namespace is not None else inner.describe()
        self._rng = rng if rng is not None else random.Random()
        self._rng_lock = threading.Lock()
        self._clock = clock
        self._hook = step_hook

    @property
    def supports_conditional_put(self) -> bool:
        return True

    def describe(self) -> str:
        return f"{self.inner.describe()} (two-phase writes via {self.log.describe()})"

    def _step(self, step: str, destination: str) -> None:
        if self._hook is not None:
            self._hook(step, destination)

    def _tmp_name(self, data: bytes | bytearray | memoryview) -> str:
        with self._rng_lock:
            uid = uuid.UUID(int=self._rng.getrandbits(128), version=4)
        return f"{TWO_PHASE_TMP_PREFIX}{uid.hex}.{google_crc32c.value(bytes(data)):08x}"

    # -- the write -------------------------------------------------------------------------

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        check_relative_path(path)
        if not create:
            self._settle(path)
            self.inner.put(path, data, attributes=attributes)
            return
        self._refuse_existing(path)
        tmp = self._tmp_name(data)
        self.inner.put(tmp, data, attributes=attributes)
        self._step("tmp_written", path)
        try:
            inserted = self.log.insert(self.namespace, path, tmp, self._clock.now())
        except Unavailable:
            self._delete_quietly(tmp)
            raise
        if not inserted:
            self._delete_quietly(tmp)
            raise AlreadyExists(path)
        self._step("record_inserted", path)
        try:
            self._finish(path, tmp)
        except Unavailable as exc:
            # The record is the commit point: the write is durable and the next
            # read (or recover()) completes it. Failing here would be a lie.
            _log.warning("%s: two-phase write of %s committed, copy deferred: %s", self.describe(), path, exc)

    def _refuse_existing(self, path: str) -> None:
        rec = self.log.get(self.namespace, path)
        if rec is not None:
            if not rec.committed:
                self._finish(path, rec.source)  # help it along, as a read would
            raise AlreadyExists(path)
        try:
            self.inner.head(path)
        except ObjectNotFound:
            return
        raise AlreadyExists(path)  # written without a record (plain put, or before two-phase)

    def _finish(self, destination: str, source: str) -> None:
        """Steps 3-5 for one record; idempotent, safe to run concurrently."""
        try:
            self.inner.copy(source, destination)
        except ObjectNotFound:
            # Gone only after the record was committed (or removed): someone
            # else finished this write.
            rec = self.log.get(self.namespace, destination)
            if rec is None or rec.committed or rec.source != source:
                return
            try:
                self.inner.head(destination)
            except ObjectNotFound:
                raise CorruptionError(
                    f"two-phase write lost its temporary object {source} before it was copied",
                    destination,
                ) from None
            self.log.commit(self.namespace, destination, source)
            return
        self._step("copied", destination)
        self.log.commit(self.namespace, destination, source)
        self._step("committed", destination)
        self.inner.delete(source)
        self._step("tmp_deleted", destination)

    def _delete_quietly(self, path: str) -> None:
        try:
            self.inner.delete(path)
        except Unavailable:
            pass  # an orphan temporary object; sweep_orphans() reclaims it

    def _settle(self, path: str) -> None:
        check_relative_path(path)
        if path.startswith(TWO_PHASE_TMP_PREFIX):
            return
        rec = self.log.get(self.namespace, path)
        if rec is not None and not rec.committed:
            self._finish(path, rec.source)

    def recover(self) -> int:
        """Roll forward every pending write of this namespace; returns how many."""
        pending = self.log.pending(self.namespace)
        for rec in pending:
            self._finish(rec.destination, rec.source)
        return len(pending)

    def sweep_orphans(self, min_age_s: float) -> int:
        """Delete temporary objects older than ``min_age_s`` that no record names.

        They are left by writers that stopped before their record was inserted
        (or lost the race for it). The age bound keeps a slow writer's fresh
        temporary object alive until its insert.
        """
        pending = {r.source for r in self.log.pending(self.namespace)}
        cutoff = self._clock.now() - min_age_s
        removed = 0
        for meta in list(self.inner.list(TWO_PHASE_TMP_PREFIX)):
            if meta.path not in pending and meta.last_modified <= cutoff:
                self.inner.delete(meta.path)
                removed += 1
        return removed

    # -- reads settle first ----------------------------------------------------------------

    def get(self, path: str) -> bytes:
        self._settle(path)
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._settle(path)
        return self.inner.get_range(path, start, end)

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self._settle(path)
        return self.inner.get_ranges(path, ranges)

    def head(self, path: str) -> ObjectMeta:
        self._settle(path)
        return self.inner.head(path)

    def attributes(self, path: str) -> dict[str, str]:
        self._settle(path)
        return self.inner.attributes(path)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        for rec in self.log.pending(self.namespace, prefix):
            self._finish(rec.destination, rec.source)
        return self.inner.list(prefix, offset=offset)

    def delete(self, path: str) -> None:
        self._settle(path)
        self.log.remove(self.namespace, path)
        self.inner.delete(path)

    def delete_many(self, paths: Sequence[str]) -> None:
        for path in paths:
            check_relative_path(path)
        for path in paths:
            self._settle(path)
            self.log.remove(self.namespace, path)
        self.inner.delete_many(paths)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        self._settle(src)
        if not create:
            self._settle(dst)
            self.inner.copy(src, dst)
            return
        attrs = self.inner.attributes(src) if self.inner.supports_attributes else None
        self.put(dst, self.inner.get(src), create=True, attributes=attrs)

    def close(self) -> None:
        if self._owns_log:
            self.log.close()
        self.inner.close()

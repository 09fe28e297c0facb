"""The value-journal side of the read API (mixed into ``Db``, ``Snapshot`` and ``DbReader``).

Reads that follow Leveled's design on top of the LSM (docs/journal.md, docs/design/value-journal.md):

* ``head(key)`` -- a :class:`~shaledb.engine.indexes.Head` from the ledger, no journal read;
* ``index_query(field, start, end, ...)`` -- keys by secondary-index term;
* ``scan_heads`` / ``fold_heads``, ``fold_keys`` -- key-order folds without values;
* ``fold_objects(order="key" | "sqn")`` -- values in key order (pointers resolved
  lazily, as ``scan`` does) or in sequence order straight from the journal, each
  entry checked to be current in the snapshot;
The writer's journal maintenance (``compact_journal``, ``rebuild_ledger``,
``backup``) is ``Db``'s own (``shaledb.db.writer``).

Every fold reads one snapshot, pinned until the iterator is exhausted or closed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..engine.indexes import (
    Head,
    check_query,
    index_query,
    index_view,
    make_head,
    scan_heads,
    scan_keys,
)
from ..engine.memtable import Memtable
from ..engine.reads import ReadView, Scan, Visibility, check_limit, get_many, lookup, scan_items
from ..engine.sstable import TableCache
from ..errors import ClosedError, InvalidArgument
from ..journal.folds import fold_sequence_order
from ..journal.resolver import JournalResolver
from ..keys import MAX_KEY_BYTES, check_key, scan_bounds
from ..store.base import ObjectStore
from ..store.parallel import DEFAULT_WORKERS, check_workers


class WriterReads(Protocol):
    """What the writer's and its snapshots' queries read through (the writer's host)."""

    @property
    def tables(self) -> TableCache: ...

    @property
    def vis(self) -> Visibility: ...

    @property
    def journal(self) -> JournalResolver: ...

    @property
    def closed(self) -> bool: ...

    @property
    def view(self) -> ReadView:
        """The current read view (unpinned)."""
        ...

    def store_for(self, db_index: int) -> ObjectStore: ...

    def pin(self) -> tuple[ReadView, int, Callable[[], None]]:
        """The current view and sequence number, pinned until the returned release is called."""
        ...


def checked_keys(keys: Iterable[bytes], workers: int) -> list[bytes]:
    """``keys`` as a list of valid keys (InvalidArgument for the first bad one, or bad workers)."""
    check_workers(workers)
    if isinstance(keys, (bytes, bytearray, memoryview, str)) or not isinstance(keys, Iterable):
        raise InvalidArgument(
            f"keys must be an iterable of bytes keys, e.g. a list, got {type(keys).__name__}"
        )
    return [k if type(k) is bytes and 0 < len(k) <= MAX_KEY_BYTES else check_key(k) for k in keys]


class _ViewReads:
    """Heads and index queries on ``(view, seq)``: shared by the writer, its snapshots
    and ``DbReader``, which differ only in where their table cache and clock live."""

    def _read_ctx(self) -> tuple[TableCache, Visibility]:
        raise NotImplementedError

    def _get_many_at(
        self, view: ReadView, seq: int | None, keys: list[bytes], workers: int
    ) -> list[bytes | None]:
        tables, vis = self._read_ctx()
        return get_many(view, tables, vis, keys, seq, workers)

    def _head_at(self, view: ReadView, seq: int | None, key: bytes) -> Head | None:
        tables, vis = self._read_ctx()
        k = key if type(key) is bytes else check_key(key)
        e = lookup(view, tables, k, seq)
        return None if e is None else make_head(e[0], e[1], e[2], vis.now_ms)

    def _index_query_at(
        self,
        view: ReadView,
        seq: int | None,
        fld: str,
        start: bytes | None,
        end: bytes | None,
        return_terms: bool,
        term_regex: str | bytes | re.Pattern[bytes] | None,
        start_key: bytes | None,
        limit: int | None,
    ) -> list[Any]:
        pattern = check_query(fld, start, end, start_key, limit, term_regex)
        tables, vis = self._read_ctx()
        return list(
            index_query(
                index_view(view),
                tables,
                vis,
                seq,
                fld,
                start,
                end,
                return_terms=return_terms,
                term_regex=pattern,
                start_key=start_key,
                limit=limit,
                data=view,
            )
        )


class _Reads(_ViewReads):
    """Read operations shared by the writer and its snapshots."""

    def _db_(self) -> WriterReads:
        raise NotImplementedError

    def _read_ctx(self) -> tuple[TableCache, Visibility]:
        db = self._db_()
        return db.tables, db.vis

    def _fold_sqn(self, view: ReadView, seq: int, s: bytes | None, e: bytes | None) -> Iterator[Any]:
        db = self._db_()
        return fold_sequence_order(view, seq, db.tables, db.vis, db.store_for, s, e)


class SnapshotExtras(_Reads):
    """Heads, index queries and folds of a ``Snapshot`` (its view and sequence number)."""

    _view: ReadView
    seq: int
    _reads: WriterReads

    def _check(self) -> None:
        raise NotImplementedError

    def _db_(self) -> WriterReads:
        return self._reads

    def get_many(self, keys: Iterable[bytes], *, workers: int = DEFAULT_WORKERS) -> list[bytes | None]:
        """As :meth:`DbExtras.get_many`, at the snapshot."""
        ks = checked_keys(keys, workers)
        self._check()
        return self._get_many_at(self._view, self.seq, ks, workers)

    def head(self, key: bytes) -> Head | None:
        """The key's :class:`~shaledb.engine.indexes.Head` at the snapshot (no journal read)."""
        self._check()
        return self._head_at(self._view, self.seq, key)

    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: bool = False,
        term_regex: str | bytes | re.Pattern[bytes] | None = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[Any]:
        """As :meth:`DbExtras.index_query`, at the snapshot."""
        self._check()
        return self._index_query_at(
            self._view, self.seq, field, start, end, return_terms, term_regex, start_key, limit
        )

    def scan_heads(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, Head]]:
        self._check()
        check_limit(limit)
        s, e = scan_bounds(start, end, prefix)
        db = self._db_()
        return scan_heads(self._view, db.tables, db.vis, s, e, self.seq, bool(reverse), limit)

    fold_heads = scan_heads

    def fold_keys(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[bytes]:
        self._check()
        check_limit(limit)
        s, e = scan_bounds(start, end, prefix)
        db = self._db_()
        return scan_keys(self._view, db.tables, db.vis, s, e, self.seq, bool(reverse), limit)

    def fold_objects(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        order: str = "key",
    ) -> Iterator[Any]:
        """``(key, value)`` in key order, or ``(seq, key, value)`` in sequence order."""
        self._check()
        s, e = scan_bounds(start, end, prefix)
        if order == "key":
            db = self._db_()
            return scan_items(self._view, db.tables, db.vis, s, e, self.seq, False, None)
        if order == "sqn":
            return self._fold_sqn(self._view, self.seq, s, e)
        raise InvalidArgument(f"order must be 'key' or 'sqn', got {order!r}")


class DbExtras(_Reads):
    """The writer's heads, secondary indexes and folds (read through its host)."""

    _host: WriterReads

    def _db_(self) -> WriterReads:
        return self._host

    # ----------------------------------------------------------------- heads

    def get_many(self, keys: Iterable[bytes], *, workers: int = DEFAULT_WORKERS) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), in order, from one consistent view.

        Up to ``workers`` threads look up contiguous slices of ``keys`` at once:
        on an object store, lookups that miss the block cache then wait for
        their round trips together. Sorted keys share blocks best.
        """
        ks = checked_keys(keys, workers)
        view, seq, release = self._pin_view()
        try:
            return self._get_many_at(view, seq, ks, workers)
        finally:
            release()

    def head(self, key: bytes) -> Head | None:
        """The key's metadata: ``Head(seq, value_size, metadata, expires_at, indexes,
        in_journal)``, or None if absent, deleted or expired. Reads no value."""
        db = self._db_()
        if db.closed:
            raise ClosedError("database is closed")
        return self._head_at(db.view, None, key)

    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: bool = False,
        term_regex: str | bytes | re.Pattern[bytes] | None = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[Any]:
        """Keys whose ``field`` has a term in ``[start, end)`` (half-open like
        ``scan``: the end term is excluded; None unbounded), in term order then
        key order, read from a snapshot. One term ``t``: ``index_query(field, t,
        t + b"\x00")`` (``shaledb.engine.indexes.term_range(t)``).

        ``return_terms=True`` gives ``(term, key)`` pairs. ``term_regex`` keeps
        terms it matches (``re.search`` over bytes). ``start_key`` skips keys
        below it within the start term, so the page after one that ended at
        ``(t, k)`` is ``index_query(field, t, end, start_key=k + b"\\x00", ...)``.
        A key appears once per matching term. ``limit`` caps the result.
        """
        view, seq, release = self._pin_view()
        try:
            return self._index_query_at(
                view, seq, field, start, end, return_terms, term_regex, start_key, limit
            )
        finally:
            release()

    def _pin_view(self) -> tuple[ReadView, int, Callable[[], None]]:
        return self._db_().pin()

    # ----------------------------------------------------------------- folds

    def scan_heads(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
        journal_check: bool = False,
    ) -> Scan[Any]:
        """``(key, Head)`` for live keys in ``[start, end)``, on a snapshot; no value read.

        ``journal_check=True`` (Leveled's JournalCheck) leaves out keys whose value
        lives in a journal object that is missing from the store (one HEAD
        request per journal object the fold meets).
        """
        check_limit(limit)
        s, e = scan_bounds(start, end, prefix)
        db = self._db_()
        view, seq, release = self._pin_view()
        check = db.journal.checker() if journal_check else None
        return Scan(scan_heads(view, db.tables, db.vis, s, e, seq, bool(reverse), limit, check), release)

    fold_heads = scan_heads

    def fold_keys(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Scan[Any]:
        """Live keys in ``[start, end)`` in key order, on a snapshot."""
        check_limit(limit)
        s, e = scan_bounds(start, end, prefix)
        db = self._db_()
        view, seq, release = self._pin_view()
        return Scan(scan_keys(view, db.tables, db.vis, s, e, seq, bool(reverse), limit), release)

    def fold_objects(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        order: str = "key",
    ) -> Scan[Any]:
        """Values on a snapshot: ``order="key"`` gives ``(key, value)`` in key order
        (like ``scan``); ``order="sqn"`` gives ``(seq, key, value)`` in sequence
        order, read straight from the journal objects and then the memtables,
        each entry checked to be the key's current version in the snapshot.

        Sequence order needs the value journal: entries that never were in it
        (bulk-ingested rows, writes from before the threshold was set) are not
        visited.
        """
        if order not in ("key", "sqn"):
            raise InvalidArgument(f"order must be 'key' or 'sqn', got {order!r}")
        s, e = scan_bounds(start, end, prefix)
        db = self._db_()
        view, seq, release = self._pin_view()
        if order == "key":
            return Scan(scan_items(view, db.tables, db.vis, s, e, seq, False, None), release)
        return Scan(self._fold_sqn(view, seq, s, e), release)


class ReaderReads(_ViewReads):
    """``DbReader``'s heads, index queries and head scans (on its current view)."""

    _tables: TableCache
    _vis: Visibility

    def _read_ctx(self) -> tuple[TableCache, Visibility]:
        return self._tables, self._vis

    def _check_open(self) -> None:
        raise NotImplementedError

    def _pin(self) -> tuple[ReadView, int, Any]:
        raise NotImplementedError

    def _unpin(self, mem: Memtable, seq: int, cp: Any) -> None:
        raise NotImplementedError

    _view: ReadView

    def get_many(self, keys: Iterable[bytes], *, workers: int = DEFAULT_WORKERS) -> list[bytes | None]:
        """The values of ``keys``, in order, from one consistent view (as ``Db.get_many``)."""
        ks = checked_keys(keys, workers)
        view, seq, cp = self._pin()
        try:
            return self._get_many_at(view, seq, ks, workers)
        finally:
            self._unpin(view.mem, seq, cp)

    def head(self, key: bytes) -> Head | None:
        """The key's :class:`~shaledb.engine.indexes.Head` in the current view (no journal read)."""
        self._check_open()
        return self._head_at(self._view, None, key)

    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: bool = False,
        term_regex: Any = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[Any]:
        """Keys by secondary-index term, as ``Db.index_query``, from one consistent view."""
        view, seq, cp = self._pin()
        try:
            return self._index_query_at(
                view, seq, field, start, end, return_terms, term_regex, start_key, limit
            )
        finally:
            self._unpin(view.mem, seq, cp)

    def scan_heads(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Scan[Any]:
        """``(key, Head)`` of live keys in ``[start, end)``, from one consistent view."""
        check_limit(limit)
        s, e = scan_bounds(start, end, prefix)
        view, seq, cp = self._pin()
        it = scan_heads(view, self._tables, self._vis, s, e, seq, bool(reverse), limit)
        return Scan(it, lambda: self._unpin(view.mem, seq, cp))


__all__ = ["DbExtras", "ReaderReads", "SnapshotExtras"]

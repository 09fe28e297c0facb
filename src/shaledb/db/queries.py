"""``Queries``: the read surface of every handle, written once.

``Db``, its ``Snapshot``, ``DbReader`` and its ``ReaderSnapshot`` answer the
same reads: ``get``, ``get_many``, ``scan``, ``head``, ``index_query``,
``scan_heads`` (alias ``fold_heads``), ``fold_keys``, ``fold_objects`` and the
dict habits of :mod:`shaledb.db.mapping` (``h[k]``, ``k in h``, ``iter(h)``,
``keys``/``values``/``items``). The handles differ only in *which* version a
read sees, so each one composes :class:`Queries` by keeping a few attributes
current and answering two hooks:

* ``_view`` and ``_cap``: where a point read (``get``, ``head``) looks -- a live
  handle's current view at the newest version (``_cap`` None), a snapshot's
  view at its sequence number;
* ``_tables``, ``_vis``, ``_journal``: the handle's table cache, visibility
  rules (tombstones, expiry, journal pointers, merges) and journal resolver;
* ``_closed``: a closed handle raises ``ClosedError(_closed_message)``, and so do
  the snapshots taken from it (:class:`SnapshotQueries` reads its handle's);
* ``_pin()`` / ``_unpin()``: pin the current view for a range read (released
  when its iterator is done) -- :class:`SnapshotQueries` overrides
  :meth:`Queries._pin_read` instead, as a snapshot's view is pinned already;
* ``_resolve_store(db_index)``: the store of a clone's parent (``fold_objects``).

Point reads use those attributes directly, with no hook call between the
caller and ``lookup``, so a ``get`` costs what it did when each handle spelled
it out. Range reads hand the read path one
:class:`~shaledb.engine.reads.ReadAt` (view, tables, visibility, sequence
number) and one :class:`~shaledb.engine.reads.Span` (bounds, order, limit).
A ``Scan`` a snapshot returns holds the snapshot's pin, not one of its own, and
every scan stops with ``ClosedError`` at its next step once its handle is closed.
"""

from __future__ import annotations

import re
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar, Literal, NoReturn, Self, SupportsIndex, TypeVar, overload

from ..engine.indexes import Head, check_query, index_query, index_view, make_head, scan_heads, scan_keys
from ..engine.memtable import Memtable
from ..engine.reads import (
    ReadAt,
    ReadView,
    Scan,
    Span,
    Visibility,
    check_limit,
    get_many,
    lookup,
    scan_chunks,
    scan_items,
)
from ..engine.sstable import TableCache
from ..errors import ClosedError, InvalidArgument, ObjectNotFound
from ..journal.folds import fold_sequence_order
from ..journal.resolver import JournalResolver
from ..keys import MAX_KEY_BYTES, BytesLike, check_key, scan_bounds
from ..numbers import check_flag
from ..store.base import ObjectStore
from ..store.parallel import DEFAULT_WORKERS, check_workers
from .mapping import closing, refuse_pickle

Bound = BytesLike | None
"""A range bound or prefix: bytes-like, or None (unbounded)."""

TermRegex = str | bytes | re.Pattern[bytes] | None
"""``index_query``'s ``term_regex``: a pattern over bytes terms (a str is UTF-8 encoded)."""

D = TypeVar("D")


def checked_keys(keys: Iterable[BytesLike], workers: int) -> list[bytes]:
    """``keys`` as a list of valid keys (InvalidArgument for the first bad one, or bad workers)."""
    check_workers(workers)
    if isinstance(keys, (bytes, bytearray, memoryview, str)) or not isinstance(keys, Iterable):
        raise InvalidArgument(
            f"keys must be an iterable of bytes keys, e.g. a list, got {type(keys).__name__}"
        )
    return [k if type(k) is bytes and 0 < len(k) <= MAX_KEY_BYTES else check_key(k) for k in keys]


def span(start: Bound, end: Bound, prefix: Bound, reverse: bool, limit: int | None) -> Span:
    """A range read's checked arguments (``prefix`` narrows ``[start, end)``)."""
    if prefix is None and (start is None or type(start) is bytes) and (end is None or type(end) is bytes):
        s, e = start, end  # (the common call, checked in place: a short scan's fixed cost, issue 30)
    else:
        s, e = scan_bounds(start, end, prefix)
    check_limit(limit)
    if reverse is not False and reverse is not True:
        check_flag("reverse", reverse)
    return Span(s, e, reverse, limit)


class Queries:
    """The reads every handle answers (module docstring): what a handle composes."""

    _view: ReadView
    _tables: TableCache
    _vis: Visibility
    _journal: JournalResolver
    _cap: int | None = None
    _closed: bool = False
    _closed_message: ClassVar[str] = "database is closed"
    _m_gets = 0
    _m_scans = 0

    # ------------------------------------------------------- the handle's part

    def _pin(self) -> tuple[ReadView, int, uuid.UUID | None]:  # pragma: no cover - every handle
        raise NotImplementedError

    def _unpin(self, mem: Memtable, seq: int, cp: uuid.UUID | None) -> None:  # pragma: no cover
        raise NotImplementedError

    def _resolve_store(self, db_index: int) -> ObjectStore:  # pragma: no cover - every handle
        raise NotImplementedError

    def _ended(self) -> str | None:
        """Why this handle's running scans must stop (the closed message), or None.

        A scan belongs to the handle it came from: once that is closed (or a
        snapshot's database), the scan's next step raises ``ClosedError``
        (``engine.reads.while_open``) -- before, a snapshot closed mid-scan
        unpinned its memtable versions and the scan went on without the rows
        overwritten since (silently short). Rows of a chunk already read come
        from the pinned view and are still handed out.
        """
        return self._closed_message if self._closed else None

    def _pin_read(self) -> tuple[ReadAt, Callable[[], None] | None]:
        """What a range read reads, pinned, and the release of that pin (None: nothing to release)."""
        view, seq, cp = self._pin()
        return ReadAt(view, self._tables, self._vis, seq), lambda: self._unpin(view.mem, seq, cp)

    def _lost(self, key: bytes, exc: ObjectNotFound) -> tuple[int, int, bytes] | None:
        """A point read met an SST that is gone: a reader following the latest version
        moves on and reads again; elsewhere it is an error."""
        raise exc

    # ------------------------------------------------------------ point reads

    @overload
    def get(self, key: BytesLike) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: D) -> bytes | D: ...
    def get(self, key: BytesLike, default: D | None = None) -> bytes | D | None:
        """The value of ``key``, or ``default`` (None) when it is absent."""
        k = key if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES else check_key(key)
        if self._closed:
            raise ClosedError(self._closed_message)
        self._m_gets += 1
        try:
            e = lookup(self._view, self._tables, k, self._cap)
        except ObjectNotFound as exc:
            e = self._lost(k, exc)
        if e is None:
            return default
        if e[1] == 0:
            return e[2]
        v = self._vis.value(k, e[1], e[2])
        return default if v is None else v

    def get_many(self, keys: Iterable[BytesLike], *, workers: int = DEFAULT_WORKERS) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), in order, from one consistent view.

        Up to ``workers`` threads look up contiguous slices of ``keys`` at once:
        on an object store, lookups that miss the block cache then wait for
        their round trips together. Sorted keys share blocks best.
        """
        ks = checked_keys(keys, workers)
        self._m_gets += len(ks)  # gets_total counts keys looked up (get_many's were left out)
        at, release = self._pin_read()
        try:
            return get_many(at.view, at.tables, at.vis, ks, at.seq, workers)
        finally:
            if release is not None:
                release()

    def head(self, key: BytesLike) -> Head | None:
        """The key's metadata: ``Head(seq, value_size, metadata, expires_at, indexes,
        in_journal)``, or None if absent, deleted or expired. Reads no value."""
        if self._closed:
            raise ClosedError(self._closed_message)
        k = key if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES else check_key(key)
        e = lookup(self._view, self._tables, k, self._cap)
        return None if e is None else make_head(e[0], e[1], e[2], self._vis.now_ms)

    def __getitem__(self, key: BytesLike) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[call-overload]  # (a non-key raises InvalidArgument)

    # ------------------------------------------------------------ range reads

    def scan(
        self,
        start: Bound = None,
        end: Bound = None,
        *,
        prefix: Bound = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Scan[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end`` in key order (``prefix``
        narrows the range), read from one consistent view taken when it is called."""
        sp = span(start, end, prefix, reverse, limit)
        self._m_scans += 1
        at, release = self._pin_read()
        return Scan.of_chunks(scan_chunks(at, sp), release, self._ended)

    # The overloads say which list a call gets: keys, or with ``return_terms=True`` (term, key)
    # pairs (the union alone made every caller check or cast what it already knew).
    @overload
    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: Literal[False] = False,
        term_regex: TermRegex = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]: ...
    @overload
    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: Literal[True],
        term_regex: TermRegex = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]: ...
    @overload
    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: bool,
        term_regex: TermRegex = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes] | list[tuple[bytes, bytes]]: ...
    def index_query(
        self,
        field: str,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        return_terms: bool = False,
        term_regex: TermRegex = None,
        start_key: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes] | list[tuple[bytes, bytes]]:
        """Keys whose ``field`` has a term in ``[start, end)`` (half-open like
        ``scan``: the end term is excluded; None unbounded), in term order then
        key order, read from one consistent view. One term ``t``: ``index_query(field, t,
        t + b"\\x00")`` (``shaledb.engine.indexes.term_range(t)``).

        ``return_terms=True`` gives ``(term, key)`` pairs. ``term_regex`` keeps
        terms it matches (``re.search`` over bytes). ``start_key`` skips keys
        below it within the start term, so the page after one that ended at
        ``(t, k)`` is ``index_query(field, t, end, start_key=k + b"\\x00", ...)``.
        A key appears once per matching term. ``limit`` caps the result.
        """
        at, release = self._pin_read()
        try:
            pattern = check_query(field, start, end, start_key, limit, term_regex)
            hits = index_query(
                index_view(at.view),
                at.tables,
                at.vis,
                at.seq,
                field,
                start,
                end,
                return_terms=return_terms,
                term_regex=pattern,
                start_key=start_key,
                limit=limit,
                data=at.view,
            )
            return list(hits)
        finally:
            if release is not None:
                release()

    def scan_heads(
        self,
        start: Bound = None,
        end: Bound = None,
        *,
        prefix: Bound = None,
        reverse: bool = False,
        limit: int | None = None,
        journal_check: bool = False,
    ) -> Scan[tuple[bytes, Head]]:
        """``(key, Head)`` for live keys in ``[start, end)``, from one consistent view; no value read.

        ``journal_check=True`` (Leveled's JournalCheck) leaves out keys whose value
        lives in a journal object that is missing from the store (one HEAD
        request per journal object the fold meets).
        """
        sp = span(start, end, prefix, reverse, limit)
        at, release = self._pin_read()
        check = self._journal.checker() if journal_check else None
        return Scan(scan_heads(at, sp, check), release, self._ended)

    fold_heads = scan_heads

    def fold_keys(
        self,
        start: Bound = None,
        end: Bound = None,
        *,
        prefix: Bound = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Scan[bytes]:
        """Live keys in ``[start, end)`` in key order, from one consistent view."""
        sp = span(start, end, prefix, reverse, limit)
        at, release = self._pin_read()
        return Scan(scan_keys(at, sp), release, self._ended)

    # As index_query's: the order says the rows' shape.
    @overload
    def fold_objects(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, order: Literal["key"] = "key"
    ) -> Scan[tuple[bytes, bytes]]: ...
    @overload
    def fold_objects(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, order: Literal["sqn"]
    ) -> Scan[tuple[int, bytes, bytes]]: ...
    @overload
    def fold_objects(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, order: str
    ) -> Scan[tuple[bytes, bytes]] | Scan[tuple[int, bytes, bytes]]: ...
    def fold_objects(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, order: str = "key"
    ) -> Scan[tuple[bytes, bytes]] | Scan[tuple[int, bytes, bytes]]:
        """Values from one consistent view: ``order="key"`` gives ``(key, value)`` in key
        order (like ``scan``); ``order="sqn"`` gives ``(seq, key, value)`` in sequence
        order, read straight from the journal objects and then the memtables,
        each entry checked to be the key's current version in the view.

        Sequence order needs the value journal: entries that never were in it
        (bulk-ingested rows, writes from before the threshold was set) are not
        visited.
        """
        if order not in ("key", "sqn"):
            raise InvalidArgument(f"order must be 'key' or 'sqn', got {order!r}")
        sp = span(start, end, prefix, False, None)
        at, release = self._pin_read()
        if order == "key":
            return Scan(scan_items(at, sp), release, self._ended)
        assert at.seq is not None  # (a pinned read has its sequence number)
        rows = fold_sequence_order(at.view, at.seq, at.tables, at.vis, self._resolve_store, sp.start, sp.end)
        return Scan(rows, release, self._ended)

    # ------------------------------------------------------------ dict habits

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    def keys(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, reverse: bool = False
    ) -> Iterator[bytes]:
        """Keys in ``[start, end)`` (or under ``prefix``) in key order, from one consistent view."""
        return (k for k, _ in self._pairs(start, end, prefix, reverse))

    def values(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, reverse: bool = False
    ) -> Iterator[bytes]:
        """Values of the keys :meth:`keys` would give, in the same order."""
        return (v for _, v in self._pairs(start, end, prefix, reverse))

    def items(
        self, start: Bound = None, end: Bound = None, *, prefix: Bound = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs as :meth:`keys` orders them (``scan`` with dict's name)."""
        return self._pairs(start, end, prefix, reverse)

    def _pairs(self, start: Bound, end: Bound, prefix: Bound, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        # Validate and pin now (not at the first next()), so bad bounds raise at the call.
        return closing(self.scan(start, end, prefix=prefix, reverse=reverse))

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_pickle(self)


class SnapshotQueries(Queries):
    """A consistent, read-only view at one sequence number (``Snapshot``,
    ``ReaderSnapshot``): every read sees that version, which stays pinned until
    the snapshot is closed (``close()``, ``with``, or garbage collection)."""

    def __init__(self, handle: Queries, view: ReadView, seq: int, cp: uuid.UUID | None = None) -> None:
        self._handle = handle
        self._shut = False
        """Whether :meth:`close` was called (``_closed`` also says whether the handle was)."""
        self._view = view
        self._tables = handle._tables
        self._vis = handle._vis
        self._journal = handle._journal
        self._cap = self.seq = seq
        self._at = ReadAt(view, self._tables, self._vis, seq)
        self._finalizer = weakref.finalize(self, handle._unpin, view.mem, seq, cp)
        self._scans = 0
        self._scans_lock = threading.Lock()

    @property
    def _closed(self) -> bool:  # type: ignore[override]  # (a handle's attribute, a property here)
        """Closed, or its handle is: a closed handle's snapshots refuse every read.

        Before, a point read (``get``, ``head``, ``get_many``, ``index_query``) on a
        snapshot of a closed database went on -- from a cleared cache and a closed
        store -- while its ``scan`` raised ``ClosedError``.
        """
        return self._shut or self._handle._closed

    @property
    def _closed_message(self) -> str:  # type: ignore[override]
        if self._shut:
            return "snapshot is closed"
        return f"{self._handle._closed_message}: its snapshots are closed with it"

    def _ended(self) -> str | None:
        return self._closed_message if self._closed else None

    def _pin_read(self) -> tuple[ReadAt, Callable[[], None] | None]:
        """The snapshot's view; a scan holds the snapshot's pin until it ends, so a ``close()``
        in another thread while a chunk is being read releases the version only after it."""
        if self._closed:
            raise ClosedError(self._closed_message)
        with self._scans_lock:
            self._scans += 1
        return self._at, self._scan_ended

    def _scan_ended(self) -> None:
        with self._scans_lock:
            self._scans -= 1
            last = self._scans == 0 and self._shut
        if last:
            self._finalizer()

    def _resolve_store(self, db_index: int) -> ObjectStore:
        return self._handle._resolve_store(db_index)

    def close(self) -> None:
        """Release the snapshot's version; reads, and the next step of its running scans,
        raise ``ClosedError`` from now on (the version goes once those scans end)."""
        with self._scans_lock:
            self._shut = True
            running = self._scans
        if not running:
            self._finalizer()

    def __enter__(self) -> Self:
        if self._closed:  # (as a closed file refuses ``with``: every call inside would raise)
            raise ClosedError(self._closed_message)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        closed = ", closed" if self._closed else ""
        return f"{type(self).__name__}(seq={self.seq} of {self._handle!r}{closed})"


__all__ = ["Queries", "SnapshotQueries", "checked_keys", "span"]

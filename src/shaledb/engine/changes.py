"""The change feed: every committed write, in sequence order, read from WAL objects.

    feed = db.changes(since=stored_cursor)       # or DbReader.changes, or open_changes(url)
    for change in feed:                          # follows new writes until closed
        apply(change)                            # change.kind, .key, .value, .seq, .batch_index
        save(change.cursor)                      # with the consumer's own output

Why WAL objects: a write is committed exactly when its WAL object exists (a
writer acknowledges after the create; a writer that opens after a crash
replays every object present; a fenced writer can create no more). So the
objects ``wal/1.sst, 2, ...`` in id order *are* the committed history, in
sequence order, readable by any process with the store alone -- across writer
restarts and fencing takeovers, whose fences are empty objects in the same
sequence.

A :class:`Cursor` is a position in that history: the WAL object to read next
and how much of the sequence is consumed (every write below ``seq`` and the
first ``taken`` writes of batch ``seq``). A batch never spans two WAL objects,
and a cursor can stop inside a batch, so a consumer that stores
``change.cursor`` together with its output resumes exactly once: nothing seen
twice, nothing missed. ``str(cursor)`` is its storable form.

WAL objects are deleted by the garbage collector once their writes are in L0
SSTs and they are older than ``GcOptions.min_age_s``, or
``GcOptions.wal_retention_s`` if that is longer (a consumer that can fall
behind by an hour wants an hour). A cursor whose next object is gone raises
:class:`CursorExpired`: it never skips what it missed. A feed with no cursor
(``since=None``) starts at the oldest history the WAL still holds whole up to its
head (after the last object the collector removed), stepping over what the collector
removes meanwhile before its first change. Bulk ingests (the Spark
data source) add SSTs without WAL entries and are not in the feed.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple, TypedDict, Unpack

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import ClosedError, CursorAhead, CursorExpired, InvalidArgument, NotFound, ObjectNotFound
from ..format import paths
from ..format.merge import merge_operand
from ..format.range_dels import KIND_RANGE_DEL
from ..format.row import FLAG_INDEX_TREE, KIND_MERGE, KIND_TOMBSTONE, TYPE_MASK, decode_payload
from ..format.wal import EpochGate, decode_wal_object
from ..manifest.model import Manifest
from ..manifest.store import ManifestStore
from ..numbers import check_int, check_number
from ..store.base import ObjectStore
from .reads import check_limit
from .wal_read import fetch_wal_objects

_CURSOR = re.compile(r"^c1\.(\d+)\.(\d+)\.(\d+)$")

READ_AHEAD = 8
"""WAL objects fetched at once while the feed is behind."""


class Cursor(NamedTuple):
    """A position in the change history (see the module docstring); ``str()`` stores it.

    A named tuple: one is made per change, and a tuple is the cheapest immutable object.
    """

    wal_id: int = 1
    """The WAL object to read next (it may hold changes already consumed)."""
    seq: int = 0
    """Every change with a lower sequence number is consumed..."""
    taken: int = 0
    """...and the first ``taken`` changes of batch ``seq``."""

    def __str__(self) -> str:
        return f"c1.{self.wal_id}.{self.seq}.{self.taken}"

    @classmethod
    def parse(cls, text: str | Cursor | None) -> Cursor:
        """A cursor from its string (None: the start of the history)."""
        if text is None:
            return cls()
        if isinstance(text, Cursor):
            return cls(*text)
        m = _CURSOR.match(text) if isinstance(text, str) else None
        if m is None:
            raise InvalidArgument(f"not a change-feed cursor: {text!r} (expected c1.<wal>.<seq>.<taken>)")
        wal_id, seq, count = (int(g) for g in m.groups())
        if wal_id < 1:
            raise InvalidArgument(f"cursor {text!r}: WAL ids start at 1")
        return cls(wal_id, seq, count)


class Change(NamedTuple):
    """One committed write: ``kind`` "put" (``value`` set), "delete" (``value`` None) or
    "delete_range" (every key in ``[key, end)`` removed; ``value`` None) or "merge"
    (``value`` the operand given to ``Db.merge``, not the folded value).

    ``seq`` is its batch's sequence number (every write of a batch shares it);
    ``batch_index`` its place in the batch and ``batch_size`` the batch's
    writes; ``metadata`` and ``expires_at_ms`` as the write set them;
    ``cursor`` the position just after it.
    """

    seq: int
    kind: str
    key: bytes
    value: bytes | None
    batch_index: int
    batch_size: int
    cursor: Cursor
    wal_id: int
    metadata: bytes | None = None
    expires_at_ms: int | None = None
    end: bytes | None = None
    """A range delete's end key (exclusive); None for other changes."""


class ChangeFeed:
    """An iterator of :class:`Change` from a cursor; ``cursor`` is where it stands.

    Iterating follows the database: when it has caught up it polls every
    ``poll_interval_s`` (one GET of the next WAL object) until :meth:`close`
    (from any thread) or, with ``follow=False``, stops at the end.
    :meth:`read` returns the changes available now, up to ``limit``.
    """

    def __init__(
        self,
        store: ObjectStore,
        since: Cursor | str | None = None,
        *,
        follow: bool = True,
        poll_interval_s: float = 0.5,
        clock: Clock | None = None,
        read_ahead: int = READ_AHEAD,
        owns_store: bool = False,
        until_wal_id: int | None = None,
    ) -> None:
        check_number("poll_interval_s", poll_interval_s, above_minimum=True, maximum=86_400)
        if not isinstance(follow, bool):
            raise InvalidArgument(f"follow must be True or False, got {follow!r}")
        check_int("read_ahead", read_ahead, minimum=1, maximum=1024)
        self.store = store
        self.cursor = Cursor.parse(since)
        self._from_oldest = since is None
        """Start at the oldest history the WAL still holds: until the first change, gaps the
        garbage collector left are stepped over (a cursor's gap raises CursorExpired)."""
        self._start_found = since is not None
        """Whether the start is known (a cursor, or :meth:`_whole_from` has run)."""
        self.follow = follow
        self.poll_interval_s = float(poll_interval_s)
        self.clock = clock or SYSTEM_CLOCK
        self.read_ahead = read_ahead
        self._ahead_checked = False
        self._owns_store = owns_store
        self._manifests = ManifestStore(store, self.clock, random.Random(), author="changes")
        self._latest: Manifest | None = None
        self._closed = threading.Event()
        self._gone: str | None = None
        """Why the handle this feed came from no longer serves it (see :meth:`detach`)."""
        self._on_close: list[Callable[[], None]] = []
        """Called (from the closing thread) by :meth:`close` and :meth:`detach`: see :meth:`on_close`."""
        self.objects_read = 0
        self._gate = EpochGate()
        self.until_wal_id = until_wal_id
        """The history ends before this WAL object (a pinned reader's: the version its
        checkpoint pins); the feed ends there, following or not. None: it goes on."""

    # ------------------------------------------------------------- reading

    def read(self, limit: int | None = None) -> list[Change]:
        """The changes committed after the cursor and present now (at most ``limit``);
        advances the cursor past them. ``limit=0`` reads nothing."""
        check_limit(limit)
        if self._gone is not None:
            raise ClosedError(self._gone)
        if limit == 0:
            return []
        out: list[Change] = []
        for change in self._available():
            out.append(change)
            if limit is not None and len(out) >= limit:
                break
        return out

    def __iter__(self) -> Iterator[Change]:
        while not self._closed.is_set():
            got = False
            for change in self._available():
                got = True
                yield change
                if self._closed.is_set():
                    break
            if not got:
                if not self.follow or self._at_end():
                    return
                self._closed.wait(self.poll_interval_s)
        if self._gone is not None:
            raise ClosedError(self._gone)

    def _at_end(self) -> bool:
        return self.until_wal_id is not None and self.cursor.wal_id >= self.until_wal_id

    def _available(self) -> Iterator[Change]:
        """Changes from the cursor on, object by object, until the next object is absent
        (or the feed's end, ``until_wal_id``)."""
        if not self._start_found:
            self.cursor = self.cursor._replace(wal_id=self._whole_from())
            self._start_found = True
        while not self._at_end():
            start = self.cursor.wal_id
            stop = start + self.read_ahead
            if self.until_wal_id is not None:
                stop = min(stop, self.until_wal_id)
            wids = range(start, stop)
            moved = False
            with fetch_wal_objects(self.store, wids, self.read_ahead) as fetched:
                for wid, (path, data) in zip(wids, fetched):
                    if wid != self.cursor.wal_id:
                        break
                    if data is None:
                        if wid == start and self._after_missing(wid):
                            moved = True  # a slot a crashed writer left empty: go on from the next
                        break
                    yield from self._object(wid, path, data)
                    c = self.cursor
                    self.cursor = Cursor(wid + 1, c.seq, c.taken)
                    self.objects_read += 1
                    moved = True
            if not moved:
                return

    def _object(self, wid: int, path: str, data: bytes) -> Iterator[Change]:
        if not self._gate.admit(data, path):
            return  # a crashed writer's object after the next writer's fence
        keys, ents = decode_wal_object(data, path)
        rows = [(k, e) for k, e in zip(keys, ents) if not e[1] & FLAG_INDEX_TREE]
        newest = max((e[0] for _, e in rows), default=None)
        if newest is not None and newest < self.cursor.seq:
            # A cursor names the object it stopped in (holding its batch) or one after it,
            # whose writes are all newer: writes older than it all through mean the cursor
            # is not from this history (before: a follower skipped every new write until
            # the sequence numbers caught up with it).
            raise self._ahead(f"WAL object {wid} holds writes up to seq {newest} only")
        i = 0
        n = len(rows)
        while i < n:
            seq = rows[i][1][0]
            j = i
            while j < n and rows[j][1][0] == seq:
                j += 1
            size = j - i
            c = self.cursor
            if seq > c.seq or (seq == c.seq and c.taken < size):
                skip = c.taken if seq == c.seq else 0
                for idx in range(skip, size):
                    key, (_, kind, payload) = rows[i + idx]
                    after = Cursor(wid, seq, idx + 1)
                    self.cursor = after
                    self._from_oldest = False
                    yield _change(seq, kind, key, payload, idx, size, after, wid)
            i = j

    def _whole_from(self) -> int:
        """Where ``since=None`` starts: the first WAL id of the history the WAL holds whole up
        to its head (or this feed's ``until_wal_id``), one manifest read and one LIST.

        The collector deletes WAL objects at or below the replay point but keeps a live
        checkpoint's range (and fences), so older objects may stand apart from the rest as an
        island. Started at the oldest object present, the feed read the island and raised
        CursorExpired at the gap after it: ``shaledb changes`` printed a few changes and failed,
        and a consumer starting fresh never got going. An id at or below the replay point that
        is absent was collected (or never written): the history starts after the last one."""
        m = self._refresh_manifest()
        if m is None or m.parent is not None:
            return self.cursor.wal_id  # (a clone's feed says where its history starts: _covered)
        top = m.replay_after_wal_id
        if self.until_wal_id is not None:
            top = min(top, self.until_wal_id - 1)  # a pinned feed: its version's range
        if top < 1:
            return self.cursor.wal_id
        present = set()
        for meta in self.store.list(paths.WAL_DIR):
            wid = paths.parse_wal_id(meta.path)
            if wid is not None and wid > top:
                break  # listings are sorted and ids zero-padded: the rest are newer
            if wid is not None:
                present.add(wid)
        gap = top
        while gap >= 1 and gap in present:
            gap -= 1
        return max(gap + 1, self.cursor.wal_id)

    def _after_missing(self, wid: int) -> bool:
        """WAL object ``wid`` is absent: True if it was never written (go on at the next one
        present), False if it is not written yet; raises CursorExpired if it was collected.

        The latest manifest decides: objects at or below its ``replay_after_wal_id``
        have their writes in SSTs and may have been deleted by the collector (then
        the history the cursor needs is gone); an id below ``next_wal_id`` that is
        not covered was a slot a crashed writer left empty (as the reader reasons,
        ``DbReader._after_missing``).
        """
        m = self._refresh_manifest()
        if m is None:
            raise NotFound(f"no database at {self.store.describe()}")
        if m.replay_after_wal_id >= wid:
            return self._covered(m, wid)
        if m.next_wal_id <= wid + 1:
            if not self._ahead_checked:  # once: a follower polling at the end lists nothing
                self._ahead_checked = True
                self._refuse_if_ahead(m, wid)
            return False
        nxt = self._next_present(wid)
        if nxt is not None:
            self.cursor = self.cursor._replace(wal_id=nxt)
            return True
        return False

    def _covered(self, m: Manifest, wid: int) -> bool:
        """Missing WAL object ``wid`` is at or below ``m``'s replay point: True to read on
        (it was only late, or a feed from the oldest history steps over the collected gap);
        else CursorExpired, as the history the cursor needs is gone."""
        if self._written_since(wid):
            # The GET came before the writer wrote the object, and before this manifest read
            # the writer flushed its memtable past it: not collected, just late. Read it now
            # (before, a follower at the head of a busy database got CursorExpired).
            return True
        if m.parent is not None:
            raise CursorExpired(
                f"change-feed cursor {self.cursor} needs {paths.wal_path(wid)}, which this database does "
                f"not have: it is a clone of {m.parent.url} (checkpoint {m.parent.checkpoint_id}); its "
                f"changes before the fork are in the parent's feed, and its own WAL objects up to "
                f"{m.replay_after_wal_id} have their writes in SSTs (the garbage collector may have "
                f'removed them); start from a snapshot of the clone and changes("latest")'
            )
        if self._from_oldest:
            # since=None and nothing yielded yet: the history the WAL holds starts later (the
            # collector deletes WAL objects from the oldest on, but keeps the empty fences, so
            # wal/1 may still be there). Before, such a feed raised CursorExpired on any
            # database whose collector had run. (A clone's feed says where its history starts, above.)
            nxt = self._next_present(wid)
            self.cursor = self.cursor._replace(wal_id=nxt if nxt is not None else m.replay_after_wal_id + 1)
            return True
        raise CursorExpired(
            f"change-feed cursor {self.cursor} needs {paths.wal_path(wid)}, which the garbage collector "
            f"removed (its writes are in SSTs); start again from a snapshot, and keep WAL objects "
            f"longer with GcOptions.wal_retention_s"
        )

    def _next_present(self, wid: int) -> int | None:
        """The id of the first WAL object present after ``wid`` (one LIST), if any."""
        for meta in self.store.list(paths.WAL_DIR, offset=paths.wal_path(wid)):
            nxt = paths.parse_wal_id(meta.path)
            if nxt is not None and nxt > wid:
                return nxt
        return None

    def _written_since(self, wid: int) -> bool:
        """Whether WAL object ``wid``, absent at this feed's GET, is there now (the collector
        never writes an id again, so present means it had not been written yet)."""
        try:
            self.store.head(paths.wal_path(wid))
        except ObjectNotFound:
            return False
        return True

    def _refuse_if_ahead(self, m: Manifest, wid: int) -> None:
        """A cursor at ``wid`` says object ``wid - 1`` was read. If no WAL object at or after
        it exists and the manifest never allocated its id, no writer made it: the cursor is
        not from this database (before, such a feed waited for it forever)."""
        if wid - 1 < max(m.next_wal_id, 1):
            return
        last = None
        for meta in self.store.list(paths.WAL_DIR):
            got = paths.parse_wal_id(meta.path)
            if got is not None and (last is None or got > last):
                last = got
        if last is None or last < wid - 1:
            raise self._ahead(
                "its WAL " + ("has no WAL objects" if last is None else f"ends at WAL object {last}")
            )

    def _ahead(self, why: str) -> CursorAhead:
        return CursorAhead(
            f"change-feed cursor {self.cursor} is past the end of the database at "
            f"{self.store.describe()}: {why}; take cursors from Change.cursor, "
            f'or start with since=None (the oldest history) or "latest"'
        )

    def _refresh_manifest(self) -> Manifest | None:
        if self._latest is None:
            self._latest = self._manifests.read_latest()
        else:
            self._latest = self._manifests.refresh(self._latest)
        return self._latest

    def __repr__(self) -> str:
        return self.describe(self.cursor)

    def describe(self, at: Cursor) -> str:
        """The repr, with ``at`` as the position (``aio``'s feed hands out from a buffer)."""
        mode = "follow" if self.follow else "no follow"
        closed = ", closed" if self._closed.is_set() else ""
        return f"ChangeFeed({self.store.describe()}, at {at}, {mode}{closed})"

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (from the closing thread) when the feed is closed or detached: a
        follower that waits elsewhere than on this feed (``aio``'s, on its event loop) wakes
        then instead of at its next poll."""
        self._on_close.append(fn)
        if self._closed.is_set():
            fn()

    def _closed_now(self) -> None:
        self._closed.set()
        for fn in list(self._on_close):
            fn()

    def stop(self) -> None:
        """Stop iterating, from any thread, as :meth:`close` does, but leave the store open
        for a read in flight on the iterating thread (``shaledb changes --follow`` stops so
        when the reader of its output goes away); :meth:`close` still closes it."""
        self._closed_now()

    def close(self) -> None:
        """Stop iterating (a following iterator returns at once, from any thread)."""
        self._closed_now()
        if self._owns_store:
            self.store.close()

    def detach(self, reason: str) -> None:
        """The handle this feed came from closed: its next step raises ``ClosedError(reason)``
        (a following iterator at its next poll). Before, a feed kept following after its
        ``Db`` closed, and a consumer thread kept the process alive."""
        self._gone = reason
        self._closed_now()

    def __enter__(self) -> ChangeFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _change(
    seq: int, kind: int, key: bytes, payload: bytes, idx: int, size: int, cursor: Cursor, wid: int
) -> Change:
    if kind & TYPE_MASK == KIND_TOMBSTONE:
        if kind == KIND_RANGE_DEL:
            return Change(seq, "delete_range", key, None, idx, size, cursor, wid, end=payload)
        return Change(seq, "delete", key, None, idx, size, cursor, wid)
    if kind == KIND_MERGE:
        return Change(seq, "merge", key, merge_operand(payload), idx, size, cursor, wid)
    body, meta, expires = decode_payload(kind, payload)
    return Change(seq, "put", key, body, idx, size, cursor, wid, meta, expires)


def latest_cursor(store: ObjectStore, clock: Clock | None = None) -> Cursor:
    """A cursor at the end of the history as the store shows it now (to follow only new writes).

    It points at the first WAL object not yet present; its sequence numbers are
    those of the last change found there, so nothing before it is yielded.
    """
    feed = ChangeFeed(store, _start_near_end(store, clock), follow=False, clock=clock)
    for _ in feed._available():
        pass
    return feed.cursor


def oldest_cursor(store: ObjectStore, clock: Clock | None = None) -> Cursor:
    """A storable cursor just before the oldest change the WAL still holds (or at the end of
    the history when it holds none): where ``since=None`` starts, as a position.

    ``since=None`` steps over what the collector removed only until its first change; a
    consumer that stores its start (Spark's offset log stores a stream's initial offset as the
    start of its first micro-batch) needs a real position instead. The default cursor
    (``c1.1.0.0``) is not one once the collector has run: it names ``wal/1``, so a feed from
    it met the collected gap and raised :class:`CursorExpired`. With no change present, the
    feed's own end (past the fences and collected gap it stepped over) is the answer: a second
    scan (``latest_cursor``) could pass over writes landing in between.
    """
    feed = ChangeFeed(store, None, follow=False, clock=clock, read_ahead=1)
    for change in feed._available():
        return Cursor(change.cursor.wal_id, change.seq, change.batch_index)
    return feed.cursor


def _start_near_end(store: ObjectStore, clock: Clock | None) -> Cursor:
    """The cursor just before the last WAL object listed (the feed then reads only it).

    The listing starts at the latest manifest's replay point: every WAL object below it may
    still be there (kept for a checkpoint, a clone, ``wal_retention_s``), and listing them
    all made ``"latest"`` cost seconds on a busy database (17,000 objects, 5 s on a local S3
    server). Only when nothing is left from there on is the whole WAL listed."""
    m = ManifestStore(store, clock or SYSTEM_CLOCK, random.Random(), author="changes").read_latest()
    last = None
    if m is not None and m.replay_after_wal_id > 1:
        last = _last_wal_id(store, paths.wal_path(m.replay_after_wal_id - 1))
    if last is None:
        last = _last_wal_id(store, None)
    if m is not None and (last is None or last < m.replay_after_wal_id):
        # Nothing is left from the replay point on, and what is left below it is a kept fence
        # with the objects after it collected (a feed from there met the gap and raised
        # CursorExpired): the history ends at the replay point, every write up to the SSTs'
        # last sequence number consumed (a Spark stream's AvailableNow target compares them).
        return Cursor(m.replay_after_wal_id + 1, m.last_l0_seq + 1, 0)
    return Cursor(last if last is not None else 1, 0, 0)


def _last_wal_id(store: ObjectStore, offset: str | None) -> int | None:
    last = None
    for meta in store.list(paths.WAL_DIR, offset=offset):
        wid = paths.parse_wal_id(meta.path)
        if wid is not None:
            last = wid
    return last


class FeedOptions(TypedDict, total=False):
    """The keywords ``Db.changes`` and ``DbReader.changes`` pass on to :class:`ChangeFeed`."""

    follow: bool
    poll_interval_s: float
    read_ahead: int


def open_feed(
    store: ObjectStore,
    since: Cursor | str | None,
    clock: Clock,
    until_wal_id: int | None = None,
    **options: Unpack[FeedOptions],
) -> ChangeFeed:
    """``Db.changes`` and ``DbReader.changes``: a feed over the handle's store ("latest": from
    now; ``until_wal_id``: a pinned reader's end, see :class:`ChangeFeed`)."""
    if since == "latest":
        since = latest_cursor(store, clock)
    return ChangeFeed(store, since, clock=clock, until_wal_id=until_wal_id, **options)


def open_changes(
    url: str,
    since: Cursor | str | None = None,
    *,
    store_options: Mapping[str, object] | None = None,
    follow: bool = True,
    poll_interval_s: float = 0.5,
) -> ChangeFeed:
    """A change feed of the database at ``url`` that needs no writer or reader: only the store."""
    from ..settings import Settings
    from ..store.stack import open_stack

    store = open_stack(url, None, store_options, Settings(), SYSTEM_CLOCK, random.Random())
    if since == "latest":
        since = latest_cursor(store)
    return ChangeFeed(store, since, follow=follow, poll_interval_s=poll_interval_s, owns_store=True)


__all__ = [
    "Change",
    "ChangeFeed",
    "Cursor",
    "CursorExpired",
    "FeedOptions",
    "latest_cursor",
    "oldest_cursor",
    "open_changes",
    "open_feed",
]

"""Time-travel reads: keeping old versions for ``Settings.history_retention_s``.

With a retention window ``R`` > 0 the database can be read as of any
sequence number (or wall time) in the last ``R`` seconds:

* memtables keep every overwritten version (a permanent pin at
  :data:`HISTORY_PIN`), and L0 flushes write all of them, newest first;
* compaction keeps every version newer than the *floor* -- the sequence
  number current ``R`` seconds ago -- plus the newest version at or below it
  (what a read at the floor sees); only those base versions may be dropped
  as tombstones at the bottom;
* the writer records *marks* ``(time_ms, seq)``, "at this time the newest
  sequence number was seq" (taken as a write is applied): one per millisecond
  that saw a write for the last :data:`FINE_MARKS_MS`, thinned beyond that to
  the last mark of each :data:`MARK_INTERVAL_MS`; and it
  persists the marks of flushed writes (never of writes a crash could still
  lose), thinned the same way, in the manifest's options with the retention
  itself, so a compactor in another process computes the same floor from the
  manifest alone.

A time resolves to the newest mark at or before it. So the writer's
``at_time`` sees exactly the writes made up to that millisecond while the time
is within the last :data:`FINE_MARKS_MS`, and a state at most one mark interval
older than asked before that (and a reader, which has only the manifest's
marks, the same at most one interval older). Why not one mark per write: a
mark per millisecond is bounded by the clock, not the write rate, and thinning
keeps the list (and the manifest) small however long the window. A time in the
future is refused: its state is not known yet. With retention 0 none of this
runs: no marks, no pin, no extra versions, and the options are removed at the
next flush.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections.abc import Iterable
from datetime import UTC, datetime
from operator import itemgetter

from ..errors import HistoryUnavailable, InvalidArgument
from ..format.row import FLAG_EXPIRY, FLAG_INDEXED, KIND_TOMBSTONE, TYPE_MASK, payload_expiry
from ..manifest.model import Manifest
from .memtable import Memtable

log = logging.getLogger("shaledb.history")

HISTORY_PIN = 1 << 62
"""A memtable pin above every sequence number: every overwrite keeps the replaced version."""

MARK_INTERVAL_MS = 1000
FINE_MARKS_MS = 60_000
"""How long the writer keeps a mark for every millisecond that saw a write."""
_THIN_AT = 4096
"""The writer thins its marks when the list grows past this (and twice what thinning kept)."""
OPT_RETENTION = "history_retention_ms"
OPT_MARKS = "history_marks"
OPT_START = "history_start_seq"
"""The oldest sequence number history is complete from (before any mark is old enough)."""
OPT_VERSIONS = "history_versions"
"""Set ("1") once SSTs may hold several versions of a key; never removed."""

Mark = tuple[int, int]
Columns = tuple[list[bytes], list[int], bytes, list[bytes]]


def encode_marks(marks: Iterable[Mark]) -> str:
    """``t:s`` pairs, delta-coded after the first (compact in the manifest's JSON)."""
    out: list[str] = []
    pt = ps = 0
    for t, s in marks:
        out.append(f"{t - pt}:{s - ps}")
        pt, ps = t, s
    return ",".join(out)


def decode_marks(text: str | None) -> list[Mark]:
    if not text:
        return []
    out: list[Mark] = []
    t = s = 0
    for part in text.split(","):
        dt, _, ds = part.partition(":")
        t, s = t + int(dt), s + int(ds)
        out.append((t, s))
    return out


def thin_marks(marks: list[Mark]) -> list[Mark]:
    """The last mark of each :data:`MARK_INTERVAL_MS` (marks are in time order): every time
    still resolves to a state at most one interval older than its own."""
    out: list[Mark] = []
    for t, s in marks:
        if out and out[-1][0] // MARK_INTERVAL_MS == t // MARK_INTERVAL_MS:
            out[-1] = (t, s)
        else:
            out.append((t, s))
    return out


def thin_after_first(marks: list[Mark]) -> list[Mark]:
    """:func:`thin_marks` of every mark but the first, which stays: it is where the list
    begins (the window's floor, or when history began). Thinning it into the last mark of
    its interval left every time before that mark unresolvable: a read at a time inside the
    window, soon after the database was created, raised ``HistoryUnavailable`` naming seq 0
    as readable."""
    return marks[:1] + thin_marks(marks[1:])


def floor_of(marks: list[Mark], retention_ms: int, now_ms: int, start: int) -> int:
    """The oldest readable sequence number: current ``retention_ms`` ago, or where history began."""
    i = bisect_right(marks, now_ms - retention_ms, key=itemgetter(0))
    return max(start, marks[i - 1][1]) if i else start


def _start(m: Manifest) -> int:
    """Where history is complete from: as recorded, else the L0 boundary (newer writes are
    replayed from the WAL into memtables that keep every version)."""
    s = m.option(OPT_START)
    return int(s) if s is not None and m.option(OPT_RETENTION) is not None else m.last_l0_seq


def has_versions(m: Manifest) -> bool:
    """Whether the database's SSTs may repeat a key (then single-source scans must de-duplicate)."""
    return m.option(OPT_VERSIONS) == "1"


def manifest_floor(m: Manifest, now_ms: int) -> int | None:
    """The floor compaction must keep for the manifest's database; None: no history kept."""
    r = m.option(OPT_RETENTION)
    if r is None:
        return None
    return floor_of(decode_marks(m.option(OPT_MARKS)), int(r), now_ms, _start(m))


def resolve_retention(asked: float | None, m: Manifest, where: str) -> float:
    """The window a writer opening ``m`` keeps: ``asked`` (``Settings.history_retention_s``),
    or with None the one the database records (0 if none).

    Why None by default: a writer opened without the setting -- a script, the CLI's ``put``
    -- removed a database's history at its first flush, and compaction then dropped the
    versions time-travel reads needed, with no word. Turning it off is now an explicit 0,
    which is logged."""
    recorded = m.option(OPT_RETENTION)
    had = int(recorded) / 1000 if recorded is not None and recorded.isdigit() else 0.0
    if asked is None:
        if had:
            log.info("%s keeps history for %gs, as its manifest records", where, had)
        return had
    if had and not asked:
        log.warning(
            "history_retention_s=0 turns off the history %s kept (%gs): its time-travel reads stop at "
            "the next flush and compaction drops old versions (leave history_retention_s unset to keep it)",
            where,
            had,
        )
    return float(asked)


class History:
    """The writer's marks and the time-travel window.

    ``note`` runs under the write lock, ``options`` in the flush thread: the
    list itself is guarded by ``lock``.
    """

    def __init__(
        self, retention_s: float, m: Manifest, seq: int, now_ms: int, replayed: Iterable[Mark] = ()
    ) -> None:
        """``replayed``: the ``(created_at_ms, newest seq)`` of each WAL object replayed at
        open. The manifest has marks for flushed writes only, so without these a time
        between the last flush and a crash resolved to the state before every write the
        crash left in the WAL (acknowledged ones too), and stayed so after the next flush
        persisted marks: the first new one was the open's. An object is encoded after all
        its writes were applied, so its mark never claims a write not yet made; taken only
        where they extend the marks forward and are not after ``now_ms``."""
        self.lock = threading.Lock()
        self.retention_ms = int(retention_s * 1000)
        self.marks: list[Mark] = decode_marks(m.option(OPT_MARKS)) if m.option(OPT_RETENTION) else []
        self.start = _start(m)
        self.thin_at = _THIN_AT
        for t, s in replayed:
            if t <= now_ms and (not self.marks or (t > self.marks[-1][0] and s > self.marks[-1][1])):
                self.marks.append((t, s))
        if not self.marks or self.marks[-1][0] < now_ms:
            self.marks.append((now_ms, seq))

    def note(self, seq: int, now_ms: int) -> None:
        """Write ``seq`` is applied at ``now_ms`` (called under the write lock)."""
        marks = self.marks
        with self.lock:
            last = marks[-1][0]
            if now_ms == last:
                marks[-1] = (now_ms, seq)  # the same millisecond: the newest state then
            elif now_ms > last:
                marks.append((now_ms, seq))
                if len(marks) > self.thin_at:
                    self._thin(now_ms)

    def _thin(self, now_ms: int) -> None:
        """Marks older than :data:`FINE_MARKS_MS` down to one per interval (under ``lock``)."""
        marks = self.marks
        cut = bisect_right(marks, now_ms - FINE_MARKS_MS, key=itemgetter(0))
        marks[:cut] = thin_after_first(marks[:cut])
        self.thin_at = max(_THIN_AT, 2 * len(marks))

    def floor(self, now_ms: int) -> int:
        return floor_of(self.marks, self.retention_ms, now_ms, self.start)

    def resolve(self, at_ms: int, now_ms: int) -> int:
        """The sequence number to read for wall time ``at_ms``."""
        if at_ms > now_ms:
            raise InvalidArgument(
                f"at_time {_iso(at_ms)} is in the future (now: {_iso(now_ms)}): its state is not known yet"
            )
        i = bisect_right(self.marks, at_ms, key=itemgetter(0))
        oldest = self.floor(now_ms)
        if i == 0 or self.marks[i - 1][1] < oldest:
            raise HistoryUnavailable(self._oldest_text(now_ms), oldest)
        return self.marks[i - 1][1]

    def check_seq(self, seq: int, now_ms: int) -> None:
        oldest = self.floor(now_ms)
        if seq < oldest:
            raise HistoryUnavailable(self._oldest_text(now_ms), oldest)

    def _oldest_text(self, now_ms: int) -> str:
        oldest = self.floor(now_ms)
        t = min((t for t, s in self.marks if s >= oldest), default=now_ms)
        return (
            f"outside the history window (history_retention_s={self.retention_ms / 1000:g}): "
            f"the oldest readable point is seq {oldest} ({_iso(t)})"
        )

    def options(self, opts: dict[str, str], flushed_seq: int, now_ms: int, newest: int) -> None:
        """Persist the retention and the marks of flushed writes (older ones pruned)."""
        with self.lock:
            if flushed_seq == newest and self.marks[-1][1] < newest and now_ms > self.marks[-1][0]:
                self.marks.append((now_ms, newest))  # everything is flushed: map up to now
            floor = self.floor(now_ms)
            keep = [mk for mk in self.marks if mk[1] <= flushed_seq]
            first = max((i for i, mk in enumerate(keep) if mk[1] <= floor), default=0)
            del self.marks[:first]
            self._thin(now_ms)
            self.start = floor
        opts[OPT_START] = str(min(floor, flushed_seq))  # never past what a crash keeps
        opts[OPT_RETENTION] = str(self.retention_ms)
        opts[OPT_VERSIONS] = "1"
        opts[OPT_MARKS] = encode_marks(thin_after_first(keep[first:]))


def manifest_seq(m: Manifest, newest: int, at_seq: int | None, at_ms: int | None, now_ms: int) -> int:
    """The sequence number a reader of ``m`` (newest known write ``newest``) reads for
    ``at_seq`` / ``at_ms``; the marks are the manifest's (flushed writes only)."""
    if (at_seq is None) == (at_ms is None):
        raise InvalidArgument("give exactly one of at_seq and at_time")
    r = m.option(OPT_RETENTION)
    if r is None:
        raise InvalidArgument(
            "this database's manifest records no history: its writer's history_retention_s is 0, "
            "or the writer has not flushed an L0 SST since history was turned on (a reader learns "
            "the history window from the manifest: read again after the writer's next "
            "flush(memtable=True))"
        )
    h = History.__new__(History)
    h.lock = threading.Lock()
    h.retention_ms = int(r)
    h.marks = decode_marks(m.option(OPT_MARKS)) or [(now_ms, newest)]
    h.start = _start(m)
    h.thin_at = _THIN_AT
    if at_ms is not None:
        last_t, last_s = h.marks[-1]
        if at_ms > last_t and newest > last_s:
            raise InvalidArgument(
                f"the manifest maps times up to {last_t} ms (seq {last_s}); writes after that are not "
                "flushed yet, so their times are unknown here: read by at_seq, or after the next flush"
            )
        return h.resolve(at_ms, now_ms)
    assert at_seq is not None
    if isinstance(at_seq, bool) or not isinstance(at_seq, int) or at_seq < 0:
        raise InvalidArgument(f"at_seq must be a sequence number (int >= 0), got {at_seq!r}")
    if at_seq > newest:
        raise InvalidArgument(f"at_seq {at_seq} is newer than the newest write seen (seq {newest})")
    h.check_seq(at_seq, now_ms)
    return at_seq


def flush_history_options(
    opts: dict[str, str], history: History | None, flushed_seq: int, now_ms: int, newest: int
) -> None:
    """At an L0 flush: record the window, or drop it when retention is off."""
    if history is None:
        opts.pop(OPT_RETENTION, None)
        opts.pop(OPT_MARKS, None)
        opts.pop(OPT_START, None)
    else:
        history.options(opts, flushed_seq, now_ms, newest)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def to_millis(at_time: datetime) -> int:
    if not isinstance(at_time, datetime):
        raise InvalidArgument(f"at_time must be a datetime, got {type(at_time).__name__}")
    if at_time.tzinfo is None:
        raise InvalidArgument("at_time must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return int(at_time.timestamp() * 1000)


# ------------------------------------------------------------ flush and compaction


def memtable_versions(mem: Memtable) -> tuple[list[bytes], list[int], list[int], list[bytes]]:
    """Every version in ``mem``, in key order, a key's versions newest first (for an L0 SST)."""
    keys, seqs, kinds, pays = mem.sorted_items()
    hist = mem.hist
    if not hist:
        return keys, seqs, kinds, pays
    ok: list[bytes] = []
    os_: list[int] = []
    ot: list[int] = []
    op: list[bytes] = []
    for k, s, t, p in zip(keys, seqs, kinds, pays):
        ok.append(k)
        os_.append(s)
        ot.append(t)
        op.append(p)
        for e in reversed(hist.get(k, ())):  # hist is oldest first
            if e[0] < s:
                ok.append(k)
                os_.append(e[0])
                ot.append(e[1])
                op.append(e[2])
                s = e[0]
    return ok, os_, ot, op


def merge_history(cols: list[Columns], floor: int, *, bottom: bool, now_ms: int) -> Columns:
    """Compaction's merge with a history window: every version newer than ``floor`` and
    the newest at or below it; at the bottom a base tombstone (or expired base) goes."""
    rows = [(k, s, t, p) for ks, ss, ts, ps in cols for k, s, t, p in zip(ks, ss, ts, ps)]
    rows.sort(key=lambda r: (r[0], -r[1]))
    keys: list[bytes] = []
    seqs: list[int] = []
    kinds = bytearray()
    pays: list[bytes] = []
    prev: bytes | None = None
    based = False
    last_seq = -1
    for k, s, t, p in rows:
        if k != prev:
            prev, based, last_seq = k, False, -1
        elif based or s == last_seq:
            continue  # older than the base version, or the same version twice
        last_seq = s
        dead = t & TYPE_MASK == KIND_TOMBSTONE
        if not dead and t & FLAG_EXPIRY:
            expires = payload_expiry(t, p)
            if expires is not None and expires <= now_ms:
                dead = True
                t, p = KIND_TOMBSTONE | (t & FLAG_INDEXED), b""
        if s <= floor:
            based = True
            if dead and bottom:
                continue
        keys.append(k)
        seqs.append(s)
        kinds.append(t)
        pays.append(p)
    return keys, seqs, bytes(kinds), pays


__all__ = [
    "HISTORY_PIN",
    "History",
    "flush_history_options",
    "has_versions",
    "manifest_seq",
    "manifest_floor",
    "memtable_versions",
    "merge_history",
    "thin_marks",
    "to_millis",
]

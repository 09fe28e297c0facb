"""Heads, secondary indexes and folds: reads that need no value (or follow the journal).

**Heads.** :class:`Head` is what the ledger knows about a key without reading
its value: sequence number, value size, user metadata, expiry, index terms,
and whether the value lives in the value journal. ``Db.head`` answers from
the ledger alone (no journal read), as Leveled's HEAD does.

**Index terms** (Leveled's 2i). ``put(key, value, indexes={"field": [terms]})``
replaces the key's terms *for the fields given* (an empty list removes a
field); other fields keep theirs, and a plain put keeps every term. The data
entry records the key's current terms (the TERMS extra, ``format/row.py``), so
the writer computes the changes itself: :func:`plan_index_changes` turns a
batch into index-tree entries -- a tombstone for each term the key loses, an
entry for each term it has (re-written so it carries the new expiry: index
entries inherit the key's TTL) -- written in the same atomic batch (one
sequence number, one WAL object) as the data entries. A delete removes every
term. Index keys order ``(field, term, key)`` (``format/journal.index_key``).

Once a database has index terms (manifest option ``index.enabled``), every
write looks up the old terms of its keys, serialized by the writer's index
lock so two writes to one key cannot both compute removals from the same old
state; databases without indexes never pay for it.

:func:`index_query` reads one field's range of terms from a view at a
sequence number: term order, then key order; ``start_key`` resumes inside the
start term; ``term_regex`` filters terms (``re.search``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError, InvalidArgument
from ..format.journal import decode_index_key, decode_pointer, index_key, index_prefix, index_term_prefix
from ..format.merge import decode_merge
from ..format.range_dels import KIND_RANGE_DEL
from ..format.row import (
    FLAG_TERMS,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    decode_extras,
    decode_terms,
    encode_payload,
    encode_terms,
)
from ..keys import check_field
from .memtable import Memtable
from .prefetch import prefetch_points
from .range_tombstones import covering_seq, has_range_dels
from .reads import (
    ReadAt,
    ReadView,
    Span,
    Visibility,
    check_limit,
    lookup,
    read_pool,
    scan_items,
    visible,
    visible_rows,
)
from .sstable import TableCache

Terms = dict[str, tuple[bytes, ...]]


@dataclass(frozen=True, slots=True)
class Head:
    """A key's metadata from the ledger (no value read).

    ``expires_at`` is seconds since the Unix epoch (None: no expiry);
    ``in_journal`` says the value lives in the value journal (a GET costs one
    more ranged read).
    """

    seq: int
    value_size: int
    metadata: bytes | None = None
    expires_at: float | None = None
    indexes: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    in_journal: bool = False


def make_head(seq: int, kind: int, payload: bytes, now_ms: Callable[[], int]) -> Head | None:
    """The head of a stored entry, or None if it hides the key (tombstone, expired).
    ``now_ms`` is called only for an entry with an expiry (scans of heads call this per row)."""
    t = kind & TYPE_MASK
    if t == KIND_TOMBSTONE:
        return None
    body, meta, expires, raw_terms = decode_extras(kind, payload)
    if expires is not None and expires <= now_ms():
        return None
    if t == KIND_POINTER:
        size = decode_pointer(body).value_len
    else:
        size = len(body)
    terms = decode_terms(raw_terms) if raw_terms is not None else {}
    return Head(
        seq=seq,
        value_size=size,
        metadata=meta,
        expires_at=None if expires is None else expires / 1000.0,
        indexes=terms,
        in_journal=t == KIND_POINTER,
    )


def entry_terms(kind: int, payload: bytes, vis: Visibility) -> Terms:
    """The index terms a live data entry records ({} for tombstones, expired entries)."""
    if not kind & FLAG_TERMS or not vis.alive(kind, payload):
        return {}
    raw = decode_extras(kind, payload)[3]
    return decode_terms(raw) if raw is not None else {}


def prefetch_old_terms(view: ReadView, tables: TableCache, keys: list[bytes]) -> int:
    """Warm the block cache for the old-terms lookups of a batch's ``keys``, in parallel;
    returns the ranged GETs made.

    Every write to a database with index terms looks up each key's current terms
    (:func:`current_terms`), one key after another under the index lock. On an
    object store a batch of cold keys -- 500 deletes of random flights in the demo
    -- then waits one ranged GET per key, in series; warming their blocks first
    (the same grouped, parallel reads as ``get_many``) turns that into a few
    parallel GETs. A single key gains nothing from it and is left alone.
    """
    if len(keys) < 2:
        return 0
    with read_pool() as pool:
        return prefetch_points(view, tables, sorted(set(keys)), pool)


def current_terms(view: ReadView, tables: TableCache, vis: Visibility, key: bytes) -> Terms:
    e = lookup(view, tables, key, None)
    return {} if e is None else entry_terms(e[1], e[2], vis)


def current_value(view: ReadView, tables: TableCache, vis: Visibility, key: bytes) -> bytes | None:
    """The key's value as a read sees it now (merges folded, journal pointers followed)."""
    e = lookup(view, tables, key, None)
    return None if e is None else vis.value(key, e[1], e[2])


@dataclass
class IndexedBatch:
    """A batch with its index changes worked out (see :func:`plan_index_changes`)."""

    keys: list[bytes]
    kinds: list[int]
    payloads: list[bytes]
    index_keys: list[bytes]
    index_kinds: list[int]
    index_payloads: list[bytes]


def plan_index_changes(
    keys: list[bytes],
    types: list[int],
    payloads: list[bytes],
    extras: Mapping[int, Mapping[str, Any]],
    old_terms: Any,
    now_ms: int,
    *,
    old_value: Callable[[bytes], bytes | None] | None = None,
    fold: Callable[[bytes, bytes | None, list[bytes]], bytes] | None = None,
) -> IndexedBatch:
    """Data entries with their terms recorded, plus the index-tree entries.

    ``types`` are the entries' kinds (VALUE, TOMBSTONE, a range tombstone or
    MERGE), ``payloads`` the plain values (a merge: its one-operand payload),
    ``extras`` the rich entries' value/metadata/ttl/indexes by position,
    ``old_terms(key)`` the key's terms before the batch.

    A merge is *folded here*, at write time (:func:`fold_merge`): ``old_value(key)``
    is the key's value before the batch (merges folded, journal pointers followed),
    ``fold(key, existing, operands)`` the merge operator. The data entry becomes a
    plain put of the folded value that keeps the key's terms (as a put without
    ``indexes=`` does), so the index tree stays exact for it.
    """
    overlay: dict[bytes, Terms] = {}
    values: dict[bytes, bytes | None] = {}  # the value of a key this batch wrote (None: deleted)
    ranges: list[tuple[bytes, bytes]] = []  # this batch's range deletes so far
    out_kinds: list[int] = []
    out_pays: list[bytes] = []
    ik: list[bytes] = []
    it: list[int] = []
    ip: list[bytes] = []
    for i, k in enumerate(keys):
        old = overlay[k] if k in overlay else old_terms(k)
        new: Terms
        expires: int | None = None
        if types[i] & TYPE_MASK == KIND_TOMBSTONE:
            new = {}  # a range tombstone (start key ``k``) keeps its kind and end key
            ranged = types[i] == KIND_RANGE_DEL
            out_kinds.append(KIND_RANGE_DEL if ranged else KIND_TOMBSTONE)
            out_pays.append(payloads[i] if ranged else b"")
            values[k] = None
            if ranged:
                end = payloads[i]
                ranges.append((k, end))
                for wk in [wk for wk in values if k <= wk < end]:
                    values[wk] = None
        elif types[i] == KIND_MERGE:
            if old_value is None or fold is None:
                raise InvalidArgument("a merge on an indexed database needs the merge operator")
            if k in values:
                existing = values[k]
            elif any(a <= k < b for a, b in ranges):
                existing = None  # an earlier range delete of this batch deleted it
            else:
                existing = old_value(k)
            value = fold_merge(k, existing, payloads[i], fold)
            values[k] = value
            new = dict(old)
            flags, payload = encode_payload(value, None, None, encode_terms(new) if new else None)
            out_kinds.append(KIND_VALUE | flags)
            out_pays.append(payload)
        else:
            x = extras.get(i)
            value = payloads[i] if x is None else x["value"]
            meta = None if x is None else x.get("metadata")
            if x is not None and "ttl_ms" in x:
                expires = now_ms + x["ttl_ms"]
            new = dict(old)
            if x is not None and "indexes" in x:
                for f, ts in x["indexes"].items():
                    if ts:
                        new[f] = tuple(ts)
                    else:
                        new.pop(f, None)
            flags, payload = encode_payload(value, meta, expires, encode_terms(new) if new else None)
            out_kinds.append(KIND_VALUE | flags)
            out_pays.append(payload)
            values[k] = value
        ikind, ipay = KIND_TOMBSTONE, b""
        if new:
            iflags, ipay = encode_payload(b"", None, expires)
            ikind = KIND_VALUE | iflags
        for ikey, live in term_changes(k, old, new):
            ik.append(ikey)
            it.append(ikind if live else KIND_TOMBSTONE)
            ip.append(ipay if live else b"")
        overlay[k] = new
    return IndexedBatch(keys, out_kinds, out_pays, ik, it, ip)


def fold_merge(
    key: bytes,
    existing: bytes | None,
    operand_payload: bytes,
    fold: Callable[[bytes, bytes | None, list[bytes]], bytes],
) -> bytes:
    """The value after merging a batch's merge entry into ``existing`` (indexed databases
    fold at write time: the cost is one lookup of the key, which an indexed write pays for
    its old terms anyway, plus the operator call and, for a value in the journal, its read)."""
    base, ops = decode_merge(operand_payload)
    if base is not None:
        raise CorruptionError("a batch's merge entry carries a base")
    return fold(key, existing, ops)


def term_changes(
    key: bytes, old: Mapping[str, tuple[bytes, ...]], new: Terms
) -> Iterator[tuple[bytes, bool]]:
    """The index-tree keys a write of ``key`` touches: ``(index key, False)`` for each term
    it loses (a tombstone), then ``(index key, True)`` for each term it has (re-written, so
    the entry carries the write's expiry)."""
    if old:
        keep = {(f, t) for f, ts in new.items() for t in ts}
        for f, ts in old.items():
            for t in ts:
                if (f, t) not in keep:
                    yield index_key(f, t, key), False
    for f, ts in new.items():
        for t in ts:
            yield index_key(f, t, key), True


def index_view(view: ReadView) -> ReadView:
    """The index tree of ``view``: its memtables' ``sub`` tables and the manifest's index SSTs."""
    mem = view.mem.sub if view.mem.sub is not None else Memtable()
    imms = tuple(i.sub if i.sub is not None else Memtable() for i in view.imms)
    return ReadView(mem, imms, view.manifest, tree="index")


def _bounds(fld: str, start: bytes | None, end: bytes | None, start_key: bytes | None) -> tuple[bytes, bytes]:
    base = index_prefix(fld)
    if start is None:
        if start_key is not None:
            raise InvalidArgument("start_key needs a start term")
        lo = base + b"\x01"
    else:
        lo = index_term_prefix(fld, start)
        if start_key is not None:
            lo += b"\x01" + start_key.replace(b"\x00", b"\x00\xff") + b"\x00"
    # The end term is excluded (half-open, as scan's end): every index key of a
    # term starts with its prefix, and smaller terms' keys sort below it.
    hi = base + b"\x02" if end is None else index_term_prefix(fld, end)
    return lo, hi


def check_query(
    fld: object, start: object, end: object, start_key: object, limit: object, term_regex: object
) -> re.Pattern[bytes] | None:
    check_field(fld)
    for name, v in (("start", start), ("end", end), ("start_key", start_key)):
        if v is not None and not isinstance(v, bytes):
            raise InvalidArgument(f"index_query {name} must be bytes or None, got {type(v).__name__}")
    check_limit(limit)
    if term_regex is None:
        return None
    if isinstance(term_regex, re.Pattern):
        if not isinstance(term_regex.pattern, bytes):
            raise InvalidArgument("term_regex must be a bytes pattern (terms are bytes)")
        return term_regex
    if isinstance(term_regex, str):
        term_regex = term_regex.encode("utf-8")
    if not isinstance(term_regex, bytes):
        raise InvalidArgument(
            f"term_regex must be a str, bytes or compiled bytes pattern, got {term_regex!r}"
        )
    try:
        return re.compile(term_regex)
    except re.error as exc:
        raise InvalidArgument(f"term_regex does not compile: {exc}") from None


def index_query(
    view: ReadView,
    tables: TableCache,
    vis: Visibility,
    seq: int | None,
    fld: str,
    start: bytes | None,
    end: bytes | None,
    *,
    return_terms: bool = False,
    term_regex: re.Pattern[bytes] | None = None,
    start_key: bytes | None = None,
    limit: int | None = None,
    data: ReadView | None = None,
) -> Iterator[Any]:
    """Keys (or ``(term, key)``) with a term of ``fld`` in ``[start, end)``, in term then key order.

    ``view`` is the *index* view (:func:`index_view`). The range is half-open
    like ``scan``'s (the end term is excluded; one term ``t`` is
    ``[t, t + b"\x00")``, see :func:`term_range`); None is unbounded. ``start_key`` skips keys below it in
    the start term: to continue after a page ending at ``(t, k)``, pass
    ``start=t, start_key=k + b"\\x00"``.
    """
    if limit is not None and limit <= 0:
        return
    lo, hi = _bounds(fld, start, end, start_key)
    n = 0
    if data is not None and has_range_dels(data):  # ``data``: the data tree's view
        hits: Iterator[tuple[bytes, Any]] = _not_range_deleted(view, tables, vis, lo, hi, seq, data)
    else:
        hits = scan_items(ReadAt(view, tables, vis, seq), Span(lo, hi))
    for ik, _ in hits:
        try:
            _f, term, key = decode_index_key(ik)
        except CorruptionError:
            continue  # not an index key of this layout: skip rather than fail a query
        if term_regex is not None and term_regex.search(term) is None:
            continue
        yield (term, key) if return_terms else key
        n += 1
        if limit is not None and n >= limit:
            return


def _not_range_deleted(
    view: ReadView, tables: TableCache, vis: Visibility, lo: bytes, hi: bytes, seq: int | None, data: ReadView
) -> Iterator[tuple[bytes, None]]:
    """Live index keys whose data key no range tombstone deleted after the index entry
    was written (a range delete writes no index tombstones: the index keeps the terms,
    the query drops them here)."""
    for ik, s, kind, payload in visible_rows(view, tables, lo, hi, seq, False):
        if kind and not vis.alive(kind, payload):
            continue
        try:
            key = decode_index_key(ik)[2]
        except CorruptionError:
            yield ik, None  # the caller skips it
            continue
        if covering_seq(data, tables, key, seq) <= s:
            yield ik, None


def scan_heads(
    at: ReadAt, span: Span, journal_check: Callable[[str], bool] | None = None
) -> Iterator[tuple[bytes, Head]]:
    """``(key, Head)`` of live keys in ``span``: the ledger only, no journal read.

    ``journal_check(ref)`` (Leveled's JournalCheck) skips keys whose value
    lives in a journal object it says is missing.
    """
    limit = span.limit
    if limit is not None and limit <= 0:
        return
    n = 0
    now_ms = at.vis.now_ms
    for k, s, kind, payload in visible(at, span):
        h = make_head(s, kind, payload, now_ms)
        if h is None:
            continue
        if journal_check is not None and h.in_journal:
            ref = decode_pointer(decode_extras(kind, payload)[0]).ref
            if not journal_check(ref):
                continue
        yield k, h
        n += 1
        if limit is not None and n >= limit:
            return


def scan_keys(at: ReadAt, span: Span) -> Iterator[bytes]:
    """Live keys in ``span`` (no value or metadata decoded beyond expiry)."""
    limit = span.limit
    if limit is not None and limit <= 0:
        return
    alive = at.vis.alive
    n = 0
    for k, _s, kind, payload in visible(at, span):
        if kind and not alive(kind, payload):
            continue
        yield k
        n += 1
        if limit is not None and n >= limit:
            return


__all__ = [
    "Head",
    "IndexedBatch",
    "check_query",
    "current_terms",
    "current_value",
    "entry_terms",
    "fold_merge",
    "index_query",
    "index_view",
    "make_head",
    "plan_index_changes",
    "scan_heads",
    "scan_keys",
    "term_changes",
]


def term_range(term: bytes) -> tuple[bytes, bytes]:
    """``(start, end)`` of ``index_query`` selecting exactly ``term``: ``[term, term + NUL)``."""
    return term, term + b"\x00"

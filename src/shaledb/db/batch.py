"""WriteBatch: an atomic group of puts, deletes and merges, validated as it is built.

A batch is applied under one sequence number and lands in one WAL object, so
it is all-or-nothing across crashes. Columns are kept as parallel lists so
applying a batch is a couple of C-level list and dict operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn, SupportsIndex, overload

from ..engine.wal import WalWriter
from ..errors import ClosedError, InvalidArgument
from ..format.merge import encode_merge
from ..format.range_dels import KIND_RANGE_DEL
from ..format.row import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, encode_payload
from ..keys import MAX_KEY_BYTES, MAX_VALUE_BYTES, BytesLike, check_field, check_key, check_value
from ..numbers import check_seconds
from .bulk_puts import checked_columns


def ttl_ms(ttl: timedelta | float | int | str | None) -> int | None:
    """A TTL as milliseconds (None: no expiry)."""
    if ttl is None:
        return None
    if isinstance(ttl, str):  # "1h", "250ms", "7days" (shaledb.duration)
        from ..duration import parse_duration

        try:
            ttl = parse_duration(ttl)
        except InvalidArgument as exc:
            raise InvalidArgument(f"ttl: {exc}") from None
    secs = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
    ms = int(check_seconds("ttl", secs) * 1000)
    if ms <= 0:
        raise InvalidArgument(f"ttl must be at least 1 ms (0.001 seconds), got {ttl!r}")
    return ms


IndexTerms = Mapping[str, Iterable[BytesLike]]


class _Committed(list[bytes]):
    """The keys of a batch its ``with db.batch()`` block committed: readable as before
    (``len(b)``), refusing additions. Every addition to a batch appends to its keys first,
    so this refuses them all at no cost to building batches. Before, a write added after
    the block (a line dedented one level too far, a batch kept in a variable) went into a
    batch nobody would write again: silently lost."""

    __slots__ = ()

    def _refuse(self) -> NoReturn:
        raise ClosedError(
            "this batch was committed when its 'with db.batch()' block ended: a write added "
            "now would never be applied. Write inside the block, or use db.put / db.write "
            "(shaledb.WriteBatch() is a batch to build and write yourself)"
        )

    def append(self, value: bytes, /) -> NoReturn:
        self._refuse()

    def extend(self, values: Iterable[bytes], /) -> NoReturn:
        self._refuse()

    def insert(self, index: SupportsIndex, value: bytes, /) -> NoReturn:
        self._refuse()

    def __iadd__(self, values: Iterable[bytes], /) -> NoReturn:  # type: ignore[override,misc]  # (refused)
        self._refuse()


class WriteBatch:
    """Puts and deletes applied atomically by ``Db.write`` (chainable)."""

    __slots__ = ("_counted", "_counted_n", "_extras", "_keys", "_kinds", "_payloads", "_ranged")

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._kinds: list[int] = []
        self._payloads: list[bytes] = []
        self._extras: list[tuple[int, dict[str, Any]]] | None = None
        self._ranged = False
        """Whether the batch holds a range tombstone (``delete_range``)."""
        self._counted = 0
        """Key plus value bytes of the first ``_counted_n`` entries, when they all came
        from ``put_many`` (which sums the lengths to check them anyway)."""
        self._counted_n = 0
        """``len(self)`` while every entry is a plain put added by ``put_many`` (no
        merge, delete, range or rich put): ``Db.write`` then takes its fast path and
        ``_counted`` as the batch's bytes. Any other addition leaves it behind for good."""

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def put(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        ttl: timedelta | float | str | None = None,
        metadata: BytesLike | None = None,
        indexes: IndexTerms | None = None,
    ) -> WriteBatch:
        k = key if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES else check_key(key)
        v = value if type(value) is bytes and len(value) <= MAX_VALUE_BYTES else check_value(value)
        if ttl is None and metadata is None and indexes is None:
            self._keys.append(k)
            self._kinds.append(KIND_VALUE)
            self._payloads.append(v)
            return self
        self._put_rich(k, v, ttl, metadata, indexes)
        return self

    @overload
    def put_many(
        self, pairs: Iterable[tuple[BytesLike, BytesLike]] | Mapping[BytesLike, BytesLike], /
    ) -> WriteBatch: ...

    @overload
    def put_many(self, keys: Sequence[BytesLike], values: Sequence[BytesLike], /) -> WriteBatch: ...

    def put_many(
        self,
        pairs: Iterable[tuple[BytesLike, BytesLike]] | Mapping[BytesLike, BytesLike] | Sequence[BytesLike],
        values: Sequence[BytesLike] | None = None,
        /,
    ) -> WriteBatch:
        """Many puts in one call: ``put_many([(k1, v1), (k2, v2)])``, ``put_many({k1: v1})``
        or ``put_many(keys, values)`` (two sequences of one length).

        The same as calling :meth:`put` for each pair in order (a key given twice
        keeps its last value), without a Python call per key: the keys and values
        are checked column by column. A bad key or value raises the
        :class:`~shaledb.errors.InvalidArgument` that ``put`` would raise for it, and
        then nothing of the call is added to the batch. No ``ttl``, ``metadata`` or
        ``indexes``: use :meth:`put` for those.
        """
        keys, vals, nbytes = checked_columns(pairs, values)
        if not keys:
            return self
        plain = self._counted_n == len(self._keys)
        self._keys += keys  # first: a committed batch refuses here, changing nothing
        self._kinds += [KIND_VALUE] * len(keys)
        self._payloads += vals
        if plain:
            self._counted += nbytes
            self._counted_n += len(keys)
        return self

    def _put_rich(
        self,
        k: bytes,
        v: bytes,
        ttl: timedelta | float | str | None,
        metadata: BytesLike | None,
        indexes: IndexTerms | None,
    ) -> None:
        extra: dict[str, Any] = {"value": v}
        if metadata is not None:
            extra["metadata"] = check_value(metadata)
        if ttl is not None:
            extra["ttl_ms"] = ttl_ms(ttl)
        if indexes is not None:
            if not isinstance(indexes, Mapping):
                raise InvalidArgument("indexes must map field names to lists of byte terms")
            terms: dict[str, list[bytes]] = {}
            for fld, ts in indexes.items():
                check_field(fld)
                if isinstance(ts, (bytes, bytearray, memoryview, str)):
                    raise InvalidArgument(f"index terms for {fld!r} must be a list of bytes")
                terms[fld] = sorted({check_key(t) for t in ts})
            extra["indexes"] = terms
        # The payload is finalised at apply time (expiry needs the clock).
        _, payload = encode_payload(v, extra.get("metadata"), None)
        self._keys.append(k)
        self._kinds.append(KIND_VALUE)
        self._payloads.append(payload)
        if self._extras is None:
            self._extras = []
        self._extras.append((len(self._keys) - 1, extra))

    def merge(self, key: BytesLike, operand: BytesLike) -> WriteBatch:
        """Merge ``operand`` into ``key``'s value (``Db.merge``); in order with the batch's
        other writes to the key (a put then a merge folds onto the put)."""
        self._keys.append(check_key(key))
        self._kinds.append(KIND_MERGE)
        self._payloads.append(encode_merge([check_value(operand)]))
        return self

    def delete(self, key: BytesLike) -> WriteBatch:
        k = key if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES else check_key(key)
        self._keys.append(k)
        self._kinds.append(KIND_TOMBSTONE)
        self._payloads.append(b"")
        return self

    def delete_range(self, start: BytesLike, end: BytesLike) -> WriteBatch:
        """Remove every key ``k`` with ``start <= k < end``: one range tombstone.

        The batch applies in the order it was built: puts and deletes added
        before this call inside the range are dropped from the batch, those
        added after it stand (they share the batch's sequence number, which a
        range tombstone does not hide). ``start == end`` is an empty range.
        """
        s, e = check_range(start, end)
        if s == e:
            return self
        keys = self._keys
        if type(keys) is _Committed:  # (dropping entries below rebuilds the lists)
            keys._refuse()
        drop = [i for i, k in enumerate(keys) if s <= k < e and self._kinds[i] != KIND_RANGE_DEL]
        if drop:
            self._counted_n = -1  # (entries leave: the count no longer says anything)
            gone = set(drop)
            keep = [i for i in range(len(keys)) if i not in gone]
            self._keys = [keys[i] for i in keep]
            self._kinds = [self._kinds[i] for i in keep]
            self._payloads = [self._payloads[i] for i in keep]
            if self._extras:
                where = {old: new for new, old in enumerate(keep)}
                self._extras = [(where[i], x) for i, x in self._extras if i in where] or None
        self._keys.append(s)
        self._kinds.append(KIND_RANGE_DEL)
        self._payloads.append(e)
        self._ranged = True
        return self

    def _seal(self) -> None:
        """``db.batch()`` committed this batch: refuse additions from now on (:class:`_Committed`)."""
        self._keys = _Committed(self._keys)

    def clear(self) -> None:
        self._keys.clear()
        self._kinds.clear()
        self._payloads.clear()
        self._extras = None
        self._ranged = False
        self._counted = self._counted_n = 0

    def _plain(self) -> bool:
        """Whether every entry is a plain put from ``put_many`` (``_counted`` holds its bytes)."""
        return self._counted_n == len(self._keys)

    def _entry_bytes(self) -> int:
        """Key plus payload bytes of every entry (what ``Db.write`` accounts)."""
        if self._plain():
            return self._counted
        return sum(map(len, self._keys)) + sum(map(len, self._payloads))

    def __repr__(self) -> str:
        return f"WriteBatch({len(self._keys)} ops)"


def check_range(start: object, end: object) -> tuple[bytes, bytes]:
    """``(start, end)`` of a range delete: two keys with ``start <= end``."""
    s, e = _range_key("start", start), _range_key("end", end)
    if s > e:
        raise InvalidArgument(f"delete_range start {s!r} is after its end {e!r}")
    return s, e


def _range_key(name: str, key: object) -> bytes:
    """``check_key``, its error naming the argument as ``scan`` does (``delete_range(b"a", "b")``
    said "keys are bytes" without saying which of the two was not)."""
    try:
        return check_key(key)
    except InvalidArgument as exc:
        if isinstance(key, str):
            raise InvalidArgument(
                f"delete_range {name} must be bytes, got str: encode text first, e.g. {name}.encode()"
            ) from None
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"delete_range {name} must be bytes, got {type(key).__name__}") from None
        raise InvalidArgument(f"delete_range {name}: {exc}") from None


class WriteHandle:
    """The result of a write: its sequence number and a way to wait for durability."""

    __slots__ = ("_wal", "seq")

    def __init__(self, wal: WalWriter, seq: int) -> None:
        self._wal = wal
        self.seq = seq

    def wait_durable(self, timeout: timedelta | float | str | None = None) -> bool:
        """Block until the write is durable in a WAL object; False on timeout (seconds, a
        ``timedelta`` or a duration string such as ``"1s"``, as every duration takes;
        None waits as long as it takes)."""
        if timeout is not None and not (type(timeout) is float and 0.0 <= timeout < float("inf")):
            from ..duration import to_seconds

            timeout = to_seconds(timeout, "timeout")
        return self._wal.wait_durable(self.seq, timeout)

    @property
    def durable(self) -> bool:
        return self._wal.durable_seq >= self.seq

    def __repr__(self) -> str:
        return f"WriteHandle(seq={self.seq}, durable={self.durable})"

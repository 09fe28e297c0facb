"""Key checks and key-range arithmetic every layer shares (public: the Spark layer and
users need it too).

:func:`check_key`, :func:`check_value` and :func:`check_field` turn what a caller
passed into what is stored (bytes-like keys and values become ``bytes``) or raise
``InvalidArgument`` saying what is wrong. Ranges are half-open ``[start, end)``
over byte strings; the other helpers turn an inclusive bound or a prefix into
the exclusive end such a range needs.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from .errors import InvalidArgument

BytesLike = bytes | bytearray | memoryview
"""What a key, value or range bound may be; stored as ``bytes`` (:func:`check_key`,
:func:`check_value` and :func:`scan_bounds` copy the others)."""


def key_after(key: bytes) -> bytes:
    """The smallest key greater than ``key``: an exclusive bound that includes ``key``."""
    return key + b"\x00"


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def scan_bounds(
    start: BytesLike | None, end: BytesLike | None, prefix: BytesLike | None
) -> tuple[bytes | None, bytes | None]:
    """Validate and intersect ``[start, end)`` with a prefix range."""
    for name, v in (("start", start), ("end", end), ("prefix", prefix)):
        if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"scan {name} must be bytes or None, got {type(v).__name__}")
    s = bytes(start) if start is not None else None
    e = bytes(end) if end is not None else None
    if prefix is not None:
        p = bytes(prefix)
        pe = prefix_end(p)
        if p and (s is None or s < p):
            s = p
        if pe is not None and (e is None or e > pe):
            e = pe
    return s, e


def split_points(ranges: Sequence[tuple[bytes, bytes, float]], n: int) -> list[bytes]:
    """At most ``n - 1`` ascending keys cutting ``ranges`` (``(first, last, size)``) into ``n``
    parts of similar size, each range's size spread evenly over the range's boundaries."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgument(f"n must be a positive integer, got {n!r}")
    if n == 1 or not ranges:
        return []
    bounds = sorted({r[0] for r in ranges} | {r[1] for r in ranges})
    weight = [0.0] * len(bounds)
    for first, last, size in ranges:
        lo = bisect_right(bounds, first) - 1
        hi = bisect_right(bounds, last) - 1
        span = max(1, hi - lo)
        for i in range(lo, lo + span):
            weight[i] += size / span
    total = sum(weight)
    points: list[bytes] = []
    acc = 0.0
    target = 1
    for i, w in enumerate(weight[:-1]):
        acc += w
        while target < n and acc >= total * target / n:
            key = bounds[i + 1]
            if not points or key > points[-1]:
                points.append(key)
            target += 1
    return points[: n - 1]


MAX_KEY_BYTES = 65535
MAX_VALUE_BYTES = (1 << 30) - 1


def _key_error(key: object) -> InvalidArgument:
    if isinstance(key, str):
        return InvalidArgument("keys are bytes: encode text first, e.g. key.encode()")
    if isinstance(key, (bytes, bytearray, memoryview)):
        n = len(key)
        if n == 0:
            return InvalidArgument("a key must not be empty")
        return InvalidArgument(f"a key may be at most {MAX_KEY_BYTES} bytes, got {n}")
    return InvalidArgument(f"keys are bytes, got {type(key).__name__}")


def check_key(key: object) -> bytes:
    """``key`` as bytes, or InvalidArgument saying what is wrong."""
    if type(key) is bytes and 0 < len(key) <= MAX_KEY_BYTES:
        return key
    if isinstance(key, (bytearray, memoryview)) and 0 < len(key) <= MAX_KEY_BYTES:
        return bytes(key)
    raise _key_error(key)


def check_field(fld: object) -> str:
    """An index field name: a non-empty str without NUL (NUL ends it in index keys)."""
    if not isinstance(fld, str) or not fld or "\x00" in fld:
        raise InvalidArgument(f"index field names are non-empty str without NUL, got {fld!r}")
    return fld


def check_value(value: object) -> bytes:
    if type(value) is bytes and len(value) <= MAX_VALUE_BYTES:
        return value
    if isinstance(value, (bytearray, memoryview)) and len(value) <= MAX_VALUE_BYTES:
        return bytes(value)
    if isinstance(value, str):
        raise InvalidArgument("values are bytes: encode text first, e.g. value.encode()")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"a value may be at most {MAX_VALUE_BYTES} bytes")
    raise InvalidArgument(f"values are bytes, got {type(value).__name__}")


__all__ = [
    "BytesLike",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "check_field",
    "check_key",
    "check_value",
    "key_after",
    "prefix_end",
    "scan_bounds",
    "split_points",
]

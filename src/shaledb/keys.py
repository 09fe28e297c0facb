"""Key-range arithmetic every layer shares (public: the Spark layer and users need it too).

Ranges are half-open ``[start, end)`` over byte strings; these helpers turn an
inclusive bound or a prefix into the exclusive end such a range needs.
"""

from __future__ import annotations

from .errors import InvalidArgument


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
    start: bytes | None, end: bytes | None, prefix: bytes | None
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


__all__ = ["key_after", "prefix_end", "scan_bounds"]

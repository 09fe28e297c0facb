"""Key-range arithmetic every layer shares (public: the Spark layer and users need it too).

Ranges are half-open ``[start, end)`` over byte strings; these helpers turn an
inclusive bound or a prefix into the exclusive end such a range needs.
"""

from __future__ import annotations


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


__all__ = ["key_after", "prefix_end"]

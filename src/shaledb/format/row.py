"""Entry kinds and the payload of entries that carry metadata.

Every stored entry is ``(key, seq, kind, payload)``. The low two bits of
``kind`` say what the payload is; flag bits say which extras precede it:

    kind & 0x03 == 0  VALUE      payload is the value
    kind & 0x03 == 1  TOMBSTONE  payload is empty (or extras only)
    kind & 0x03 == 2  POINTER    payload is a value-journal pointer
    kind & 0x04       META       payload starts with u32 len + user metadata
    kind & 0x08       EXPIRY     then u64 expires_at_ms
    kind & 0x10       INDEXED    the writer recorded index terms for this key

Plain values (no flags) are stored as-is, so the common path never parses.
"""

from __future__ import annotations

import struct

from ..errors import CorruptionError

KIND_VALUE = 0
KIND_TOMBSTONE = 1
KIND_POINTER = 2
TYPE_MASK = 0x03
FLAG_META = 0x04
FLAG_EXPIRY = 0x08
FLAG_INDEXED = 0x10
KNOWN_BITS = 0x1F
EXTRA_FLAGS = FLAG_META | FLAG_EXPIRY

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def check_kind(kind: int) -> None:
    if kind & ~KNOWN_BITS or (kind & TYPE_MASK) == 3:
        raise CorruptionError(f"unknown entry kind 0x{kind:02x}")


def encode_payload(body: bytes, metadata: bytes | None, expires_at_ms: int | None) -> tuple[int, bytes]:
    """Flags and payload for ``body`` with optional extras."""
    flags = 0
    parts: list[bytes] = []
    if metadata is not None:
        flags |= FLAG_META
        parts.append(_U32.pack(len(metadata)))
        parts.append(metadata)
    if expires_at_ms is not None:
        flags |= FLAG_EXPIRY
        parts.append(_U64.pack(expires_at_ms))
    if not flags:
        return 0, body
    parts.append(body)
    return flags, b"".join(parts)


def decode_payload(kind: int, payload: bytes) -> tuple[bytes, bytes | None, int | None]:
    """``(body, metadata, expires_at_ms)`` of a stored payload."""
    if not kind & EXTRA_FLAGS:
        return payload, None, None
    pos = 0
    meta: bytes | None = None
    expires: int | None = None
    n = len(payload)
    if kind & FLAG_META:
        if n < 4:
            raise CorruptionError("entry metadata length is truncated")
        (mlen,) = _U32.unpack_from(payload, 0)
        pos = 4 + mlen
        if pos > n:
            raise CorruptionError("entry metadata runs past the entry")
        meta = payload[4:pos]
    if kind & FLAG_EXPIRY:
        if pos + 8 > n:
            raise CorruptionError("entry expiry is truncated")
        (expires,) = _U64.unpack_from(payload, pos)
        pos += 8
    return payload[pos:], meta, expires


def payload_expiry(kind: int, payload: bytes) -> int | None:
    """Only the expiry (cheaper than a full decode on the read path)."""
    if not kind & FLAG_EXPIRY:
        return None
    return decode_payload(kind, payload)[2]

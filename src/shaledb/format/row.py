"""Entry kinds and the payload of entries that carry metadata.

Every stored entry is ``(key, seq, kind, payload)``. The low two bits of
``kind`` say what the payload is; flag bits say which extras precede it:

    kind & 0x03 == 0  VALUE      payload is the value
    kind & 0x03 == 1  TOMBSTONE  payload is empty (or extras only)
    kind & 0x03 == 2  POINTER    payload is a value-journal pointer
    kind & 0x03 == 3  MERGE      payload is merge operands, maybe over a base entry
                                 (``format/merge.py``; SST format version 2 only)
    kind & 0x04       META       payload starts with u32 len + user metadata
    kind & 0x08       EXPIRY     then u64 expires_at_ms
    kind & 0x10       INDEXED    the writer recorded index terms for this key
    kind & 0x20       TERMS      then u32 len + the key's index terms (``encode_terms``)
    kind & 0x80       INDEX_TREE only in WAL and journal objects: the entry belongs
                                 to the index tree (the bit is stripped on replay)

Plain values (no flags) are stored as-is, so the common path never parses.
Extras come in the order META, EXPIRY, TERMS, then the body.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..errors import CorruptionError

KIND_VALUE = 0
KIND_TOMBSTONE = 1
KIND_POINTER = 2
KIND_MERGE = 3
TYPE_MASK = 0x03
FLAG_META = 0x04
FLAG_EXPIRY = 0x08
FLAG_INDEXED = 0x10
FLAG_TERMS = 0x20
FLAG_INDEX_TREE = 0x80
KNOWN_BITS = 0xBF
EXTRA_FLAGS = FLAG_META | FLAG_EXPIRY | FLAG_TERMS

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def check_kind(kind: int) -> None:
    if kind & ~KNOWN_BITS or ((kind & TYPE_MASK) == KIND_MERGE and kind != KIND_MERGE):
        raise CorruptionError(f"unknown entry kind 0x{kind:02x}")


def encode_payload(
    body: bytes, metadata: bytes | None, expires_at_ms: int | None, terms: bytes | None = None
) -> tuple[int, bytes]:
    """Flags and payload for ``body`` with optional extras (``terms``: ``encode_terms`` output)."""
    flags = 0
    parts: list[bytes] = []
    if metadata is not None:
        flags |= FLAG_META
        parts.append(_U32.pack(len(metadata)))
        parts.append(metadata)
    if expires_at_ms is not None:
        flags |= FLAG_EXPIRY
        parts.append(_U64.pack(expires_at_ms))
    if terms is not None:
        flags |= FLAG_TERMS | FLAG_INDEXED
        parts.append(_U32.pack(len(terms)))
        parts.append(terms)
    if not flags:
        return 0, body
    parts.append(body)
    return flags, b"".join(parts)


def payloads_with_terms(
    bodies: Sequence[bytes], terms: Sequence[bytes | None]
) -> tuple[list[int], list[bytes]]:
    """Kinds and payloads of value rows whose only extra is ``terms`` (None: no extra):
    ``encode_payload(body, None, None, t)`` of each row, in two comprehensions, not a call a row."""
    pack, flags = _U32.pack, KIND_VALUE | FLAG_TERMS | FLAG_INDEXED
    kinds = [KIND_VALUE if t is None else flags for t in terms]
    return kinds, [b if t is None else pack(len(t)) + t + b for b, t in zip(bodies, terms)]


def decode_extras(kind: int, payload: bytes) -> tuple[bytes, bytes | None, int | None, bytes | None]:
    """``(body, metadata, expires_at_ms, raw_terms)`` of a stored payload."""
    if not kind & EXTRA_FLAGS:
        return payload, None, None, None
    pos = 0
    meta: bytes | None = None
    expires: int | None = None
    terms: bytes | None = None
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
    if kind & FLAG_TERMS:
        if pos + 4 > n:
            raise CorruptionError("entry index terms length is truncated")
        (tlen,) = _U32.unpack_from(payload, pos)
        pos += 4
        if pos + tlen > n:
            raise CorruptionError("entry index terms run past the entry")
        terms = payload[pos : pos + tlen]
        pos += tlen
    return payload[pos:], meta, expires, terms


def decode_payload(kind: int, payload: bytes) -> tuple[bytes, bytes | None, int | None]:
    """``(body, metadata, expires_at_ms)`` of a stored payload (index terms skipped)."""
    if not kind & EXTRA_FLAGS:
        return payload, None, None
    body, meta, expires, _ = decode_extras(kind, payload)
    return body, meta, expires


def encode_terms(terms: dict[str, list[bytes]] | dict[str, tuple[bytes, ...]]) -> bytes:
    """A key's index terms: ``u16 nfields``, then per field (sorted by name)
    ``u16 name_len, name (UTF-8), u32 nterms``, then per term ``u16 len, term``."""
    return terms_from_fields([encode_field_terms(name, terms[name]) for name in sorted(terms)])


def encode_field_terms(name: str, ts: Sequence[bytes]) -> bytes:
    """One field's part of :func:`encode_terms` (a bulk load caches it per distinct value)."""
    raw = name.encode("utf-8")
    parts = [_U16.pack(len(raw)), raw, _U32.pack(len(ts))]
    for t in ts:
        parts.append(_U16.pack(len(t)))
        parts.append(t)
    return b"".join(parts)


def terms_from_fields(fields: Sequence[bytes]) -> bytes:
    """:func:`encode_terms` of the fields encoded by :func:`encode_field_terms`, sorted by name."""
    return _U16.pack(len(fields)) + b"".join(fields)


def decode_terms(raw: bytes) -> dict[str, tuple[bytes, ...]]:
    """Inverse of :func:`encode_terms`; raises CorruptionError on damage."""
    n = len(raw)
    if n < 2:
        raise CorruptionError("index terms are truncated")
    (nf,) = _U16.unpack_from(raw, 0)
    pos = 2
    out: dict[str, tuple[bytes, ...]] = {}
    for _ in range(nf):
        if pos + 2 > n:
            raise CorruptionError("index field name length is truncated")
        (ln,) = _U16.unpack_from(raw, pos)
        pos += 2
        if pos + ln + 4 > n:
            raise CorruptionError("index field runs past the terms")
        try:
            name = raw[pos : pos + ln].decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptionError("index field name is not UTF-8") from None
        pos += ln
        (nt,) = _U32.unpack_from(raw, pos)
        pos += 4
        if nt > n:
            raise CorruptionError("index field claims more terms than bytes")
        ts = []
        for _ in range(nt):
            if pos + 2 > n:
                raise CorruptionError("index term length is truncated")
            (tl,) = _U16.unpack_from(raw, pos)
            pos += 2
            if pos + tl > n:
                raise CorruptionError("index term runs past the terms")
            ts.append(raw[pos : pos + tl])
            pos += tl
        out[name] = tuple(ts)
    if pos != n:
        raise CorruptionError("index terms have trailing bytes")
    return out


def payload_expiry(kind: int, payload: bytes) -> int | None:
    """Only the expiry (cheaper than a full decode on the read path)."""
    if not kind & FLAG_EXPIRY:
        return None
    return decode_extras(kind, payload)[2]

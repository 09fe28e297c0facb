"""The payload of a merge entry (kind 3): operands, maybe over a base entry.

A merge entry says "apply these operands, oldest first, to the key's value
below". Its payload::

    u8  flags                bit 0: a base entry follows; other bits are 0
    [u8 base_kind            the base's kind (value, tombstone or pointer, with
     u32 base_len             their flags; never a merge)
     base_len bytes]          the base's payload, as it would be stored alone
    u32 n                    number of operands, >= 1
    n x (u32 len, len bytes) the operands, oldest first

Without a base, the operands apply to the key's next older version (in the
same SST or an older source); with one, the entry is self-contained: the
memtable and compaction embed the base they found, so a reader never looks
further. Why a base inside the entry rather than a second entry: a table SST
or sorted run holds one entry per key (readers rely on it), and folding the
operands onto the base needs the merge operator, which a compactor or a
replaying writer may not have. See docs/format/block.md.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ..errors import CorruptionError
from .row import KIND_MERGE, TYPE_MASK, check_kind

_U32 = struct.Struct("<I")
_HAS_BASE = 0x01
MAX_OPERANDS = 1 << 24


def encode_merge(operands: Sequence[bytes], base: tuple[int, bytes] | None = None) -> bytes:
    """The payload of a merge entry: ``operands`` (oldest first) over ``base`` ``(kind, payload)``."""
    if not operands:
        raise ValueError("a merge entry needs at least one operand")
    parts: list[bytes] = []
    if base is None:
        parts.append(b"\x00")
    else:
        kind, payload = base
        if kind & TYPE_MASK == KIND_MERGE:
            raise ValueError("a merge entry's base cannot be a merge")
        parts += (bytes((_HAS_BASE, kind)), _U32.pack(len(payload)), payload)
    parts.append(_U32.pack(len(operands)))
    for op in operands:
        parts.append(_U32.pack(len(op)))
        parts.append(op)
    return b"".join(parts)


def decode_merge(payload: bytes) -> tuple[tuple[int, bytes] | None, list[bytes]]:
    """``(base, operands)`` of a merge payload; raises CorruptionError on damage."""
    n = len(payload)
    if n < 5:
        raise CorruptionError("merge entry is truncated")
    flags = payload[0]
    if flags & ~_HAS_BASE:
        raise CorruptionError(f"merge entry has unknown flags 0x{flags:02x}")
    pos = 1
    base: tuple[int, bytes] | None = None
    if flags & _HAS_BASE:
        if n < 6 + 4:
            raise CorruptionError("merge entry base is truncated")
        kind = payload[1]
        check_kind(kind)
        if kind & TYPE_MASK == KIND_MERGE:
            raise CorruptionError("merge entry's base is a merge")
        (blen,) = _U32.unpack_from(payload, 2)
        pos = 6 + blen
        if pos + 4 > n:
            raise CorruptionError("merge entry base runs past the entry")
        base = (kind, payload[6:pos])
    (count,) = _U32.unpack_from(payload, pos)
    pos += 4
    if count == 0 or count > MAX_OPERANDS or count * 4 > n - pos:
        raise CorruptionError(f"merge entry claims {count} operands in {n - pos} bytes")
    ops: list[bytes] = []
    for _ in range(count):
        if pos + 4 > n:
            raise CorruptionError("merge operand length is truncated")
        (ln,) = _U32.unpack_from(payload, pos)
        pos += 4
        if pos + ln > n:
            raise CorruptionError("merge operand runs past the entry")
        ops.append(payload[pos : pos + ln])
        pos += ln
    if pos != n:
        raise CorruptionError("merge entry has trailing bytes")
    return base, ops


_ONE = b"\x00\x01\x00\x00\x00"


def one_operand(operand: bytes) -> bytes:
    """``encode_merge([operand])``, the payload of every WAL merge entry, in one join."""
    return b"".join((_ONE, _U32.pack(len(operand)), operand))


def append_operands(payload: bytes, operands: Sequence[bytes]) -> bytes:
    """``payload`` (a valid merge payload) with ``operands`` added after its own: byte
    copies, no decode (a memtable stack grows by one operand a merge)."""
    pos = 1 if not payload[0] & _HAS_BASE else 6 + _U32.unpack_from(payload, 2)[0]
    (count,) = _U32.unpack_from(payload, pos)
    parts = [payload[:pos], _U32.pack(count + len(operands)), payload[pos + 4 :]]
    for op in operands:
        parts.append(_U32.pack(len(op)))
        parts.append(op)
    return b"".join(parts)


def merge_operand(payload: bytes) -> bytes:
    """The one operand of a WAL merge entry (``Db.merge`` writes one operand, no base)."""
    base, ops = decode_merge(payload)
    if base is not None or len(ops) != 1:
        raise CorruptionError("a WAL merge entry holds one operand and no base")
    return ops[0]


def operand_count(payload: bytes) -> int:
    """How many operands a (valid) merge payload holds, without decoding them."""
    pos = 1 if not payload[0] & _HAS_BASE else 6 + _U32.unpack_from(payload, 2)[0]
    return int(_U32.unpack_from(payload, pos)[0])

"""Value-journal pointers and secondary-index keys (pure codecs).

A **pointer** is the body of a ``POINTER`` ledger entry (``row.py``): where the
value of that write lives in the value journal. The journal is made of WAL
objects (``wal/<id>.sst``, kept once their writes reach L0) and objects written
by journal compaction (``journal/<ULID>.journal``); both are SSTs whose data
blocks hold entries in sequence order, so a value is addressed by its stored
block and its index in the block::

    u8   version = 1
    u8   ref kind: 0 = WAL object, 1 = journal object
    ref  kind 0: u64 WAL id; kind 1: the ULID's 128 bits (16 bytes, big-endian)
    u64  block_off    offset of the stored block in the object
    u32  block_len    its length, trailer included
    u32  index        the entry's index in the block
    u32  value_len    the value's length (HEAD answers from it without a read)

A reader fetches ``[block_off, block_off + block_len)`` with one ranged GET,
checks the block's CRC32C, decodes it and takes entry ``index``, which must
carry the ledger entry's key and a value of ``value_len`` bytes.

An **index key** orders ``(field, term, key)`` as tuples, with the
FoundationDB tuple layer's byte-string encoding: each element is ``0x01``,
the bytes with every ``0x00`` written as ``0x00 0xFF``, then ``0x00``. Byte
order of the encodings is the tuple order, for arbitrary bytes.

See docs/format/journal.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CorruptionError

POINTER_VERSION = 1
REF_WAL = 0
REF_JOURNAL = 1

_HEAD = struct.Struct("<BB")
_WAL_REF = struct.Struct("<Q")
_TAIL = struct.Struct("<QIII")
POINTER_SIZE_WAL = _HEAD.size + 8 + _TAIL.size
POINTER_SIZE_JOURNAL = _HEAD.size + 16 + _TAIL.size

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_CROCKFORD)}
_WAL_ID_DIGITS = 20


@dataclass(frozen=True, slots=True)
class Pointer:
    """Where one value lives: ``ref`` names the object (see :func:`ref_of`)."""

    ref: str
    block_off: int
    block_len: int
    index: int
    value_len: int


def is_wal_ref(ref: str) -> bool:
    """True for a WAL object's ref (20 decimal digits), False for a ULID."""
    return len(ref) == _WAL_ID_DIGITS and ref.isdigit()


def wal_ref(wal_id: int) -> str:
    """The ref (and ``JournalFile.id``) of WAL object ``wal_id``."""
    return f"{wal_id:020d}"


def ulid_to_bytes(ulid: str) -> bytes:
    if len(ulid) != 26 or ulid[0] not in "01234567":
        raise ValueError(f"not a ULID: {ulid!r}")
    v = 0
    for ch in ulid:
        v = v * 32 + _DECODE[ch]
    return v.to_bytes(16, "big")


def ulid_from_bytes(raw: bytes) -> str:
    v = int.from_bytes(raw, "big")
    out = []
    for _ in range(26):
        out.append(_CROCKFORD[v & 31])
        v >>= 5
    return "".join(reversed(out))


def encode_pointer(p: Pointer) -> bytes:
    if is_wal_ref(p.ref):
        head = _HEAD.pack(POINTER_VERSION, REF_WAL) + _WAL_REF.pack(int(p.ref))
    else:
        head = _HEAD.pack(POINTER_VERSION, REF_JOURNAL) + ulid_to_bytes(p.ref)
    return head + _TAIL.pack(p.block_off, p.block_len, p.index, p.value_len)


def wal_pointer(wal_id: int, block_off: int, block_len: int, index: int, value_len: int) -> bytes:
    """``encode_pointer`` for a WAL object, without building a Pointer (the hot path)."""
    return (
        _HEAD.pack(POINTER_VERSION, REF_WAL)
        + _WAL_REF.pack(wal_id)
        + _TAIL.pack(block_off, block_len, index, value_len)
    )


def pointers_into(
    ref: str, offsets: list[int], ends: list[int], entries: list[tuple[int, int]]
) -> list[bytes]:
    """Encoded pointers to entries of one object, given its block layout.

    ``offsets``/``ends`` are ``SstBuilder.block_layout()``; ``entries`` are
    ``(entry number in the object, value length)`` in ascending entry order.
    """
    out = []
    bi = 0
    for g, vlen in entries:
        while ends[bi] <= g:
            bi += 1
        first = ends[bi - 1] if bi else 0
        out.append(encode_pointer(Pointer(ref, offsets[bi], offsets[bi + 1] - offsets[bi], g - first, vlen)))
    return out


def decode_pointer(raw: bytes) -> Pointer:
    """Parse a pointer; CorruptionError if it is not one this version writes."""
    n = len(raw)
    if n < 2:
        raise CorruptionError("value-journal pointer is truncated")
    version, kind = _HEAD.unpack_from(raw, 0)
    if version != POINTER_VERSION:
        raise CorruptionError(f"unsupported value-journal pointer version {version}")
    if kind == REF_WAL:
        if n != POINTER_SIZE_WAL:
            raise CorruptionError(f"value-journal pointer is {n} bytes, expected {POINTER_SIZE_WAL}")
        (wid,) = _WAL_REF.unpack_from(raw, 2)
        ref = wal_ref(wid)
        pos = 10
    elif kind == REF_JOURNAL:
        if n != POINTER_SIZE_JOURNAL:
            raise CorruptionError(f"value-journal pointer is {n} bytes, expected {POINTER_SIZE_JOURNAL}")
        ref = ulid_from_bytes(raw[2:18])
        pos = 18
    else:
        raise CorruptionError(f"value-journal pointer has unknown object kind {kind}")
    off, ln, idx, vlen = _TAIL.unpack_from(raw, pos)
    return Pointer(ref, off, ln, idx, vlen)


# ------------------------------------------------------------- index keys


def _element(b: bytes) -> bytes:
    return b"\x01" + b.replace(b"\x00", b"\x00\xff") + b"\x00"


def index_prefix(field: str) -> bytes:
    """Every index key of ``field`` starts with this."""
    return _element(field.encode("utf-8"))


def index_term_prefix(field: str, term: bytes) -> bytes:
    """Every index key of ``(field, term)`` starts with this."""
    return _element(field.encode("utf-8")) + _element(term)


def index_key(field: str, term: bytes, key: bytes) -> bytes:
    """The index-tree key of ``key`` having ``term`` in ``field``."""
    return index_term_prefix(field, term) + index_key_tail(key)


def index_key_tail(key: bytes) -> bytes:
    """How every index key of ``key`` ends (after :func:`index_term_prefix`)."""
    return _element(key)


def _take(raw: bytes, pos: int) -> tuple[bytes, int]:
    if pos >= len(raw) or raw[pos] != 0x01:
        raise CorruptionError("index key element does not start with 0x01")
    out = bytearray()
    i = pos + 1
    n = len(raw)
    while True:
        j = raw.find(b"\x00", i)
        if j < 0:
            raise CorruptionError("index key element is not terminated")
        out += raw[i:j]
        if j + 1 < n and raw[j + 1] == 0xFF:
            out.append(0)
            i = j + 2
            continue
        return bytes(out), j + 1


def decode_index_key(raw: bytes) -> tuple[str, bytes, bytes]:
    """``(field, term, key)`` of an index key."""
    f, pos = _take(raw, 0)
    term, pos = _take(raw, pos)
    key, pos = _take(raw, pos)
    if pos != len(raw):
        raise CorruptionError("index key has trailing bytes")
    try:
        return f.decode("utf-8"), term, key
    except UnicodeDecodeError:
        raise CorruptionError("index field is not UTF-8") from None


__all__ = [
    "pointers_into",
    "POINTER_SIZE_JOURNAL",
    "POINTER_SIZE_WAL",
    "Pointer",
    "decode_index_key",
    "decode_pointer",
    "encode_pointer",
    "index_key",
    "index_key_tail",
    "index_prefix",
    "index_term_prefix",
    "is_wal_ref",
    "ulid_from_bytes",
    "ulid_to_bytes",
    "wal_pointer",
    "wal_ref",
]

"""Value-journal pointers and secondary-index keys (pure codecs).

A **pointer** is the body of a ``POINTER`` ledger entry (``row.py``): where the
value of that write lives in the value journal. The journal is made of WAL
objects (``wal/<id>.sst``, kept once their writes reach L0) and objects written
by journal compaction (``journal/<ULID>.journal``); both are SSTs whose data
blocks hold entries in sequence order, so a value is addressed by its stored
block and its index in the block::

    u8   version = 1 or 2
    u8   ref kind: 0 = WAL object, 1 = journal object
    ref  kind 0: u64 WAL id; kind 1: the ULID's 128 bits (16 bytes, big-endian)
    u64  block_off    offset of the stored block in the object
    u32  block_len    its length, trailer included
    u32  index        the entry's index in the block
    u32  value_len    the value's length (HEAD answers from it without a read)
    version 2 only, for a block stored uncompressed:
    u32  value_off    offset of the value's first byte from block_off
    u32  value_crc    CRC32C of the key followed by the value

A version 1 reader fetches ``[block_off, block_off + block_len)`` with one
ranged GET, checks the block's CRC32C, decodes it and takes entry ``index``,
which must carry the ledger entry's key and a value of ``value_len`` bytes.
Version 2 exists because a write batch is never cut across blocks: a batch of
a hundred 4 KiB values is one 400 KiB block, and reading all of it for one
value made a cold get of a separated value 100 times the bytes it needs. A
version 2 reader fetches only ``[block_off + value_off, + value_len)`` and
checks ``value_crc`` (the key is in the CRC, so a pointer aimed at another
entry's bytes fails like damaged bytes do). Blocks stored compressed keep
version 1 pointers: their raw offsets are not the stored ones.

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
from .coding import CODEC_NONE, TRAILER_SIZE, crc32c, crc32c_extend

POINTER_VERSION = 2
"""The version written for a value in an uncompressed block (1 for a compressed one)."""
POINTER_V1 = 1
REF_WAL = 0
REF_JOURNAL = 1

_HEAD = struct.Struct("<BB")
_WAL_REF = struct.Struct("<Q")
_TAIL = struct.Struct("<QIII")
_RANGE = struct.Struct("<II")
_U32 = struct.Struct("<I")
_WAL_V1 = struct.Struct("<BBQQIII")
_WAL_V2 = struct.Struct("<BBQQIIIII")
POINTER_SIZE_WAL = _HEAD.size + 8 + _TAIL.size
POINTER_SIZE_JOURNAL = _HEAD.size + 16 + _TAIL.size
POINTER_V2_SIZE_WAL = POINTER_SIZE_WAL + _RANGE.size
POINTER_V2_SIZE_JOURNAL = POINTER_SIZE_JOURNAL + _RANGE.size
_SIZES = {
    (POINTER_V1, REF_WAL): POINTER_SIZE_WAL,
    (POINTER_V1, REF_JOURNAL): POINTER_SIZE_JOURNAL,
    (POINTER_VERSION, REF_WAL): POINTER_V2_SIZE_WAL,
    (POINTER_VERSION, REF_JOURNAL): POINTER_V2_SIZE_JOURNAL,
}

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_CROCKFORD)}
_WAL_ID_DIGITS = 20


@dataclass(frozen=True, slots=True)
class Pointer:
    """Where one value lives: ``ref`` names the object (see :func:`ref_of`).

    ``value_off`` is None for a version 1 pointer (read the whole block); else
    the value's bytes start ``value_off`` bytes into the block and ``value_crc``
    is the CRC32C of the key followed by them (version 2)."""

    ref: str
    block_off: int
    block_len: int
    index: int
    value_len: int
    value_off: int | None = None
    value_crc: int = 0


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
    version = POINTER_V1 if p.value_off is None else POINTER_VERSION
    if is_wal_ref(p.ref):
        head = _HEAD.pack(version, REF_WAL) + _WAL_REF.pack(int(p.ref))
    else:
        head = _HEAD.pack(version, REF_JOURNAL) + ulid_to_bytes(p.ref)
    out = head + _TAIL.pack(p.block_off, p.block_len, p.index, p.value_len)
    if p.value_off is not None:
        out += _RANGE.pack(p.value_off, p.value_crc)
    return out


def wal_pointer(
    wal_id: int,
    block_off: int,
    block_len: int,
    index: int,
    value_len: int,
    value_off: int | None = None,
    value_crc: int = 0,
) -> bytes:
    """``encode_pointer`` for a WAL object, without building a Pointer (the hot path)."""
    if value_off is None:
        return _WAL_V1.pack(POINTER_V1, REF_WAL, wal_id, block_off, block_len, index, value_len)
    return _WAL_V2.pack(
        POINTER_VERSION, REF_WAL, wal_id, block_off, block_len, index, value_len, value_off, value_crc
    )


def raw_block_columns(
    data: bytes | bytearray | memoryview, block_off: int, block_len: int
) -> tuple[int, int] | None:
    """For the stored block at ``[block_off, block_off + block_len)`` of object ``data``:
    where its ``val_off`` column starts and where its payloads start, both from
    ``block_off``; None if the block is stored compressed. Read from the block's own
    header (docs/format/block.md): ``n``, then ``key_off[0..n]`` and ``val_off[0..n]``,
    seqs and kinds (``12 + 17 n`` bytes in all), the keys, the payloads."""
    if data[block_off + block_len - TRAILER_SIZE + 4] != CODEC_NONE:
        return None
    (n,) = _U32.unpack_from(data, block_off)
    (klen,) = _U32.unpack_from(data, block_off + 4 + 4 * n)
    return 8 + 4 * n, 12 + 17 * n + klen


def raw_value_offset(
    data: bytes | bytearray, block_off: int, block_len: int, index: int, value_len: int
) -> int | None:
    """Where the value of entry ``index`` (the last ``value_len`` bytes of its payload,
    after its extras) starts, from ``block_off``, in the stored block at
    ``[block_off, block_off + block_len)`` of object ``data``; None if that block is
    stored compressed (:func:`raw_block_columns`)."""
    cols = raw_block_columns(data, block_off, block_len)
    if cols is None:
        return None
    (vend,) = _U32.unpack_from(data, block_off + cols[0] + 4 * index + 4)
    return int(cols[1] + vend - value_len)


def value_crc(key: bytes, value: bytes) -> int:
    """A version 2 pointer's ``value_crc``: CRC32C of ``key`` followed by ``value``."""
    return crc32c_extend(int(crc32c(key)), value)


def ranged_pointer(
    ref: str, data: bytes | bytearray, block_off: int, block_len: int, index: int, value_len: int
) -> Pointer:
    """The pointer to entry ``index`` of the stored block at ``block_off`` of object
    ``data`` (``ref``): version 2 if the block is stored uncompressed, else version 1.
    The key and the value are read from ``data`` itself, so the CRC covers what a
    reader will find there."""
    voff = raw_value_offset(data, block_off, block_len, index, value_len)
    if voff is None:
        return Pointer(ref, block_off, block_len, index, value_len)
    (n,) = _U32.unpack_from(data, block_off)
    k0, k1 = struct.unpack_from("<II", data, block_off + 4 + 4 * index)
    kbase = block_off + 12 + 17 * n
    view = memoryview(data)
    key = bytes(view[kbase + k0 : kbase + k1])
    value = bytes(view[block_off + voff : block_off + voff + value_len])
    return Pointer(ref, block_off, block_len, index, value_len, voff, value_crc(key, value))


def pointers_into(
    ref: str,
    offsets: list[int],
    ends: list[int],
    entries: list[tuple[int, int]],
    data: bytes | bytearray | None = None,
) -> list[bytes]:
    """Encoded pointers to entries of one object, given its block layout.

    ``offsets``/``ends`` are ``SstBuilder.block_layout()``; ``entries`` are
    ``(entry number in the object, value length)`` in ascending entry order.
    With the object's bytes ``data``, values in uncompressed blocks get
    version 2 pointers (:func:`ranged_pointer`); without, version 1.
    """
    out = []
    bi = 0
    for g, vlen in entries:
        while ends[bi] <= g:
            bi += 1
        first = ends[bi - 1] if bi else 0
        off, ln = offsets[bi], offsets[bi + 1] - offsets[bi]
        if data is None:
            p = Pointer(ref, off, ln, g - first, vlen)
        else:
            p = ranged_pointer(ref, data, off, ln, g - first, vlen)
        out.append(encode_pointer(p))
    return out


def decode_pointer(raw: bytes) -> Pointer:
    """Parse a pointer; CorruptionError if it is not one of versions 1 and 2."""
    n = len(raw)
    if n < 2:
        raise CorruptionError("value-journal pointer is truncated")
    version, kind = _HEAD.unpack_from(raw, 0)
    if version not in (POINTER_V1, POINTER_VERSION):
        raise CorruptionError(f"unsupported value-journal pointer version {version}")
    size = _SIZES.get((version, kind))
    if size is None:
        raise CorruptionError(f"value-journal pointer has unknown object kind {kind}")
    if n != size:
        raise CorruptionError(f"value-journal pointer is {n} bytes, expected {size}")
    if kind == REF_WAL:
        (wid,) = _WAL_REF.unpack_from(raw, 2)
        ref = wal_ref(wid)
        pos = 10
    else:
        ref = ulid_from_bytes(raw[2:18])
        pos = 18
    off, ln, idx, vlen = _TAIL.unpack_from(raw, pos)
    if version == POINTER_V1:
        return Pointer(ref, off, ln, idx, vlen)
    voff, crc = _RANGE.unpack_from(raw, pos + _TAIL.size)
    if voff + vlen > ln:
        raise CorruptionError(f"value-journal pointer's value [{voff}, +{vlen}) leaves its {ln}-byte block")
    return Pointer(ref, off, ln, idx, vlen, voff, crc)


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
    "POINTER_V2_SIZE_JOURNAL",
    "POINTER_V2_SIZE_WAL",
    "Pointer",
    "decode_index_key",
    "decode_pointer",
    "encode_pointer",
    "index_key",
    "index_key_tail",
    "index_prefix",
    "index_term_prefix",
    "is_wal_ref",
    "ranged_pointer",
    "raw_block_columns",
    "raw_value_offset",
    "ulid_from_bytes",
    "ulid_to_bytes",
    "value_crc",
    "wal_pointer",
    "wal_ref",
]

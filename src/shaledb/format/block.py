"""Data blocks: columnar so CPython can encode and decode them in C-level calls.

Payload layout (before framing, little-endian)::

    u32 n
    u32 key_off[n + 1]      offsets into the key blob (key_off[0] = 0)
    u32 val_off[n + 1]      offsets into the value blob
    u64 seq[n]
    u8  kind[n]
    key blob                key_off[n] bytes
    value blob              val_off[n] bytes

Encoding is ``bytes.join`` plus ``array`` conversions; decoding is two array
loads and one list comprehension of key slices. Values stay in their blob and
are sliced only when read, so a point lookup never decodes values it skips.

Fixed-width columns (keys, or values, all of one length in the block: the
common case for keys) are split by one ``struct`` call instead of a slice per
entry, five times faster in CPython: their offsets are recognised by one byte
comparison against the offsets such a column must have. Values of one width
are then kept split (a list), so scans and lookups take them without slicing.

A stored block (``coding.frame_block``) of a shape seen before -- its size,
entry count and fixed widths: every full block of an SST of fixed-width keys
and values -- is checked and decoded by :func:`decode_stored` in place, a dozen
C-level calls and no copy of the payload: the header is compared with the shape's
as bytes, the CRC is taken over the whole stored block (a CRC32C followed by its
own value leaves a constant residue) and the columns are unpacked from where they
lie. A first touch of a block is most of a cold scan's cost (issue 30).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from ..errors import CorruptionError
from .coding import (
    _LITTLE,
    CODEC_NONE,
    TRAILER_SIZE,
    check_offsets,
    crc32c,
    pack_u32s,
    pack_u64s,
    u32_array,
    u64_array,
    unframe_block,
)
from .offsets import packed_offsets
from .range_dels import KIND_RANGE_DEL
from .row import KNOWN_BITS, TYPE_MASK

_U32 = struct.Struct("<I")
MAX_ENTRIES = 1 << 24
# 1 for every byte that is not a valid entry kind: one C-level translate checks a block.
# A range tombstone (KIND_RANGE_DEL, only in WAL SSTs of format version 2) is the one use of bit 0x40;
# a merge entry (type 3, ``format/merge.py``) carries no flag bits.
_BAD_KIND = bytes(
    int(k != KIND_RANGE_DEL and (bool(k & ~KNOWN_BITS) or ((k & TYPE_MASK) == 3 and k != 3)))
    for k in range(256)
)


_FIXED_MAX_ENTRIES = 256
"""Longer columns (a WAL block holds a whole write batch) are sliced: a compiled
``Struct`` grows with its entry count, and the shapes are cached."""
_FIXED_CACHE_MAX = 512
_fixed: dict[tuple[int, int], tuple[bytes, struct.Struct]] = {}


def split_fixed(buf: bytes, off_pos: int, n: int, total: int, blob_pos: int) -> tuple[bytes, ...] | None:
    """The ``n`` entries of a column whose ``n + 1`` u32 offsets are at ``buf[off_pos:]``
    and whose ``total`` bytes are at ``buf[blob_pos:]``, if they are all one width; else None.

    The offsets of a fixed-width column are known from ``(width, n)``: comparing
    them as bytes (``startswith``, no copy) is the whole check.
    """
    if n < 2 or n > _FIXED_MAX_ENTRIES or total % n or not isinstance(buf, (bytes, bytearray)):
        return None
    shape = _fixed_shape(total // n, n)
    if not buf.startswith(shape[0], off_pos):
        return None
    return shape[1].unpack_from(buf, blob_pos)


def _fixed_shape(w: int, n: int) -> tuple[bytes, struct.Struct]:
    """The packed offsets and the splitting ``Struct`` of ``n`` entries of ``w`` bytes
    (cached; made when missing, so a cache cleared by another shape's arrival, in this
    thread or another, never leaves a caller without it)."""
    shape = _fixed.get((w, n))
    if shape is None:
        if len(_fixed) >= _FIXED_CACHE_MAX:
            _fixed.clear()
        offsets = array("I", range(0, w * n + 1, w) if w else [0] * (n + 1))
        shape = _fixed[(w, n)] = (pack_u32s(offsets), struct.Struct(f"{w}s" * n))
    return shape


class Block:
    """A decoded block: keys as a sequence, everything else as flat buffers (values as a
    sequence too when they are all of one width: ``pays``).

    Split columns are the tuples ``struct`` returns: no copy into a list, and a
    tuple of bytes is one object the garbage collector stops tracking, where a
    list is one it scans on every full collection while the block is cached."""

    __slots__ = ("keys", "kinds", "nbytes", "pays", "seqs", "val_off", "vals")

    def __init__(
        self,
        keys: Sequence[bytes],
        seqs: array[int],
        kinds: bytes,
        val_off: array[int],
        vals: bytes,
        pays: Sequence[bytes] | None = None,
        key_bytes: int | None = None,
    ) -> None:
        self.keys = keys
        self.seqs = seqs
        self.kinds = kinds
        self.val_off = val_off
        self.vals = vals
        self.pays = pays
        """The values, split (``split_fixed``), or None: slice them from ``vals``."""
        # Rough resident size: blobs plus ~56 bytes per key object and list slot
        # (split values: their bytes plus ~40 for each object and list slot).
        # ``key_bytes``: the keys' total length when the caller knows it.
        n = len(keys)
        vbytes = len(vals) if pays is None else val_off[-1] + 40 * n
        kbytes = sum(map(len, keys)) if key_bytes is None else key_bytes
        self.nbytes = vbytes + kbytes + 64 * n + 128

    def __len__(self) -> int:
        return len(self.keys)

    def payload(self, i: int) -> bytes:
        pays = self.pays
        if pays is not None:
            return pays[i]
        vo = self.val_off
        return self.vals[vo[i] : vo[i + 1]]

    def find(self, key: bytes) -> int:
        """Index of ``key`` (its newest version if repeated), or -1."""
        keys = self.keys
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return i
        return -1

    def payloads(self, lo: int, hi: int) -> Sequence[bytes]:
        pays = self.pays
        if pays is not None:
            return pays[lo:hi]
        vo = self.val_off
        vals = self.vals
        return [vals[a:b] for a, b in zip(vo[lo:hi], vo[lo + 1 : hi + 1])]


def encode_block(
    keys: Sequence[bytes], seqs: Sequence[int], kinds: bytes | Sequence[int], vals: Sequence[bytes]
) -> bytes:
    """Payload for the given columns (all of the same length)."""
    n = len(keys)
    if not (len(seqs) == n and len(kinds) == n and len(vals) == n):
        raise ValueError("block columns differ in length")
    return encode_columns(
        keys,
        seqs if isinstance(seqs, array) else array("Q", seqs),
        kinds if isinstance(kinds, bytes) else bytes(kinds),
        vals,
        map(len, keys),
        map(len, vals),
    )


def encode_columns(
    keys: Sequence[bytes],
    seqs: array[int],
    kinds: bytes,
    vals: Sequence[bytes],
    key_lens: Iterable[int],
    val_lens: Iterable[int],
) -> bytes:
    """:func:`encode_block`'s payload from columns already checked, with their lengths
    already taken (a builder that cut blocks on those lengths passes them on)."""
    return b"".join(
        (
            _U32.pack(len(keys)),
            packed_offsets(key_lens),  # (a fixed-width column's offsets are packed once)
            packed_offsets(val_lens),
            pack_u64s(seqs),
            kinds,
            b"".join(keys),
            b"".join(vals),
        )
    )


_ONE_HEAD = struct.Struct("<IIIIIQB")
"""The head of a one-entry block: count 1, key offsets 0 and the key's length, value
offsets 0 and the value's length, seq, kind (:func:`encode_block`'s layout for n = 1)."""


def encode_single(key: bytes, seq: int, kind: int, val: bytes) -> bytes:
    """:func:`encode_block` of one entry, packed by one ``struct`` call (a block per large value)."""
    return b"".join((_ONE_HEAD.pack(1, 0, len(key), 0, len(val), seq, kind), key, val))


def decode_block(buf: bytes) -> Block:
    """Decode a block payload; raise CorruptionError if its structure is wrong."""
    size = len(buf)
    if size < 4:
        raise CorruptionError("block shorter than its entry count")
    (n,) = _U32.unpack_from(buf, 0)
    if n > MAX_ENTRIES or 12 + 17 * n > size:
        raise CorruptionError(f"block claims {n} entries in {size} bytes")
    pos = 4
    key_off = u32_array(buf, pos, n + 1, "block key offsets")
    pos += 4 * (n + 1)
    val_off = u32_array(buf, pos, n + 1, "block value offsets")
    pos += 4 * (n + 1)
    seqs = u64_array(buf, pos, n, "block sequence numbers")
    pos += 8 * n
    kinds = buf[pos : pos + n]
    pos += n
    klen = key_off[-1]
    vlen = val_off[-1]
    if pos + klen + vlen != size:
        raise CorruptionError(f"block blobs are {size - pos} bytes, offsets say {klen + vlen}")
    if n and 1 in kinds.translate(_BAD_KIND):
        raise CorruptionError("block has an unknown entry kind")
    keys: Sequence[bytes] | None = split_fixed(buf, 4, n, klen, pos)
    if keys is None:
        check_offsets(key_off, klen, "block keys")
        kb = buf[pos : pos + klen]
        # zip over a copied slice: 25% under indexing and 20% under pairwise, per block key.
        keys = [kb[a:b] for a, b in zip(key_off, key_off[1:])]  # noqa: RUF007
    pays = split_fixed(buf, 8 + 4 * n, n, vlen, pos + klen)
    if pays is None:
        check_offsets(val_off, vlen, "block values")
    if pays is not None:
        return Block(keys, seqs, kinds, val_off, b"", pays, klen)
    return Block(keys, seqs, kinds, val_off, buf[pos + klen : pos + klen + vlen], None, klen)


CRC_RESIDUE = 0x48674BC7
"""CRC32C of any bytes followed by their own CRC32C (little-endian): the check of a
whole stored block, trailer included, in one call and without slicing the CRC off."""

_Shape = tuple[bytes, bytes, int, int, int, int, struct.Struct, struct.Struct, "array[int]", int]
"""What a stored block of one shape looks like: payload header (count and both offset
columns), trailer head (raw length, codec), entry count, where the sequence numbers,
kinds, keys and values start, the keys' and values' ``Struct``, the value offsets,
and the keys' total length."""
_SHAPES_MAX = 512
_shapes: dict[int, _Shape] = {}
"""Stored-block size -> the last shape of that size decoded, if fixed-width."""


def decode_stored(stored: bytes, what: str = "block") -> Block:
    """``decode_block(unframe_block(stored, what))``, in place for a known shape.

    Any damage is detected as on the general path: a header that differs from
    the shape's sends the block there, and the CRC covers every byte.
    """
    size = len(stored)
    shape = _shapes.get(size)
    if (
        shape is None
        or type(stored) is not bytes
        or not stored.startswith(shape[0])
        or not stored.endswith(shape[1], 0, size - 4)
    ):
        return _decode_stored_slow(stored, what)
    if crc32c(stored) != CRC_RESIDUE:
        raise CorruptionError(f"{what} checksum mismatch")
    _h, _t, _n, sp, kp, bp, ks, vs, val_off, klen = shape
    kinds = stored[kp:bp]
    if 1 in kinds.translate(_BAD_KIND):
        raise CorruptionError("block has an unknown entry kind")
    seqs = array("Q")
    seqs.frombytes(stored[sp:kp])
    return Block(
        ks.unpack_from(stored, bp), seqs, kinds, val_off, b"", vs.unpack_from(stored, bp + klen), klen
    )


_ROWS_STRUCTS_MAX = 4096
_rows_structs: dict[tuple[int, int], struct.Struct] = {}


def rows_struct(width: int, count: int) -> struct.Struct:
    """The ``Struct`` that splits ``count`` entries of ``width`` bytes (cached: a scan
    takes a block's rows from where it starts, up to where its limit ends)."""
    st = _rows_structs.get((width, count))
    if st is None:
        if len(_rows_structs) >= _ROWS_STRUCTS_MAX:
            _rows_structs.clear()
        st = _rows_structs[(width, count)] = struct.Struct(f"{width}s" * count)
    return st


def stored_shape(buf: bytes, off: int, size: int) -> _Shape | None:
    """The shape of the stored block at ``buf[off:off + size]`` when it is a fixed-width
    shape seen before and passes :func:`decode_stored`'s checks in place (its header and
    trailer as bytes, one CRC32C over every byte, its kinds); else None, and the caller
    decodes the block the general way, which reports any damage.

    A scan meeting a block for the first time reads only the rows it needs from
    where the block lies in its read-ahead chunk (``engine.sst_rows``) instead of
    decoding and caching all of them.
    """
    shape = _shapes.get(size)
    if (
        shape is None
        or type(buf) is not bytes
        or not buf.startswith(shape[0], off)
        or not buf.startswith(shape[1], off + size - TRAILER_SIZE)
        or crc32c(buf[off : off + size]) != CRC_RESIDUE
        or 1 in buf[off + shape[4] : off + shape[5]].translate(_BAD_KIND)
    ):
        return None
    return shape


def clear_shape_caches() -> None:
    """Forget every learnt block shape and cached column ``Struct`` (process-wide).

    What a block read does depends on these caches: a block of a known shape is read
    in place, one of a new shape is decoded first. They are filled by whatever
    blocks the process met before, so a test that counts decoded blocks starts
    from here to count the same whichever tests ran before it. Correctness never
    depends on them: every cache refills itself on the next decode.
    """
    _shapes.clear()
    _fixed.clear()
    _rows_structs.clear()


def _decode_stored_slow(stored: bytes, what: str) -> Block:
    """The general path of :func:`decode_stored`; learns the block's shape if it is fixed-width."""
    body = unframe_block(stored, what)
    b = decode_block(body)
    n = len(b.keys)
    klen = len(body) - len(b.kinds) - 12 - 16 * n - b.val_off[-1]
    plain = len(stored) == len(body) + TRAILER_SIZE and stored[len(body) + 4] == CODEC_NONE
    if b.pays is not None and type(b.keys) is tuple and plain and _LITTLE and type(stored) is bytes:
        # Both columns were split as fixed-width; their shapes are made again if missing
        # (the values' split may have cleared the cache of the keys' shape, or another
        # thread's blocks did): a block must not go unlearned for that.
        kshape = _fixed_shape(klen // n, n)
        vshape = _fixed_shape(b.val_off[-1] // n, n)
        head = _U32.pack(n) + kshape[0] + vshape[0]
        if body.startswith(head):
            if len(_shapes) >= _SHAPES_MAX:
                _shapes.clear()
            sp = 4 + 8 * (n + 1)
            _shapes[len(stored)] = (
                head,
                stored[len(body) : len(body) + 5],
                n,
                sp,
                sp + 8 * n,
                sp + 9 * n,
                kshape[1],
                vshape[1],
                b.val_off,
                klen,
            )
    return b

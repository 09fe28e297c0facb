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
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

from ..errors import CorruptionError
from .coding import check_offsets, pack_u32s, pack_u64s, u32_array, u64_array
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


class Block:
    """A decoded block: keys as a list, everything else as flat buffers."""

    __slots__ = ("keys", "kinds", "nbytes", "seqs", "val_off", "vals")

    def __init__(
        self, keys: list[bytes], seqs: array[int], kinds: bytes, val_off: array[int], vals: bytes
    ) -> None:
        self.keys = keys
        self.seqs = seqs
        self.kinds = kinds
        self.val_off = val_off
        self.vals = vals
        # Rough resident size: blobs plus ~56 bytes per key object and list slot.
        self.nbytes = len(vals) + sum(map(len, keys)) + 64 * len(keys) + 128

    def __len__(self) -> int:
        return len(self.keys)

    def payload(self, i: int) -> bytes:
        vo = self.val_off
        return self.vals[vo[i] : vo[i + 1]]

    def find(self, key: bytes) -> int:
        """Index of ``key`` (its newest version if repeated), or -1."""
        keys = self.keys
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return i
        return -1

    def payloads(self, lo: int, hi: int) -> list[bytes]:
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
    key_off = array("I", accumulate(map(len, keys), initial=0))
    val_off = array("I", accumulate(map(len, vals), initial=0))
    return b"".join(
        (
            _U32.pack(n),
            pack_u32s(key_off),
            pack_u32s(val_off),
            pack_u64s(seqs if isinstance(seqs, array) else array("Q", seqs)),
            kinds if isinstance(kinds, bytes) else bytes(kinds),
            b"".join(keys),
            b"".join(vals),
        )
    )


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
    check_offsets(key_off, klen, "block keys")
    check_offsets(val_off, vlen, "block values")
    if n and 1 in kinds.translate(_BAD_KIND):
        raise CorruptionError("block has an unknown entry kind")
    kb = buf[pos : pos + klen]
    # zip over a copied slice: 25% under indexing and 20% under pairwise, per block key.
    keys = [kb[a:b] for a, b in zip(key_off, key_off[1:])]  # noqa: RUF007
    return Block(keys, seqs, kinds, val_off, buf[pos + klen : pos + klen + vlen])

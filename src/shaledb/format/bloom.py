"""A blocked Bloom filter, shaped for CPython.

All probes for a key fall in one 512-bit block, so a lookup is one slice, one
``int.from_bytes`` and one mask comparison. The key is hashed once (BLAKE2b,
128 bits) and the same hash and probe mask serve every SST a lookup visits.

Layout (framed as a stored block)::

    u8  version (1)
    u8  probes (1..10)
    u32 num_blocks
    num_blocks * 64 bytes of bits (block i is bytes [6 + 64 i, 6 + 64 (i + 1)))

Hash: ``h = int.from_bytes(blake2b(key, digest_size=16).digest(), "little")``.
Block: ``(h & 0xFFFFFFFF) % num_blocks``. Probe ``i`` sets bit
``(h >> (32 + 9 i)) & 511`` of the block (bit ``b`` is bit ``b % 8`` of byte
``b // 8``, i.e. the block read as a little-endian integer).
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Iterable

from ..errors import CorruptionError

VERSION = 1
_HEADER = struct.Struct("<BBI")
BLOCK_BYTES = 64
BLOCK_BITS = 512
MAX_PROBES = 10
_blake2b = hashlib.blake2b
_BITS = [1 << i for i in range(BLOCK_BITS)]
_PROBE_SHIFTS = [range(32, 32 + 9 * p, 9) for p in range(MAX_PROBES + 1)]


def key_hash(key: bytes) -> int:
    return int.from_bytes(_blake2b(key, digest_size=16).digest(), "little")


def probe_mask(h: int, probes: int) -> int:
    """The bits a key with hash ``h`` sets within its block."""
    m = 0
    bit = _BITS
    for s in _PROBE_SHIFTS[probes]:
        m |= bit[(h >> s) & 511]
    return m


def probes_for(bits_per_key: int) -> int:
    return max(1, min(MAX_PROBES, round(bits_per_key * 0.69)))


def key_digest(key: bytes) -> bytes:
    """The 16 hash bytes of ``key``; :func:`key_hash` reads them as a little-endian int.

    Builders keep digests packed (16 bytes a key) rather than as ints (~50).
    """
    return _blake2b(key, digest_size=16).digest()


def build_filter(hashes: Iterable[int], count: int, bits_per_key: int) -> bytes:
    """Filter bytes for ``count`` key hashes (an empty filter if none)."""
    return build_filter_from_digests(b"".join(h.to_bytes(16, "little") for h in hashes), count, bits_per_key)


def build_filter_from_digests(digests: bytes | bytearray, count: int, bits_per_key: int) -> bytes:
    """Filter bytes for ``count`` keys given their packed :func:`key_digest` values."""
    probes = probes_for(bits_per_key)
    num_blocks = max(1, -(-count * bits_per_key // BLOCK_BITS))
    blocks = [0] * num_blocks
    q = array("Q")
    q.frombytes(digests)
    if sys.byteorder == "big":
        q.byteswap()
    # A quarter faster than shifting: bits come from a table (no new int per probe), and
    # the block's own int is the accumulator.
    bit = _BITS
    shifts = range(0, 9 * probes, 9)
    for lo, hi in zip(q[0::2], q[1::2]):
        b = (lo & 0xFFFFFFFF) % num_blocks
        x = (lo >> 32) | (hi << 32)
        m = blocks[b]
        for s in shifts:
            m |= bit[(x >> s) & 511]
        blocks[b] = m
    body = b"".join(v.to_bytes(BLOCK_BYTES, "little") for v in blocks)
    return _HEADER.pack(VERSION, probes, num_blocks) + body


class BloomFilter:
    """A decoded filter. ``may_contain`` never says no to a key that was added."""

    __slots__ = ("bits", "num_blocks", "probes")

    def __init__(self, data: bytes) -> None:
        if len(data) < _HEADER.size:
            raise CorruptionError("filter shorter than its header")
        version, probes, num_blocks = _HEADER.unpack_from(data, 0)
        if version != VERSION:
            raise CorruptionError(f"unsupported filter version {version}")
        if not 1 <= probes <= MAX_PROBES or num_blocks < 1:
            raise CorruptionError(f"filter has {probes} probes and {num_blocks} blocks")
        if len(data) != _HEADER.size + num_blocks * BLOCK_BYTES:
            raise CorruptionError("filter length does not match its block count")
        self.bits = data
        self.num_blocks = num_blocks
        self.probes = probes

    def may_contain(self, h: int, mask: int) -> bool:
        """``mask`` must be ``probe_mask(h, self.probes)``."""
        start = 6 + ((h & 0xFFFFFFFF) % self.num_blocks) * 64
        block = int.from_bytes(self.bits[start : start + 64], "little")
        return block & mask == mask

    def may_contain_key(self, key: bytes) -> bool:
        h = key_hash(key)
        return self.may_contain(h, probe_mask(h, self.probes))

    @property
    def nbytes(self) -> int:
        return len(self.bits)

"""A blocked Bloom filter, shaped for CPython.

All probes for a key fall in one 512-bit block, so a lookup is one slice, one
``int.from_bytes`` and one mask comparison. The key is hashed once per filter
version and the same hash and probe mask serve every SST a lookup visits.

Layout (framed as a stored block)::

    u8  version (1 or 2: which hash)
    u8  probes (1..10)
    u32 num_blocks
    num_blocks * 64 bytes of bits (block i is bytes [6 + 64 i, 6 + 64 (i + 1)))

The version names the 128-bit key hash ``h``: 1 is BLAKE2b-128 read
little-endian (one C call per key, the fastest per key in CPython); 2 is
*wordmix*, a multiply-xorshift over the key's 64-bit words that numpy computes
for a whole column at once (bulk ingest). Both are defined in
``docs/format/bloom.md``. Block: ``(h & 0xFFFFFFFF) % num_blocks``. Probe ``i``
sets bit ``(h >> (32 + 9 i)) & 511`` of the block (bit ``b`` is bit ``b % 8``
of byte ``b // 8``, i.e. the block read as a little-endian integer).
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import CorruptionError

BLAKE2B = 1
WORDMIX = 2
VERSION = BLAKE2B
"""The version the reference builder writes (flush and compaction)."""
_HEADER = struct.Struct("<BBI")
BLOCK_BYTES = 64
BLOCK_BITS = 512
MAX_PROBES = 10
_blake2b = hashlib.blake2b
_BITS = [1 << i for i in range(BLOCK_BITS)]
_PROBE_SHIFTS = [range(32, 32 + 9 * p, 9) for p in range(MAX_PROBES + 1)]
_M64 = (1 << 64) - 1
# wordmix constants: MurmurHash3's 64-bit finalizer, and the golden ratio for the high half.
_C1 = 0xFF51AFD7ED558CCD
_C2 = 0xC4CEB9FE1A85EC53
_GOLDEN = 0x9E3779B97F4A7C15


def key_hash(key: bytes) -> int:
    """The version-1 hash: BLAKE2b-128 of ``key``, little-endian."""
    return int.from_bytes(_blake2b(key, digest_size=16).digest(), "little")


def _fmix(x: int) -> int:
    x ^= x >> 33
    x = (x * _C1) & _M64
    x ^= x >> 33
    x = (x * _C2) & _M64
    return x ^ (x >> 33)


def key_hash_wordmix(key: bytes) -> int:
    """The version-2 hash of ``key``: ``lo | hi << 64`` (see docs/format/bloom.md)."""
    h = len(key)
    words = int.from_bytes(key, "little")  # word i is bits 64 i .. 64 i + 63, zero-padded
    for _ in range(0, len(key), 8):
        # _fmix(h ^ word), inlined: this runs on every point lookup of a bulk-loaded SST.
        h ^= words & _M64
        h ^= h >> 33
        h = (h * _C1) & _M64
        h ^= h >> 33
        h = (h * _C2) & _M64
        h ^= h >> 33
        words >>= 64
    return h | _fmix(h ^ _GOLDEN) << 64


HASHES: dict[int, Callable[[bytes], int]] = {BLAKE2B: key_hash, WORDMIX: key_hash_wordmix}
SUPPORTED_VERSIONS = tuple(HASHES)


def probe_mask(h: int, probes: int) -> int:
    """The bits a key with hash ``h`` sets within its block."""
    m = 0
    bit = _BITS
    for s in _PROBE_SHIFTS[probes]:
        m |= bit[(h >> s) & 511]
    return m


def probes_for(bits_per_key: int) -> int:
    return max(1, min(MAX_PROBES, round(bits_per_key * 0.69)))


def num_blocks_for(count: int, bits_per_key: int) -> int:
    return max(1, -(-count * bits_per_key // BLOCK_BITS))


def key_digest(key: bytes) -> bytes:
    """The 16 hash bytes of ``key``; :func:`key_hash` reads them as a little-endian int.

    Builders keep digests packed (16 bytes a key) rather than as ints (~50).
    """
    return _blake2b(key, digest_size=16).digest()


def build_filter(hashes: Iterable[int], count: int, bits_per_key: int, version: int = BLAKE2B) -> bytes:
    """Filter bytes for ``count`` key hashes of ``version`` (an empty filter if none)."""
    return build_filter_from_digests(
        b"".join(h.to_bytes(16, "little") for h in hashes), count, bits_per_key, version
    )


def build_filter_from_digests(
    digests: bytes | bytearray, count: int, bits_per_key: int, version: int = BLAKE2B
) -> bytes:
    """Filter bytes for ``count`` keys given their hashes as packed 16-byte little-endian digests."""
    probes = probes_for(bits_per_key)
    num_blocks = num_blocks_for(count, bits_per_key)
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
    return _HEADER.pack(version, probes, num_blocks) + body


class BloomFilter:
    """A decoded filter. ``may_contain`` never says no to a key that was added."""

    __slots__ = ("bits", "hash", "mask_key", "num_blocks", "probes", "version")

    def __init__(self, data: bytes) -> None:
        if len(data) < _HEADER.size:
            raise CorruptionError("filter shorter than its header")
        version, probes, num_blocks = _HEADER.unpack_from(data, 0)
        if version not in SUPPORTED_VERSIONS:
            raise CorruptionError(f"unsupported filter version {version}")
        if not 1 <= probes <= MAX_PROBES or num_blocks < 1:
            raise CorruptionError(f"filter has {probes} probes and {num_blocks} blocks")
        if len(data) != _HEADER.size + num_blocks * BLOCK_BYTES:
            raise CorruptionError("filter length does not match its block count")
        self.bits = data
        self.num_blocks = num_blocks
        self.probes = probes
        self.version = version
        self.hash = HASHES[version]
        self.mask_key = version << 8 | probes
        """Filters with equal ``mask_key`` take the same ``(h, mask)`` for a key."""

    def query(self, key: bytes) -> tuple[int, int]:
        """``(h, mask)`` for :meth:`may_contain`; a lookup reuses it for every filter
        with the same ``mask_key``."""
        h = self.hash(key)
        return h, probe_mask(h, self.probes)

    def may_contain(self, h: int, mask: int) -> bool:
        """``h, mask`` must come from :meth:`query` of a filter with this ``mask_key``."""
        start = 6 + ((h & 0xFFFFFFFF) % self.num_blocks) * 64
        block = int.from_bytes(self.bits[start : start + 64], "little")
        return block & mask == mask

    def may_contain_key(self, key: bytes) -> bool:
        return self.may_contain(*self.query(key))

    @property
    def nbytes(self) -> int:
        return len(self.bits)


# ----------------------------------------------------------- whole columns (numpy)


def _fmix_np(x: Any, tmp: Any = None) -> Any:
    """:func:`_fmix` of each element of the uint64 array ``x``, in place; ``tmp``
    (an array like ``x``) spares a temporary per step."""
    import numpy as np

    if tmp is None:
        tmp = np.empty_like(x)
    for c in (_C1, _C2, None):
        np.right_shift(x, np.uint64(33), out=tmp)
        x ^= tmp
        if c is not None:
            x *= np.uint64(c)
    return x


_TAIL_MASKS = [(1 << 8 * r) - 1 for r in range(8)] + [_M64]  # the bytes a key's last word has


def wordmix_column(offsets: Any, data: Any) -> tuple[Any, Any]:
    """The version-2 hashes of a column of keys, as ``(lo, hi)`` uint64 arrays.

    Key ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (``offsets``: n + 1
    ascending ints, ``data``: a buffer). One numpy pass per word position,
    over the keys that have a word there: the word is a little-endian u64 read
    at any byte offset (an overlapping strided view of the data), masked to
    the key's last byte.
    """
    import numpy as np

    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    lens = np.diff(offsets)
    h = lens.astype(np.uint64)
    if n and int(lens.min()) == int(lens.max()) and int(lens[0]) % 8 == 0 and lens[0] > 0:
        # Equal lengths, whole words (fixed-width keys): read the words in place.
        m = int(lens[0]) // 8
        words = np.frombuffer(data, dtype="<u8", count=n * m, offset=int(offsets[0])).reshape(n, m)
        tmp = np.empty_like(h)
        for j in range(m):
            h ^= words[:, j]
            _fmix_np(h, tmp)
    elif n:
        raw = np.frombuffer(data, dtype=np.uint8)
        padded = np.zeros(len(raw) + 8, dtype=np.uint8)
        padded[: len(raw)] = raw
        at = np.ndarray((len(raw) + 1,), dtype="<u8", buffer=padded, strides=(1,))  # u64 at each byte
        order = np.argsort(-lens, kind="stable")  # longest first: word j's keys are a prefix
        starts, left, hs = offsets[order], lens[order], h[order]
        tail = np.array(_TAIL_MASKS, dtype=np.uint64)
        nwords = (left + 7) >> 3
        scratch = np.empty_like(hs)
        longer = n - np.cumsum(np.bincount(nwords))  # longer[j]: keys with more than j words
        for j in range(int(nwords[0])):
            c = int(longer[j])
            w = at[starts[:c]]
            w &= tail[np.minimum(left[:c], 8)]
            view = hs[:c]
            view ^= w
            _fmix_np(view, scratch[:c])
            starts[:c] += 8
            left[:c] -= 8
        h[order] = hs
    return h, _fmix_np(h ^ np.uint64(_GOLDEN))


def filter_from_column(lo: Any, hi: Any, bits_per_key: int, version: int) -> bytes:
    """Filter bytes for hashes given as ``(lo, hi)`` uint64 arrays: the bytes
    :func:`build_filter_from_digests` gives for the same hashes, vectorized."""
    import numpy as np

    n = len(lo)
    probes = probes_for(bits_per_key)
    num_blocks = num_blocks_for(n, bits_per_key)
    bits = np.zeros(num_blocks * BLOCK_BITS, dtype=bool)
    if n:
        base = ((lo & np.uint64(0xFFFFFFFF)) % np.uint64(num_blocks)) * np.uint64(BLOCK_BITS)
        for i in range(probes):
            pos = 32 + 9 * i  # probe i is bits [pos, pos + 9) of the 128-bit hash
            if pos + 9 <= 64:
                b = lo >> np.uint64(pos)
            elif pos >= 64:
                b = hi >> np.uint64(pos - 64)
            else:
                b = (lo >> np.uint64(pos)) | (hi << np.uint64(64 - pos))
            bits[(base + (b & np.uint64(511))).astype(np.int64)] = True
    body: bytes = np.packbits(bits, bitorder="little").tobytes()
    return _HEADER.pack(version, probes, num_blocks) + body

"""Appending large uncompressed data blocks to a growing SST without whole-block temporaries.

The plain way to add a block (``SstBuilder._append``) encodes its payload
(``block.encode_columns``: the values joined, then joined again with the head),
frames it (``coding.framed``: the CRC) and appends it to the object. A WAL block
holds a whole write batch -- 100 values of 4 KiB are a 400 KiB block -- so that
makes two temporaries of the block's size. Where the allocator serves such sizes
with fresh mappings (a fixed mmap threshold, ``Settings.malloc_mmap_threshold_bytes``,
which the benchmarks use), each temporary is faulted in page by page and
unmapped again: two to three times the cost of the copies themselves (issue 30
item 5, the overwrite of 4 KiB values).

:func:`append_columns` instead appends the block in pieces: its head (count,
offsets, sequence numbers, kinds, keys), then its values joined in runs of at
most :data:`PIECE_BYTES` (a size the allocator recycles), then the trailer; the
CRC is extended over the same pieces. Small blocks, and blocks of many small
values, take the plain way: there a join per piece costs more than the copy it
saves. :func:`append_singles` appends runs of one-entry blocks (values of a
block or more: an L0 SST of 4 KiB values) column by column: one copy of each
value and no Python frame per block (10-15% off such an L0 build).

The bytes are exactly those of ``framed(encode_columns(...), CODEC_NONE)`` and
``framed(encode_single(...), CODEC_NONE)``: the format is unchanged
(``tests/format/test_block_append.py`` compares them).
"""

from __future__ import annotations

import io
import struct
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from functools import reduce
from itertools import accumulate, chain, repeat
from operator import add

import google_crc32c

from .coding import CODEC_NONE, TRAILER_SIZE, crc32c, pack_u32s, pack_u64s

PIECE_BYTES = 64 * 1024
"""Values are joined in runs of at most this many bytes (one value may be larger)."""
MIN_VALUE_BYTES = 128 * 1024
"""Blocks whose values total less go the plain way: their temporaries are small."""
MIN_MEAN_VALUE = 256
"""Nor blocks of smaller values on average: a piece then holds hundreds of them and
the plain way's single join is cheaper."""

_U32 = struct.Struct("<I")
_TRAILER_HEAD = struct.Struct("<IB")
_ONE_HEAD = struct.Struct("<IIIIIQB")
"""A one-entry block's head (``block.encode_single``): count 1, key offsets 0 and the
key's length, value offsets 0 and the value's length, seq, kind."""
_extend = google_crc32c.extend
"""The C function itself (``coding.crc32c_extend`` is a Python frame around it), mapped
over columns below."""


def worth_it(n: int, value_bytes: int) -> bool:
    """Whether a block of ``n`` entries whose values total ``value_bytes`` takes
    :func:`append_columns` (else the plain way)."""
    return value_bytes >= MIN_VALUE_BYTES and value_bytes >= MIN_MEAN_VALUE * n


def append_columns(
    data: bytearray | io.BytesIO,
    keys: Sequence[bytes],
    seqs: array[int],
    kinds: bytes,
    vals: Sequence[bytes],
    key_lens: Sequence[int],
    val_lens: Sequence[int],
) -> int:
    """Append ``framed(encode_columns(keys, seqs, kinds, vals, key_lens, val_lens),
    CODEC_NONE)`` to ``data`` (a ``bytearray``, or a reused buffer written at its
    position: ``format.out_buffers``) in pieces; its stored size.

    Every value must be ``bytes`` (the CRC function takes nothing else); a
    ``TypeError`` is raised before anything is appended otherwise.
    """
    head = b"".join(
        (
            _U32.pack(len(keys)),
            pack_u32s(array("I", accumulate(key_lens, initial=0))),
            pack_u32s(array("I", accumulate(val_lens, initial=0))),
            pack_u64s(seqs),
            kinds,
            b"".join(keys),
        )
    )
    cum = list(accumulate(val_lens))
    n = len(cum)
    pieces = [head]
    lo = 0
    base = 0
    while lo < n:
        hi = max(lo + 1, bisect_left(cum, base + PIECE_BYTES, lo))
        pieces.append(b"".join(vals[lo:hi]) if hi - lo > 1 else vals[lo])
        base = cum[hi - 1]
        lo = hi
    raw = len(head) + (cum[-1] if n else 0)
    trailer = _TRAILER_HEAD.pack(raw, CODEC_NONE)
    crc = _extend(reduce(_extend, pieces[1:], crc32c(head)), trailer)
    write = data.extend if isinstance(data, bytearray) else data.write
    for p in pieces:
        write(p)
    write(trailer)
    write(_U32.pack(crc))
    return raw + TRAILER_SIZE


def append_singles(
    data: bytearray | io.BytesIO,
    keys: Sequence[bytes],
    seqs: Sequence[int],
    kinds: bytes,
    vals: Sequence[bytes],
) -> list[int]:
    """Append one block per entry, each ``framed(encode_single(k, s, t, v), CODEC_NONE)``,
    to ``data``; their stored sizes.

    Every value must be ``bytes``; a ``TypeError`` is raised before anything is
    appended otherwise.
    """
    heads = list(
        map(
            add,
            map(_ONE_HEAD.pack, repeat(1), repeat(0), map(len, keys), repeat(0), map(len, vals), seqs, kinds),
            keys,
        )
    )
    raws = list(map(add, map(len, heads), map(len, vals)))
    trailers = list(map(_TRAILER_HEAD.pack, raws, repeat(CODEC_NONE)))
    crcs = list(map(_extend, map(_extend, map(crc32c, heads), vals), trailers))
    tails = map(add, trailers, map(_U32.pack, crcs))
    write = data.extend if isinstance(data, bytearray) else data.write
    deque(map(write, chain.from_iterable(zip(heads, vals, tails))), 0)
    return [r + TRAILER_SIZE for r in raws]

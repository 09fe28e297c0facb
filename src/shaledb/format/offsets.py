"""Packing a column's u32 offsets (a block's key and value offsets, ``format/block.py``).

Offsets are the running sum of the entries' lengths, built in CPython one
Python int per entry (``accumulate`` into an ``array``): about a quarter of
encoding a WAL object of small entries (docs/benchmarks.md, "fillseq in
batches (issue 30 item 5, second attempt)"). A column whose entries are all
of one width -- keys nearly always, often values too -- has the offsets
``0, w, 2w, ...``, the same bytes for every block of that width and count:
those are packed once and reused. The bytes are the same either way.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from itertools import accumulate

from .coding import pack_u32s

FIXED_MAX_ENTRIES = 1024
"""Longer fixed-width columns are packed each time (a cached entry is 4 bytes per offset)."""
_FIXED_CACHE_MAX = 256
_fixed: dict[tuple[int, int], bytes] = {}
"""``(width, count)`` -> the packed offsets of ``count`` entries of ``width`` bytes."""


def packed_offsets(lens: Iterable[int]) -> bytes:
    """The u32 offsets ``0, l0, l0 + l1, ...`` of entries of lengths ``lens``, packed
    little-endian (``len(lens) + 1`` of them). OverflowError past 4 GiB, as ``array``."""
    if type(lens) is list and 1 < len(lens) <= FIXED_MAX_ENTRIES and lens.count(lens[0]) == len(lens):
        return fixed_offsets(lens[0], len(lens))
    return pack_u32s(array("I", accumulate(lens, initial=0)))


def fixed_offsets(width: int, count: int) -> bytes:
    """:func:`packed_offsets` of ``count`` entries of ``width`` bytes each (cached)."""
    got = _fixed.get((width, count))
    if got is None:
        offsets = array("I", range(0, width * count + 1, width) if width else [0] * (count + 1))
        got = pack_u32s(offsets)
        if count <= FIXED_MAX_ENTRIES:
            if len(_fixed) >= _FIXED_CACHE_MAX:
                _fixed.clear()
            _fixed[(width, count)] = got
    return got

"""A scan's first touch of a block: its rows read in place from the read-ahead chunk.

After a reopen, short scans spread over an SST meet most blocks once (1,000 random
100-key scans of the benchmark touch 2,700 of 5,556 blocks, 3.7 per scan). Decoding
each such block whole and caching it cost a cold scan much more than the decode
(issue 30, third attempt): every key and value of the block became an object kept in
the block cache, the surviving containers drove the cyclic garbage collector (in the
benchmark's process a young collection every ~40 scans and a full one of ~20 ms in the
first thousand: ~30 µs per scan), and the fresh memory was faulted in page by page.
So a scan that meets a block not in the block cache, whose read-ahead chunk is
cached, checks the stored block where it lies in the chunk
(``format.block.stored_shape``: header, trailer, CRC32C over every byte, kinds) and
unpacks only the rows it hands out; nothing is cached for the block. The third scan
to meet the block decodes and caches it the usual way (``SstReader._load``), so a
range scanned again and again is read from decoded blocks as before: reading a
block in place costs about half of decoding and caching it, so after two reads in
place a block that keeps being met has paid for its decode (the rent-or-buy rule;
docs/benchmarks.md, "100-key scans (issue 30 item 5, third attempt)").

Only blocks of a fixed-width shape seen before qualify (every full block of an SST of
fixed-width keys and values); anything else -- and any block that fails a check, so
that the damage is reported with the usual re-read from the store -- takes the
decoding path.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from ..format.block import rows_struct, stored_shape

if TYPE_CHECKING:
    from ..format.block import _Shape
    from .sstable import Chunk, SstReader

IN_PLACE_READS = 2
"""Scans that read a block in place before the next one decodes and caches it."""

InChunk = tuple[bytes, int, "_Shape"]
"""A stored block where it lies: the chunk, the block's offset in it, its shape."""


def block_in_chunk(r: SstReader, i: int) -> InChunk | None:
    """Block ``i`` of ``r`` in its cached read-ahead chunk, checked; None when the chunk is
    not cached, the block is not of a known fixed-width shape, or a check fails."""
    ra = r.read_ahead
    offs = r.index.offsets
    start = offs[i]
    size = offs[i + 1] - start
    if ra <= size:
        return None
    cs = start - start % ra
    ckey = (r.id, "chunk", cs // ra)
    entries = r.entries
    item = entries.get(ckey)
    if item is None or start + size - cs > item[1]:
        return None
    buf: bytes = item[0]
    shape = stored_shape(buf, start - cs, size)
    if shape is None:
        return None
    try:
        entries.move_to_end(ckey)
    except KeyError:  # evicted meanwhile: still ours to read, once
        pass
    cache = r.cache
    cache.misses += 1  # (counted as ``SstReader._load`` counts a block found in its chunk)
    cache.hits += 1
    return buf, start - cs, shape


def keys_of(at: InChunk) -> tuple[bytes, ...]:
    """All keys of the block (a scan's first block is searched for its start key)."""
    buf, off, shape = at
    keys: tuple[bytes, ...] = shape[6].unpack_from(buf, off + shape[5])
    return keys


def rows_of(at: InChunk, lo: int, hi: int, keys: tuple[bytes, ...] | None) -> Chunk:
    """Columns of rows ``[lo, hi)`` of the block (``keys``: all its keys, if split already)."""
    buf, off, shape = at
    _h, _t, n, sp, kp, bp, ks, vs, val_off, klen = shape
    seqs = array("Q")
    seqs.frombytes(buf[off + sp + 8 * lo : off + sp + 8 * hi])
    kinds = buf[off + kp + lo : off + kp + hi]
    vals: tuple[bytes, ...]
    if hi - lo == n:  # a whole block: the shape's own structs
        vals = vs.unpack_from(buf, off + bp + klen)
        return (ks.unpack_from(buf, off + bp) if keys is None else keys), seqs, kinds, vals
    kw = klen // n
    vw = val_off[-1] // n
    if keys is None:
        ksl: tuple[bytes, ...] = rows_struct(kw, hi - lo).unpack_from(buf, off + bp + lo * kw)
    else:
        ksl = keys[lo:hi]
    vals = rows_struct(vw, hi - lo).unpack_from(buf, off + bp + klen + lo * vw)
    return ksl, seqs, kinds, vals

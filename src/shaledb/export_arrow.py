"""Reading a checkpoint's key range straight into Arrow arrays (the Spark reader's fast path).

:func:`shaledb.export.read_part` hands out Python lists, one bytes object
per key and per value; building those and then Arrow arrays from them was
most of a checkpoint read's CPU. When a part reads a single sorted run and
no WAL (a bulk-loaded or compacted database, the common case for analytics)
nothing needs merging: a run holds one version per key. Then the stored
blocks of a chunk are unframed (CRC32C checked), their layout
(``format/block.py``: count, key and value offsets, sequence numbers, kinds,
key and value blobs) is read with numpy, validated as ``decode_block``
validates it, and the chunk's keys and values become Arrow arrays over the
joined blobs: no Python object per row. Tombstones (kind 1) are filtered
out with a mask; a chunk holding anything else (metadata, expiry, pointers)
goes through the general path, as does every part with more than one source.

Needs pyarrow and numpy (the spark extra).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from . import paths
from .clock import SYSTEM_CLOCK, Clock
from .errors import CorruptionError
from .export import ReadPart, _stack, _wal_columns, read_part, values_and_metadata
from .format.block import _BAD_KIND, MAX_ENTRIES, decode_block
from .format.coding import unframe_block
from .format.row import KIND_TOMBSTONE
from .manifest.model import SstInfo
from .settings import MiB
from .sstable import read_sst_meta
from .store.base import ObjectStore

_U32 = struct.Struct("<I")


@dataclass
class ArrowChunk:
    """Live entries in key order as Arrow arrays (``metadata`` None: no entry has any)."""

    keys: Any
    values: Any
    seqs: Any
    metadata: Any | None

    def __len__(self) -> int:
        return len(self.keys)


def blob_array(items: list[bytes], kind: str = "binary") -> Any:
    """An Arrow binary (or string) array over one joined buffer of ``items``."""
    import numpy as np

    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    return _from_lengths(lengths, b"".join(items), kind)


def _from_lengths(lengths: Any, blob: bytes, kind: str) -> Any:
    import numpy as np
    import pyarrow as pa

    offs = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offs[1:])
    if offs[-1] >= 2**31:
        raise CorruptionError("a chunk of more than 2 GiB")
    typ = pa.string() if kind == "string" else pa.binary()
    arr = pa.Array.from_buffers(
        typ, len(lengths), [None, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(blob)]
    )
    if kind == "string":
        arr.validate(full=True)
    return arr


class _RunReader:
    """Blocks of one sorted run within ``[lo, hi)``, read ahead in large ranged GETs."""

    def __init__(
        self, store: ObjectStore, ssts: tuple[SstInfo, ...], lo: bytes | None, hi: bytes | None
    ) -> None:
        self.store, self.ssts, self.lo, self.hi = store, ssts, lo, hi

    def chunks(self, chunk_bytes: int) -> Iterator[list[tuple[bytes, int, int]]]:
        """Lists of ``(stored block, first row, end row)``, about ``chunk_bytes`` each."""
        out: list[tuple[bytes, int, int]] = []
        size = 0
        last_sst = len(self.ssts) - 1
        for si, info in enumerate(self.ssts):
            meta = read_sst_meta(self.store, info)
            idx = meta.index
            nblocks = len(idx.keys)
            a = 0 if self.lo is None else bisect_left(idx.keys, self.lo)
            b = nblocks if self.hi is None else min(nblocks, bisect_left(idx.keys, self.hi) + 1)
            i = a
            path = paths.sst_path(info.id)
            while i < b:
                j = i + 1
                while j < b and idx.offsets[j + 1] - idx.offsets[i] <= chunk_bytes:
                    j += 1
                start = idx.offsets[i]
                data = self.store.get_range(path, start, idx.offsets[j])
                if len(data) != idx.offsets[j] - start:
                    raise CorruptionError(f"short read at {start}", path)
                for k in range(i, j):
                    s, e = idx.offsets[k] - start, idx.offsets[k + 1] - start
                    first = -1 if si == 0 and k == a and self.lo is not None else 0  # -1: find lo
                    end = -1 if si == last_sst and k == b - 1 and self.hi is not None else 0
                    out.append((data[s:e], first, end))
                    size += e - s
                if size >= chunk_bytes:
                    yield out
                    out, size = [], 0
                i = j
        if out:
            yield out


def _chunk(
    blocks: list[tuple[bytes, int, int]], lo: bytes | None, hi: bytes | None, path: str
) -> ArrowChunk | None:
    """One chunk as arrays, or None if an entry needs the general path.

    Per block only the framing is checked and the layout sliced (a few
    microseconds); offsets, blob sizes and kinds are validated for the whole
    chunk at once, with the checks ``decode_block`` makes.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kos: list[memoryview] = []
    vos: list[memoryview] = []
    seqs: list[memoryview] = []
    kinds: list[memoryview] = []
    kbl: list[memoryview] = []
    vbl: list[memoryview] = []
    ns: list[int] = []
    front = back = 0
    for stored, first, end in blocks:
        try:
            payload = unframe_block(stored, "SST data block")
            size = len(payload)
            if size < 4:
                raise CorruptionError("block shorter than its entry count")
            (n,) = _U32.unpack_from(payload, 0)
            if n > MAX_ENTRIES or 12 + 17 * n > size:
                raise CorruptionError(f"block claims {n} entries in {size} bytes")
            ko_end, vo_end = 8 + 4 * n, 12 + 8 * n
            seq_end, kind_end = vo_end + 8 * n, vo_end + 9 * n
            (klen,) = _U32.unpack_from(payload, ko_end - 4)
            (vlen,) = _U32.unpack_from(payload, vo_end - 4)
            if kind_end + klen + vlen != size:
                raise CorruptionError(f"block blobs are {size - kind_end} bytes, offsets say {klen + vlen}")
            if first < 0 or end < 0:  # the range's first or last block: find lo / hi among its keys
                keys = decode_block(payload).keys
                if first < 0 and lo is not None:
                    front = bisect_left(keys, lo)
                if end < 0 and hi is not None:
                    back = n - bisect_left(keys, hi)
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        mv = memoryview(payload)
        kos.append(mv[4:ko_end])
        vos.append(mv[ko_end:vo_end])
        seqs.append(mv[vo_end:seq_end])
        kinds.append(mv[seq_end:kind_end])
        kbl.append(mv[kind_end : kind_end + klen])
        vbl.append(mv[kind_end + klen : size])
        ns.append(n)
    kind = b"".join(kinds)
    if 1 in kind.translate(_BAD_KIND):
        raise CorruptionError("block has an unknown entry kind", path)
    if kind.count(0) + kind.count(KIND_TOMBSTONE) != len(kind):
        return None  # metadata, expiry or pointers: the general path decodes those
    counts = np.array(ns, dtype=np.int64)
    ends = np.cumsum(counts + 1)
    starts = ends - counts - 1
    klens = _lengths(b"".join(kos), starts, ends, [len(b) for b in kbl], path)
    vlens = _lengths(b"".join(vos), starts, ends, [len(b) for b in vbl], path)
    keys = _from_lengths(klens, b"".join(kbl), "binary")
    values = _from_lengths(vlens, b"".join(vbl), "binary")
    seq = pa.array(np.frombuffer(b"".join(seqs), dtype="<u8").astype(np.int64))
    total = len(keys)
    if front or back:
        keys, values, seq = (a.slice(front, total - front - back) for a in (keys, values, seq))
        kind = kind[front : total - back]
    if kind.count(0) != len(kind):  # drop tombstones
        live = pa.array(np.frombuffer(kind, dtype=np.uint8) == 0)
        keys, values, seq = pc.filter(keys, live), pc.filter(values, live), pc.filter(seq, live)
    return ArrowChunk(keys, values, seq, None)


def _lengths(offsets: bytes, starts: Any, ends: Any, blobs: list[int], path: str) -> Any:
    """Entry lengths from several blocks' offset arrays, checked like ``check_offsets``."""
    import numpy as np

    off = np.frombuffer(offsets, dtype="<u4").astype(np.int64)
    if (off[starts] != 0).any() or (off[ends - 1] != np.array(blobs, dtype=np.int64)).any():
        raise CorruptionError("block offsets do not span the data", path)
    lengths = np.diff(off)
    keep = np.ones(len(lengths), dtype=bool)
    keep[ends[:-1] - 1] = False  # the step from one block's last offset to the next block's 0
    lengths = lengths[keep]
    if len(lengths) and lengths.min() < 0:
        raise CorruptionError("block offsets decrease", path)
    return lengths


def read_part_arrow(
    part: ReadPart,
    url: str | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    chunk_bytes: int = 8 * MiB,
    clock: Clock | None = None,
) -> Iterator[ArrowChunk]:
    """Live entries of ``part`` as Arrow arrays, in key order (see module docstring)."""
    clock = clock or SYSTEM_CLOCK
    st = _stack(url, store, store_options, clock)
    single_run = len(part.sources) == 1 and part.l0_count == 0 and not any(s.db for s in part.sources[0])
    # The WAL range usually holds only writers' empty fencing objects; anything in it is newer data.
    if not single_run or (part.wal_ids and _wal_columns(st, part)[0]):
        yield from _general(part, url, st, store_options, clock)
        return
    reader = _RunReader(st, part.sources[0], part.lo, part.hi)
    where = paths.sst_path(part.sources[0][0].id)
    for blocks in reader.chunks(chunk_bytes):
        got = _chunk(blocks, part.lo, part.hi, where)
        if got is None:  # metadata, expiry or pointers in this chunk: the general path for its range
            lo = _first_key(blocks, part.lo)
            hi = _after_last_key(blocks, part.hi)
            sub = replace(part, lo=lo, hi=hi)
            yield from _general(sub, url, st, store_options, clock)
        elif len(got):
            yield got


def _first_key(blocks: list[tuple[bytes, int, int]], lo: bytes | None) -> bytes | None:
    keys = decode_block(unframe_block(blocks[0][0], "SST data block")).keys
    k = keys[0] if keys else None
    return lo if lo is not None and (k is None or k < lo) else k


def _after_last_key(blocks: list[tuple[bytes, int, int]], hi: bytes | None) -> bytes | None:
    keys = decode_block(unframe_block(blocks[-1][0], "SST data block")).keys
    if not keys:
        return hi
    k = keys[-1] + b"\x00"
    return hi if hi is not None and k > hi else k


def _general(
    part: ReadPart,
    url: str | None,
    store: ObjectStore | None,
    store_options: Mapping[str, Any] | None,
    clock: Clock,
) -> Iterator[ArrowChunk]:
    import pyarrow as pa

    for keys, seqs, kinds, pays in read_part(
        part, url, store=store, store_options=store_options, clock=clock
    ):
        values, metas = values_and_metadata(kinds, pays)
        yield ArrowChunk(
            blob_array(keys),
            blob_array(values),
            pa.array(seqs, pa.int64()),
            None if metas is None else pa.array(metas, pa.binary()),
        )


__all__ = ["ArrowChunk", "blob_array", "read_part_arrow"]

"""The columnar fast path of :class:`~shaledb.bulk.ingest.parts.PartWriter`: Arrow arrays in, SSTs out.

``PartWriter.add`` hands Python lists to ``SstBuilder.add_many``, which costs
tens of microseconds of Python per 4 KiB block; at a hundred-odd bytes per
row that was most of a bulk load's CPU. Here the keys and values stay in
their Arrow buffers: order and duplicates are checked with Arrow compute
kernels, block and SST boundaries come from numpy cumulative sums using the
same rules as ``SstBuilder.add_many`` and ``SstCutter.add``, and each
block's payload (``format/block.py``: counts, offsets, sequence numbers,
kinds, key and value blobs) is joined from slices of those buffers. The
bytes are the ones the list path writes for the same rows in one chunk
(``tests/ingest/test_ingest_arrow.py`` checks that), so nothing downstream
can tell the paths apart. Only plain values take this path (no metadata).

It appends finished blocks with ``SstBuilder.append_blocks``, which keeps the
same bookkeeping as the builder's own blocks (the byte-identity test checks
that).

Needs pyarrow and numpy (the spark extra); the list path needs neither.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgument
from ...format.bloom import WORDMIX, build_filter, filter_from_column, key_hash, wordmix_column
from ...format.coding import crc32c_extend_view, framed
from ...format.sst import ENTRY_OVERHEAD, SstBuilder
from ...keys import MAX_KEY_BYTES, MAX_VALUE_BYTES

if TYPE_CHECKING:
    from .parts import PartWriter

_U32 = struct.Struct("<I")
_NO_META = 0xFFFFFFFF

WINDOW_BLOCKS = 256
"""Blocks per numpy pass of :meth:`_Emitter.blocks` (about 1 MiB of 4 KiB blocks)."""


def bloom_filter_bytes(
    keys: Sequence[bytes], bits_per_key: int, hashes: Sequence[tuple[Any, Any]] = ()
) -> bytes:
    """The filter of ``keys`` plus keys already hashed (``hashes``: ``(lo, hi)`` arrays
    from ``format.bloom.wordmix_column``).

    Built whole-column with numpy as a version-2 (wordmix) filter: hashing is
    a few numpy passes per key word instead of a C call per key, which was a
    third of a bulk load's CPU. Without numpy (the list path of a core
    install), a version-1 filter, like every other builder's.
    """
    try:
        import numpy as np
        import pyarrow as pa
    except ImportError:  # pragma: no cover - numpy and pyarrow come with the spark extra
        return build_filter(map(key_hash, keys), len(keys), bits_per_key)

    parts = [*hashes, wordmix_column(*binary_buffers(pa.array(keys, pa.binary())))]
    lo = np.concatenate([p[0] for p in parts])
    hi = np.concatenate([p[1] for p in parts])
    return filter_from_column(lo, hi, bits_per_key, WORDMIX)


def contiguous(col: Any) -> Any:
    """``col`` (an Arrow array or chunked array) as one array.

    ``ChunkedArray.combine_chunks`` copies even a single chunk (a take's
    output, a one-batch table): tens of milliseconds per column of a bulk
    load's part, on a machine where each fresh MB costs 2.5 ms
    (docs/benchmarks.md, "page cost").
    """
    import pyarrow as pa

    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _binary(arr: Any) -> Any:
    """``arr`` as one contiguous ``binary`` array (int32 offsets)."""
    import pyarrow as pa

    arr = contiguous(arr)
    if (
        pa.types.is_string(arr.type)
        or pa.types.is_large_string(arr.type)
        or pa.types.is_large_binary(arr.type)
    ):
        arr = arr.cast(pa.binary())
    if not pa.types.is_binary(arr.type):
        raise InvalidArgument(f"ingest columns must be binary or string arrays, got {arr.type}")
    if arr.null_count:
        raise InvalidArgument("ingest keys and values must not be null")
    return arr


def binary_buffers(arr: Any) -> tuple[Any, memoryview]:
    """The n + 1 offsets (int64, into the data buffer) and the data of a binary array."""
    import numpy as np

    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + n + 1)[arr.offset :]
    offs = offs.astype(np.int64)
    data = arr.buffers()[2]
    mv = memoryview(data) if data is not None else memoryview(b"")
    return offs, mv


def sort_indices(keys: Any) -> Any:
    """The stable ascending order of a binary (or string) column.

    Keys of one width of at most 32 bytes, a multiple of 8 (hashes, UUIDs,
    the benchmark's 16-byte keys), sort as big-endian u64 words. When the
    first words are all distinct (random or hashed keys nearly always are),
    they alone decide the order, and numpy's unstable argsort of one u64
    column (vectorized introsort) is about 9x faster than a stable sort of
    every word; stability cannot matter when no two keys tie. Otherwise
    ``numpy.lexsort`` of all the words, still faster than Arrow's sort of
    binary values.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_binary(keys.type) or len(keys) < 2:
        return pc.array_sort_indices(keys)
    offs, data = binary_buffers(keys)
    width = int(offs[1] - offs[0])
    if 0 < width <= 32 and width % 8 == 0 and bool((np.diff(offs) == width).all()):
        n, m = len(keys), width // 8
        words = np.frombuffer(data, dtype=">u8", count=n * m, offset=int(offs[0])).reshape(n, m)
        first = words[:, 0].astype(np.uint64)
        order = np.argsort(first)
        ranked = first[order]
        if not bool((ranked[1:] == ranked[:-1]).any()):
            return order
        return np.lexsort(words.T[::-1])
    return pc.array_sort_indices(keys)


def _dedupe(w: PartWriter, keys: Any, values: Any) -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(keys)
    if n < 2:
        return keys, values
    nxt, prv = keys.slice(1), keys.slice(0, n - 1)
    if pc.any(pc.less(nxt, prv)).as_py():
        i = pc.index(pc.less(nxt, prv), True).as_py()
        raise InvalidArgument(
            f"ingest part {w.partition}: keys are not in ascending order "
            f"({keys[i].as_py()!r:.60} before {keys[i + 1].as_py()!r:.60}); sort each partition by key"
        )
    eq = pc.equal(nxt, prv)
    if not pc.any(eq).as_py():
        return keys, values
    if w.plan.duplicates == "error":
        i = pc.index(eq, True).as_py()
        raise InvalidArgument(
            f"ingest part {w.partition}: key {keys[i].as_py()!r:.80} appears more than once "
            "(to keep one: duplicates='last' in Python; in Spark, "
            "options on_duplicate and order_by)"
        )
    keep = pc.invert(pa.concat_arrays([eq, pa.array([False])]))  # the last of equal keys wins
    return keys.filter(keep), values.filter(keep)


def add_arrow(w: PartWriter, keys: Any, values: Any) -> None:
    """``w.add`` for Arrow arrays (see module docstring)."""
    import numpy as np

    keys, values = _binary(keys), _binary(values)
    n = len(keys)
    if len(values) != n:
        raise InvalidArgument("key and value columns differ in length")
    if not n:
        return
    w.flush_carry()
    keys, values = _dedupe(w, keys, values)
    n = len(keys)
    koffs, kmv = binary_buffers(keys)
    voffs, vmv = binary_buffers(values)
    klen = np.diff(koffs)
    vlen = np.diff(voffs)
    if klen.min() < 1 or klen.max() > MAX_KEY_BYTES or vlen.max() > MAX_VALUE_BYTES:
        raise InvalidArgument(
            f"ingest keys must be 1..{MAX_KEY_BYTES} bytes, values at most {MAX_VALUE_BYTES}"
        )
    first, last = bytes(kmv[koffs[0] : koffs[1]]), bytes(kmv[koffs[-2] : koffs[-1]])
    if w._prev is not None and first <= w._prev:
        raise InvalidArgument(
            f"ingest part {w.partition}: a chunk starts at {first!r:.60}, not after the previous "
            f"chunk's last key {w._prev!r:.60} (chunks must ascend and not split equal keys)"
        )
    if w._first is None:
        w._first = first
    _fingerprint(w, kmv, koffs, klen, vmv, voffs, vlen, n)
    w._rows += n
    w._prev = last
    if w.write:
        hashes = wordmix_column(koffs, kmv) if w.plan.bloom_bits_per_key else None
        _Emitter(w, kmv, koffs, vmv, voffs, klen + vlen, hashes).run()


def _fingerprint(
    w: PartWriter, kmv: memoryview, koffs: Any, klen: Any, vmv: memoryview, voffs: Any, vlen: Any, n: int
) -> None:
    import numpy as np

    fp = w._fp
    chunks = (
        kmv[koffs[0] : koffs[-1]],
        klen.astype("<u4").tobytes(),
        vmv[voffs[0] : voffs[-1]],
        vlen.astype("<u4").tobytes(),
        b"",
        np.full(n, _NO_META, dtype="<u4").tobytes(),
    )
    for i, c in enumerate(chunks):
        fp.crcs[i] = crc32c_extend_view(fp.crcs[i], memoryview(c))
        fp.lens[i] += len(c)


class _Emitter:
    """Cuts rows into SSTs (:class:`~shaledb.engine.sstable.SstSplitter`) and blocks (``add_many``'s rule)."""

    def __init__(
        self,
        w: PartWriter,
        kmv: memoryview,
        koffs: Any,
        vmv: memoryview,
        voffs: Any,
        kv_len: Any,
        hashes: tuple[Any, Any] | None,
    ) -> None:
        import numpy as np

        self.w = w
        self.kmv, self.koffs, self.vmv, self.voffs = kmv, koffs, vmv, voffs
        self.n = n = len(kv_len)
        self.cum_entry: Any = np.cumsum(kv_len + ENTRY_OVERHEAD)  # SST cuts (bisected, not listed: 15 ms)
        self.cum_kv = np.cumsum(kv_len)  # block cuts
        self.seq_bytes = np.full(n, w.plan.seq, dtype="<u8").tobytes()
        self.kinds = bytes(n)
        self.hashes = hashes

    def run(self) -> None:
        out = self.w._data

        def fill(b: SstBuilder, lo: int, hi: int) -> None:
            self.blocks(b, lo, hi)
            if self.hashes is not None:
                out.bloom_hashes.append((self.hashes[0][lo:hi], self.hashes[1][lo:hi]))

        out.splitter.place(self.cum_entry, self.n, fill)

    def blocks(self, b: SstBuilder, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` as blocks, cut where ``SstBuilder.add_many`` would cut them.

        The cut points come first; then the blocks go to the builder a window of
        ``WINDOW_BLOCKS`` at a time (:meth:`_window`): whole-SST numpy passes made
        temporaries of megabytes each, out of cache by their next use; windows
        took the builder from 0.099 to 0.072 s per 500,000 rows
        (docs/benchmarks.md, stop 22).
        """
        cum = self.cum_kv
        base = int(cum[lo - 1]) if lo else 0
        bs = b.block_size
        cuts = [lo]
        start = lo
        while start < hi:
            # cum ascends and cum[start - 1] == base < base + bs, so the search lands at or past start.
            end = min(hi, int(cum.searchsorted(base + bs, side="left")) + 1)
            cuts.append(end)
            base = int(cum[end - 1])
            start = end
        for at in range(0, len(cuts) - 1, WINDOW_BLOCKS):
            self._window(b, cuts[at : at + WINDOW_BLOCKS + 1])

    def _window(self, b: SstBuilder, cuts: list[int]) -> None:
        """The blocks between consecutive ``cuts``: every block's rebased key and value
        offsets, buffer bounds and last key in numpy passes, so a block costs a join
        and a frame in Python and nothing else; the builder takes them in one call."""
        import numpy as np

        bounds = np.array(cuts, dtype=np.int64)
        firsts, counts = bounds[:-1], np.diff(bounds)
        spans = counts + 1  # a block of n rows has n + 1 offsets
        where = np.zeros(len(spans) + 1, dtype=np.int64)
        np.cumsum(spans, out=where[1:])
        rows = np.repeat(firsts - where[:-1], spans) + np.arange(where[-1])  # row of each offset
        ko, vo = self.koffs, self.voffs
        kbase = np.repeat(ko[firsts], spans)
        vbase = np.repeat(vo[firsts], spans)
        krel = (ko[rows] - kbase).astype("<u4").tobytes()
        vrel = (vo[rows] - vbase).astype("<u4").tobytes()
        kc, vc, w4 = ko[bounds].tolist(), vo[bounds].tolist(), (4 * where).tolist()
        kmv, vmv, seqs, kinds, codec = self.kmv, self.vmv, self.seq_bytes, self.kinds, b.codec
        last_keys = [bytes(kmv[a:z]) for a, z in zip(ko[bounds[1:] - 1].tolist(), kc[1:])]
        pieces: list[bytes] = []
        stored: list[int] = []
        for j, m in enumerate(counts.tolist()):
            r0, r1, a, z = cuts[j], cuts[j + 1], w4[j], w4[j + 1]
            body, tail = framed(
                b"".join(
                    (
                        _U32.pack(m),
                        krel[a:z],
                        vrel[a:z],
                        seqs[8 * r0 : 8 * r1],
                        kinds[r0:r1],
                        kmv[kc[j] : kc[j + 1]],
                        vmv[vc[j] : vc[j + 1]],
                    )
                ),
                codec,
            )
            pieces += (body, tail)
            stored.append(len(body) + len(tail))
        b.append_blocks(
            pieces,
            stored=stored,
            last_keys=last_keys,
            entries=counts.tolist(),
            first_key=bytes(kmv[kc[0] : int(ko[cuts[0] + 1])]),
            seq=self.w.plan.seq,
            raw_key_bytes=kc[-1] - kc[0],
            raw_value_bytes=vc[-1] - vc[0],
        )


__all__ = ["add_arrow", "binary_buffers", "contiguous", "sort_indices"]

"""Sorted string tables (SSTs) and WAL SSTs: one format, two orderings.

Object layout::

    [data block 0] ... [data block n-1] [filter block] [index block] [props block] [footer]

Every block is a stored block (``coding.frame_block``: payload, raw length,
codec, CRC32C). A table SST holds entries sorted by key (newest version first
when a key repeats), a bloom filter, and an index keyed by each block's last
key. A WAL SST holds entries in sequence order, cut into blocks only between
write batches, no filter, and an index keyed by each block's first sequence
number (8 bytes big-endian). The footer is fixed-size so a reader finds
everything from one read of the object's tail::

    u64 index_off  u32 index_len
    u64 filter_off u32 filter_len     (filter_len 0: no filter)
    u64 props_off  u32 props_len
    u16 format_version  u16 flags  u32 crc32c(footer bytes before it)
    8 bytes magic "SHALESST"

See docs/format/sst.md for the field tables.
"""

from __future__ import annotations

import io
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, islice, pairwise
from operator import add

from ..errors import CorruptionError
from .block import Block, decode_stored, encode_block, encode_columns, encode_single
from .block_append import append_columns, append_singles, worth_it
from .bloom import BloomFilter, build_filter_from_digests, key_digest
from .coding import (
    CODEC_NONE,
    check_offsets,
    crc32c,
    frame_block,
    framed,
    pack_u32s,
    pack_u64s,
    u32_array,
    u64_array,
    unframe_block,
)
from .range_dels import EMPTY, KIND_RANGE_DEL, Fragments, decode_range_dels, encode_range_dels
from .row import KIND_MERGE, KIND_TOMBSTONE, TYPE_MASK

MAGIC = b"SHALESST"
FORMAT_VERSION = 1
FORMAT_VERSION_2 = 2
"""Written only by SSTs that need it; every other SST stays version 1, readable by older
code. Version 2 may hold either or both of: range tombstones (docs/format/range-dels.md: a
table SST with a range-del block, footer flag ``FLAG_RANGE_DEL_BLOCK``, or a WAL SST with
range-tombstone entries) and merge entries (kind 3, ``format/merge.py``)."""
FORMAT_VERSION_RANGE_DELS = FORMAT_VERSION_2
MERGE_FORMAT_VERSION = FORMAT_VERSION_2
SUPPORTED_VERSIONS = (1, 2)
FLAG_RANGE_DEL_BLOCK = 0x0001
"""Footer flag (version 2): a range-del block lies between the index and the properties."""
SST_TABLE = 0
SST_WAL = 1
SST_JOURNAL = 2
"""A value-journal object (``journal/<ULID>.journal``): laid out like a WAL SST."""

_FOOTER = struct.Struct("<QIQIQIHHI8s")
FOOTER_SIZE = _FOOTER.size
_PROPS = struct.Struct("<BBHQQQQQQQQ16s")
_U32 = struct.Struct("<I")
_U64BE = struct.Struct(">Q")
ENTRY_OVERHEAD = 21  # two u32 offsets, u64 seq, u8 kind
_RANGE_KIND = bytes((KIND_RANGE_DEL,))
_IS_TOMBSTONE = bytes(int(k & TYPE_MASK == KIND_TOMBSTONE) for k in range(256))


@dataclass(frozen=True, slots=True)
class Footer:
    index_off: int
    index_len: int
    filter_off: int
    filter_len: int
    props_off: int
    props_len: int
    version: int
    flags: int = 0

    @property
    def meta_start(self) -> int:
        """Offset where the data blocks end and the metadata begins."""
        return self.filter_off if self.filter_len else self.index_off


@dataclass(frozen=True, slots=True)
class SstProps:
    """What an SST says about itself (also copied into the manifest)."""

    kind: int
    codec: int
    entries: int
    min_seq: int
    max_seq: int
    writer_epoch: int
    created_at_ms: int
    tombstones: int
    raw_key_bytes: int
    raw_value_bytes: int
    nonce: bytes
    first_key: bytes
    last_key: bytes
    range_dels: int = 0
    """Fragment-seq pairs in the range-del block (not stored in the properties block)."""


class SstIndex:
    """Block offsets and the search keys of each block."""

    __slots__ = ("keys", "offsets")

    def __init__(self, offsets: array[int], keys: list[bytes]) -> None:
        self.offsets = offsets
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def block_span(self, i: int) -> tuple[int, int]:
        return self.offsets[i], self.offsets[i + 1]

    def find(self, key: bytes) -> int:
        """First block whose last key is >= ``key`` (== len(self) if none)."""
        return bisect_left(self.keys, key)

    def find_le(self, key: bytes) -> int:
        """Last block whose last key is < ``key``, plus one: for reverse scans."""
        return bisect_right(self.keys, key)

    @property
    def nbytes(self) -> int:
        return 8 * len(self.offsets) + sum(map(len, self.keys)) + 64 * len(self.keys)


def _encode_props(p: SstProps) -> bytes:
    return b"".join(
        (
            _PROPS.pack(
                p.kind,
                p.codec,
                0,
                p.entries,
                p.min_seq,
                p.max_seq,
                p.writer_epoch,
                p.created_at_ms,
                p.tombstones,
                p.raw_key_bytes,
                p.raw_value_bytes,
                p.nonce,
            ),
            _U32.pack(len(p.first_key)),
            p.first_key,
            _U32.pack(len(p.last_key)),
            p.last_key,
        )
    )


def decode_props(payload: bytes) -> SstProps:
    n = len(payload)
    if n < _PROPS.size + 8:
        raise CorruptionError("SST properties are truncated")
    f = _PROPS.unpack_from(payload, 0)
    pos = _PROPS.size
    (fl,) = _U32.unpack_from(payload, pos)
    pos += 4
    if pos + fl + 4 > n:
        raise CorruptionError("SST first key runs past the properties")
    first = payload[pos : pos + fl]
    pos += fl
    (ll,) = _U32.unpack_from(payload, pos)
    pos += 4
    if pos + ll != n:
        raise CorruptionError("SST last key does not end the properties")
    last = payload[pos : pos + ll]
    kind = f[0]
    if kind not in (SST_TABLE, SST_WAL, SST_JOURNAL):
        raise CorruptionError(f"unknown SST kind {kind}")
    return SstProps(kind, f[1], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], first, last)


def encode_index(offsets: Sequence[int], keys: Sequence[bytes]) -> bytes:
    n = len(keys)
    key_off = array("I", accumulate(map(len, keys), initial=0))
    return b"".join((_U32.pack(n), pack_u64s(array("Q", offsets)), pack_u32s(key_off), b"".join(keys)))


def decode_index(payload: bytes, data_end: int) -> SstIndex:
    size = len(payload)
    if size < 4:
        raise CorruptionError("SST index is truncated")
    (n,) = _U32.unpack_from(payload, 0)
    if 4 + 12 * (n + 1) > size:
        raise CorruptionError(f"SST index claims {n} blocks in {size} bytes")
    offsets = u64_array(payload, 4, n + 1, "SST block offsets")
    pos = 4 + 8 * (n + 1)
    key_off = u32_array(payload, pos, n + 1, "SST index keys")
    pos += 4 * (n + 1)
    klen = key_off[-1]
    if pos + klen != size:
        raise CorruptionError("SST index key blob length mismatch")
    check_offsets(key_off, klen, "SST index keys")
    offs = offsets.tolist()
    if offs[0] != 0 or offs[-1] != data_end or offs != sorted(offs):
        raise CorruptionError("SST block offsets do not tile the data region")
    kb = payload[pos:]
    keys = [kb[a:b] for a, b in pairwise(key_off)]
    return SstIndex(offsets, keys)


def parse_footer(tail: bytes, object_size: int) -> Footer:
    """The footer from the last bytes of an object of ``object_size`` bytes."""
    if object_size < FOOTER_SIZE or len(tail) < FOOTER_SIZE:
        raise CorruptionError(f"object of {object_size} bytes is too short for an SST")
    raw = tail[-FOOTER_SIZE:]
    f = _FOOTER.unpack(raw)
    if f[9] != MAGIC:
        raise CorruptionError("SST magic mismatch (not an SST, or truncated)")
    if crc32c(raw[: FOOTER_SIZE - 12]) != f[8]:
        raise CorruptionError("SST footer checksum mismatch")
    if f[6] not in SUPPORTED_VERSIONS:
        raise CorruptionError(f"unsupported SST format version {f[6]}")
    flags = f[7] if f[6] >= FORMAT_VERSION_RANGE_DELS else 0
    if flags & ~FLAG_RANGE_DEL_BLOCK:
        raise CorruptionError(f"unknown SST footer flags 0x{flags:04x}")
    footer = Footer(f[0], f[1], f[2], f[3], f[4], f[5], f[6], flags)
    body_end = object_size - FOOTER_SIZE
    spans = [(footer.index_off, footer.index_len), (footer.props_off, footer.props_len)]
    if footer.filter_len:
        spans.append((footer.filter_off, footer.filter_len))
    for off, ln in spans:
        if ln == 0 or off + ln > body_end:
            raise CorruptionError("SST footer points outside the object")
    if not (footer.meta_start <= footer.index_off < footer.props_off):
        raise CorruptionError("SST metadata blocks are out of order")
    # Filter, index and props tile the tail up to the footer, so no byte escapes
    # a checksum: an object extended by a copy of its own last bytes (a retried
    # final upload part) ends with a valid footer and would otherwise decode.
    if (
        (footer.filter_len and footer.filter_off + footer.filter_len != footer.index_off)
        or (footer.index_off + footer.index_len != footer.props_off) != bool(flags)
        or footer.index_off + footer.index_len > footer.props_off
        or footer.props_off + footer.props_len != body_end
    ):
        raise CorruptionError("SST metadata blocks do not tile the object's tail")
    return footer


def encode_footer(f: Footer) -> bytes:
    head = _FOOTER.pack(
        f.index_off,
        f.index_len,
        f.filter_off,
        f.filter_len,
        f.props_off,
        f.props_len,
        f.version,
        f.flags,
        0,
        MAGIC,
    )
    crc = crc32c(head[: FOOTER_SIZE - 12])
    return head[: FOOTER_SIZE - 12] + struct.pack("<I", crc) + MAGIC


class SstBuilder:
    """Accumulates entries and produces one SST object.

    Table SSTs take entries in key order (``add`` or the columnar
    ``add_many``); WAL SSTs take entries in sequence order (``add_many``), and
    a batch (one sequence number) never spans two blocks, so salvage recovery
    can skip a damaged block without splitting a batch.
    """

    def __init__(
        self,
        *,
        kind: int = SST_TABLE,
        block_size: int = 4096,
        codec: int = CODEC_NONE,
        bloom_bits_per_key: int = 10,
        writer_epoch: int = 0,
        created_at_ms: int = 0,
        nonce: bytes = b"\0" * 16,
        out: io.BytesIO | None = None,
    ) -> None:
        """``out``: a buffer to build the object in from its start, reused from an earlier
        object (``format.out_buffers``: its pages are in already); finish with
        :meth:`finish_view`. Without it the object grows in a ``bytearray`` of its own."""
        if len(nonce) != 16:
            raise ValueError("nonce must be 16 bytes")
        self.kind = kind
        self.block_size = block_size
        self.codec = codec
        self.bloom_bits = bloom_bits_per_key if kind == SST_TABLE else 0
        self.writer_epoch = writer_epoch
        self.created_at_ms = created_at_ms
        self.nonce = nonce
        self._data: bytearray | io.BytesIO
        """The object so far: grown in place (or written into ``out``), so finishing
        needs no second copy."""
        if out is None:
            self._data = data = bytearray()
            self._write: Callable[[bytes | memoryview], object] = data.extend
        else:
            out.seek(0)
            self._data = out
            self._write = out.write
        self._offsets: list[int] = [0]
        self._ends: list[int] = []
        self._index_keys: list[bytes] = []
        self._digests = bytearray()
        self._entries = 0
        self._tombstones = 0
        self._merges = 0
        self._raw_k = 0
        self._raw_v = 0
        self._min_seq: int | None = None
        self._max_seq = 0
        self._first: bytes | None = None
        self._last = b""
        # Pending single entries (``add``).
        self._pk: list[bytes] = []
        self._ps: list[int] = []
        self._pt: list[int] = []
        self._pv: list[bytes] = []
        self._pbytes = 0
        self._range_dels: Fragments = EMPTY
        self._rd_first: bytes | None = None
        self._rd_last: bytes | None = None
        self._has_range_entries = False

    def set_range_dels(self, frags: Fragments, first_key: bytes | None, last_key: bytes | None) -> None:
        """Table SSTs: the range tombstones this SST carries (its range-del block), and the
        key range it claims (``first_key``/``last_key``, covering the tombstones)."""
        self._range_dels = frags
        self._rd_first = first_key
        self._rd_last = last_key

    @property
    def entries(self) -> int:
        return self._entries + len(self._pk)

    @property
    def last_key(self) -> bytes | None:
        """The last key added to a table SST (None before the first)."""
        if self._pk:
            return self._pk[-1]
        return None if self._first is None else self._last

    @property
    def estimated_size(self) -> int:
        return self._offsets[-1] + self._pbytes

    def add(self, key: bytes, seq: int, kind: int, payload: bytes) -> None:
        """One table entry; keys must arrive in order."""
        self._pk.append(key)
        self._ps.append(seq)
        self._pt.append(kind)
        self._pv.append(payload)
        self._pbytes += len(key) + len(payload) + ENTRY_OVERHEAD
        if self._pbytes >= self.block_size:
            self._flush_pending()

    def _flush_pending(self) -> None:
        if self._pk:
            self._emit(self._pk, self._ps, self._pt, self._pv)
            self._pk, self._ps, self._pt, self._pv = [], [], [], []
            self._pbytes = 0

    def add_many(
        self,
        keys: Sequence[bytes],
        seqs: Sequence[int],
        kinds: Sequence[int],
        payloads: Sequence[bytes],
    ) -> None:
        """Many entries at once, following anything added before.

        Table SSTs: sorted by key. WAL SSTs: in sequence order; a block is
        never cut between entries that share a sequence number (one batch).
        """
        self._flush_pending()
        n = len(keys)
        if not n:
            return
        klens = list(map(len, keys))
        plens = list(map(len, payloads))
        sizes = list(map(add, klens, plens))
        raw_k = sum(klens)
        kinds_b = bytes(kinds)
        table = self.kind == SST_TABLE
        bs = self.block_size
        if table and min(sizes) >= bs:  # every entry fills a block (large values): one per block
            stored = self._emit_singles(keys, seqs, kinds_b, payloads)
            bounds: list[int] = list(range(n + 1))
        else:
            bounds = self._cut(sizes, seqs, table)
            stored = self._emit_cut(keys, array("Q", seqs), kinds_b, payloads, bounds, klens, plens)
        self._account(stored, bounds, keys, seqs, kinds_b, raw_k, sum(plens))

    def _account(
        self,
        stored: Sequence[int],
        bounds: Sequence[int],
        keys: Sequence[bytes],
        seqs: Sequence[int],
        kinds_b: bytes,
        key_bytes: int,
        payload_bytes: int,
    ) -> None:
        """Index, filter and properties of blocks just appended: ``stored`` sizes, cut at
        ``bounds`` (``[0, ..., len(keys)]``) from these columns; once per call, not per block."""
        n = len(keys)
        if self.kind == SST_TABLE:
            lasts: Sequence[bytes] = [keys[h - 1] for h in bounds[1:]] if len(bounds) <= n else keys
            first = keys[0]
            if self.bloom_bits:
                self._digests += b"".join(map(key_digest, keys))
        else:  # WAL SSTs index blocks by first seq
            lasts = [_U64BE.pack(seqs[lo]) for lo in bounds[:-1]]
            first = lasts[0]
        counts = [h - lo for lo, h in pairwise(bounds)]
        self._note_blocks(stored, first, lasts, counts, min(seqs), max(seqs), key_bytes, payload_bytes)
        self._tombstones += kinds_b.translate(_IS_TOMBSTONE).count(1)
        if self.kind != SST_TABLE and not self._has_range_entries:
            self._has_range_entries = _RANGE_KIND in kinds_b
        self._merges += kinds_b.count(KIND_MERGE)

    def _cut(self, sizes: list[int], seqs: Sequence[int], table: bool) -> list[int]:
        """Block boundaries (``[0, ..., n]``): a block ends at the entry that brings its key
        plus payload bytes to ``block_size``; in a WAL SST not before the end of that
        entry's batch (entries are in sequence order, so one bisection finds it)."""
        cum = list(accumulate(sizes))
        n = len(cum)
        bs = self.block_size
        bounds = [0]
        lo = 0
        base = 0
        while lo < n:
            hi = min(n, bisect_left(cum, base + bs, lo) + 1)
            if not table and hi < n and seqs[hi] == seqs[hi - 1]:
                # (Past the batch's last entry: an entry of a higher seq, never one of the batch.)
                hi = bisect_right(seqs, seqs[hi - 1], hi)
            bounds.append(hi)
            base = cum[hi - 1]
            lo = hi
        return bounds

    def _emit_cut(
        self,
        keys: Sequence[bytes],
        seqs_a: array[int],
        kinds_b: bytes,
        payloads: Sequence[bytes],
        bounds: list[int],
        klens: list[int],
        plens: list[int],
    ) -> list[int]:
        """Encode and append the blocks ``bounds`` cuts (``block.encode_columns``, from the
        lengths already taken); their stored sizes. Large uncompressed blocks (a WAL
        block of a batch of large values) are appended in pieces (``block_append``)."""
        plain = self.codec != CODEC_NONE  # (compression needs the whole payload)
        stored = []
        for lo, hi in pairwise(bounds):
            vl = plens[lo:hi]
            if not plain and worth_it(hi - lo, sum(vl)):
                try:
                    stored.append(
                        append_columns(
                            self._data,
                            keys[lo:hi],
                            seqs_a[lo:hi],
                            kinds_b[lo:hi],
                            payloads[lo:hi],
                            klens[lo:hi],
                            vl,
                        )
                    )
                    continue
                except TypeError:  # a value that is not bytes (a bytearray): the plain way
                    pass
            stored.append(
                self._append(
                    encode_columns(
                        keys[lo:hi], seqs_a[lo:hi], kinds_b[lo:hi], payloads[lo:hi], klens[lo:hi], vl
                    )
                )
            )
        return stored

    def _emit_singles(
        self,
        keys: Sequence[bytes],
        seqs: Sequence[int],
        kinds_b: bytes,
        payloads: Sequence[bytes],
    ) -> list[int]:
        """Blocks of one entry each (``block.encode_single``); their stored sizes.
        Uncompressed, they are appended column by column (``block_append``)."""
        if self.codec == CODEC_NONE:
            try:
                return append_singles(self._data, keys, seqs, kinds_b, payloads)
            except TypeError:  # a value that is not bytes (a bytearray): the plain way
                pass
        return [self._append(encode_single(*e)) for e in zip(keys, seqs, kinds_b, payloads, strict=True)]

    def _append(self, payload: bytes) -> int:
        """Frame ``payload`` as a stored block and append it to the data; its stored size."""
        body, tail = framed(payload, self.codec)
        self._write(body)
        self._write(tail)
        return len(body) + len(tail)

    def _emit(
        self, keys: Sequence[bytes], seqs: Sequence[int], kinds: Sequence[int], payloads: Sequence[bytes]
    ) -> None:
        """One block of these entries (``add`` has cut it), appended and accounted."""
        kinds_b = bytes(kinds)
        seqs_a = array("Q", seqs)
        stored = self._append(encode_block(keys, seqs_a, kinds_b, payloads))
        self._account(
            (stored,),
            (0, len(keys)),
            keys,
            seqs_a,
            kinds_b,
            sum(map(len, keys)),
            sum(map(len, payloads)),
        )

    def append_blocks(
        self,
        pieces: Sequence[bytes | memoryview],
        *,
        stored: Sequence[int],
        last_keys: Sequence[bytes],
        entries: Sequence[int],
        first_key: bytes,
        seq: int,
        raw_key_bytes: int,
        raw_value_bytes: int,
    ) -> None:
        """Framed data blocks of plain values at one sequence number, encoded by the
        caller (the Arrow ingest path builds blocks from columns without row objects).

        ``pieces`` are the blocks' bytes in order (a block may span several
        pieces: a body and its trailer); block ``i`` is ``stored[i]`` bytes long,
        holds ``entries[i]`` entries and ends with key ``last_keys[i]``; the first
        block starts with ``first_key``. Table SSTs only; keys go to no filter (that
        path inserts its own).
        """
        if not (len(stored) == len(last_keys) == len(entries)) or not stored:
            raise ValueError("append_blocks needs one size, last key and entry count per block")
        self._flush_pending()
        data = self._data
        at = self._offsets[-1]
        write = self._write
        for piece in pieces:
            write(piece)
        if (len(data) if isinstance(data, bytearray) else data.tell()) - at != sum(stored):
            if isinstance(data, bytearray):
                del data[at:]
            else:
                data.seek(at)
            raise ValueError("append_blocks: the pieces do not add up to the stored sizes")
        self._note_blocks(stored, first_key, last_keys, entries, seq, seq, raw_key_bytes, raw_value_bytes)

    def _note_blocks(
        self,
        stored: Sequence[int],
        first: bytes,
        lasts: Sequence[bytes],
        entries: Sequence[int],
        lo_seq: int,
        hi_seq: int,
        raw_k: int,
        raw_v: int,
    ) -> None:
        """Account for framed blocks just appended: block ``i`` is ``stored[i]`` bytes
        and holds ``entries[i]`` entries; ``first`` is the first block's first key and
        ``lasts`` each block's last (WAL SSTs: a block's first sequence number, its
        index key). List operations, not a call per block: the Arrow ingest path hands
        over an SST's thousands of blocks at once."""
        self._offsets.extend(islice(accumulate(stored, initial=self._offsets[-1]), 1, None))
        self._ends.extend(islice(accumulate(entries, initial=self._entries), 1, None))
        self._entries = self._ends[-1]
        if self._min_seq is None or lo_seq < self._min_seq:
            self._min_seq = lo_seq
        self._max_seq = max(self._max_seq, hi_seq)
        if self.kind == SST_TABLE:
            if self._first is None:
                self._first = first
            self._last = lasts[-1]
        self._index_keys.extend(lasts)
        self._raw_k += raw_k
        self._raw_v += raw_v

    def block_layout(self) -> tuple[list[int], list[int]]:
        """``(offsets, ends)`` of the data blocks emitted so far: block ``i`` spans
        ``offsets[i]:offsets[i + 1]`` and holds entries ``ends[i - 1]`` (0 for the
        first) to ``ends[i]`` in the order they were added (value-journal pointers)."""
        self._flush_pending()
        return list(self._offsets), list(self._ends)

    def finish(self) -> tuple[bytes, SstProps]:
        """The whole object and its properties."""
        data, props = self.finish_buffer()
        return bytes(data), props

    def finish_buffer(self, *, filter_block: bytes | None = None) -> tuple[bytearray, SstProps]:
        """:meth:`finish` without the copy into ``bytes``: for objects that only go to a
        store (compaction outputs, L0 SSTs), whose peak memory is then one object.

        ``filter_block``: a filter built elsewhere for exactly the keys added, on a
        builder without its own (``bloom_bits_per_key=0``). The Arrow ingest builds
        it with numpy; taking it here spares splicing it into a finished object.
        """
        data = self._data
        if not isinstance(data, bytearray):
            raise ValueError("a builder given a buffer (out=...) finishes with finish_view")
        props = self._finish_meta(filter_block)
        self._data = bytearray()
        return data, props

    def finish_view(self) -> tuple[memoryview, SstProps]:
        """The object as a view of the buffer it was built in (``out``: valid until
        that buffer is given back to its ``OutBuffers``), and its properties."""
        data = self._data
        props = self._finish_meta(None)
        if isinstance(data, bytearray):
            return memoryview(data), props
        whole = data.getbuffer()  # (all the buffer has held: an earlier object may have been longer)
        view = whole[: data.tell()]
        whole.release()
        return view, props

    def _finish_meta(self, filter_block: bytes | None) -> SstProps:
        """Append the filter, index, range-del and properties blocks and the footer."""
        self._flush_pending()
        write = self._write
        pos = self._offsets[-1]
        filter_off = filter_len = 0
        count = len(self._digests) // 16
        filt = filter_block
        if filt is not None and self.bloom_bits:
            raise ValueError("filter_block given to a builder that builds its own filter")
        if self.bloom_bits and count:
            filt = build_filter_from_digests(self._digests, count, self.bloom_bits)
            self._digests = bytearray()
        if filt is not None:
            stored = frame_block(filt, CODEC_NONE)
            filter_off, filter_len = pos, len(stored)
            write(stored)
            pos += len(stored)
        index = frame_block(encode_index(self._offsets, self._index_keys), CODEC_NONE)
        index_off = pos
        write(index)
        pos += len(index)
        version, flags = FORMAT_VERSION, 0
        first, last = self._first or b"", self._last
        if self._range_dels:
            rd = frame_block(encode_range_dels(self._range_dels), CODEC_NONE)
            write(rd)
            pos += len(rd)
            version, flags = FORMAT_VERSION_2, FLAG_RANGE_DEL_BLOCK
            if self._rd_first is not None and (self._first is None or self._rd_first < first):
                first = self._rd_first
            if self._rd_last is not None and self._rd_last > last:
                last = self._rd_last
            rd_seqs = [q for ss in self._range_dels.seqs for q in ss]
            lo_seq = min(rd_seqs) if self._min_seq is None else min(self._min_seq, *rd_seqs)
            self._min_seq, self._max_seq = lo_seq, max(self._max_seq, *rd_seqs)
        elif self._has_range_entries or self._merges:
            version = FORMAT_VERSION_2
        props = SstProps(
            kind=self.kind,
            codec=self.codec,
            entries=self._entries,
            min_seq=self._min_seq or 0,
            max_seq=self._max_seq,
            writer_epoch=self.writer_epoch,
            created_at_ms=self.created_at_ms,
            tombstones=self._tombstones,
            raw_key_bytes=self._raw_k,
            raw_value_bytes=self._raw_v,
            nonce=self.nonce,
            first_key=first,
            last_key=last,
            range_dels=self._range_dels.count,
        )
        pstored = frame_block(_encode_props(props), CODEC_NONE)
        props_off = pos
        write(pstored)
        write(
            encode_footer(
                Footer(index_off, len(index), filter_off, filter_len, props_off, len(pstored), version, flags)
            )
        )
        return props


@dataclass(frozen=True, slots=True)
class SstMeta:
    """Everything but the data blocks, decoded."""

    footer: Footer
    props: SstProps
    index: SstIndex
    bloom: BloomFilter | None
    range_dels: Fragments = EMPTY


def decode_meta(tail: bytes, object_size: int) -> SstMeta:
    """Decode footer, properties, index and filter from the object's tail.

    ``tail`` must hold the object's last ``object_size - footer.meta_start``
    bytes (callers read a generous tail first and retry with the exact size
    from ``parse_footer`` when it was too short).
    """
    footer = parse_footer(tail, object_size)
    base = object_size - len(tail)
    if footer.meta_start < base:
        raise ValueError("tail too short")

    def stored(off: int, ln: int) -> bytes:
        return tail[off - base : off - base + ln]

    props = decode_props(unframe_block(stored(footer.props_off, footer.props_len), "SST properties"))
    index = decode_index(
        unframe_block(stored(footer.index_off, footer.index_len), "SST index"), footer.meta_start
    )
    bloom = None
    if footer.filter_len:
        bloom = BloomFilter(unframe_block(stored(footer.filter_off, footer.filter_len), "SST filter"))
    if (props.entries == 0) != (len(index) == 0):
        raise CorruptionError("SST entry count disagrees with its index")
    if footer.flags & FLAG_RANGE_DEL_BLOCK:
        rd_off = footer.index_off + footer.index_len
        frags = decode_range_dels(
            unframe_block(stored(rd_off, footer.props_off - rd_off), "SST range-del block")
        )
        return SstMeta(footer, replace(props, range_dels=frags.count), index, bloom, frags)
    return SstMeta(footer, props, index, bloom)


def decode_data_block(stored: bytes) -> Block:
    return decode_stored(stored, "SST data block")


def iter_blocks(data: bytes, meta: SstMeta) -> Iterator[Block]:
    """Every data block of a whole object, in order."""
    offs = meta.index.offsets
    for i in range(len(meta.index)):
        yield decode_data_block(data[offs[i] : offs[i + 1]])


def decode_sst(data: bytes) -> tuple[SstMeta, list[Block]]:
    """Decode a whole SST object (WAL replay, verification, tests)."""
    meta = decode_meta(data, len(data))
    blocks = list(iter_blocks(data, meta))
    total = sum(len(b) for b in blocks)
    if total != meta.props.entries:
        raise CorruptionError(f"SST blocks hold {total} entries, properties say {meta.props.entries}")
    if meta.footer.version < MERGE_FORMAT_VERSION and any(KIND_MERGE in b.kinds for b in blocks):
        raise CorruptionError(f"SST format version {meta.footer.version} holds a merge entry")
    return meta, blocks

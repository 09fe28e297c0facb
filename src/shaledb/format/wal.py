"""The WAL object codec: encoding and decoding the WAL SSTs the writer puts at
``wal/<id>.sst`` (docs/format/wal.md), value locations inside them, and which
objects read in id order belong to the log (:class:`EpochGate`).

Pure codec, no I/O: the writer thread is :mod:`shaledb.engine.wal`, fetching
objects in order :mod:`shaledb.engine.wal_read`.
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Sequence
from operator import itemgetter

from ..errors import CorruptionError
from .journal import raw_block_columns, value_crc, wal_pointer
from .row import EXTRA_FLAGS, FLAG_INDEX_TREE, TYPE_MASK, decode_payload
from .sst import SST_WAL, SstBuilder, decode_data_block, decode_meta

log = logging.getLogger("shaledb.wal")

Entry = tuple[int, int, bytes]
"""``(seq, kind, payload)``: a WAL entry (as ``engine.memtable.Entry``)."""

_SEQ, _KIND, _PAYLOAD = itemgetter(0), itemgetter(1), itemgetter(2)
_U32 = struct.Struct("<I")

Locations = dict[bytes, tuple[int, bytes, int]]
"""key -> (seq, pointer, value length): ``Memtable.locs``."""


def encode_wal_layout(
    keys: list[bytes],
    ents: list[Entry],
    *,
    epoch: int,
    nonce: bytes,
    created_at_ms: int,
    codec: int,
    block_size: int,
) -> tuple[bytearray | memoryview, list[int], list[int]]:
    """:func:`encode_wal` plus the block layout (``SstBuilder.block_layout``), as the
    builder's own buffer: the object only goes to the store, so no copy into bytes."""
    return encode_wal_columns(
        keys,
        list(map(_SEQ, ents)),  # (three C-level column reads: a transposing zip costs more)
        list(map(_KIND, ents)),
        list(map(_PAYLOAD, ents)),
        epoch=epoch,
        nonce=nonce,
        created_at_ms=created_at_ms,
        codec=codec,
        block_size=block_size,
    )


def encode_wal_columns(
    keys: Sequence[bytes],
    seqs: Sequence[int],
    kinds: Sequence[int],
    pays: Sequence[bytes],
    *,
    epoch: int,
    nonce: bytes,
    created_at_ms: int,
    codec: int,
    block_size: int,
    out: io.BytesIO | None = None,
) -> tuple[bytearray | memoryview, list[int], list[int]]:
    """:func:`encode_wal_layout` of entries given as columns (the WAL writer's buffer:
    an ``array`` of sequence numbers, a ``bytearray`` of kinds). With ``out`` (a reused
    buffer, ``format.out_buffers``) the object is built there and returned as a view of it."""
    b = SstBuilder(
        kind=SST_WAL,
        block_size=block_size,
        codec=codec,
        writer_epoch=epoch,
        created_at_ms=created_at_ms,
        nonce=nonce,
        out=out,
    )
    if keys:
        b.add_many(keys, seqs, kinds, pays)
    offsets, ends = b.block_layout()
    return (b.finish_buffer() if out is None else b.finish_view())[0], offsets, ends


def locate_values(
    wal_id: int,
    keys: Sequence[bytes],
    ents: list[Entry],
    offsets: list[int],
    ends: list[int],
    threshold: int,
    sink: Locations,
    data: bytes | bytearray | memoryview | None = None,
) -> None:
    """Record a pointer for every data-tree value of at least ``threshold`` bytes.

    Only a key's newest entry in the object is its value (a batch may write a
    key twice, and a later batch may overwrite or delete it), so entries are
    visited last to first and every earlier entry of a key already seen is
    skipped: a value a later tombstone deleted gets no location.

    With the object's bytes ``data``, a value in a block stored uncompressed
    gets a version 2 pointer (its byte range and CRC, ``format/journal.py``):
    a get then reads the value, not its whole batch's block. The range is read
    from the block's header in ``data``; the CRC is taken of the entry's own
    payload, no copy of the object.
    """
    b = len(ends) - 1
    seen: set[bytes] = set()
    head_b = -1
    cols: tuple[int, int] | None = None  # the block's raw_block_columns (None: version 1)
    for j in range(len(ents) - 1, -1, -1):
        e = ents[j]
        k = keys[j]
        if k in seen:
            continue
        seen.add(k)
        p = e[2]
        if len(p) < threshold:
            continue
        kind = e[1]
        if kind & (TYPE_MASK | FLAG_INDEX_TREE):
            continue  # tombstones, pointers and index entries stay where they are
        body = decode_payload(kind, p)[0] if kind & EXTRA_FLAGS else p
        vlen = len(body)
        if vlen < threshold:
            continue
        while b > 0 and ends[b - 1] > j:
            b -= 1
        first = ends[b - 1] if b else 0
        if sink.get(k, (-1,))[0] > e[0]:
            continue  # a newer write of the key was located already (replay of several objects)
        off = offsets[b]
        size = offsets[b + 1] - off
        if head_b != b and data is not None:
            head_b = b
            cols = raw_block_columns(data, off, size)
        i = j - first
        if cols is None or data is None:
            sink[k] = (e[0], wal_pointer(wal_id, off, size, i, vlen), vlen)
            continue
        voff = cols[1] + _U32.unpack_from(data, off + cols[0] + 4 * i + 4)[0] - vlen
        sink[k] = (e[0], wal_pointer(wal_id, off, size, i, vlen, voff, value_crc(k, body)), vlen)


def encode_wal(
    keys: list[bytes],
    ents: list[Entry],
    *,
    epoch: int,
    nonce: bytes,
    created_at_ms: int,
    codec: int,
    block_size: int,
) -> bytes:
    """A WAL SST for entries in sequence order (empty: a fencing object)."""
    return bytes(
        encode_wal_layout(
            keys,
            ents,
            epoch=epoch,
            nonce=nonce,
            created_at_ms=created_at_ms,
            codec=codec,
            block_size=block_size,
        )[0]
    )


def wal_object_epoch(data: bytes) -> int | None:
    """The writer epoch recorded in a WAL object (None for a zero-length fence)."""
    if not data:
        return None
    return decode_meta(data, len(data)).props.writer_epoch


class EpochGate:
    """Tells which WAL objects, read in id order, belong to the log.

    A writer with up to ``wal_max_in_flight`` PUTs in flight can crash with
    object N+1 written and N not. Nothing in N+1 was acknowledged (N was not
    written), and replaying it would keep later writes while losing earlier
    ones. The next writer therefore writes its fence *at* the hole N
    (``recovery.write_fence``), so every object of an older epoch that comes
    after a newer epoch's object is such a dead object: this gate skips it.
    In a log written one PUT at a time an older epoch never follows a newer
    one except as an empty fence, so nothing else is skipped.

    A zero-length object is a fence of unknown epoch, which only a *newer*
    writer can have placed: a writer that meets one stops (``FencedError``).
    So an object after it from the epoch before it, or an older one, means
    the zero-length object was a data object emptied by damage; that raises
    ``CorruptionError`` naming it (before, its writes vanished without a word).
    Only the first object read can be emptied unseen: nothing before it tells
    its writer's epoch.
    """

    __slots__ = ("_empty", "epoch")

    def __init__(self) -> None:
        self.epoch = 0
        self._empty: str | None = None
        """The first zero-length object since the last object with an epoch."""

    def admit(self, data: bytes, path: str) -> bool:
        """True if the object ``data`` (read in id order) belongs to the log."""
        if not data:
            return self.admit_epoch(None, path)
        try:
            epoch = decode_meta(data, len(data)).props.writer_epoch
        except CorruptionError:
            return True  # the caller's decoding reports the damage
        return self.admit_epoch(epoch, path)

    def admit_epoch(self, epoch: int | None, path: str) -> bool:
        """:meth:`admit` for an object whose epoch is known (None: zero-length)."""
        if epoch is None:
            if self._empty is None:
                self._empty = path
            return True
        empty, self._empty = self._empty, None
        if empty is not None and 0 < epoch <= self.epoch:
            raise CorruptionError(
                f"zero-length, but {path} after it was written by epoch {epoch} and the object "
                f"before it by epoch {self.epoch}: only a newer writer's fence may be empty, so "
                "this was a WAL object holding writes",
                empty,
            )
        if epoch < self.epoch:
            log.info("skipping %s: written by epoch %d after epoch %d fenced it", path, epoch, self.epoch)
            return False
        self.epoch = epoch
        return True


def decode_wal_object(data: bytes, path: str) -> tuple[list[bytes], list[Entry]]:
    """Keys and ``(seq, kind, payload)`` entries of a WAL object, in sequence order."""
    keys: list[bytes] = []
    ents: list[Entry] = []
    if not data:
        return keys, ents  # a zero-length fencing object
    try:
        meta = decode_meta(data, len(data))
        offs = meta.index.offsets
        for i in range(len(meta.index)):
            block = decode_data_block(data[offs[i] : offs[i + 1]])
            keys.extend(block.keys)
            ents.extend(zip(block.seqs, block.kinds, block.payloads(0, len(block))))
    except CorruptionError as exc:
        raise exc.with_path(path) from exc
    return keys, ents


def is_empty_wal(data: bytes) -> bool:
    """True for a fencing object: a WAL SST without entries."""
    return decode_meta(data, len(data)).props.entries == 0

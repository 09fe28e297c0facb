"""Writing one partition of an ingest: sorted columns to table SSTs in the store.

:class:`PartWriter` takes chunks of sorted columns, applies the plan's
duplicates policy, cuts SSTs at ``plan.max_sst_size_bytes``, uploads each as
``compacted/<ULID>.sst`` and returns an :class:`~shaledb.ingest.model.IngestPart`.
SSTs are built by ``format.sst.SstBuilder`` without a filter; the bloom
filter (the same bytes ``format.bloom`` would build) is computed vectorized
and spliced in, because the per-key Python loop of the reference builder
would be most of an ingest's CPU time.
"""

from __future__ import annotations

import hashlib
import random
import struct
from array import array
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate, repeat
from operator import add, lt
from typing import Any

from .. import paths
from ..batch import MAX_KEY_BYTES, MAX_VALUE_BYTES
from ..clock import SYSTEM_CLOCK, Clock
from ..db import wrap_store
from ..errors import AlreadyExists, InvalidArgument, ShaleError
from ..format.bloom import BLOCK_BITS, build_filter, key_hash, probes_for
from ..format.coding import CODEC_NONE, CODECS, crc32c_extend, frame_block
from ..format.row import FLAG_META, KIND_VALUE, encode_payload
from ..format.sst import (
    ENTRY_OVERHEAD,
    FOOTER_SIZE,
    SST_TABLE,
    Footer,
    SstBuilder,
    SstProps,
    encode_footer,
    parse_footer,
)
from ..manifest.model import SstInfo
from ..settings import Settings
from ..store.base import ObjectStore
from ..store.url import open_store
from .model import STREAMS, IngestPart, IngestPlan, log, write_lease

_NO_META = 0xFFFFFFFF


def bloom_filter_bytes(keys: Sequence[bytes], bits_per_key: int) -> bytes:
    """The filter ``format.bloom.build_filter`` builds for ``keys``, vectorized with numpy.

    Same bytes, about ten times faster (one BLAKE2b call per key is what is
    left in Python). Falls back to ``build_filter`` when numpy is missing.
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy comes with the spark extra
        return build_filter(map(key_hash, keys), len(keys), bits_per_key)
    n = len(keys)
    probes = probes_for(bits_per_key)
    num_blocks = max(1, -(-n * bits_per_key // BLOCK_BITS))
    bits = np.zeros(num_blocks * BLOCK_BITS, dtype=bool)
    if n:
        b2 = hashlib.blake2b
        digests = b"".join([b2(k, digest_size=16).digest() for k in keys])
        h = np.frombuffer(digests, dtype="<u8").reshape(n, 2)
        lo, hi = h[:, 0], h[:, 1]
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
    header = struct.pack("<BBI", 1, probes, num_blocks)
    body: bytes = np.packbits(bits, bitorder="little").tobytes()
    return header + body


def _with_filter(data: bytes, filt: bytes) -> bytes:
    """Insert a filter block into an SST built without one (public footer API only)."""
    f = parse_footer(data[-FOOTER_SIZE:], len(data))
    stored = frame_block(filt, CODEC_NONE)
    shift = len(stored)
    data_end = f.index_off
    footer = Footer(
        f.index_off + shift, f.index_len, data_end, shift, f.props_off + shift, f.props_len, f.version
    )
    return b"".join(
        (data[:data_end], stored, data[data_end : len(data) - FOOTER_SIZE], encode_footer(footer))
    )


class _Fingerprint:
    """CRC32C and length of each stream of :data:`STREAMS`, extended chunk by chunk."""

    __slots__ = ("crcs", "lens")

    def __init__(self) -> None:
        self.crcs = [0] * len(STREAMS)
        self.lens = [0] * len(STREAMS)

    def update(
        self, keys: Sequence[bytes], values: Sequence[bytes], metas: Sequence[bytes | None] | None
    ) -> None:
        n = len(keys)
        mlens = (
            array("I", repeat(_NO_META, n))
            if metas is None
            else array("I", (_NO_META if x is None else len(x) for x in metas))
        )
        chunks = (
            b"".join(keys),
            array("I", map(len, keys)).tobytes(),
            b"".join(values),
            array("I", map(len, values)).tobytes(),
            b"" if metas is None else b"".join(x for x in metas if x is not None),
            mlens.tobytes(),
        )
        for i, c in enumerate(chunks):
            self.crcs[i] = crc32c_extend(self.crcs[i], c)
            self.lens[i] += len(c)

    def streams(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.crcs, self.lens))


class PartWriter:
    """Writes one partition's rows, given in ascending key order, as table SSTs.

    Call :meth:`add` with chunks of columns (each sorted by key, each chunk
    after the previous one), then :meth:`finish`. Output SSTs are cut at
    ``plan.max_sst_size_bytes`` and uploaded as they fill; :meth:`abort`
    deletes what was uploaded (a crash leaves it to the garbage collector).
    When the plan says the id is already committed, rows are only
    fingerprinted.
    """

    def __init__(
        self,
        store: ObjectStore,
        plan: IngestPlan,
        partition: int,
        *,
        attempt: str = "",
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.plan = plan
        self.partition = partition
        self.attempt = attempt
        self.clock = clock or SYSTEM_CLOCK
        self.rng = rng or random.Random()
        self.codec = CODECS[plan.compression]
        self.write = plan.committed_manifest is None
        self._fp = _Fingerprint()
        self._rows = 0
        self._first: bytes | None = None
        self._carry: tuple[bytes, bytes, bytes | None] | None = None
        self._prev: bytes | None = None
        """The last key handed to the SSTs (the carry, if any, comes after it)."""
        self._ssts: list[SstInfo] = []
        self._builder: SstBuilder | None = None
        self._bloom_keys: list[bytes] = []
        self._last_lease = -float("inf")  # renewed with the first SST, then every lease_s / 4
        self._done = False

    # ------------------------------------------------------------------ rows

    def add(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        metadata: Sequence[bytes | None] | None = None,
    ) -> None:
        """Append a chunk; keys ascending (equal keys per the plan's ``duplicates``)."""
        if self._done:
            raise InvalidArgument("this part is finished")
        n = len(keys)
        if len(values) != n or (metadata is not None and len(metadata) != n):
            raise InvalidArgument("key, value and metadata columns differ in length")
        if not n:
            return
        ks, vs = list(keys), list(values)
        ms = None if metadata is None else list(metadata)
        if self._carry is None and self._prev is not None and ks[0] <= self._prev:
            raise InvalidArgument(
                f"ingest part {self.partition}: a chunk starts at {ks[0]!r:.60}, not after the previous "
                f"chunk's last key {self._prev!r:.60} (chunks must ascend and not split equal keys)"
            )
        if self._carry is not None:
            ks.insert(0, self._carry[0])
            vs.insert(0, self._carry[1])
            if ms is not None or self._carry[2] is not None:
                ms = [None] * (len(ks) - 1) if ms is None else ms
                ms.insert(0, self._carry[2])
        self._check(ks, vs, ms)
        ks, vs, ms = self._dedupe(ks, vs, ms)
        # Hold the last row back: the next chunk may repeat its key.
        self._carry = (ks.pop(), vs.pop(), None if ms is None else ms.pop())
        self._emit(ks, vs, ms)

    def add_arrow(self, keys: Any, values: Any) -> None:
        """Append a chunk given as Arrow binary (or string) arrays, without per-row Python.

        The same rules as :meth:`add` (ascending keys, the plan's duplicates
        policy within the chunk), except that a chunk may not begin with the
        key the previous chunk ended with. Needs pyarrow and numpy; see
        ``shaledb.ingest.arrow``.
        """
        from .arrow import add_arrow

        if self._done:
            raise InvalidArgument("this part is finished")
        add_arrow(self, keys, values)

    def flush_carry(self) -> None:
        """Emit the row :meth:`add` held back (it waits for a possible duplicate)."""
        if self._carry is not None:
            k, v, meta = self._carry
            self._carry = None
            self._emit([k], [v], None if meta is None else [meta])

    def new_builder(self) -> SstBuilder:
        return SstBuilder(
            kind=SST_TABLE,
            block_size=self.plan.block_size_bytes,
            codec=self.codec,
            bloom_bits_per_key=0,  # built vectorized at the end (bloom_filter_bytes)
            created_at_ms=int(self.clock.now() * 1000),
            nonce=self.rng.getrandbits(128).to_bytes(16, "little"),
        )

    def _check(self, ks: list[bytes], vs: list[bytes], ms: list[bytes | None] | None) -> None:
        # C-level passes: type sets and length extremes, not a Python loop per row.
        if set(map(type, ks)) != {bytes} or not min(map(len, ks)) > 0 or max(map(len, ks)) > MAX_KEY_BYTES:
            raise InvalidArgument(f"ingest keys must be bytes of 1..{MAX_KEY_BYTES} bytes")
        if set(map(type, vs)) != {bytes} or max(map(len, vs)) > MAX_VALUE_BYTES:
            raise InvalidArgument(f"ingest values must be bytes of at most {MAX_VALUE_BYTES} bytes")
        if ms is not None and not set(map(type, ms)) <= {bytes, type(None)}:
            raise InvalidArgument("ingest metadata must be bytes or None")

    def _dedupe(
        self, ks: list[bytes], vs: list[bytes], ms: list[bytes | None] | None
    ) -> tuple[list[bytes], list[bytes], list[bytes | None] | None]:
        if all(map(lt, ks, ks[1:])):
            if self._first is None:
                self._first = ks[0]
            return ks, vs, ms
        keep: list[int] = []
        for i in range(len(ks)):
            if i + 1 < len(ks):
                if ks[i] > ks[i + 1]:
                    raise InvalidArgument(
                        f"ingest part {self.partition}: keys are not in ascending order "
                        f"({ks[i]!r:.60} before {ks[i + 1]!r:.60}); sort each partition by key"
                    )
                if ks[i] == ks[i + 1]:
                    if self.plan.duplicates == "error":
                        raise InvalidArgument(
                            f"ingest part {self.partition}: key {ks[i]!r:.80} appears more than once "
                            "(use duplicates='last' to keep the last one)"
                        )
                    continue  # "last": the later row of equal keys wins
            keep.append(i)
        if self._first is None:
            self._first = ks[keep[0]]
        return (
            [ks[i] for i in keep],
            [vs[i] for i in keep],
            None if ms is None else [ms[i] for i in keep],
        )

    def _emit(self, ks: list[bytes], vs: list[bytes], ms: list[bytes | None] | None) -> None:
        n = len(ks)
        if not n:
            return
        self._fp.update(ks, vs, ms)
        self._rows += n
        self._prev = ks[-1]
        if not self.write:
            return
        if ms is None or all(x is None for x in ms):
            kinds = bytes(n)
            pays = vs
        else:
            kb = bytearray(n)
            pays = list(vs)
            for i, meta in enumerate(ms):
                if meta is not None:
                    flags, pays[i] = encode_payload(vs[i], meta, None)
                    kb[i] = KIND_VALUE | flags
            kinds = bytes(kb)
            assert all(k in (0, FLAG_META) for k in kinds)
        seqs = [self.plan.seq] * n
        limit = self.plan.max_sst_size_bytes
        cum = list(accumulate(map(add, map(add, map(len, ks), map(len, pays)), repeat(ENTRY_OVERHEAD, n))))
        pos = 0
        while pos < n:
            if self._builder is None:
                self._builder = self.new_builder()
            b = self._builder
            room = limit - b.estimated_size
            base = cum[pos - 1] if pos else 0
            j = bisect_right(cum, base + room, pos)
            if j == pos:
                if b.entries:
                    self._finish_sst()
                    continue
                j = pos + 1  # one entry larger than the limit gets an SST of its own
            b.add_many(ks[pos:j], seqs[pos:j], kinds[pos:j], pays[pos:j])
            self._bloom_keys += ks[pos:j]
            pos = j
            if pos < n or b.estimated_size >= limit:
                self._finish_sst()

    def _finish_sst(self) -> None:
        b = self._builder
        self._builder = None
        if b is None or not b.entries:
            return
        data, props = b.finish()
        if self.plan.bloom_bits_per_key:
            data = _with_filter(data, bloom_filter_bytes(self._bloom_keys, self.plan.bloom_bits_per_key))
        self._bloom_keys = []
        self._ssts.append(self._upload(data, props))
        self._renew_lease()

    def _upload(self, data: bytes, props: SstProps) -> SstInfo:
        for _ in range(8):
            sst_id = paths.new_ulid(self.clock.now(), self.rng)
            try:
                self.store.put(paths.sst_path(sst_id), data, create=True)
            except AlreadyExists:
                continue  # an 80-bit collision: take another id
            return SstInfo(
                id=sst_id,
                size=len(data),
                first_key=props.first_key,
                last_key=props.last_key,
                entries=props.entries,
                min_seq=props.min_seq,
                max_seq=props.max_seq,
            )
        raise InvalidArgument("could not find a free SST id")

    def _renew_lease(self) -> None:
        now = self.clock.monotonic()
        if now - self._last_lease >= self.plan.lease_s / 4:
            self._last_lease = now
            write_lease(self.store, self.plan, self.clock.now())

    # ---------------------------------------------------------------- finish

    def finish(self) -> IngestPart:
        """Flush the last SST and describe the part."""
        if self._done:
            raise InvalidArgument("this part is finished")
        self.flush_carry()
        last = self._prev
        self._finish_sst()
        self._done = True
        if self.write and self._ssts:
            write_lease(self.store, self.plan, self.clock.now())
        return IngestPart(
            partition=self.partition,
            attempt=self.attempt,
            ssts=tuple(self._ssts),
            rows=self._rows,
            first_key=self._first,
            last_key=last,
            streams=self._fp.streams(),
        )

    def abort(self) -> None:
        """Delete the SSTs uploaded so far (best effort)."""
        self._done = True
        delete_ssts(self.store, self._ssts)
        self._ssts = []


def write_part(
    store: ObjectStore,
    plan: IngestPlan,
    partition: int,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    metadata: Sequence[bytes | None] | None = None,
    *,
    attempt: str = "",
) -> IngestPart:
    """Write one partition's sorted columns (a :class:`PartWriter` in one call)."""
    w = PartWriter(store, plan, partition, attempt=attempt)
    try:
        w.add(keys, values, metadata)
        return w.finish()
    except BaseException:
        w.abort()
        raise


def delete_ssts(store: ObjectStore, ssts: Sequence[SstInfo]) -> None:
    for s in ssts:
        try:
            store.delete(paths.sst_path(s.id))
        except ShaleError as exc:  # the garbage collector removes what we could not
            log.warning("could not delete unused ingest output %s: %s", s.id, exc)


def open_store_stack(
    url: str | None,
    store: ObjectStore | None,
    store_options: Mapping[str, Any] | None,
    settings: Settings,
    clock: Clock,
    rng: random.Random,
) -> ObjectStore:
    if store is None:
        if url is None:
            raise InvalidArgument("give a database URL or a store")
        store = open_store(url, **dict(store_options or {}))
    return wrap_store(store, settings, clock, rng)


def open_ingest_store(
    url: str, *, store_options: Mapping[str, Any] | None = None, settings: Settings | None = None
) -> ObjectStore:
    """The store stack a task writes through (retries and accounting included)."""
    return open_store_stack(url, None, store_options, settings or Settings(), SYSTEM_CLOCK, random.Random())


__all__ = [
    "PartWriter",
    "bloom_filter_bytes",
    "delete_ssts",
    "open_ingest_store",
    "open_store_stack",
    "write_part",
]

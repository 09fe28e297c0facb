"""Writing one partition of an ingest: sorted columns to table SSTs in the store.

:class:`PartWriter` takes chunks of sorted columns, applies the plan's
duplicates policy, cuts SSTs at ``plan.max_sst_size_bytes``, uploads each as
``compacted/<ULID>.sst`` and returns an :class:`~shaledb.bulk.ingest.model.IngestPart`.
SSTs are built by ``format.sst.SstBuilder`` without a filter of its own; the
bloom filter is computed a column at a time with numpy (a version-2 filter,
whose hash numpy can compute) and handed to the builder as it finishes,
because per-key hashing would be a third of an ingest's CPU time.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import lt
from typing import Any

from ...clock import SYSTEM_CLOCK, Clock
from ...db.reader import DbReader
from ...engine.sstable import put_new_sst
from ...errors import InvalidArgument, ShaleError
from ...format import paths
from ...format.coding import CODECS, crc32c_extend
from ...format.row import KIND_VALUE, encode_payload, payloads_with_terms
from ...format.sst import SST_TABLE, SstBuilder, SstProps
from ...keys import MAX_KEY_BYTES, MAX_VALUE_BYTES
from ...manifest.model import JournalFile, SstInfo
from ...settings import Settings
from ...store.base import ObjectStore
from ...store.local_store import LocalObstoreStore
from ...store.stack import open_stack
from ...store.url import open_store
from .arrow import add_arrow, bloom_filter_bytes
from .model import STREAMS, IngestPart, IngestPlan, lease_due, log, write_lease
from .outputs import JournalCutter, SstCutter, TermColumn, TermsPlanner

_NO_META = 0xFFFFFFFF


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
        self._carry: tuple[bytes, bytes, bytes | None, dict[str, Any] | None] | None = None
        self._prev: bytes | None = None
        """The last key handed to the SSTs (the carry, if any, comes after it)."""
        self._data = SstCutter(self)
        self._index = SstCutter(self)
        self._journal = (
            None
            if plan.value_separation_threshold is None
            else JournalCutter(self, plan.value_separation_threshold, self._data)
        )
        self._reader: DbReader | None = None
        self._terms = TermsPlanner(plan.index_fields, self._old_terms if plan.terms_checkpoint else None)
        self._last_lease = -float("inf")  # monotonic time of this part's last renewal
        self._done = False

    @property
    def rows_path_needed(self) -> bool:
        """True when rows must go through :meth:`add` (terms or journal work per row)."""
        return self._terms.active or self._journal is not None

    def _old_terms(self, key: bytes) -> dict[str, tuple[bytes, ...]]:
        if self._reader is None:
            self._reader = DbReader.open(store=self.store, checkpoint=self.plan.terms_checkpoint)
        h = self._reader.head(key)
        return {} if h is None else dict(h.indexes)

    # ------------------------------------------------------------------ rows

    def add(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        metadata: Sequence[bytes | None] | None = None,
        indexes: Mapping[str, TermColumn] | None = None,
    ) -> None:
        """Append a chunk; keys ascending (equal keys per the plan's ``duplicates``).

        ``indexes`` maps each of the plan's ``index_fields`` to a column of
        terms (a list of bytes, one bytes term, or None/empty for none): they
        replace the key's terms for that field, as ``Db.put(indexes=)`` does.
        """
        if self._done:
            raise InvalidArgument("this part is finished")
        n = len(keys)
        if len(values) != n or (metadata is not None and len(metadata) != n):
            raise InvalidArgument("key, value and metadata columns differ in length")
        if indexes is not None and any(len(c) != n for c in indexes.values()):
            raise InvalidArgument("index term columns and the key column differ in length")
        if not n:
            return
        ks, vs = list(keys), list(values)
        ms = None if metadata is None else list(metadata)
        idx = None if indexes is None else {f: list(c) for f, c in indexes.items()}
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
            carried = self._carry[3]
            if idx is not None or carried is not None:
                idx = idx if idx is not None else {f: [None] * (len(ks) - 1) for f in carried or ()}
                for f, col in idx.items():
                    col.insert(0, None if carried is None else carried.get(f))
        self._check(ks, vs, ms)
        keep = self._dedupe(ks)
        if keep is not None:
            ks, vs = [ks[i] for i in keep], [vs[i] for i in keep]
            ms = None if ms is None else [ms[i] for i in keep]
            idx = None if idx is None else {f: [c[i] for i in keep] for f, c in idx.items()}
        # Hold the last row back: the next chunk may repeat its key.
        self._carry = (
            ks.pop(),
            vs.pop(),
            None if ms is None else ms.pop(),
            None if idx is None else {f: c.pop() for f, c in idx.items()},
        )
        self._emit(ks, vs, ms, idx)

    def add_arrow(self, keys: Any, values: Any) -> None:
        """Append a chunk given as Arrow binary (or string) arrays, without per-row Python.

        The same rules as :meth:`add` (ascending keys, the plan's duplicates
        policy within the chunk), except that a chunk may not begin with the
        key the previous chunk ended with. Needs pyarrow and numpy; see
        ``shaledb.bulk.ingest.arrow``.
        """
        if self._done:
            raise InvalidArgument("this part is finished")
        if self.rows_path_needed:  # per-row work (terms, journal): the list path
            self.add(_pylist(keys), _pylist(values))
            return
        add_arrow(self, keys, values)

    def flush_carry(self) -> None:
        """Emit the row :meth:`add` held back (it waits for a possible duplicate)."""
        if self._carry is not None:
            k, v, meta, terms = self._carry
            self._carry = None
            idx = None if terms is None else {f: [t] for f, t in terms.items()}
            self._emit([k], [v], None if meta is None else [meta], idx)

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

    def _dedupe(self, ks: list[bytes]) -> list[int] | None:
        """The positions to keep (None: all of them), per the plan's duplicates policy."""
        if all(map(lt, ks, ks[1:])):
            if self._first is None:
                self._first = ks[0]
            return None
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
                            "(to keep one: duplicates='last' in Python; in Spark, "
                            "options on_duplicate and order_by)"
                        )
                    continue  # "last": the later row of equal keys wins
            keep.append(i)
        if self._first is None:
            self._first = ks[keep[0]]
        return keep

    def _emit(
        self,
        ks: list[bytes],
        vs: list[bytes],
        ms: list[bytes | None] | None,
        idx: Mapping[str, TermColumn] | None = None,
    ) -> None:
        n = len(ks)
        if not n:
            return
        self._fp.update(ks, vs, ms)
        self._rows += n
        self._prev = ks[-1]
        if not self.write:
            return
        terms = self._terms.rows(ks, idx) if self._terms.active else None
        kinds: bytes | list[int]
        if terms is None and (ms is None or all(x is None for x in ms)):
            kinds, pays = bytes(n), vs
        elif ms is None and terms is not None:
            kinds, pays = payloads_with_terms(vs, terms)
        else:
            kinds = [KIND_VALUE] * n
            pays = list(vs)
            for i in range(n):
                meta = None if ms is None else ms[i]
                t = None if terms is None else terms[i]
                if meta is not None or t is not None:
                    flags, pays[i] = encode_payload(vs[i], meta, None, t)
                    kinds[i] = KIND_VALUE | flags
        if self._journal is not None:
            self._journal.add(ks, kinds, pays, list(map(len, vs)))
        else:
            self._data.add(ks, kinds, pays)

    def upload_sst(self, data: bytes | bytearray, props: SstProps) -> SstInfo:
        """Upload a finished SST under a fresh id (the lease is renewed as SSTs land)."""
        info = put_new_sst(self.store, data, props, self.new_id)
        self.renew_lease()
        return info

    def new_id(self) -> str:
        """A ULID for an output, never earlier than the lease's start: the garbage collector
        keeps unreferenced outputs born after a live lease started, and this task's clock may
        run behind the driver's that named the lease (an output born "before" it was deleted
        at a low ``min_age_s`` and the commit named a missing object)."""
        start = paths.ulid_time_s(self.plan.lease_id) if self.plan.lease_id is not None else 0.0
        return paths.new_ulid(max(self.clock.now(), start), self.rng)

    def renew_lease(self) -> None:
        """Rewrite the lease once a quarter of ``lease_s`` has passed since it was last written:
        since the plan began (its begin wrote it), then since this part's last renewal.

        So a lease always has three quarters of its life left when a part checks, and a part
        that runs soon after the begin -- a stream's micro-batch, most jobs -- writes none (it
        used to write one with its first SST and one at its finish)."""
        now = self.clock.monotonic()
        if self._last_lease == -float("inf"):
            due = lease_due(self.plan, self.clock.now())
        else:
            due = now - self._last_lease >= self.plan.lease_s / 4
        if due:
            self._last_lease = now
            write_lease(self.store, self.plan, self.clock.now())

    # ---------------------------------------------------------------- finish

    def finish(self) -> IngestPart:
        """Flush the last SST and describe the part."""
        if self._done:
            raise InvalidArgument("this part is finished")
        self.flush_carry()
        last = self._prev
        if self._journal is not None:
            self._journal.flush()
        self._data.finish_sst()
        self._terms.write(self._index)
        self._index.finish_sst()
        self._done = True
        self._close_reader()
        part = IngestPart(
            partition=self.partition,
            attempt=self.attempt,
            ssts=tuple(self._data.ssts),
            rows=self._rows,
            first_key=self._first,
            last_key=last,
            streams=self._fp.streams(),
            index_ssts=tuple(self._index.ssts),
            journal=() if self._journal is None else tuple(self._journal.files),
        )
        if self.write and part.objects:
            self.renew_lease()
        return part

    def abort(self) -> None:
        """Delete the objects uploaded so far (best effort)."""
        self._done = True
        self._close_reader()
        delete_outputs(
            self.store,
            [*self._data.ssts, *self._index.ssts],
            [] if self._journal is None else self._journal.files,
        )
        self._data.ssts, self._index.ssts = [], []
        if self._journal is not None:
            self._journal.files = []

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def write_part(
    store: ObjectStore,
    plan: IngestPlan,
    partition: int,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    metadata: Sequence[bytes | None] | None = None,
    *,
    indexes: Mapping[str, TermColumn] | None = None,
    attempt: str = "",
) -> IngestPart:
    """Write one partition's sorted columns (a :class:`PartWriter` in one call)."""
    w = PartWriter(store, plan, partition, attempt=attempt)
    try:
        w.add(keys, values, metadata, indexes)
        return w.finish()
    except BaseException:
        w.abort()
        raise


def delete_outputs(store: ObjectStore, ssts: Sequence[SstInfo], journal: Sequence[JournalFile] = ()) -> None:
    """Delete ingest output that will not be committed (best effort)."""
    names = [paths.sst_path(s.id) for s in ssts] + [paths.journal_path(j.id) for j in journal]
    try:
        store.delete_many(names)
    except ShaleError as exc:  # the garbage collector removes what we could not
        log.warning("could not delete %d unused ingest outputs: %s", len(names), exc)


def part_outputs(parts: Sequence[IngestPart | None]) -> tuple[list[SstInfo], list[JournalFile]]:
    """Every SST (data and index) and journal object the parts name."""
    live = [p for p in parts if p is not None]
    return [s for p in live for s in (*p.ssts, *p.index_ssts)], [j for p in live for j in p.journal]


def _pylist(arr: Any) -> list[bytes]:
    """An Arrow binary or string column as a list of bytes."""
    import pyarrow as pa

    if isinstance(arr, (list, tuple)):
        return list(arr)
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        arr = arr.cast(pa.binary() if pa.types.is_string(t) else pa.large_binary())
    return list(arr.to_pylist())


INGEST_DROP_CACHE_MIN_BYTES = 1 << 20


def open_ingest_store(
    url: str,
    *,
    store_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    keep_page_cache: bool = False,
) -> ObjectStore:
    """The store stack a task writes through (retries and accounting included).

    In a local directory, objects of a MiB or more leave the OS page cache as
    they are written unless ``keep_page_cache`` is set: a bulk load is seldom
    read back at once and should not push the working set out of the cache,
    and filling fresh cache pages cost an ingest task about as much CPU as
    building its SSTs (docs/store.md, ``LocalObstoreStore._write_uncached``).
    """
    store = open_store(url, **dict(store_options or {}))
    if not keep_page_cache and isinstance(store, LocalObstoreStore):
        store.drop_cache_min_bytes = INGEST_DROP_CACHE_MIN_BYTES
    return open_stack(None, store, None, settings or Settings(), SYSTEM_CLOCK, random.Random())


__all__ = [
    "PartWriter",
    "bloom_filter_bytes",
    "delete_outputs",
    "part_outputs",
    "open_ingest_store",
    "write_part",
]

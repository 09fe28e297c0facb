"""Running one compaction: merge source SSTs into the SSTs of one sorted run.

What the output keeps, and why that is safe
-------------------------------------------
Only the newest version of each key survives. Older versions are still
readable by everyone who may need them, because nobody reads "the tree" in
the abstract: a reader reads the SSTs of one manifest version. The writer's
snapshots and scans pin their view (its memtables plus one manifest's SSTs)
and the writer keeps a checkpoint on that manifest until they close; other
processes read through checkpoints; and the garbage collector deletes no SST
that a live checkpoint's manifest references. So the old SSTs, with their old
versions, outlive every reader that could want them, and the new run never
needs them.

Tombstones are dropped only when the output is the *bottom* of the tree (no
sorted run older than the sources): elsewhere a tombstone still hides older
versions in lower runs. Entries whose expiry (``FLAG_EXPIRY``) has passed, by
the injected clock, are dropped at the bottom and turned into tombstones
elsewhere, for the same reason: dropping an expired value above an older,
unexpired one would bring the older one back.

How it is fast
--------------
Per-row Python work is what costs in CPython, so rows move in columns.
Each source (one L0 SST, or one sorted run) is read forward with large ranged
GETs and decoded block by block. The key space is cut into *chunks* of about
``chunk_bytes`` of input at block boundaries; for a chunk, every source's
columns are concatenated and the newest version of each key is found with one
``dict.update`` per source (oldest source first, so newer sources overwrite)
and one ``sorted`` of the surviving keys; the columns are then gathered with
``map(list.__getitem__, ...)`` and handed to ``SstBuilder.add_many``. Only
entries that are not plain values (tombstones, expiring entries) get a
per-row look.

Output SSTs are cut at ``max_sst_size_bytes``, always between two keys (one
key's versions never straddle SSTs, so a reader of a run finds a key in at
most one SST) and written as ``compacted/<ULID>.sst``.

The column primitives (source cursors, chunk cuts, the newest-version merge,
dropping dead and covered rows) live in ``engine/columns.py``: bulk checkpoint
reads use them too, and sit beside compaction rather than above it.

Subcompactions
--------------
:meth:`Executor.plan_ranges` splits the key space into up to N ranges of
similar input size, using the sources' block boundaries (SST boundaries are
too coarse when the sources are L0 SSTs spanning the whole key space).
:meth:`Executor.execute_range` compacts one range and needs nothing but the
spec, so ranges can run in threads here or as Spark tasks elsewhere; the
ranges' outputs, concatenated in key order, form one sorted run.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add

from ..clock import Clock
from ..engine.columns import (
    Columns,
    SourceCursor,
    block_span,
    chunk_cuts,
    drop_covered,
    drop_dead,
    merge_columns,
)
from ..engine.history import merge_history
from ..engine.merging import Folder, complete_columns, fold_columns, has_merges, plain_base_value, uncumulate
from ..engine.sstable import SstSplitter, put_new_sst, read_sst_meta
from ..errors import CorruptionError
from ..format import paths
from ..format.range_dels import EMPTY
from ..format.row import KIND_MERGE
from ..format.sst import (
    ENTRY_OVERHEAD,
    SST_TABLE,
    SstBuilder,
    SstMeta,
    SstProps,
)
from ..manifest.model import SstInfo
from ..store.base import ObjectStore
from ..store.parallel import Progress
from .index_rdels import data_fragments, drop_deleted_terms
from .merge_bases import BelowReader, below_rows, without
from .range_dels import Placer, has_range_dels, retained, source_fragments
from .scheduler import CompactionSpec

log = logging.getLogger("shaledb.compaction")

KeyRange = tuple[bytes | None, bytes | None]
"""``[lo, hi)``; None is unbounded."""


@dataclass
class RangeResult:
    """The output of one key range of a compaction."""

    lo: bytes | None
    hi: bytes | None
    ssts: list[SstInfo] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    entries_read: int = 0
    entries_written: int = 0


@dataclass
class ExecResult:
    """The output of a whole compaction: the new run's SSTs, in key order."""

    spec: CompactionSpec
    ssts: tuple[SstInfo, ...]
    bytes_read: int
    bytes_written: int
    entries_read: int
    entries_written: int
    ranges: int
    duration_s: float

    @property
    def input_bytes(self) -> int:
        return self.spec.input_bytes


def own_operands(cols: Columns) -> Columns:
    """Versions kept by a history window: a merge without a base holds only the operands
    its next older kept version does not (``complete_columns`` made them cumulative)."""
    keys, seqs, kinds, pays = cols
    kl, pl = list(kinds), list(pays)
    uncumulate(keys, kl, pl)
    return keys, seqs, bytes(kl), pl


UNFOLDABLE_WARNED_MAX = 4096
"""Keys an executor remembers having warned about (beyond that, each new one warns again)."""


def fold_merges(
    folder: Folder | None, cols: Columns, bottom: bool, now_ms: int, warned: set[bytes] | None = None
) -> Columns:
    """Merge entries of ``cols`` (made self-contained) folded into values where safe; one
    the operator refuses stays unfolded, with a warning (see ``fold_columns``).

    ``warned``: keys already warned about (the executor's, so per database and process).
    An unfoldable key stays so until it is overwritten, and every compaction of its range
    meets it again: the warning is for news, repeats go to DEBUG.
    """
    failed: list[bytes] = []
    out = fold_columns(cols, bottom=bottom, folder=folder, base_value=plain_base_value(now_ms), failed=failed)
    if failed:
        new = failed if warned is None else [k for k in failed if k not in warned]
        if warned is not None and len(warned) < UNFOLDABLE_WARNED_MAX:
            warned.update(new)
        name = folder.op.name if folder is not None and folder.op is not None else "?"
        log.log(
            logging.WARNING if new else logging.DEBUG,
            "merge operator %r refused to fold %d key(s), first %r: kept unfolded (compaction goes on); "
            "reads of those keys raise MergeOperatorFailed until they are overwritten or deleted%s",
            name,
            len(failed),
            (new or failed)[0][:64],
            "" if new else " (warned before)",
        )
    return out


class _Output:
    """The output SSTs of one range, cut at the size limit (:class:`SstSplitter`)."""

    def __init__(self, ex: Executor, res: RangeResult, placer: Placer | None = None) -> None:
        self.ex = ex
        self.res = res
        self.ssts = SstSplitter(ex.max_sst_size_bytes, ex.new_builder, self._emit)
        self.placer = placer
        """Range tombstones to hand the SSTs (``range_dels.py``); None: the sources have none."""
        self._final = False

    def add(self, cols: Columns) -> None:
        keys, seqs, kinds, pays = cols
        n = len(keys)
        if not n:
            return
        cum = list(accumulate(map(add, map(add, map(len, keys), map(len, pays)), repeat(ENTRY_OVERHEAD, n))))

        def fill(b: SstBuilder, lo: int, hi: int) -> None:
            b.add_many(keys[lo:hi], seqs[lo:hi], kinds[lo:hi], pays[lo:hi])

        self.ssts.place(cum, n, fill, keys)
        self.res.entries_written += n

    def finish(self) -> None:
        self._final = True
        self.ssts.finish()
        if self.placer is not None and self.placer.pending:
            self._emit(self.ex.new_builder())  # an SST of range tombstones only

    def _emit(self, b: SstBuilder) -> None:
        if self.placer is not None:
            self.placer.attach(b, b.last_key, self._final)
        data, props = b.finish_buffer()
        self.res.ssts.append(self.ex.write_sst(data, props))
        self.res.bytes_written += len(data)


class Executor:
    """Executes compaction specs against one store (see module docstring).

    ``heartbeat`` callables passed to the execute methods are called between
    chunks (the compactor renews its job lease there). Thread-safe.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Clock,
        rng: random.Random,
        block_size: int,
        codec: int,
        bloom_bits_per_key: int,
        max_sst_size_bytes: int,
        chunk_bytes: int = 4 * 1024 * 1024,
        read_ahead_bytes: int = 4 * 1024 * 1024,
        resolve: Callable[[int], ObjectStore] | None = None,
    ) -> None:
        self.store = store
        self.resolve = resolve
        """Store of sources with ``SstInfo.db > 0`` (a clone's ancestors); outputs go to ``store``."""
        self.clock = clock
        self._rng = rng
        self._rng_lock = threading.Lock()
        self.ids_not_before_s = 0.0
        """Outputs' ULID times are never earlier (:meth:`Compactor.execute_range`'s ``lease_id``)."""
        self.block_size = block_size
        self.codec = codec
        self.bloom_bits_per_key = bloom_bits_per_key
        self.max_sst_size_bytes = max_sst_size_bytes
        self.chunk_bytes = chunk_bytes
        self.read_ahead_bytes = read_ahead_bytes
        self._metas: dict[str, SstMeta] = {}
        self._meta_lock = threading.Lock()
        self.folder_for: Callable[[], Folder | None] = lambda: None
        """The merge operator to fold merge entries with (``shaledb.engine.merging``)."""
        self.unfoldable_warned: set[bytes] = set()
        """Keys whose unfoldable merges were logged at WARNING (``fold_merges``)."""

    # --------------------------------------------------------------- helpers

    def source_store(self, info: SstInfo) -> ObjectStore:
        """The store holding source SST ``info`` (a clone reads its ancestors' SSTs)."""
        if not info.db:
            return self.store
        if self.resolve is None:
            raise CorruptionError(f"SST {info.id} belongs to external database #{info.db}")
        return self.resolve(info.db)

    def meta(self, info: SstInfo) -> SstMeta:
        with self._meta_lock:
            m = self._metas.get(info.id)
        if m is None:
            m = read_sst_meta(self.source_store(info), info)
            with self._meta_lock:
                self._metas[info.id] = m
        return m

    def forget(self, spec: CompactionSpec) -> None:
        """Drop cached metadata of ``spec``'s sources."""
        with self._meta_lock:
            for s in spec.ssts:
                self._metas.pop(s.id, None)

    def _random(self, bits: int) -> int:
        with self._rng_lock:
            return self._rng.getrandbits(bits)

    def new_builder(self) -> SstBuilder:
        return SstBuilder(
            kind=SST_TABLE,
            block_size=self.block_size,
            codec=self.codec,
            bloom_bits_per_key=self.bloom_bits_per_key,
            created_at_ms=int(self.clock.now() * 1000),
            nonce=self._random(128).to_bytes(16, "little"),
        )

    def write_sst(self, data: bytes | bytearray, props: SstProps) -> SstInfo:
        return put_new_sst(self.store, data, props, self._new_id)

    def _new_id(self) -> str:
        with self._rng_lock:
            return paths.new_ulid(max(self.clock.now(), self.ids_not_before_s), self._rng)

    def cursors(self, spec: CompactionSpec, lo: bytes | None, hi: bytes | None) -> list[SourceCursor]:
        """One cursor per source of ``spec`` within ``[lo, hi)``, oldest source first."""
        return [
            SourceCursor(
                ssts, lo, hi, meta=self.meta, store_for=self.source_store, read_ahead=self.read_ahead_bytes
            )
            for ssts in reversed(spec.sources())
        ]

    def _blocks(self, cursors: list[SourceCursor]) -> list[tuple[bytes, int]]:
        return [b for c in cursors for b in c.blocks()]

    # --------------------------------------------------------------- planning

    def plan_ranges(self, spec: CompactionSpec, n: int) -> list[KeyRange]:
        """Up to ``n`` key ranges of similar input size covering the whole key space."""
        if n <= 1 or has_range_dels(spec):  # (range tombstones: one range, see range_dels.py)
            return [(None, None)]
        blocks = self._blocks(self.cursors(spec, None, None))
        total = sum(s for _, s in blocks)
        if not blocks or total == 0:
            return [(None, None)]
        cuts = chunk_cuts(blocks, max(1, -(-total // n)), None, None)[: n - 1]
        bounds: list[bytes | None] = [None, *cuts, None]
        return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]

    # --------------------------------------------------------------- execution

    def execute_range(
        self,
        spec: CompactionSpec,
        lo: bytes | None,
        hi: bytes | None,
        *,
        heartbeat: Callable[[], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> RangeResult:
        """Compact the rows of ``spec`` with ``lo <= key < hi`` into new SSTs.

        ``progress`` gets the input bytes read so far after each chunk. On
        failure the SSTs this call wrote are deleted (best effort; a crash
        leaves them for the garbage collector) and the error is raised.
        """
        res = RangeResult(lo, hi)
        now_ms = int(self.clock.now() * 1000)
        cursors = self.cursors(spec, lo, hi)
        frags = source_fragments(spec, self.meta).clip(lo, hi) if has_range_dels(spec) else EMPTY
        placer = (
            Placer(retained(frags, spec.history_floor, spec.bottom, spec.range_dels_keep_above))
            if frags
            else None
        )
        dfrags = data_fragments(spec.data_range_dels, self.meta) if spec.data_range_dels else None
        below = BelowReader(spec.below, self.meta, self.source_store) if spec.below else None
        out = _Output(self, res, placer)
        try:
            cuts = chunk_cuts(self._blocks(cursors), self.chunk_bytes, lo, hi)
            for upto in [*cuts, None]:
                cols = [c.take(upto) for c in cursors]
                if has_merges(cols):  # every merge version self-contained, then folded where safe
                    done = complete_columns(cols, frags)  # (a range tombstone is a base)
                    if below is not None:  # hot merges get their base from the runs below
                        extra = below_rows(done, below)
                        if extra[0]:
                            done = without(complete_columns([extra, *cols], frags), extra)
                    cols = [done]
                    folded = fold_merges(
                        self.folder_for(), cols[0], spec.bottom, now_ms, self.unfoldable_warned
                    )
                    cols = [folded]
                if spec.history_floor is not None:
                    merged = merge_history(cols, spec.history_floor, bottom=spec.bottom, now_ms=now_ms)
                    if KIND_MERGE in merged[2]:
                        merged = own_operands(merged)
                else:
                    merged = drop_dead(merge_columns(cols), bottom=spec.bottom, now_ms=now_ms)
                if dfrags:  # index terms of range-deleted keys (index_rdels.py)
                    merged = drop_deleted_terms(merged, dfrags, spec.history_floor)
                out.add(drop_covered(merged, frags, spec.history_floor) if frags else merged)
                if heartbeat is not None:
                    heartbeat()
                if progress is not None:
                    progress(sum(c.bytes_read for c in cursors))
            out.finish()
        except BaseException:
            self.discard(res.ssts)
            raise
        res.bytes_read = sum(c.bytes_read for c in cursors)
        res.entries_read = sum(c.rows for c in cursors)
        return res

    def execute(
        self,
        spec: CompactionSpec,
        *,
        max_subcompactions: int = 1,
        heartbeat: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> ExecResult:
        """Compact ``spec`` (split into up to ``max_subcompactions`` parallel ranges).

        ``progress(bytes read, input bytes)`` is called as the ranges advance.
        """
        started = self.clock.monotonic()
        try:
            ranges = self.plan_ranges(spec, max_subcompactions)
            tally = _Tally(len(ranges), spec.input_bytes, progress)
            if len(ranges) == 1:
                results = [self.execute_range(spec, *ranges[0], heartbeat=heartbeat, progress=tally.sink(0))]
            else:
                with ThreadPoolExecutor(len(ranges), thread_name_prefix="shaledb-subcompaction") as pool:
                    futures = [
                        pool.submit(
                            self.execute_range, spec, lo, hi, heartbeat=heartbeat, progress=tally.sink(i)
                        )
                        for i, (lo, hi) in enumerate(ranges)
                    ]
                    results = []
                    error: BaseException | None = None
                    for f in futures:
                        try:
                            results.append(f.result())
                        except BaseException as exc:  # noqa: BLE001 - re-raised below
                            error = error or exc
                    if error is not None:
                        for r in results:
                            self.discard(r.ssts)
                        raise error
        finally:
            self.forget(spec)
        ssts = tuple(s for r in results for s in r.ssts)
        if progress is not None:
            progress(spec.input_bytes, spec.input_bytes)  # what was read may differ from the SST sizes
        return ExecResult(
            spec=spec,
            ssts=ssts,
            bytes_read=sum(r.bytes_read for r in results),
            bytes_written=sum(r.bytes_written for r in results),
            entries_read=sum(r.entries_read for r in results),
            entries_written=sum(r.entries_written for r in results),
            ranges=len(ranges),
            duration_s=self.clock.monotonic() - started,
        )

    def discard(self, ssts: Sequence[SstInfo]) -> None:
        """Delete output SSTs that will never be committed (best effort)."""
        try:
            self.store.delete_many([paths.sst_path(s.id) for s in ssts])
        except Exception as exc:  # noqa: BLE001 - GC removes what we could not
            log.warning("could not delete %d unused compaction outputs: %s", len(ssts), exc)


class _Tally:
    """Sums the bytes read by parallel ranges into one ``progress(done, total)``."""

    def __init__(self, ranges: int, total: int, progress: Progress | None) -> None:
        self._done = [0] * ranges
        self._total = total
        self._progress = progress
        self._lock = threading.Lock()

    def sink(self, i: int) -> Callable[[int], None] | None:
        if self._progress is None:
            return None
        progress = self._progress

        def report(read: int) -> None:
            with self._lock:  # held while reporting too: one line drawn at a time
                self._done[i] = read
                progress(min(sum(self._done), self._total), self._total)

        return report


__all__ = [
    "block_span",
    "ExecResult",
    "Executor",
    "KeyRange",
    "RangeResult",
    "SourceCursor",
    "chunk_cuts",
    "drop_dead",
    "merge_columns",
]

"""Range partitioning through the store: how a bulk load spreads rows over key ranges.

A bulk load's parts must cover disjoint key ranges so their SSTs form one
sorted run. Spark's way there (sample the input in one job, shuffle every row
through its block manager, hand each range to Python) cost 1.6-1.9x a whole
Parquet write of the same rows on local[2] before a writer ran at all; the
rows cross into Python only once either way, so here they cross first and
move between tasks as Arrow data in the store the SSTs go to anyway:

1. **stage** (:func:`stage_run`, one task per input partition): the
   partition, already sorted by key, is written as one Arrow IPC stream
   under ``tmp/stage/<exchange id>/`` (the ingest lease's ULID) in batches of ``STAGE_BATCH_ROWS`` rows. The
   task returns a :class:`StagedRun`: each batch's first and last key, byte
   range and CRC32C, and sample keys spaced evenly through the run.
2. **cut** (:func:`choose_bounds`, :func:`assign`, on the driver): part
   boundaries at weighted quantiles of all samples (no extra pass over the
   input, which Spark's sampling job recomputes when it is not cached); each
   part gets the batches that may hold its keys.
3. **gather** (:func:`gather`, one task per part): the needed batches of
   each run in one ``get_ranges`` call (remote stores coalesce adjacent
   ranges into one request), CRCs checked, the edge batches trimmed to the
   part's range; the caller sorts the rows (numpy, one pass) and writes SSTs.

A staged run is read only by the load that wrote it, within its lease, so
its format is Arrow's own (``docs/format/staged-run.md``); the CRCs and key
bounds travel outside it, in the driver's hands. The load deletes its
prefix when it ends; a load that dies leaves the runs to the garbage
collector, which keeps them while the ingest lease lives.

Needs pyarrow and numpy (the spark extra).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import CorruptionError, InvalidArgument
from ...format import paths
from ...format.coding import crc32c_extend, crc32c_extend_view
from ...keys import split_points
from .arrow import contiguous

if TYPE_CHECKING:
    from ...store.base import ObjectStore

STAGE_BATCH_ROWS = 8192
"""Rows per staged batch: a gather reads at most two batches per run beyond its range."""

SAMPLES_PER_PART = 20
"""Sample keys per run and part (what Spark's range partitioner draws per output partition)."""

_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # Arrow IPC end-of-stream marker


@dataclass(frozen=True)
class StagedBatch:
    """One record batch of a staged run: its keys' span and where its IPC message lies."""

    first_key: bytes
    last_key: bytes
    start: int
    end: int
    crc: int
    """CRC32C of the message bytes ``[start, end)``."""


@dataclass(frozen=True)
class StagedRun:
    """One input partition, sorted and staged (what a stage task returns to the driver)."""

    path: str
    schema: bytes
    """The stream's schema message (also its first bytes)."""
    rows: int
    batches: tuple[StagedBatch, ...]
    samples: tuple[bytes, ...]


@dataclass(frozen=True)
class GatherTask:
    """One part's share of every run: keys in ``[lo, hi)`` (None: unbounded)."""

    part: int
    lo: bytes | None
    hi: bytes | None
    runs: tuple[tuple[StagedRun, tuple[StagedBatch, ...]], ...]


def _binary_keys(table: Any, key: str) -> Any:
    import pyarrow as pa

    keys = contiguous(table.column(key))
    if not pa.types.is_binary(keys.type):
        raise InvalidArgument(f"staged keys must be a binary column, got {keys.type}")
    return keys


def stage_run(
    store: ObjectStore,
    table: Any,
    *,
    exchange_id: str,
    parts: int,
    key: str = "key",
    batch_rows: int = STAGE_BATCH_ROWS,
    clock: Clock | None = None,
    rng: random.Random | None = None,
) -> StagedRun | None:
    """Write ``table`` (sorted by its binary ``key`` column) as one staged run; None if empty."""
    import numpy as np

    n = table.num_rows
    if not n:
        return None
    if batch_rows < 1 or parts < 1:
        raise InvalidArgument("batch_rows and parts must be positive")
    keys = _binary_keys(table, key)
    clock = clock or SYSTEM_CLOCK
    # Never born before the exchange's lease started (its id), whatever this task's clock says:
    # the garbage collector keeps staged runs born after a live lease started.
    born = max(clock.now(), paths.ulid_time_s(exchange_id))
    path = paths.stage_path(exchange_id, paths.new_ulid(born, rng or random.Random()))
    batches = [b for b in table.to_batches(max_chunksize=batch_rows) if b.num_rows]
    view, ends = _ipc_stream(table.schema, batches)
    staged = []
    row = 0
    for batch, start, end in zip(batches, ends, ends[1:]):
        last = row + batch.num_rows - 1
        crc = crc32c_extend_view(0, view[start:end])
        staged.append(StagedBatch(keys[row].as_py(), keys[last].as_py(), start, end, crc))
        row = last + 1
    store.put(path, view)
    k = min(n, SAMPLES_PER_PART * parts)
    samples = keys.take(np.arange(k, dtype=np.int64) * n // k).to_pylist()
    return StagedRun(path, bytes(view[: ends[0]]), n, tuple(staged), tuple(samples))


def _ipc_stream(schema: Any, batches: Sequence[Any]) -> tuple[memoryview, list[int]]:
    """``batches`` as one Arrow IPC stream, and the offsets where its schema and each
    batch end.

    Written once, straight into one buffer of the exact size (Arrow's own size
    of each batch's message): serializing batch by batch and joining copied
    every byte twice more, and where fresh pages cost 2.5 ms per MB
    (docs/benchmarks.md, "page cost") each copy of a part costs more than its
    sort.
    """
    import pyarrow as pa

    head = schema.serialize().size
    size = head + sum(pa.ipc.get_record_batch_size(b) for b in batches) + len(_EOS)
    buf = pa.allocate_buffer(size)
    sink = pa.FixedSizeBufferWriter(buf)
    ends = [head]
    with pa.ipc.new_stream(sink, schema) as writer:
        for b in batches:
            writer.write_batch(b)
            ends.append(sink.tell())
    if sink.tell() != size or ends[1] - head != pa.ipc.get_record_batch_size(batches[0]):
        raise AssertionError(f"Arrow wrote a {sink.tell()}-byte stream, not the {size} bytes it sized")
    return memoryview(buf).cast("B"), ends


def choose_bounds(runs: Sequence[StagedRun], parts: int) -> list[bytes]:
    """At most ``parts - 1`` ascending distinct keys that split the runs' rows evenly.

    Each run's samples stand for ``rows / len(samples)`` rows, so a large run
    pulls the bounds as much as its size says (``keys.split_points`` of the
    samples as one-key ranges).
    """
    return split_points([(s, s, r.rows / len(r.samples)) for r in runs for s in r.samples], parts)


def assign(runs: Sequence[StagedRun], bounds: Sequence[bytes]) -> list[GatherTask]:
    """One task per key range between ``bounds``, with the batches of each run it may need."""
    edges: list[bytes | None] = [None, *bounds, None]
    tasks = []
    for part in range(len(edges) - 1):
        lo, hi = edges[part], edges[part + 1]
        shares = []
        for run in runs:
            lasts = [b.last_key for b in run.batches]
            firsts = [b.first_key for b in run.batches]
            a = 0 if lo is None else bisect_left(lasts, lo)
            z = len(firsts) if hi is None else bisect_left(firsts, hi)
            if a < z:
                shares.append((run, run.batches[a:z]))
        tasks.append(GatherTask(part, lo, hi, tuple(shares)))
    return tasks


def _lower_bound(keys: Any, key: bytes) -> int:
    """Index of the first of the sorted Arrow ``keys`` not below ``key``."""
    return bisect_left(keys, key, key=lambda k: k.as_py())


def gather(store: ObjectStore, task: GatherTask, *, key: str = "key") -> Any:
    """The rows of ``task``'s range from every run, run after run (not sorted across runs);
    None when no run has any.

    Raises:
        CorruptionError: a staged batch's bytes do not match its CRC32C.
        ObjectNotFound: a staged run is gone (the load's lease lapsed and GC took it).
    """
    import pyarrow as pa

    tables = []
    for run, batches in task.runs:
        schema = pa.ipc.read_schema(pa.py_buffer(run.schema))
        # One range per batch (remote stores coalesce adjacent ones into one request): each
        # message is checked and wrapped as it is, with no slicing of a run-sized buffer.
        got = []
        for b, msg in zip(batches, store.get_ranges(run.path, [(b.start, b.end) for b in batches])):
            if len(msg) != b.end - b.start or crc32c_extend(0, msg) != b.crc:
                raise CorruptionError(
                    f"staged batch [{b.start}, {b.end}) does not match its checksum", run.path
                )
            got.append(pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(msg)), schema))
        t = pa.Table.from_batches(got, schema)
        keys = t.column(key)
        a = 0 if task.lo is None or batches[0].first_key >= task.lo else _lower_bound(keys, task.lo)
        z = len(keys) if task.hi is None or batches[-1].last_key < task.hi else _lower_bound(keys, task.hi)
        tables.append(t.slice(a, z - a))
    if not tables:
        return None
    return pa.concat_tables(tables)


def new_exchange_id(
    lease_id: str | None, clock: Clock | None = None, rng: random.Random | None = None
) -> str:
    """The name of a load's staging prefix: its lease's id, or a fresh ULID for a re-run
    of a committed id (which takes no lease and only fingerprints its rows)."""
    if lease_id is not None:
        return lease_id
    return paths.new_ulid((clock or SYSTEM_CLOCK).now(), rng or random.Random())


def delete_staged(store: ObjectStore, exchange_id: str) -> int:
    """Delete every staged run of the exchange ``exchange_id``; returns how many."""
    doomed = [m.path for m in store.list(paths.stage_prefix(exchange_id))]
    if doomed:
        store.delete_many(doomed)
    return len(doomed)


__all__ = [
    "SAMPLES_PER_PART",
    "STAGE_BATCH_ROWS",
    "GatherTask",
    "StagedBatch",
    "StagedRun",
    "assign",
    "choose_bounds",
    "delete_staged",
    "gather",
    "new_exchange_id",
    "stage_run",
]

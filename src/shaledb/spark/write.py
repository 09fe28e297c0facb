"""The writing half of the "shaledb" data source: what a batch write's tasks and commit do,
and what the stream sink (``shaledb.spark.sink``) and the store exchange (``shaledb.spark.load``)
reuse.

``writer()`` (in ``shaledb.spark.source``) calls :func:`begin_write`, which begins an ingest
(:func:`shaledb.bulk.ingest.begin_ingest`; a claim fences a live writer at planning time, before
any task). Each task turns its partition into columns with :func:`encode_partition` (keys and
values as binary, sorted by key, duplicates resolved by ``order_by`` when asked) and then into
SSTs with a :class:`~shaledb.bulk.ingest.PartWriter` (the columnar ``add_arrow`` path for plain
keys and values; chunks of rows through ``add`` with metadata, index terms, or when the plan
asks for it, e.g. values separated into journal objects). :class:`ShaleWriter`'s ``commit()``
calls :func:`shaledb.bulk.ingest.commit_ingest` with one message per partition (``abort()``
deletes what finished tasks wrote).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

from ..bulk.ingest import (
    IngestPart,
    IngestPlan,
    PartWriter,
    abort_ingest,
    begin_ingest,
    commit_ingest,
    contiguous,
    open_ingest_store,
    sort_indices,
)
from ..bulk.ingest.exchange import GatherTask, StagedRun, gather, stage_run
from ..bulk.ingest.model import JobLease
from ..errors import InvalidArgument
from ..settings import Settings
from ..settings_load import load_settings
from ..store import ObjectStore
from .schema import TABLE_COPY, WriteOptions, json_column

log = logging.getLogger("shaledb.spark")

CHUNK_ROWS = 65536
"""Rows handed to the PartWriter at a time (bounds the Python lists alive at once)."""


def simple_type(dt: Any) -> str:
    if isinstance(dt, BinaryType):
        return "binary"
    if isinstance(dt, StringType):  # collated strings too ("string collate ...")
        return "string"
    if isinstance(dt, ArrayType):
        return f"array<{simple_type(dt.elementType)}>"
    return str(dt.simpleString())


def write_options(schema: StructType, options: Mapping[str, str]) -> WriteOptions:
    """``options`` checked against the columns of ``schema``."""
    return WriteOptions.parse(options, {f.name: simple_type(f.dataType) for f in schema.fields})


def write_settings(opts: WriteOptions) -> Settings:
    """The settings a write uses: ``SHALEDB_SETTINGS_FILE``, ``SHALEDB_*`` variables, then the
    write's own options (SST format, value separation)."""
    tuned = ("block_size_bytes", "compression", "bloom_bits_per_key", "value_separation_threshold")
    changes = {k: v for k in tuned if (v := getattr(opts, k)) is not None}
    return load_settings(Settings, **changes)


def begin_write(opts: WriteOptions, lease: JobLease | None = None) -> IngestPlan | None:
    """The ingest's plan (:func:`shaledb.bulk.ingest.begin_ingest` with the options' settings;
    ``lease``: one the caller took, which the ingest adopts); None when save mode ``ignore``
    finds data (then nothing is written)."""
    if opts.save_mode == "ignore" and _holds_data(opts):
        log.info("shaledb write to %s: the database holds data, save mode ignore writes nothing", opts.url)
        return None
    settings = write_settings(opts)
    return begin_ingest(
        opts.url,
        ingest_id=opts.ingest_id,
        behind=opts.behind,
        duplicates="error",  # on_duplicate last/first is resolved by each task (order_by)
        overwrite=opts.save_mode == "overwrite",
        require_empty=opts.save_mode == "errorifexists",
        settings=settings,
        index_fields=opts.index_columns,
        max_sst_size_bytes=opts.max_sst_size_bytes,
        lease_s=opts.lease_s,
        store_options=opts.store,
        lease=lease,
    )


def _holds_data(opts: WriteOptions) -> bool:
    from .. import admin
    from ..bulk.ingest.model import holds_data
    from ..errors import NotFound

    try:
        return holds_data(admin.read_manifest(opts.url, store_options=opts.store))
    except NotFound:
        return False


# ------------------------------------------------------------------- writing


class SkipWriter(DataSourceArrowWriter):
    """Save mode ``ignore`` on a database that holds data: the tasks read nothing, nothing commits."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return WriterCommitMessage()

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        return None


@dataclass(frozen=True)
class _Columns:
    """One partition's columns, sorted by key and aligned row for row."""

    keys: pa.Array
    values: pa.Array
    metas: pa.Array | None
    terms: dict[str, pa.Array]
    """Index field -> binary (one term or null) or list-of-binary column."""

    def staged(self) -> pa.Table:
        """The columns as a staged run's table (``docs/format/staged-run.md``)."""
        cols = {"key": self.keys, "value": self.values}
        if self.metas is not None:
            cols["metadata"] = self.metas
        cols.update({f"term:{name}": col for name, col in self.terms.items()})
        return pa.table(cols)

    @classmethod
    def from_staged(cls, table: pa.Table, opts: WriteOptions) -> _Columns:
        """:meth:`staged`'s inverse, for a table of the columns ``opts`` asks for."""

        def col(name: str) -> pa.Array:
            return contiguous(table.column(name))

        metas = col("metadata") if opts.metadata is not None else None
        return cls(col("key"), col("value"), metas, {n: col(f"term:{n}") for n in opts.index_columns})


@dataclass
class ShaleCommitMessage(WriterCommitMessage):
    """One task's output, sent to ``commit()``."""

    part: IngestPart


def _binary(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = contiguous(col)
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary() if pa.types.is_string(arr.type) else pa.large_binary())
    elif pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.binary())
    return arr


def _term_column(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """An index column as terms: binary (null: no term) or a list of binary per row.

    Strings become their UTF-8 bytes; nulls, empty strings and (in lists) null
    elements are no term -- the engine's terms are non-empty bytes. All in
    Arrow kernels; the result's ``to_pylist()`` is what ``PartWriter.add`` takes.
    """
    arr = contiguous(col)
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        if pa.types.is_list_view(t):
            arr = arr.cast(pa.list_(t.value_type))
        n = len(arr)
        bounds = arr.offsets  # of this slice; a null list may still span elements
        lo, hi = bounds[0].as_py(), bounds[n].as_py()
        values = _binary(arr.values.slice(lo, hi - lo))  # every element, in row order
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)  # row of each element
        keep = pc.fill_null(pc.greater(pc.binary_length(values), 0), False).to_numpy(zero_copy_only=False)
        if arr.null_count:
            keep &= arr.is_valid().to_numpy(zero_copy_only=False)[parents]
        counts = np.bincount(parents[keep], minlength=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return pa.LargeListArray.from_arrays(pa.array(offsets), values.filter(pa.array(keep)))
    binary = _binary(arr)
    if not (pa.types.is_binary(binary.type) or pa.types.is_large_binary(binary.type)):
        raise InvalidArgument(f"an index column has type {t}, not string, binary or a list of them")
    empty = pc.equal(pc.binary_length(binary), 0)
    if pc.any(empty).as_py():
        binary = pc.if_else(empty, pa.scalar(None, binary.type), binary)
    return binary


def task_context() -> tuple[int, int, str]:
    """This Spark task's partition id, attempt number and a label naming it ("local" outside Spark)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return 0, 0, "local"
    attempt = tc.attemptNumber()
    return tc.partitionId(), attempt, f"stage {tc.stageId()} attempt {attempt} task {tc.taskAttemptId()}"


def _resolve_duplicates(table: pa.Table, o: WriteOptions, cols: _Columns) -> _Columns:
    """Sort by key then the ``order_by`` columns and keep the last (or first) row of each key."""
    sort = pa.table({"k": cols.keys, **{f"o{i}": table.column(c) for i, c in enumerate(o.order_by)}})
    order = pc.sort_indices(
        sort, sort_keys=[("k", "ascending")] + [(f"o{i}", "ascending") for i in range(len(o.order_by))]
    )
    keys = cols.keys.take(order)
    n = len(keys)
    differ = pc.not_equal(keys.slice(1), keys.slice(0, n - 1))
    if o.duplicates == "last":  # the last of each key: the next key differs
        keep = pa.concat_arrays([differ, pa.array([True])])
    else:
        keep = pa.concat_arrays([pa.array([True]), differ])
    if o.duplicates == "error" and not pc.all(keep).as_py():
        dup = keys.filter(pc.invert(keep))[0].as_py()
        raise InvalidArgument(f"key {dup!r:.80} appears more than once in this ingest")
    order = order.filter(keep)
    return _Columns(
        cols.keys.take(order),
        cols.values.take(order),
        None if cols.metas is None else cols.metas.take(order),
        {name: col.take(order) for name, col in cols.terms.items()},
    )


def encode_partition(o: WriteOptions, table: pa.Table, pid: int) -> _Columns:
    """Partition ``pid``'s rows as the write's columns, sorted by key (duplicates resolved by
    ``order_by`` when asked): what a batch write's and a stream's tasks both do first."""
    if table.num_rows == 0:
        empty = pa.array([], pa.binary())
        return _Columns(empty, empty, None, {})
    if o.from_table and "seq" in table.column_names and table.column("seq").null_count < table.num_rows:
        raise InvalidArgument(f"partition {pid}: " + TABLE_COPY.format(url=o.url))
    keys = _binary(table.column(o.key))
    if keys.null_count:
        raise InvalidArgument(f"partition {pid}: the key column {o.key!r} has nulls")
    if o.value is not None:
        values = _binary(table.column(o.value))
        if values.null_count:
            raise InvalidArgument(f"partition {pid}: the value column {o.value!r} has nulls")
    else:
        values = json_column(table.select(list(o.value_columns)))
    metas = _binary(table.column(o.metadata)) if o.metadata is not None else None
    terms = {name: _term_column(table.column(name)) for name in o.index_columns}
    n = len(keys)
    if o.order_by and n > 1:
        return _resolve_duplicates(table, o, _Columns(keys, values, metas, terms))
    if n > 1 and pc.any(pc.less(keys.slice(1), keys.slice(0, n - 1))).as_py():
        # Not sorted (no sortWithinPartitions upstream): a stable sort keeps input order among equal keys.
        order = sort_indices(keys)
        keys, values = keys.take(order), values.take(order)
        metas = metas.take(order) if metas is not None else None
        terms = {name: col.take(order) for name, col in terms.items()}
    return _Columns(keys, values, metas, terms)


class ShaleWriter(DataSourceArrowWriter):
    """Writes each partition as SSTs; commits all of them in one manifest CAS."""

    def __init__(self, opts: WriteOptions, plan: IngestPlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShaleCommitMessage:
        batches = list(iterator)
        pid = task_context()[0]
        # An empty partition (e.g. fewer keys than range partitions) still sends its part.
        cols = encode_partition(self.opts, pa.Table.from_batches(batches), pid) if batches else None
        with closing(self._sst_store()) as store:
            return ShaleCommitMessage(self._task_part(store, pid, cols))

    def stage(self, batches: Iterator[pa.RecordBatch], exchange_id: str, parts: int) -> StagedRun | None:
        """A stage task of the store exchange (``shaledb.spark.load``): encode, sort, stage;
        None for an empty input partition."""
        got = list(batches)
        if not got:
            return None
        cols = encode_partition(self.opts, pa.Table.from_batches(got), task_context()[0])
        opened = open_ingest_store(self.opts.url, store_options=self.opts.store, keep_page_cache=True)
        with closing(opened) as store:
            return stage_run(store, cols.staged(), exchange_id=exchange_id, parts=parts)

    def gather(self, task: GatherTask) -> IngestPart:
        """A write task of the store exchange: the rows of one key range from every staged run."""
        with closing(self._sst_store()) as store:
            table = gather(store, task)
            if table is None:
                return self._task_part(store, task.part, None)
            table = table.take(sort_indices(contiguous(table.column("key"))))  # the runs, merged
            return self._task_part(store, task.part, _Columns.from_staged(table, self.opts))

    def _sst_store(self) -> ObjectStore:
        """The store this task writes SSTs through (and reads staged runs from); the task
        closes it: Spark reuses its Python workers, and a local store's cached descriptors
        would keep the staged runs' disk space after the driver deletes them."""
        return open_ingest_store(
            self.opts.url, store_options=self.opts.store, keep_page_cache=self.opts.keep_page_cache
        )

    def _task_part(self, store: ObjectStore, pid: int, cols: _Columns | None) -> IngestPart:
        """Part ``pid`` of this task (``cols`` None: an empty one), with the testing hooks."""
        _, attempt, label = task_context()
        if cols is None:
            return PartWriter(store, self.plan, pid, attempt=label).finish()
        part = self._write(store, pid, label, cols)
        if self.opts.duplicate_attempt:  # testing: a losing (speculative) attempt's leftovers
            self._write(store, pid, label + " (losing copy)", cols)
        if self.opts.fail_partition == pid and attempt == 0:
            raise RuntimeError(
                f"testing.fail_partition: partition {pid} fails its first attempt after writing"
            )
        return part

    def _write(self, store: Any, pid: int, label: str, cols: _Columns) -> IngestPart:
        w = PartWriter(store, self.plan, pid, attempt=label)
        try:
            if cols.metas is None and not cols.terms and not w.rows_path_needed:
                # Plain values: the columnar path, no Python object per row.
                w.add_arrow(cols.keys, cols.values)
                return w.finish()
            for start in range(0, len(cols.keys), CHUNK_ROWS):
                ks = cols.keys.slice(start, CHUNK_ROWS).to_pylist()
                vs = cols.values.slice(start, CHUNK_ROWS).to_pylist()
                ms = cols.metas.slice(start, CHUNK_ROWS).to_pylist() if cols.metas is not None else None
                ix = {name: col.slice(start, CHUNK_ROWS).to_pylist() for name, col in cols.terms.items()}
                w.add(ks, vs, ms, indexes=ix or None)
            return w.finish()
        except BaseException:
            w.abort()
            raise

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        parts = [m.part if isinstance(m, ShaleCommitMessage) else None for m in messages]
        # The plan says "error" (each task resolves on_duplicate itself); the commit's check of
        # keys that two partitions share is told the user's policy, so its advice fits it.
        plan = replace(self.plan, duplicates=self.opts.duplicates)
        commit_ingest(plan, parts, self.opts.url, store_options=self.opts.store)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        parts = [m.part if isinstance(m, ShaleCommitMessage) else None for m in messages]
        abort_ingest(self.plan, parts, self.opts.url, store_options=self.opts.store)


__all__ = [
    "CHUNK_ROWS",
    "ShaleCommitMessage",
    "ShaleWriter",
    "SkipWriter",
    "begin_write",
    "encode_partition",
    "simple_type",
    "task_context",
    "write_options",
    "write_settings",
]

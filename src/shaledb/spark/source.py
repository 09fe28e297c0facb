"""The "shaledb" Python data source: bulk ingest (writer) and checkpoint reads (reader).

Where each piece runs (PySpark 4, measured): ``DataSource.schema()`` runs
once per ``load()`` in a planner process and the source object is pickled
into every later plan of that DataFrame; ``reader()``, ``pushFilters()`` and
``partitions()`` run once per query in another planner process;
``writer()`` runs once per write; ``DataSourceArrowWriter.write()`` and
``DataSourceReader.read()`` run in the tasks; ``commit()``/``abort()`` run
in yet another process. Nothing is shared in memory: the reader's checkpoint
id and the ingest plan travel inside the pickled objects, everything else
goes through the object store.

Writes: ``writer()`` calls :func:`shaledb.bulk.ingest.begin_ingest` (so a claim
fences a live writer at planning time, before any task), each task turns its
partition into SSTs with a :class:`~shaledb.bulk.ingest.PartWriter` (the
columnar ``add_arrow`` path for plain keys and values; chunks of rows through
``add`` with metadata, index terms from ``index_columns``, or when the plan
asks for it, e.g. values separated into journal objects), and
``commit()`` calls :func:`shaledb.bulk.ingest.commit_ingest` with one message per
partition (``abort()`` deletes what finished tasks wrote).

Reads: ``schema()`` pins the version for the whole DataFrame -- the
checkpoint given with ``option("checkpoint", id)``, or a new one with
``checkpoint_lifetime_s`` (default one hour) -- so every query of one
``load()`` sees the same data. Tasks check the checkpoint before reading and
push a checkpoint the read created forward by its lifetime once half of it
has passed; after the last task it lapses by itself (there is no hook for
"the DataFrame is no longer used"). ``shaledb.spark.read_checkpoint`` is
the explicit form that deletes its checkpoint on exit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, LongType, StringType, StructField, StructType

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
from ..bulk.read import DEFAULT_INLINE_WAL_BYTES, ReadPart, ensure_checkpoint, intersect, plan_read
from ..bulk.read_arrow import read_part_arrow
from ..errors import CheckpointNotFound, InvalidArgument
from ..keys import key_after, prefix_end
from ..settings import Settings
from ..settings_load import load_settings
from ..store import ObjectStore
from .options import CATALOG_KEYS
from .schema import READ_COLUMNS, ReadOptions, WriteOptions, json_column

log = logging.getLogger("shaledb.spark")

CHUNK_ROWS = 65536
"""Rows handed to the PartWriter at a time (bounds the Python lists alive at once)."""


def _simple_type(dt: Any) -> str:
    if isinstance(dt, BinaryType):
        return "binary"
    if isinstance(dt, StringType):  # collated strings too ("string collate ...")
        return "string"
    if isinstance(dt, ArrayType):
        return f"array<{_simple_type(dt.elementType)}>"
    return str(dt.simpleString())


class ShaleDataSource(DataSource):
    """``spark.read/write.format("shaledb")`` (see module docstring and docs/spark.md)."""

    parallelism = 1
    """The session's task slots: a read plans at least this many parts, and a multiple of it."""

    @classmethod
    def for_session(cls, parallelism: int) -> type[ShaleDataSource]:
        """This source with a session's ``defaultParallelism`` (what ``register`` registers).

        The planner processes know nothing of the session; a class defined
        here is pickled by value, so the number travels with it.
        """

        class SessionShaleDataSource(cls):  # type: ignore[valid-type,misc]
            pass

        SessionShaleDataSource.parallelism = max(1, int(parallelism))
        return SessionShaleDataSource

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._pinned: tuple[str, bool] | None = None

    @classmethod
    def name(cls) -> str:
        return "shaledb"

    def schema(self) -> str | StructType:
        if "provider" in self.options:  # CREATE TABLE ... USING shaledb: the catalog keeps this
            return table_schema(self.options)
        opts = ReadOptions.parse(self.options)
        self._pinned = self._pin(opts)
        return opts.schema_ddl()

    def _pin(self, opts: ReadOptions) -> tuple[str, bool]:
        """The checkpoint every query of this DataFrame reads, and whether we created it."""
        if opts.checkpoint is not None or opts.version is not None:
            cp = resolve_checkpoint(opts)
            ensure_checkpoint(opts.url, cp, store_options=opts.store)
            return cp, False
        plan = plan_read(
            opts.url,
            partitions=1,
            lifetime_s=opts.checkpoint_lifetime_s,
            name="spark-read",
            store_options=opts.store,
        )
        log.info("shaledb read of %s pinned checkpoint %s", opts.url, plan.checkpoint_id)
        return plan.checkpoint_id, True

    def reader(self, schema: StructType) -> DataSourceReader:
        options, table = source_options(self.options, schema)
        opts = ReadOptions.parse(options)
        if self._pinned is None or table:  # a table or a user-given schema skips schema(): pin per query
            self._pinned = self._pin(opts)
        return ShaleReader(opts, *self._pinned, parallelism=self.parallelism, schema=schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The change feed as a stream (``shaledb.spark.stream``)."""
        from .stream import ShaleChangeStream

        return ShaleChangeStream(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options, table = source_options(self.options, schema)
        if table:  # a table's columns: key, value, seq (ignored), metadata
            names = {f.name for f in schema.fields}
            options = {**{c: c for c in ("value", "metadata") if c in names}, **options}
        if overwrite:
            given = options.get("save_mode", "overwrite")
            if given != "overwrite":
                raise InvalidArgument(f'mode("overwrite") and option save_mode={given!r} disagree')
            options = {**options, "save_mode": "overwrite"}
        opts = write_options(schema, options)
        plan = begin_write(opts)
        if plan is None:
            return SkipWriter()
        return ShaleWriter(opts, plan)


TABLE_OPTIONS = "shaledb.options"
"""Metadata key (on the key column) holding a catalog table's source options."""


def table_schema(options: Mapping[str, str]) -> StructType:
    """A catalog table's schema, carrying the table's options (path included).

    PySpark 4.3 hands a Python data source the table's options only when the
    table is created (``schema()``); reads and writes of the table through the
    session catalog get none, but they do get the table's schema, field
    metadata included. So the options travel in the key column's metadata.
    ``seq`` and ``metadata`` are nullable here so ``INSERT INTO t (key, value)``
    works (a write ignores ``seq``).
    """
    own = {k: str(v) for k, v in options.items() if k not in CATALOG_KEYS and not k.startswith("option.")}
    opts = ReadOptions.parse(own)  # checks the names and the URL
    text = {"binary": BinaryType(), "string": StringType()}
    meta = {TABLE_OPTIONS: json.dumps(own, sort_keys=True), "comment": f"shaledb table at {opts.url}"}
    return StructType(
        [
            StructField("key", text[opts.key_type], False, meta),
            StructField("value", text[opts.value_type], False),
            StructField("seq", LongType(), True),
            StructField("metadata", BinaryType(), True),
        ]
    )


def source_options(options: Mapping[str, str], schema: StructType) -> tuple[dict[str, str], bool]:
    """The options to use, and whether they came from a catalog table's schema."""
    own = {k.lower(): str(v) for k, v in options.items()}
    if own.get("path"):
        return own, False
    for f in schema.fields:
        raw = (f.metadata or {}).get(TABLE_OPTIONS)
        if raw:
            return {**json.loads(raw), **own}, True
    return own, False


def resolve_checkpoint(opts: ReadOptions) -> str:
    """The id of the checkpoint ``opts`` name (an id or a name), or that pins ``opts.version``."""
    from .. import admin

    cps = admin.list_checkpoints(opts.url, include_expired=False, store_options=opts.store)
    if opts.version is not None:
        pinned = [c for c in cps if c.manifest_id == opts.version]
        if not pinned:
            held = sorted({c.manifest_id for c in cps})
            raise CheckpointNotFound(
                f"no checkpoint pins manifest version {opts.version} of {opts.url}, so it may already be "
                f"collected (versions pinned now: {held or 'none'}); create a checkpoint to keep a version"
            )
        return str(pinned[0].id)
    assert opts.checkpoint is not None
    if any(str(c.id) == opts.checkpoint for c in cps):
        return opts.checkpoint
    named = [c for c in cps if c.name == opts.checkpoint]
    if len(named) > 1:
        ids = ", ".join(str(c.id) for c in named)
        raise InvalidArgument(f"{len(named)} checkpoints are named {opts.checkpoint!r} ({ids}): give an id")
    if named:
        return str(named[0].id)
    names = sorted({c.name for c in cps if c.name})
    raise CheckpointNotFound(
        f"no live checkpoint of {opts.url} has the id or name {opts.checkpoint!r} (names: {names or 'none'})"
    )


def write_options(schema: StructType, options: Mapping[str, str]) -> WriteOptions:
    """``options`` checked against the columns of ``schema``."""
    return WriteOptions.parse(options, {f.name: _simple_type(f.dataType) for f in schema.fields})


def begin_write(opts: WriteOptions) -> IngestPlan | None:
    """The ingest's plan (:func:`shaledb.bulk.ingest.begin_ingest` with the options' settings);
    None when save mode ``ignore`` finds data (then nothing is written)."""
    if opts.save_mode == "ignore" and _holds_data(opts):
        log.info("shaledb write to %s: the database holds data, save mode ignore writes nothing", opts.url)
        return None
    tuned = ("block_size_bytes", "compression", "bloom_bits_per_key", "value_separation_threshold")
    changes = {k: v for k in tuned if (v := getattr(opts, k)) is not None}
    settings = load_settings(Settings, **changes)  # SHALEDB_SETTINGS_FILE, SHALEDB_* variables, then options
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


def _task() -> tuple[int, int, str]:
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


class ShaleWriter(DataSourceArrowWriter):
    """Writes each partition as SSTs; commits all of them in one manifest CAS."""

    def __init__(self, opts: WriteOptions, plan: IngestPlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ShaleCommitMessage:
        batches = list(iterator)
        pid = _task()[0]
        # An empty partition (e.g. fewer keys than range partitions) still sends its part.
        cols = self._columns(pa.Table.from_batches(batches), pid) if batches else None
        with closing(self._sst_store()) as store:
            return ShaleCommitMessage(self._task_part(store, pid, cols))

    def stage(self, batches: Iterator[pa.RecordBatch], exchange_id: str, parts: int) -> StagedRun | None:
        """A stage task of the store exchange (``shaledb.spark.load``): encode, sort, stage;
        None for an empty input partition."""
        got = list(batches)
        if not got:
            return None
        cols = self._columns(pa.Table.from_batches(got), _task()[0])
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
        _, attempt, label = _task()
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

    def _columns(self, table: pa.Table, pid: int) -> _Columns:
        o = self.opts
        if table.num_rows == 0:
            empty = pa.array([], pa.binary())
            return _Columns(empty, empty, None, {})
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
        commit_ingest(self.plan, parts, self.opts.url, store_options=self.opts.store)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        parts = [m.part if isinstance(m, ShaleCommitMessage) else None for m in messages]
        abort_ingest(self.plan, parts, self.opts.url, store_options=self.opts.store)


# ------------------------------------------------------------------- reading


class ShalePartition(InputPartition):
    """One key range of the pinned version (pickled to a task)."""

    def __init__(self, part: ReadPart) -> None:
        super().__init__(part.index)
        self.part = part


Bound = tuple[bytes | None, bytes | None]


class ShaleReader(DataSourceReader):
    """Key-range partitions of one checkpoint, with key-range and prefix filters pushed down."""

    def __init__(
        self,
        opts: ReadOptions,
        checkpoint_id: str,
        created: bool,
        *,
        parallelism: int = 1,
        schema: StructType | None = None,
    ) -> None:
        self.opts = opts
        self.columns = _read_columns(opts, schema)
        """(name, kind, nullable) of each output column, in Spark's order."""
        self.key_kind = next((k for n, k, _ in self.columns if n == "key"), opts.key_type)
        self.checkpoint_id = checkpoint_id
        self.created = created
        self.parallelism = parallelism
        # Key-range options are part of the DataFrame's definition, so they are always safe.
        self.range: Bound = (opts.start, opts.end)
        if opts.prefix:
            self.range = intersect(self.range, (opts.prefix, prefix_end(opts.prefix)))
        self.pushed: list[str] = []

    # ------------------------------------------------------------ filters

    def _key(self, v: Any) -> bytes | None:
        if isinstance(v, str) and self.key_kind == "string":
            return v.encode()
        if isinstance(v, (bytes, bytearray)) and self.key_kind == "binary":
            return bytes(v)
        return None

    def _bound(self, f: Filter) -> Bound | None:
        """The exact key range of a filter on ``key``; None if it is not one we apply exactly."""
        if getattr(f, "attribute", None) != ("key",):
            return None
        if isinstance(f, StringStartsWith):
            p = self._key(f.value)
            return None if p is None else (p or None, prefix_end(p) if p else None)
        k = self._key(getattr(f, "value", None))
        if k is None:
            return None
        if isinstance(f, EqualTo):
            return k, key_after(k)
        if isinstance(f, GreaterThan):
            return key_after(k), None
        if isinstance(f, GreaterThanOrEqual):
            return k, None
        if isinstance(f, LessThan):
            return None, k
        if isinstance(f, LessThanOrEqual):
            return None, key_after(k)
        return None

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        if not self.opts.pushdown:  # Spark applies every filter; the plan reads every key
            yield from filters
            return
        for f in filters:
            b = self._bound(f)
            if b is not None:
                self.range = intersect(self.range, b)
                self.pushed.append(repr(f))
                continue
            if isinstance(f, In) and f.attribute == ("key",):
                ks = [self._key(v) for v in f.value]
                if ks and all(k is not None for k in ks):  # a hint only: Spark still applies it
                    lo = min(k for k in ks if k is not None)
                    hi = max(k for k in ks if k is not None)
                    self.range = intersect(self.range, (lo, key_after(hi)))
            yield f

    # ---------------------------------------------------------- partitions

    def partitions(self) -> list[InputPartition]:
        lo, hi = self.range
        if lo is not None and hi is not None and lo >= hi:
            return [ShalePartition(ReadPart(0, lo, lo, self.checkpoint_id, 0, (), (), 0))]
        plan = plan_read(
            self.opts.url,
            checkpoint=self.checkpoint_id,
            start=lo,
            end=hi,
            partitions=self.opts.partitions,
            parallelism=self.parallelism,
            inline_wal_bytes=DEFAULT_INLINE_WAL_BYTES,
            store_options=self.opts.store,
        )
        log.info(
            "shaledb read: checkpoint %s, %d partitions, key range %r..%r, pushed %s",
            self.checkpoint_id,
            len(plan.parts),
            lo,
            hi,
            self.pushed,
        )
        return [ShalePartition(p) for p in plan.parts]

    # ---------------------------------------------------------------- read

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShalePartition)
        part = partition.part
        if part.lo is not None and part.lo == part.hi:
            return
        o = self.opts
        ensure_checkpoint(
            o.url,
            part.checkpoint_id,
            refresh_lifetime_s=o.checkpoint_lifetime_s if self.created else None,
            store_options=o.store,
        )
        schema = pa.schema([pa.field(n, _ARROW[k], nullable=null) for n, k, null in self.columns])
        for c in read_part_arrow(part, o.url, store_options=o.store):
            meta = pa.nulls(len(c), pa.binary()) if c.metadata is None else c.metadata
            got = {"key": c.keys, "value": c.values, "seq": c.seqs, "metadata": meta}
            yield pa.RecordBatch.from_arrays([_text(got[n], k) for n, k, _ in self.columns], schema=schema)


_ARROW = {"binary": pa.binary(), "string": pa.string(), "bigint": pa.int64()}


def _read_columns(o: ReadOptions, schema: StructType | None) -> list[tuple[str, str, bool]]:
    """The columns a read returns: the schema Spark asks for (a table's, or one given with
    ``.schema()``: a subset of key, value, seq, metadata), else the read contract."""
    default = {"key": (o.key_type, False), "value": (o.value_type, False), "seq": ("bigint", False)}
    default["metadata"] = ("binary", True)
    if schema is None:
        return [(n, *default[n]) for n in READ_COLUMNS]
    out = []
    for f in schema.fields:
        if f.name not in READ_COLUMNS:
            raise InvalidArgument(
                f"column {f.name!r} is not one a shaledb read returns ({', '.join(READ_COLUMNS)})"
            )
        kind = _simple_type(f.dataType)
        allowed = (
            ("bigint",) if f.name == "seq" else ("binary",) if f.name == "metadata" else ("binary", "string")
        )
        if kind not in allowed:
            raise InvalidArgument(f"column {f.name!r} must be {' or '.join(allowed)}, not {kind}")
        out.append((f.name, kind, bool(f.nullable)))
    return out


def arrow_schema(o: ReadOptions) -> pa.Schema:
    """The Arrow form of the read contract (nullability must match Spark's)."""
    text = {"binary": pa.binary(), "string": pa.string()}
    return pa.schema(
        [
            pa.field("key", text[o.key_type], nullable=False),
            pa.field("value", text[o.value_type], nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("metadata", pa.binary(), nullable=True),
        ]
    )


def _text(arr: pa.Array, kind: str) -> pa.Array:
    """Binary as is, or as UTF-8 strings (validated) for the string column types."""
    if kind != "string" or pa.types.is_string(arr.type):
        return arr
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        raise InvalidArgument("a key or value is not valid UTF-8: read it with the binary type") from None


__all__ = ["ShaleCommitMessage", "ShaleDataSource", "ShalePartition", "ShaleReader", "ShaleWriter"]

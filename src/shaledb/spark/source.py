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

Writes: ``writer()`` begins an ingest and hands its plan to the tasks
(``shaledb.spark.write``); ``streamWriter()`` makes each micro-batch of a
stream one ingest (``shaledb.spark.sink``).

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
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from .extra import extra_error

try:
    import pyarrow as pa
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        InputPartition,
        LessThan,
        LessThanOrEqual,
        StringStartsWith,
    )
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType
except ImportError as exc:  # without the spark extra: name it and how to install it
    raise extra_error(exc) from None

from ..bulk.read import DEFAULT_INLINE_WAL_BYTES, ReadPart, ensure_checkpoint, intersect, plan_read
from ..bulk.read_arrow import read_part_arrow
from ..errors import BucketNotFound, CheckpointNotFound, InvalidArgument, NotFound
from ..keys import key_after, prefix_end
from .options import CATALOG_KEYS
from .schema import READ_COLUMNS, ReadOptions
from .tracebacks import short_traceback
from .write import ShaleWriter, SkipWriter, begin_write, simple_type, write_options

log = logging.getLogger("shaledb.spark")


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
            made = table_schema(self.options)
            _check_store(ReadOptions.parse(json.loads(made.fields[0].metadata[TABLE_OPTIONS])))
            return made
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
            reuse=True,  # an unchanged database: the last read's checkpoint, no manifest write
            store_options=opts.store,
        )
        log.info("shaledb read of %s pinned checkpoint %s", opts.url, plan.checkpoint_id)
        return plan.checkpoint_id, True

    def reader(self, schema: StructType) -> DataSourceReader:
        options, table = source_options(self.options, schema)
        opts = ReadOptions.parse(options)
        if table:
            check_table_columns(schema, opts.url)
            if opts.pushdown:  # a table an older shaledb created with it: read right, without it
                log.warning("shaledb table at %s: option pushdown ignored (%s)", opts.url, PUSHDOWN_TABLE)
                opts = replace(opts, pushdown=False)
        if self._pinned is None or table:  # a table or a user-given schema skips schema(): pin per query
            self._pinned = self._pin(opts)
        return ShaleReader(opts, *self._pinned, parallelism=self.parallelism, schema=schema)

    @short_traceback
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The change feed as a stream (``shaledb.spark.stream``)."""
        from .stream import ShaleChangeStream

        return ShaleChangeStream(self.options, schema)

    @short_traceback
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Structured Streaming into the database, a micro-batch per ingest (``shaledb.spark.sink``)."""
        from .sink import stream_writer

        return stream_writer(self._write_options(schema)[0], schema, overwrite)

    def _write_options(self, schema: StructType) -> tuple[dict[str, str], bool]:
        """The options of a write: given, or a catalog table's (whose columns are key, value,
        seq -- which must be null -- and metadata); and whether they are a table's."""
        options, table = source_options(self.options, schema)
        if table:
            check_table_columns(schema, str(options.get("path", "")), write=True)
            names = {f.name for f in schema.fields}
            options = {**{c: c for c in ("value", "metadata") if c in names}, **options}
        return options, table

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options, table = self._write_options(schema)
        if overwrite:
            given = options.get("save_mode", "overwrite")
            if given != "overwrite":
                raise InvalidArgument(f'mode("overwrite") and option save_mode={given!r} disagree')
            options = {**options, "save_mode": "overwrite"}
        opts = replace(write_options(schema, options), from_table=table)
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
    if opts.pushdown:
        raise InvalidArgument(PUSHDOWN_TABLE)
    text = {"binary": BinaryType(), "string": StringType()}
    meta = {TABLE_OPTIONS: json.dumps(own, sort_keys=True), "comment": table_comment(opts.url, own)}
    return StructType(
        [
            StructField("key", text[opts.key_type], False, meta),
            StructField("value", text[opts.value_type], False),
            StructField("seq", LongType(), True),
            StructField("metadata", BinaryType(), True),
        ]
    )


def _check_store(opts: ReadOptions) -> None:
    """CREATE TABLE reads the database's manifest once, so a wrong bucket, endpoint or
    credential fails the statement (and no catalog entry is made) instead of the table's first
    query; no database there yet is fine (the first INSERT creates it)."""
    from .. import admin

    try:
        admin.read_manifest(opts.url, store_options=opts.store)
    except BucketNotFound:
        raise
    except NotFound:
        pass


PUSHDOWN_TABLE = (
    "option pushdown is refused for a SQL table: PySpark 4.3 plans every mention of a table in one "
    "statement on one read, which the last pushed key filter narrows, so a self-join, a UNION, a "
    'subquery or a CTE used twice would silently read the wrong keys (docs/spark.md, "Filter '
    'pushdown"). Create the table without it: WHERE key ... is then applied by Spark, and right. '
    'For a fast read of a key range use a DataFrame: spark.read.format("shaledb").option("start", '
    '...)/option("end", ...)/option("prefix", ...).load(url), or option("pushdown", "true") '
    "on a DataFrame queried once"
)
"""Why ``CREATE TABLE ... OPTIONS (pushdown 'true')`` is refused (and ignored in a table made before)."""

_SECRET = re.compile(r"(?i)secret|password|token|access[._]?key|credential")
"""Option names whose values a table's comment does not show (Spark's redaction, and more)."""


def table_comment(url: str, own: Mapping[str, str]) -> str:
    """The key column's comment: the table's URL and the clause that creates it again.

    ``SHOW CREATE TABLE`` of a Python data source's table prints neither ``USING shaledb``
    nor its options (PySpark 4.3's ``PythonTable`` has no properties, and
    ``ShowCreateTableExec`` takes the provider from them), but it prints the columns'
    comments; so the comment carries them.
    """
    given = [(k, v) for k, v in sorted(own.items()) if k.lower() != "path"]
    shown = [("path", url)] + [(k, "***" if _SECRET.search(k) else v) for k, v in given]
    clause = ", ".join(f"{k} '{_sql_text(v)}'" for k, v in shown)
    return f"shaledb table at {url}; created by CREATE TABLE name USING shaledb OPTIONS ({clause})"


def _sql_text(value: str) -> str:
    """``value`` for a single-quoted Spark SQL string literal."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def check_table_columns(schema: StructType, url: str, *, write: bool = False) -> None:
    """Refuse a catalog table whose columns are not the source's: changed with ``ALTER TABLE``.

    Spark's session catalog applies ``ALTER TABLE ... ADD/DROP/RENAME COLUMNS`` to a Python
    data source's table without running any of the source's code (PySpark 4.3), so the
    first read or write after it is the first place to notice. Without this a write would
    silently drop an added column's values (or JSON-encode a renamed value column). A write's
    columns (``write``) are those of the rows, which carry the options of the table they were
    read from when a statement passes some of its columns through (``CREATE TABLE ... AS SELECT
    key, value FROM src``): the message names that cause too.
    """
    names = [f.name for f in schema.fields]
    if names == list(READ_COLUMNS):
        return
    where = f" at {url}" if url else ""
    read = (
        "Or the rows were read from that table and written with its columns passed through: "
        "CREATE TABLE ... AS SELECT cannot make a shaledb table (CREATE TABLE it, then INSERT INTO "
        "it naming the columns), and a DataFrame read from the table and written with .save() and "
        "no path would go back into it (give the URL). "
        if write
        else ""
    )
    raise InvalidArgument(
        f"the shaledb table{where} has the columns {', '.join(names)}, not key, value, seq, metadata. "
        f"{read}Perhaps its columns were changed with ALTER TABLE (ADD, DROP, RENAME or REPLACE "
        "COLUMNS), which Spark accepts for a Python data source's table without asking the source. "
        "A shaledb table's columns are fixed: DROP TABLE it (the data stays at its URL) and "
        "CREATE TABLE it again with the same OPTIONS (DESCRIBE TABLE shows them in the key "
        "column's comment); keep other columns in a JSON value (option value_columns of a "
        "DataFrame write) or in another table"
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

    if opts.version is not None:
        cps = admin.list_checkpoints(opts.url, include_expired=False, store_options=opts.store)
        pinned = [c for c in cps if c.manifest_id == opts.version]
        if not pinned:
            held = sorted({c.manifest_id for c in cps})
            raise CheckpointNotFound(
                f"no checkpoint pins manifest version {opts.version} of {opts.url}, so it may already be "
                f"collected (versions pinned now: {held or 'none'}); create a checkpoint to keep a version"
            )
        return str(pinned[0].id)
    assert opts.checkpoint is not None
    return str(admin.find_checkpoint(opts.url, opts.checkpoint, store_options=opts.store).id)


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
            cols = [_text(got[n], k, n, c.keys, o.url) for n, k, _ in self.columns]
            yield pa.RecordBatch.from_arrays(cols, schema=schema)


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
        kind = simple_type(f.dataType)
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


def _text(arr: pa.Array, kind: str, name: str, keys: pa.Array, url: str) -> pa.Array:
    """Binary as is, or as UTF-8 strings (validated) for the string column types; an invalid
    one is named (its column, the option, its key) in the error."""
    if kind != "string" or pa.types.is_string(arr.type):
        return arr
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    at = next(i for i, v in enumerate(arr.to_pylist()) if v is not None and not _utf8(v))
    key = keys[at].as_py()
    raise InvalidArgument(
        f"the {name} of key {bytes(key)[:64]!r} in {url} is not valid UTF-8, so it cannot be read "
        f"with option {name}_type=string: read it as binary (the default) and decode it yourself"
    )


def _utf8(b: bytes) -> bool:
    try:
        bytes(b).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


__all__ = [
    "PUSHDOWN_TABLE",
    "ShaleDataSource",
    "ShalePartition",
    "ShaleReader",
    "check_table_columns",
    "table_comment",
    "table_schema",
]

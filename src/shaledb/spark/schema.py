"""The column contracts of the "shaledb" data source, and its options.

Reading returns four columns, always in this order::

    key       binary (or string with key_type=string)    not null
    value     binary (or string with value_type=string)  not null
    seq       long                                       not null   the entry's sequence number
    metadata  binary                                     nullable   metadata stored with the entry

Writing takes a key column and a value column (binary or string; strings
are stored as their UTF-8 bytes). Without a value column, the other columns
are encoded as the value: one JSON object per row, keys are the column names
in DataFrame order, compact separators, dates and timestamps as ISO-8601
strings, decimals as strings, binary as base64 (:func:`json_values`). An
optional metadata column is stored as the entry's metadata.

Index columns (option ``index_columns``, comma-separated) give each row's
secondary index terms: the index field is named after the column, and the
column is string, binary, or an array of either (strings are stored as their
UTF-8 bytes). A null, an empty array, empty strings and null array elements
mean no term; an array gives one term per distinct element. The terms replace
the key's terms for those fields, as ``Db.put(key, value, indexes=...)`` does
(fields not named keep their terms). Index columns stay part of a JSON value
built from the other columns (they are only left out if ``value_columns`` or
a ``value`` column says so). ``value_separation_threshold`` (bytes) puts
values of at least that size into value-journal objects, as the engine's
setting of that name does for the writer.

Options are strings (Spark passes nothing else); :class:`WriteOptions` and
:class:`ReadOptions` parse and validate them once, on the driver, so a bad
option fails the job before any task runs. Options named ``store.<name>``
are passed to ``shaledb.store.open_store`` (e.g. ``store.endpoint``);
credentials are better left to the usual ``AWS_*`` environment variables,
which Spark's local executors inherit.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import json.encoder
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bulk.ingest import contiguous
from ..errors import InvalidArgument
from ..keys import check_field
from ..numbers import check_number, check_seconds
from ..settings import COMPRESSIONS, MiB
from .options import check_names

READ_COLUMNS = ("key", "value", "seq", "metadata")
SAVE_MODES = ("errorifexists", "ignore", "append", "overwrite")
ON_DUPLICATE = ("error", "last", "first")
TEXT_TYPES = ("binary", "string")
INDEX_TYPES = (*TEXT_TYPES, *(f"array<{t}>" for t in TEXT_TYPES))
"""Column types an index column may have (as ``source._simple_type`` spells them)."""
MAX_BLOCK_SIZE_BYTES = 16 * MiB
"""Largest ``block_size_bytes`` (``Settings`` refuses more too)."""
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def bool_option(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgument(f"option {name} must be true or false, got {raw!r}")


def _number_text(raw: object) -> object:
    """An option's text as an ``int`` or ``float`` if it reads as one, else as given (then
    :func:`~shaledb.numbers.check_number` names its type). ``nan``, ``inf`` and ``1e400``
    read as floats and are refused there, as in every option class."""
    text = str(raw).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return raw


def int_option(
    options: Mapping[str, str],
    name: str,
    default: int | None,
    minimum: int = 1,
    maximum: int | None = None,
    unit: str | None = None,
) -> int | None:
    """An integer option through the one numeric check (finite, in range, unit in the message)."""
    raw = options.get(name)
    if raw is None:
        return default
    value = check_number(
        f"option {name}", _number_text(raw), integer=True, minimum=minimum, maximum=maximum, unit=unit
    )
    assert isinstance(value, int)
    return value


def _key_option(options: Mapping[str, str], name: str, key_type: str) -> bytes | None:
    """A key bound given as an option: UTF-8 text, or ``0x``-prefixed hex for binary keys."""
    raw = options.get(name)
    if raw is None or raw == "":
        return None
    if key_type == "binary" and raw.startswith("0x"):
        try:
            return bytes.fromhex(raw[2:])
        except ValueError:
            raise InvalidArgument(f"option {name} starts with 0x but is not hex: {raw!r}") from None
    return raw.encode("utf-8")


def seconds_option(
    options: Mapping[str, str], name: str, default: float | None, *, none_ok: bool
) -> float | None:
    """A duration option in seconds through the one numeric check: finite, > 0, at most
    :data:`~shaledb.numbers.MAX_SECONDS`; ``none``/``never`` give None where ``none_ok``."""
    raw = options.get(name)
    if raw is None:
        return default
    if none_ok and str(raw).strip().lower() in ("none", "never"):
        return None
    return check_seconds(f"option {name}", _number_text(raw))


def _names(raw: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (raw or "").split(",") if n.strip())


_TYPE_HINT = {
    "key": (
        "cast it (e.g. col({name!r}).cast('string'); keys sort by their bytes, so zero-pad numbers, or "
        "encode them big-endian, to keep their order)"
    ),
    "value": "encode it first, or leave out option value to JSON-encode the other columns",
    "default value": (
        "a column named value is the value unless options say otherwise: cast it, or give option "
        "value_columns (e.g. value_columns=value) to store the columns named as a JSON object"
    ),
    "metadata": "encode it first",
}
"""What to do about a key, value or metadata column of another type."""

TABLE_COPY = (
    "a write to a shaledb table got rows with seq values, which only a read of a shaledb table "
    "gives: the rows were read from the table at {url}, and when a statement passes a table's "
    "columns through unchanged (INSERT INTO t SELECT * FROM src, CREATE TABLE t ... AS SELECT * "
    "FROM src, spark.table(src).write.insertInto(t) or .writeTo(t)) PySpark 4.3 hands the write "
    "the options of the table they were read from, not those of the table named, so they would "
    "have been written back to {url}. Nothing was written. Name the columns, so that Spark hands "
    "the write the target's options: INSERT INTO t (key, value, metadata) SELECT key, value, "
    "metadata FROM src, or spark.table(src).select('key', 'value', 'metadata').writeTo(t).append() "
    "(seq is the database's to assign; a write never stores it). CREATE TABLE ... AS SELECT cannot "
    "make a shaledb table: CREATE TABLE t USING shaledb OPTIONS (path ...), then INSERT INTO t"
)
"""Why a table write refuses rows with ``seq`` values (docs/spark.md, "SQL tables")."""

NO_URL = (
    'give the database URL: .save(url) / .load(url) (or option "path"). For a SQL table, create it '
    "first with CREATE TABLE name USING shaledb OPTIONS (path 'URL'), then saveAsTable or insertInto "
    "it (or INSERT INTO it): saveAsTable and CREATE TABLE ... AS SELECT cannot create a shaledb table "
    "(Spark keeps no path in the new catalog entry and hands the writer none). "
    "A table created with a column list, CREATE TABLE name (key ..., value ...) USING shaledb, "
    "cannot reach its options either (PySpark hands them to the source only when it asks for the "
    "columns): drop it and create it without one; its columns are key, value, seq and metadata, "
    "typed by the options key_type and value_type. So can a table whose columns were replaced or "
    "whose key column was dropped with ALTER TABLE (Spark keeps the options with the key column): "
    "drop it and create it again. A DataFrame read with spark.read.format('shaledb').load(url) "
    "and written into a table with its four columns as read (insertInto, writeTo, INSERT INTO t "
    "SELECT * FROM a view of it) reaches the write without the table's options too: name the "
    "columns, INSERT INTO t (key, value, metadata) SELECT key, value, metadata FROM v, or "
    "df.select('key', 'value', 'metadata').writeTo(t).append()"
)


def _url(options: Mapping[str, str]) -> str:
    """The database URL; none given is refused before anything is written.

    A write through ``saveAsTable`` of a table the catalog does not know yet
    gets the user's options only (PySpark 4.3 adds no location), so without
    ``path`` it lands here and nothing is written anywhere; with ``path`` the
    rows go to that database but the catalog entry Spark creates keeps no
    path, and every later query of the table lands here too.
    """
    url = options.get("path")
    if not url:
        raise InvalidArgument(NO_URL)
    return str(url)


def _on_duplicate(options: Mapping[str, str], columns: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """``on_duplicate`` (or its older name ``duplicates``) and the ``order_by`` columns it needs.

    "last" and "first" are defined by the order columns alone: without them the
    outcome would depend on how Spark cut and ordered the partitions.
    """
    given = {n: options[n] for n in ("on_duplicate", "duplicates") if options.get(n)}
    if len(set(given.values())) > 1:
        raise InvalidArgument(f"options on_duplicate and duplicates disagree: {given}")
    policy = str(next(iter(given.values()), "error")).lower()
    if policy not in ON_DUPLICATE:
        raise InvalidArgument(f"option on_duplicate must be one of {ON_DUPLICATE}, got {policy!r}")
    order_by = _names(options.get("order_by"))
    for name in order_by:
        if name not in columns:
            raise InvalidArgument(
                f"option order_by: column {name!r} is not in the DataFrame (columns: {list(columns)})"
            )
    if policy != "error" and not order_by:
        raise InvalidArgument(
            f"option on_duplicate={policy} needs option order_by: the columns whose order decides which "
            "row is the last (or first) of a key; without them the outcome would depend on Spark's "
            "partitioning"
        )
    return policy, order_by


def store_options(options: Mapping[str, str]) -> dict[str, str]:
    """``store.<name>`` options, for ``open_store``."""
    return {k[len("store.") :]: str(v) for k, v in options.items() if k.startswith("store.")}


def _index_columns(options: Mapping[str, str], columns: Mapping[str, str]) -> tuple[str, ...]:
    """The ``index_columns`` option, checked: existing columns of a type terms can come from."""
    names = _names(options.get("index_columns"))
    if len(set(names)) != len(names):
        raise InvalidArgument(f"option index_columns names a column twice: {list(names)}")
    for name in names:
        if name not in columns:
            raise InvalidArgument(f"index column {name!r} is not in the DataFrame (columns: {list(columns)})")
        if columns[name] not in INDEX_TYPES:
            raise InvalidArgument(
                f"the index column {name!r} must be string, binary or an array of them, not "
                f"{columns[name]}; cast or format it first (e.g. F.col(...).cast('string'))"
            )
    return tuple(map(check_field, names))  # a field name, as every write checks it


@dataclass(frozen=True)
class WriteOptions:
    """Parsed write options (see the module docstring and docs/spark.md)."""

    url: str
    key: str = "key"
    value: str | None = None
    value_columns: tuple[str, ...] = ()
    metadata: str | None = None
    index_columns: tuple[str, ...] = ()
    """Columns whose values are the rows' index terms (field name = column name)."""
    value_separation_threshold: int | None = None
    """Values of at least this many bytes go to value-journal objects (None: inline)."""
    ingest_id: str | None = None
    behind: bool = False
    duplicates: str = "error"
    """``on_duplicate``: "error", or "last"/"first" by the ``order_by`` columns."""
    order_by: tuple[str, ...] = ()
    save_mode: str = "append"
    """What the write does to a database that holds data (see docs/spark.md, "Save modes")."""
    block_size_bytes: int | None = None
    compression: str | None = None
    bloom_bits_per_key: int | None = None
    max_sst_size_bytes: int | None = None
    lease_s: float = 3600.0
    keep_page_cache: bool = False
    """Leave the SSTs a task writes to a local directory in the OS page cache
    (``shaledb.bulk.ingest.open_ingest_store``); by default they are dropped as written."""
    store: dict[str, str] = field(default_factory=dict)
    fail_partition: int | None = None
    """Testing hook ``testing.fail_partition``: that partition's first attempt fails after writing."""
    duplicate_attempt: bool = False
    """Testing hook ``testing.duplicate_attempt``: each task also writes a losing attempt's SSTs."""
    from_table: bool = False
    """The options came from a catalog table's key column (``source.source_options``): the
    tasks refuse rows with ``seq`` values (:data:`TABLE_COPY`), not an option."""

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: Mapping[str, str]) -> WriteOptions:
        """Options checked against the DataFrame's ``columns`` (name -> simple type string)."""
        check_names(options)
        key = options.get("key", "key")
        if key not in columns:
            raise InvalidArgument(f"key column {key!r} is not in the DataFrame (columns: {list(columns)})")
        metadata = options.get("metadata")
        value = options.get("value")
        explicit = _names(options.get("value_columns"))
        named_value = value is not None
        if value is None and not explicit and "value" in columns:
            value = "value"
        as_read = key != "metadata" and columns.get("metadata") in TEXT_TYPES
        if metadata is None and value is not None and as_read:
            # A column named as a read returns it: a read's rows copied with save() keep their
            # metadata, as a table write's do (it was dropped, with seq, as any other column).
            metadata = "metadata"
        for name, what in ((value, "value"), (metadata, "metadata")):
            if name is not None and name not in columns:
                raise InvalidArgument(f"{what} column {name!r} is not in the DataFrame")
        for name, what in ((key, "key"), (value, "value"), (metadata, "metadata")):
            if name is not None and columns[name] not in TEXT_TYPES:
                hint = _TYPE_HINT["default value" if what == "value" and not named_value else what]
                raise InvalidArgument(
                    f"the {what} column {name!r} must be binary or string, not {columns[name]}; "
                    + hint.format(name=name)
                )
        if value is not None and explicit:
            raise InvalidArgument("give either a value column or value_columns, not both")
        if value is None:
            used = {key, metadata}
            value_columns = explicit or tuple(c for c in columns if c not in used)
            missing = [c for c in value_columns if c not in columns]
            if missing:
                raise InvalidArgument(f"value_columns {missing} are not in the DataFrame")
            if not value_columns:
                raise InvalidArgument(
                    f"the DataFrame has no value: no column 'value' (or option value) and no column "
                    f"besides the key and metadata to make a JSON value of (columns: {list(columns)})"
                )
        else:
            value_columns = ()
        index_columns = _index_columns(options, columns)
        duplicates, order_by = _on_duplicate(options, columns)
        save_mode = str(options.get("save_mode", "append")).lower()
        if save_mode not in SAVE_MODES:
            raise InvalidArgument(f"option save_mode must be one of {SAVE_MODES}, got {save_mode!r}")
        if save_mode == "overwrite" and bool_option(options, "ingest_behind"):
            raise InvalidArgument("option save_mode=overwrite replaces everything: it cannot load behind")
        if "compact" in options:
            raise InvalidArgument(
                "option compact is for streams (writeStream): a batch write adds one sorted run; "
                "compact with shaledb.spark.compact(spark, url) or a compactor"
            )
        compression = options.get("compression")
        compression = None if compression is None else str(compression).strip().lower()
        if compression is not None and compression not in COMPRESSIONS:
            raise InvalidArgument(f"option compression must be one of {COMPRESSIONS}, got {compression!r}")
        return cls(
            url=_url(options),
            key=key,
            value=value,
            value_columns=value_columns,
            metadata=metadata,
            index_columns=index_columns,
            value_separation_threshold=int_option(options, "value_separation_threshold", None, unit="bytes"),
            ingest_id=options.get("ingest_id") or None,
            behind=bool_option(options, "ingest_behind"),
            duplicates=duplicates,
            order_by=order_by,
            save_mode=save_mode,
            block_size_bytes=int_option(
                options, "block_size_bytes", None, minimum=256, maximum=MAX_BLOCK_SIZE_BYTES
            ),
            compression=compression,
            bloom_bits_per_key=int_option(
                options, "bloom_bits_per_key", None, minimum=0, unit="bits per key"
            ),
            max_sst_size_bytes=int_option(options, "max_sst_size_bytes", None, minimum=4096),
            lease_s=seconds_option(options, "lease_s", 3600.0, none_ok=False) or 3600.0,
            keep_page_cache=bool_option(options, "keep_page_cache"),
            store=store_options(options),
            fail_partition=int_option(options, "testing.fail_partition", None, minimum=0),
            duplicate_attempt=bool_option(options, "testing.duplicate_attempt"),
        )


@dataclass(frozen=True)
class ReadOptions:
    """Parsed read options (see the module docstring and docs/spark.md)."""

    url: str
    checkpoint: str | None = None
    """A checkpoint id or name."""
    version: int | None = None
    """A manifest id: read it through a checkpoint that pins it."""
    checkpoint_lifetime_s: float | None = 3600.0
    partitions: int | None = None
    key_type: str = "binary"
    value_type: str = "binary"
    pushdown: bool = False
    start: bytes | None = None
    end: bytes | None = None
    prefix: bytes | None = None
    store: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        check_names(options)
        if options.get("checkpoint") and options.get("version"):
            raise InvalidArgument("give option checkpoint or option version, not both")
        types = {}
        for name in ("key_type", "value_type"):
            t = str(options.get(name, "binary")).strip().lower()  # SQL type names: any case
            if t not in TEXT_TYPES:
                raise InvalidArgument(f"option {name} must be one of {TEXT_TYPES}, got {t!r}")
            types[name] = t
        return cls(
            url=_url(options),
            checkpoint=options.get("checkpoint") or None,
            version=int_option(options, "version", None),
            checkpoint_lifetime_s=seconds_option(options, "checkpoint_lifetime_s", 3600.0, none_ok=True),
            partitions=int_option(options, "partitions", None),
            key_type=types["key_type"],
            value_type=types["value_type"],
            pushdown=bool_option(options, "pushdown", False),
            start=_key_option(options, "start", types["key_type"]),
            end=_key_option(options, "end", types["key_type"]),
            prefix=_key_option(options, "prefix", types["key_type"]),
            store=store_options(options),
        )

    def schema_ddl(self) -> str:
        """The read schema (the column contract), as Spark DDL."""
        return (
            f"key {self.key_type} not null, value {self.value_type} not null, "
            "seq bigint not null, metadata binary"
        )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return obj.isoformat()
    if isinstance(obj, decimal.Decimal):
        return str(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode("ascii")
    if isinstance(obj, datetime.timedelta):
        return obj.total_seconds()
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def json_values(rows: list[dict[str, Any]]) -> list[bytes]:
    """One compact JSON object per row (the value encoding of value_columns)."""
    enc = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default).encode
    return [enc(r).encode() for r in rows]


def json_column(table: Any) -> Any:
    """:func:`json_values` of an Arrow table's rows, as a binary array, built column by column.

    ``table.to_pylist()`` makes a dict per row and the encoder walks it: 10 us
    a row for the demo's 19 flight columns, most of a load's CPU. Here each
    column becomes the JSON text of its values in Arrow kernels where their
    text is the encoder's (integers, booleans, strings with nothing to
    escape), in Python otherwise (floats, escaped strings, binary) or once per
    distinct value (dates, times, timestamps, decimals, durations), and one
    element-wise join puts the rows together. The bytes are :func:`json_values`'
    (tests compare them); a column of another type (lists, structs, maps) or
    repeated names fall back to it.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    if len(set(names)) != len(names):
        return pa.array(json_values(table.to_pylist()), pa.binary())
    parts: list[Any] = []
    for i, (name, col) in enumerate(zip(names, table.columns)):
        texts = _json_texts(contiguous(col))
        if texts is None:
            return pa.array(json_values(table.to_pylist()), pa.binary())
        parts += (("{" if i == 0 else ",") + _json_str(name) + ":", texts)
    if not parts:
        return pa.array([b"{}"] * table.num_rows, pa.binary())
    return pc.binary_join_element_wise(*parts, "}", "").cast(pa.binary())


_json_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # the encoder's (ensure_ascii=False)
_FLOAT_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json's allow_nan spellings
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'  # what encode_basestring escapes (ensure_ascii=False)


def _json_float(v: float) -> str:
    r = float.__repr__(v)
    return _FLOAT_SPECIAL.get(r, r)


def _json_texts(col: Any) -> Any:
    """A string array of the JSON text of each value of ``col`` (an Arrow array), as the
    encoder with :func:`_json_default` writes it; None for a type this does not cover."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    text: Any
    if pa.types.is_null(t):
        return pa.array(["null"] * len(col), pa.string())
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return pc.cast(col, pa.string()).fill_null("null")  # Arrow's digits and true/false are JSON's
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if not pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
            return pc.binary_join_element_wise('"', col.cast(pa.string()), '"', "").fill_null("null")
        text = _json_str
    elif pa.types.is_floating(t):
        return _float_texts(col)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        text = lambda v: '"' + base64.b64encode(v).decode("ascii") + '"'  # noqa: E731
    elif pa.types.is_temporal(t) and not pa.types.is_interval(t):
        if pa.types.is_duration(t):
            return _by_distinct(col, lambda v: _json_float(v.total_seconds()))
        return _by_distinct(col, lambda v: _json_str(v.isoformat()))
    elif pa.types.is_decimal(t):
        return _by_distinct(col, lambda v: _json_str(str(v)))
    else:
        return None
    values = col.to_pylist()
    if col.null_count:
        return pa.array(["null" if v is None else text(v) for v in values], pa.string())
    return pa.array(list(map(text, values)), pa.string())


def _float_texts(col: Any) -> Any:
    """``float.__repr__`` of each value, mostly from Arrow's cast to text.

    Both write the shortest digits that read back as the same double, but not
    always in the same form: Arrow writes 2.0 as "2", 1e15 as "1e+15" and
    5e-05 as "0.00005". Its text is kept where the forms agree -- a fraction
    in fixed notation at magnitudes where ``repr`` uses fixed notation too
    (1e-4 up to 1e16), or an integer below 1e16 ("2" + ".0") -- and the rest
    (exponents, NaN and infinities, tiny values) go through ``repr``, a few in
    most columns. float32 values are widened first, as ``to_pylist`` does.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    f = col.cast(pa.float64())
    txt = pc.cast(f, pa.string())
    mag = pc.abs(f)
    plain = pc.invert(pc.match_substring(txt, "e"))
    dotted = pc.match_substring(txt, ".")
    fraction = pc.and_(pc.and_(plain, dotted), pc.greater_equal(mag, 1e-4)).fill_null(False)
    integer = pc.and_(pc.and_(plain, pc.invert(dotted)), pc.and_(pc.is_finite(f), pc.less(mag, 1e16)))
    integer = integer.fill_null(False)  # null rows: neither, and not "other" either
    out = pc.if_else(integer, pc.binary_join_element_wise(txt, ".0", ""), txt)
    other = pc.and_(pc.is_valid(f), pc.invert(pc.or_(fraction, integer)))
    if pc.any(other).as_py():
        texts = [_json_float(v) for v in f.filter(other).to_pylist()]
        out = pc.replace_with_mask(out, other, pa.array(texts, pa.string()))
    return out.fill_null("null")


def _by_distinct(col: Any, text: Any) -> Any:
    """``text`` of each distinct value only, spread by dictionary indices: a Python
    timestamp (time zone included) costs about 3 us to make, and such columns repeat
    (the flights' ``time_hour`` has 7,000 values in 336,776 rows)."""
    import pyarrow as pa

    enc = col.dictionary_encode()
    texts = pa.array([*map(text, enc.dictionary.to_pylist()), "null"], pa.string())
    return texts.take(enc.indices.fill_null(len(enc.dictionary)))


__all__ = [
    "READ_COLUMNS",
    "ReadOptions",
    "WriteOptions",
    "bool_option",
    "int_option",
    "json_column",
    "json_values",
    "seconds_option",
    "store_options",
]

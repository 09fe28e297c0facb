"""Pure DataFrame -> DataFrame transforms for loading into and reading out of shaledb.

Each function states its output contract with a ``select`` and uses Spark's
native functions (no Python UDFs), so the work stays in the JVM.

* :func:`composite_key` builds a sortable string key from several columns
  (numbers zero-padded so string order is numeric order).
* :func:`range_partition` is the shape a bulk ingest needs: range-partitioned
  by key (one disjoint key range per task, so the tasks' SSTs form one sorted
  run) and sorted within each partition (by key, then by the ``order``
  columns that decide which duplicate is "last").
* :func:`decode_json` parses the JSON values the writer produced back into
  columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from .extra import extra_error

try:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType
except ImportError as exc:  # without the spark extra: name it and how to install it
    raise extra_error(exc) from None

from ..errors import InvalidArgument
from ..numbers import check_int


def composite_key(
    df: DataFrame,
    parts: Sequence[str | tuple[str, int]],
    *,
    name: str = "key",
    sep: str = "/",
) -> DataFrame:
    """``df`` plus a string column ``name`` joining ``parts`` with ``sep``.

    A part ``(column, width)`` is left-padded with zeros to ``width``
    characters, so integers sort numerically as strings. Nulls become empty
    strings (check uniqueness of the result: duplicates are refused by the
    ingest unless ``duplicates="last"``).
    """
    cols: list[Column] = []
    for p in parts:
        if isinstance(p, tuple):
            col, width = p
            cols.append(F.lpad(F.coalesce(F.col(col).cast("string"), F.lit("")), width, "0"))
        else:
            cols.append(F.coalesce(F.col(p).cast("string"), F.lit("")))
    return df.select("*", F.concat_ws(sep, *cols).alias(name))


def shuffle_partitions(df: DataFrame, partitions: int | None = None) -> int:
    """``partitions`` (an integer >= 1, through the one numeric check), or by default the
    session's ``spark.sql.shuffle.partitions``."""
    if partitions is not None:
        return check_int("partitions", partitions, minimum=1)
    return int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "200")


def range_partition(
    df: DataFrame,
    *,
    key: str = "key",
    partitions: int | None = None,
    order: Sequence[str] = (),
    sort: bool = True,
) -> DataFrame:
    """Range-partition by ``key`` and (``sort``) sort each partition by ``key`` then ``order``.

    ``partitions`` defaults to ``spark.sql.shuffle.partitions``. Spark samples
    the keys first (one extra, cheap job) to choose the range boundaries.
    ``sort=False`` leaves sorting to the consumer (the shaledb writer sorts a
    partition with Arrow faster than Spark's sort hands it over).
    """
    if key not in df.columns:
        raise InvalidArgument(f"no column {key!r} to partition by (columns: {df.columns})")
    parted = df.repartitionByRange(shuffle_partitions(df, partitions), F.col(key))
    return parted.sortWithinPartitions(key, *order) if sort else parted


def key_value(
    df: DataFrame, *, key: str = "key", value: str = "value", metadata: str | None = None
) -> DataFrame:
    """The write contract's columns only: ``key``, ``value`` (and ``metadata``), as binary."""
    cols = [F.col(key).cast("binary").alias("key"), F.col(value).cast("binary").alias("value")]
    if metadata is not None:
        cols.append(F.col(metadata).cast("binary").alias("metadata"))
    return df.select(*cols)


def decode_json(df: DataFrame, schema: StructType | str, *, value: str = "value") -> DataFrame:
    """``df`` without ``value``, plus the fields of its JSON objects as columns."""
    parsed = F.from_json(F.col(value).cast("string"), schema).alias("_v")
    rest = [c for c in df.columns if c != value]
    return df.select(*rest, parsed).select(*rest, "_v.*")


__all__ = ["composite_key", "decode_json", "key_value", "range_partition", "shuffle_partitions"]

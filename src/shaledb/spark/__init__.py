"""shaledb on PySpark: the "shaledb" data source, bulk ingest, checkpoint reads, compaction.

    from shaledb import spark as shale_spark
    shale_spark.register(spark)                                      # format "shaledb"
    shale_spark.ingest(df, url, key="key")                           # sort, exchange, write, one commit
    df.write.format("shaledb").mode("append").save(url)              # the same, on a prepared DataFrame
    spark.read.format("shaledb").load(url)                           # key, value, seq, metadata
    spark.read.format("shaledb").option("checkpoint", str(cp.id)).load(url)
    with shale_spark.read_checkpoint(spark, url) as df: ...          # checkpoint deleted on exit
    shale_spark.compact(spark, url)                                  # compaction as a Spark job

Everything here reaches the engine through shaledb's public modules
(``shaledb.bulk.ingest``, ``shaledb.bulk.read``, ``shaledb.compaction``,
``shaledb.admin``); importing ``shaledb.spark`` does not import pyspark until
a function needs it. See docs/spark.md for the design and every option.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import InvalidArgument
from ..manifest.model import IngestRecord
from .compaction import SparkCompactionReport, compact

log = logging.getLogger("shaledb.spark")

FORMAT = "shaledb"


def register(spark: Any) -> None:
    """Register the "shaledb" data source with ``spark`` (idempotent).

    Also turns on ``spark.sql.python.filterPushdown.enabled``: PySpark
    refuses to plan a Python source that implements ``pushFilters`` without
    it. The source carries the session's ``defaultParallelism``, so a read
    plans at least that many parts (a multiple of it), as Spark's file
    sources do.
    """
    from .source import ShaleDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        slots = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext; plan by size alone  # noqa: BLE001
        slots = 1
    spark.dataSource.register(ShaleDataSource.for_session(slots))


def local_session(
    app_name: str = "shaledb", *, master: str = "local[2]", conf: Mapping[str, str] | None = None
) -> Any:
    """A local SparkSession set up for shaledb on one machine (and the source registered).

    Workers run this interpreter (``PYSPARK_PYTHON``), the UI and console
    progress bar are off, logs are quiet and shuffles use as many partitions
    as cores. ``conf`` adds or overrides settings.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    cores = master.split("[", 1)[1].split(",", maxsplit=1)[0].rstrip("]") if "[" in master else "2"
    cores = str(os.cpu_count() or 2) if cores == "*" else cores
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
        "spark.sql.shuffle.partitions": cores,
        "spark.default.parallelism": cores,
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def ingest(
    df: Any,
    url: str,
    *,
    key: str = "key",
    value: str | None = None,
    value_columns: Sequence[str] = (),
    metadata: str | None = None,
    index_columns: Sequence[str] = (),
    value_separation_threshold: int | None = None,
    ingest_id: str | None = None,
    behind: bool = False,
    duplicates: str = "error",
    order_by: Sequence[str] = (),
    partitions: int | None = None,
    exchange: str | None = None,
    options: Mapping[str, str] | None = None,
) -> IngestRecord:
    """Bulk-load ``df`` into the database at ``url``: sort, exchange by key range, write, one commit.

    ``key`` names a binary or string column; ``value`` a binary or string
    column, or else ``value_columns`` (default: every other column) are
    encoded as one JSON object per row. ``order_by`` columns decide which row
    is "last" among equal keys with ``duplicates="last"``. ``index_columns``
    (string, binary or arrays of them) are the rows' secondary index terms, one
    field per column; values of at least ``value_separation_threshold`` bytes go
    to value-journal objects. ``partitions``
    defaults to ``spark.sql.shuffle.partitions``. Returns the ingest's record
    from the manifest (id, manifest, rows, seq).

    ``exchange`` says how rows reach their key range's task: ``"store"``
    (the default without ``order_by``) sorts each input partition in its own
    task and moves the sorted runs through the database's store
    (:mod:`shaledb.spark.load`); ``"spark"`` (the default, and the only
    choice, with ``order_by``) uses Spark's range shuffle and the data
    source's write. See docs/spark.md.
    """
    from .transforms import range_partition, shuffle_partitions

    iid = ingest_id or uuid.uuid4().hex
    opts: dict[str, str] = {
        "key": key,
        "ingest_id": iid,
        "ingest_behind": str(bool(behind)).lower(),
        "duplicates": duplicates,
    }
    if value is not None:
        opts["value"] = value
    if value_columns:
        opts["value_columns"] = ",".join(value_columns)
    if metadata is not None:
        opts["metadata"] = metadata
    if index_columns:
        opts["index_columns"] = ",".join(index_columns)
    if value_separation_threshold is not None:
        opts["value_separation_threshold"] = str(value_separation_threshold)
    opts.update(options or {})
    exchange = exchange or ("spark" if order_by else "store")
    if exchange not in ("store", "spark"):
        raise InvalidArgument(f'exchange must be "store" or "spark", got {exchange!r}')
    if exchange == "store" and order_by:
        raise InvalidArgument('order_by needs Spark\'s sort: use exchange="spark" (its default)')
    n = shuffle_partitions(df, partitions)
    # Without order_by the writer sorts each partition itself (a stable Arrow sort, cheaper than
    # Spark's); with it, Spark sorts by key then order_by so "last" among duplicates is defined.
    started = time.monotonic()
    if exchange == "store":
        from .load import load

        load(df, url, opts, n)
    else:
        prepared = range_partition(df, key=key, partitions=n, order=order_by, sort=bool(order_by))
        df.sparkSession.sparkContext.setJobDescription(f"shaledb ingest {iid} into {url}")
        try:
            prepared.write.format(FORMAT).mode("append").options(**opts).save(url)
        finally:
            df.sparkSession.sparkContext.setJobDescription(None)
    from .. import admin

    m = admin.read_manifest(url, store_options=_store_options(opts))
    record = next((g for g in m.ingests if g.id == iid), None)
    if record is None:
        raise RuntimeError(f"ingest {iid} finished but the manifest does not record it")
    log.info(
        "ingest %s: %d rows committed at manifest %d in %.1fs",
        iid,
        record.rows,
        record.manifest_id,
        time.monotonic() - started,
    )
    return record


def _store_options(options: Mapping[str, str]) -> dict[str, str]:
    return {k[len("store.") :]: v for k, v in options.items() if k.startswith("store.")}


@contextmanager
def read_checkpoint(
    spark: Any,
    url: str,
    *,
    lifetime_s: float = 3600.0,
    options: Mapping[str, str] | None = None,
    name: str = "spark-read",
) -> Iterator[Any]:
    """A DataFrame of a checkpoint created for it, deleted when the block ends.

    The checkpoint expires after ``lifetime_s`` should this process die
    before it can delete it.
    """
    from .. import admin

    sopts = _store_options(options or {})
    cp = admin.create_checkpoint(url, lifetime=lifetime_s, name=name, store_options=sopts)
    try:
        yield spark.read.format(FORMAT).options(**(options or {})).option("checkpoint", str(cp.id)).load(url)
    finally:
        admin.delete_checkpoint(url, cp.id, missing_ok=True, store_options=sopts)


__all__ = [
    "FORMAT",
    "SparkCompactionReport",
    "compact",
    "ingest",
    "local_session",
    "read_checkpoint",
    "register",
]

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

import importlib
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import ExtraMissing, ExtraMissingAttribute, InvalidArgument
from ..manifest.model import IngestRecord
from .compaction import SparkCompactionReport, compact
from .extra import extra_error, missing_extra

log = logging.getLogger("shaledb.spark")

FORMAT = "shaledb"
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
SAVE_MODES = ("errorifexists", "ignore", "append", "overwrite")


def require_spark_extra() -> None:
    """Raise :class:`~shaledb.errors.ExtraMissing` (a :class:`~shaledb.errors.SetupError`)
    naming ``pip install 'shaledb[spark]'`` when a package of the spark extra is missing.

    Why: ``register`` and ``local_session`` are a Spark user's first calls, and without the extra
    they failed with a bare ``ModuleNotFoundError: No module named 'pyarrow'`` (or 'pyspark')
    from deep inside the data source, which did not say that shaledb has an extra for it.
    """
    error = missing_extra()
    if error is not None:
        raise error


def register(spark: Any) -> None:
    """Register the "shaledb" data source with ``spark`` (idempotent).

    Also turns on ``spark.sql.python.filterPushdown.enabled``: PySpark
    refuses to plan a Python source that implements ``pushFilters`` without
    it. The source carries the session's ``defaultParallelism``, so a read
    plans at least that many parts (a multiple of it), as Spark's file
    sources do. Unless the session set it, ``HIDE_TRACEBACK`` is turned on:
    an error raised in a Python worker (a shaledb error in the data source)
    then reaches the user as one line, ``ErrorClass: message``, right after
    Spark's own prefix, instead of at the end of a worker traceback. In
    local mode it first checks that the workers' interpreter can import
    shaledb (:class:`~shaledb.errors.SetupError` if not, see ``workers.py``).
    """
    require_spark_extra()
    from .source import ShaleDataSource
    from .workers import check_worker_python

    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: the workers are the server's, not ours to check  # noqa: BLE001
        sc = None
    if sc is not None:
        check_worker_python(str(sc.pythonExec), str(sc.master))
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    if spark.conf.get(HIDE_TRACEBACK, None) is None:  # unless the session chose otherwise
        spark.conf.set(HIDE_TRACEBACK, "true")
    slots = int(sc.defaultParallelism) if sc is not None else 1  # Connect: plan by size alone
    spark.dataSource.register(ShaleDataSource.for_session(slots))


def local_session(
    app_name: str = "shaledb", *, master: str = "local[2]", conf: Mapping[str, str] | None = None
) -> Any:
    """A local SparkSession set up for shaledb on one machine (and the source registered).

    Workers run this interpreter (``PYSPARK_PYTHON``), the UI and console
    progress bar are off, logs are quiet and shuffles use as many partitions
    as cores. ``conf`` adds or overrides settings.
    """
    require_spark_extra()
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
        HIDE_TRACEBACK: "true",
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
    mode: str = "append",
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

    ``mode`` is the save mode: ``"append"`` (add; rows replace their keys'
    values), ``"overwrite"`` (replace the whole contents in the commit's one
    CAS), ``"errorifexists"`` (refuse a database that holds data) or
    ``"ignore"`` (write nothing to one that does; the record returned then
    has 0 rows, at the manifest found, and is not in the manifest).
    """
    from .transforms import range_partition, shuffle_partitions

    iid = ingest_id or uuid.uuid4().hex
    opts: dict[str, str] = {
        "key": key,
        "ingest_id": iid,
        "ingest_behind": str(bool(behind)).lower(),
        "on_duplicate": duplicates,
        "save_mode": mode,
    }
    if order_by:
        opts["order_by"] = ",".join(order_by)
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
        activate(df.sparkSession)
        df.sparkSession.sparkContext.setJobDescription(f"shaledb ingest {iid} into {url}")
        try:
            prepared.write.format(FORMAT).mode("append").options(**opts).save(url)
        finally:
            df.sparkSession.sparkContext.setJobDescription(None)
    from .. import admin

    m = admin.read_manifest(url, store_options=_store_options(opts))
    record = next((g for g in m.ingests if g.id == iid), None)
    if record is None and mode == "ignore":
        return IngestRecord(iid, m.id, time.time(), 0, 0)
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


def save(df: Any, url: str, *, mode: str = "errorifexists", options: Mapping[str, str] | None = None) -> None:
    """``df.write.format("shaledb").mode(mode).save(url)`` for every save mode.

    PySpark 4.3 refuses a Python data source's ``.save()`` in the modes
    ``errorifexists`` (Spark's default) and ``ignore`` before the source
    runs (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``). This writes in Spark's
    ``append`` mode with option ``save_mode``, which the source applies:
    ``errorifexists`` refuses a database that holds data (checked again in
    the commit's CAS), ``ignore`` writes nothing to one.
    """
    if mode not in SAVE_MODES:
        raise InvalidArgument(f"mode must be one of {SAVE_MODES}, got {mode!r}")
    activate(df.sparkSession)
    writer = df.write.format(FORMAT).options(**(options or {})).option("save_mode", mode)
    writer.mode("overwrite" if mode == "overwrite" else "append").save(url)


def activate(session: Any) -> None:
    """Make ``session`` the active session of this thread's JVM thread.

    PySpark 4.3 looks a Python data source up in the *active* session when a write starts
    (``df.write...save()``, ``writeStream...start()``), and a Python thread other than the
    one that made the session has none on its JVM thread: the write failed there with
    ``DATA_SOURCE_NOT_FOUND: shaledb`` (reads and SQL statements found it). ``save`` and
    ``ingest`` call this; a raw write from a thread of your own can too.
    """
    jvm = getattr(session, "_jvm", None)
    jsession = getattr(session, "_jsparkSession", None)
    if jvm is None or jsession is None:  # Spark Connect: the server resolves the source
        return
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


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


def read_changes(
    spark: Any,
    url: str,
    *,
    starting_cursor: str | None = None,
    max_changes_per_trigger: int | None = None,
    store_options: Mapping[str, str] | None = None,
) -> Any:
    """The change feed of ``url`` as a streaming DataFrame (``shaledb.spark.stream``):
    ``spark.readStream.format("shaledb").schema(CHANGES_SCHEMA).load(url)`` with options."""
    from .stream import CHANGES_SCHEMA

    reader = spark.readStream.format(FORMAT).schema(CHANGES_SCHEMA)
    if starting_cursor is not None:
        reader = reader.option("startingCursor", starting_cursor)
    if max_changes_per_trigger is not None:
        reader = reader.option("maxChangesPerTrigger", str(max_changes_per_trigger))
    for k, v in (store_options or {}).items():
        reader = reader.option(f"store.{k}", v)
    return reader.load(url)


__all__ = [
    "FORMAT",
    "SparkCompactionReport",
    "activate",
    "compact",
    "ingest",
    "local_session",
    "read_changes",
    "read_checkpoint",
    "register",
    "save",
]


_SUBMODULES = ("compaction", "load", "schema", "source", "stream", "transforms")


def __getattr__(name: str) -> Any:
    """``shale_spark.transforms.decode_json`` without importing the submodule first.

    The submodules that import pyspark load on first use (so importing
    ``shaledb.spark`` still does not import pyspark). Without the spark extra that first use
    raises :class:`~shaledb.errors.ExtraMissingAttribute` naming it, as ``register`` does (it
    raised a bare ``ModuleNotFoundError: No module named 'pyspark'`` from inside the
    submodule): a :class:`~shaledb.errors.SetupError`, and an ``AttributeError`` so that
    ``hasattr(shaledb.spark, "stream")`` is False instead of an error.
    ``from shaledb.spark import stream`` imports the submodule, which raises
    :class:`~shaledb.errors.ExtraMissing` (an ``ImportError``) with the same message.
    """
    if name in _SUBMODULES:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ImportError as exc:  # the submodule's own ExtraMissing, or an import below it
            error = exc if isinstance(exc, ExtraMissing) else extra_error(exc)
            if not isinstance(error, ExtraMissing):
                raise
            raise ExtraMissingAttribute(str(error)) from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

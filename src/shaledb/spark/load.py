"""Bulk ingest with the exchange through the store (``shaledb.spark.ingest``'s default).

Two Spark jobs and a commit, all from the driver:

1. *stage*: ``mapInArrow`` over the input's own partitions (no shuffle);
   each task encodes its rows as the data source's tasks do, sorts them and
   stages them (:meth:`ShaleWriter.stage`), returning a
   :class:`~shaledb.bulk.ingest.exchange.StagedRun`.
2. *write*: one task per key range (bounds from the runs' samples), each
   gathering its rows from every run and writing SSTs
   (:meth:`ShaleWriter.gather`), returning an ``IngestPart``.
3. :func:`shaledb.bulk.ingest.commit_ingest` of the parts in one CAS, as the data
   source's ``commit()`` does. A failed job or commit is aborted: its parts'
   SSTs are deleted unless the manifest shows the CAS landed
   (:func:`~shaledb.bulk.ingest.abort_ingest`). Either way the staged runs are
   deleted (the garbage collector takes them if this process dies first).

Why not Spark's range shuffle: see :mod:`shaledb.bulk.ingest.exchange` and
docs/benchmarks.md. Duplicate keys with ``order_by`` need Spark's sort by
key then ``order_by`` and take the shuffle path.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

from .extra import extra_error

try:
    import pyarrow as pa
except ImportError as exc:  # without the spark extra: name it and how to install it
    raise extra_error(exc) from None

from ..bulk.ingest import IngestPart, abort_ingest, commit_ingest, open_ingest_store
from ..bulk.ingest.exchange import (
    StagedRun,
    assign,
    choose_bounds,
    delete_staged,
    new_exchange_id,
)
from .write import ShaleWriter, begin_write, write_options

log = logging.getLogger("shaledb.spark")


class _Stage:
    """The stage job's function (pickled to the tasks): one pickled run per input partition."""

    def __init__(self, writer: ShaleWriter, exchange_id: str, parts: int) -> None:
        self.writer = writer
        self.exchange_id = exchange_id
        self.parts = parts

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        run = self.writer.stage(batches, self.exchange_id, self.parts)
        yield pa.RecordBatch.from_pydict({"run": [pickle.dumps(run)]}, schema=_RUN_SCHEMA)


_RUN_SCHEMA = pa.schema([("run", pa.binary())])


class _Gather:
    """The write job's function: a key range's rows from every run, as SSTs (one pickled
    ``GatherTask`` in, one pickled ``IngestPart`` out, per row).

    It runs as ``mapInArrow``, like the stage job, not as an RDD ``map``: Spark honours
    ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` (which ``register`` sets) only
    in SQL's Python runners, so a task's ``InvalidArgument`` (a duplicate key, say) reached
    the user of an RDD job at the end of a dozen frames of worker and ingest internals.
    """

    def __init__(self, writer: ShaleWriter) -> None:
        self.writer = writer

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for raw in batch.column(0).to_pylist():
                part = self.writer.gather(pickle.loads(raw))
                yield pa.RecordBatch.from_pydict({"part": [pickle.dumps(part)]}, schema=_PART_SCHEMA)


_TASK_SCHEMA = "task binary"
_PART_SCHEMA = pa.schema([("part", pa.binary())])


def load(df: Any, url: str, options: Mapping[str, str], partitions: int) -> None:
    """Ingest ``df`` (columns as the data source takes them) into ``url`` in ``partitions`` key ranges."""
    opts = write_options(df.schema, {**options, "path": url})
    values = [opts.value] if opts.value else opts.value_columns
    wanted = (opts.key, *values, opts.metadata, *opts.index_columns)
    used = list(dict.fromkeys(c for c in wanted if c is not None))  # the stage needs no other column
    began = begin_write(opts)
    if began is None:  # save mode ignore and the database holds data
        return
    writer = ShaleWriter(opts, began)
    plan = writer.plan
    exchange_id = new_exchange_id(plan.lease_id)
    sc = df.sparkSession.sparkContext
    store = open_ingest_store(url, store_options=opts.store)
    parts: list[IngestPart | None] = []
    try:
        sc.setJobDescription(f"shaledb ingest {plan.ingest_id}: sort and stage the input partitions")
        got = df.select(*used).mapInArrow(_Stage(writer, exchange_id, partitions), "run binary").collect()
        runs: list[StagedRun] = [r for r in (pickle.loads(row.run) for row in got) if r is not None]
        tasks = assign(runs, choose_bounds(runs, partitions))
        log.info(
            "ingest %s: %d rows staged in %d runs, writing %d key ranges",
            plan.ingest_id,
            sum(r.rows for r in runs),
            len(runs),
            len(tasks),
        )
        sc.setJobDescription(f"shaledb ingest {plan.ingest_id}: write {len(tasks)} key ranges")
        pickled = sc.parallelize([(pickle.dumps(t),) for t in tasks], len(tasks))  # one task each
        written = df.sparkSession.createDataFrame(pickled, _TASK_SCHEMA).mapInArrow(
            _Gather(writer), "part binary"
        )
        parts = [pickle.loads(row.part) for row in written.collect()]
        commit_ingest(plan, parts, url, store_options=opts.store)
    except BaseException:
        abort_ingest(plan, parts, url, store_options=opts.store)  # keeps them if the CAS landed
        raise
    finally:
        sc.setJobDescription(None)
        try:
            delete_staged(store, exchange_id)
        except Exception as exc:  # the GC takes them later  # noqa: BLE001
            log.warning("ingest %s: could not delete its staged runs: %s", plan.ingest_id, exc)
        store.close()


__all__ = ["load"]

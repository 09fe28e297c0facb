"""Structured Streaming into a database: ``df.writeStream.format("shaledb")``.

Each micro-batch becomes one bulk ingest, so a stream writes the way a batch
write does (docs/spark.md, "Streaming writes"):

1. every task encodes and sorts its rows exactly as a batch write's task does,
   writes an ingest lease ``compactions/<ULID>.job``
   (:func:`shaledb.bulk.ingest.model.take_lease`) and stages the rows as one
   Arrow run under ``tmp/stage/<that ULID>/``
   (:func:`shaledb.bulk.ingest.exchange.stage_run`), never born before the
   lease; the run and the lease are the task's commit message. A stream writer
   has no driver step before its tasks, so the tasks take the lease: without
   one, a garbage-collector pass at a low ``min_age_s`` between the tasks and
   the commit deleted the runs;
2. the micro-batch's ``commit`` gathers the runs (one key range), sorts them,
   writes the SSTs and commits them as ingest ``<sink id>-<batch id>`` in one
   manifest CAS (:func:`shaledb.bulk.ingest.commit_ingest`) under the oldest
   task lease, which the ingest adopts instead of writing its own, then
   deletes the runs and leases in one request; ``abort`` deletes them too (a
   killed process's lease lapses after ``lease_s``, and the garbage collector
   then takes it and the runs, as every stale lease and staged run). Each task
   lease records the sink id, and a committed micro-batch also deletes what
   earlier, uncommitted attempts of the query left (a query stopped mid-batch
   gets no ``abort``; :func:`~shaledb.bulk.ingest.model.abandoned_stream_leases`).

Why one ingest per micro-batch: ingest ids are recorded in the manifest, so a
micro-batch Spark replays after a crash (same batch id) finds itself committed
and writes nothing -- exactly once, as Spark's sink contract asks. The sink id
is the ``ingest_id`` option, or else is derived from the query's
``checkpointLocation`` (the same query restarted gets the same ids); a query
without one cannot be restarted, so its id is random. A reused checkpoint
location whose batch ids start over with other rows fails with
``IngestConflict`` naming the remedy.

``commit`` runs in one Python process on the driver's side (PySpark gives a
stream writer's commit no Spark context to spread work with), so the
micro-batch's SSTs are written there; micro-batches are sized by the source's
per-trigger limits. Complete output mode (Spark's ``overwrite``) replaces the
database's contents with each micro-batch, as ``save_mode=overwrite`` does.
"""

from __future__ import annotations

import hashlib
import logging
import random
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..bulk.ingest import IngestConflict, IngestPart, abort_ingest, commit_ingest, open_ingest_store
from ..bulk.ingest.exchange import GatherTask, StagedRun, stage_run
from ..bulk.ingest.model import JobLease, abandoned_stream_leases, check_ingest_id, take_lease
from ..clock import SYSTEM_CLOCK
from ..errors import BucketNotFound, DatabaseDestroyed, InvalidArgument, NotFound, ObjectNotFound, ShaleError
from ..format import paths
from ..store import ObjectStore
from .schema import WriteOptions, bool_option
from .tracebacks import short_traceback
from .write import ShaleWriter, begin_write, encode_partition, task_context, write_options, write_settings

log = logging.getLogger("shaledb.spark")

MAX_COMPACTION_PASSES = 4
"""Compaction passes after one micro-batch at most (each runs every job the policy proposes)."""

STREAM_ONLY = ("checkpointlocation",)
"""Options Spark passes to a stream writer that are Spark's own (read here, not by the write)."""


def sink_id(options: Mapping[str, str]) -> str:
    """The prefix of the sink's ingest ids: ``ingest_id``, else one derived from the query's
    checkpoint location, else random (see the module docstring)."""
    given = options.get("ingest_id")
    if given:
        return given
    where = options.get("checkpointlocation")
    if where:
        return "stream-" + hashlib.sha256(where.encode()).hexdigest()[:20]
    return "stream-" + uuid.uuid4().hex[:20]


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> ShaleStreamWriter:
    """The writer for ``DataSource.streamWriter``: options checked once, on the driver."""
    own = {k.lower(): str(v) for k, v in options.items()}
    if not own.get("path"):
        raise InvalidArgument(
            'give the database URL: .start(url) (or option "path"). toTable() cannot reach a shaledb '
            "table's path (PySpark hands a stream writer the stream's columns, not the table's): start "
            "the query with the table's URL instead"
        )
    if "save_mode" in own:
        raise InvalidArgument(
            "a stream has no save_mode: it appends each micro-batch (outputMode append), "
            'or replaces the contents with each one (outputMode("complete"))'
        )
    prefix = sink_id(own)
    check_ingest_id(f"{prefix}-{2**63}")  # the longest id a batch can give it
    mine = {k for k in (*STREAM_ONLY, "ingest_id", "compact") if k in own}
    opts = write_options(schema, {k: v for k, v in own.items() if k not in mine})
    if overwrite:
        if opts.behind:
            raise InvalidArgument(
                'outputMode("complete") replaces the whole contents with each micro-batch: it cannot '
                "load behind (option ingest_behind)"
            )
        opts = replace(opts, save_mode="overwrite")
    compact = bool_option(own, "compact", default=not opts.behind)
    _reach(opts)
    return ShaleStreamWriter(opts, prefix, compact=compact)


def _reach(opts: WriteOptions) -> None:
    """Read the database's manifest once when the query starts, so a wrong bucket, endpoint or
    credentials fail there with the store's own error (as a batch write's begin does), not
    inside the first micro-batch's tasks. A missing database is fine: the first micro-batch
    creates it."""
    from .. import admin

    try:
        m = admin.read_manifest(opts.url, store_options=opts.store)
    except (BucketNotFound, DatabaseDestroyed):
        raise
    except NotFound:
        return  # no database yet
    if m.destroyed_at_s is not None:
        raise DatabaseDestroyed(f"the database at {opts.url} was destroyed: a stream cannot write to it")


@dataclass
class StagedMessage(WriterCommitMessage):
    """One task's staged run and the lease it staged it under (None: its partition was empty)."""

    run: StagedRun | None
    lease: JobLease | None = None


class ShaleStreamWriter(DataSourceStreamArrowWriter):
    """Stages each task's rows; commits each micro-batch as one ingest (module docstring)."""

    def __init__(self, opts: WriteOptions, prefix: str, *, compact: bool = True) -> None:
        self.opts = opts
        self.prefix = prefix
        self.compact = compact
        """Run compaction passes after a commit when the tree asks for them (:meth:`_compact`)."""

    @short_traceback
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        batches = list(iterator)
        if not batches:
            return StagedMessage(None)
        cols = encode_partition(self.opts, pa.Table.from_batches(batches), task_context()[0])
        if not len(cols.keys):
            return StagedMessage(None)
        with closing(open_ingest_store(self.opts.url, store_options=self.opts.store)) as store:
            # The lease first, then the run, never born before it (the run's exchange is the
            # lease's id): a GC pass at any min_age_s keeps the run until the commit is done.
            job = f"stream {self.prefix}: a micro-batch's staged run"
            lease = take_lease(
                store, job, self.opts.lease_s, SYSTEM_CLOCK, random.Random(), stream=self.prefix
            )
            run = None
            try:
                run = stage_run(store, cols.staged(), exchange_id=lease.id, parts=1)
            finally:
                if run is None:  # failed (or nothing to stage): the lease protects nothing
                    _delete_quietly(store, [paths.job_path(lease.id)], f"stream {self.prefix}: a lease")
        return StagedMessage(run, lease if run is not None else None)

    @short_traceback
    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        runs, leases = _runs(messages), _leases(messages)
        iid = f"{self.prefix}-{batchId}"
        committed = False
        try:
            self._ingest(iid, runs, leases, batchId)
            committed = True
        finally:
            self._delete(runs, leases, iid, sweep=committed and bool(leases))

    @short_traceback
    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        self._delete(_runs(messages), _leases(messages), f"{self.prefix}-{batchId}")

    def _ingest(self, iid: str, runs: list[StagedRun], leases: list[JobLease], batch: int) -> None:
        opts = replace(self.opts, ingest_id=iid)
        if not runs and opts.save_mode != "overwrite":
            return  # an empty micro-batch adds nothing (and claims nothing)
        # The ingest adopts the oldest task lease (renewing it when due) instead of writing its
        # own: it covers every run (each born after its own, younger lease) and whatever the
        # commit writes, and goes with the runs in _delete's one request.
        plan = begin_write(opts, min(leases, key=lambda le: le.id) if leases else None)
        if plan is None:
            return
        writer = ShaleWriter(opts, plan)
        part: IngestPart | None = None
        try:
            try:
                part = writer.gather(GatherTask(0, None, None, tuple((r, r.batches) for r in runs)))
            except ObjectNotFound as exc:
                raise NotFound(
                    f"micro-batch {batch}: a staged run is gone ({exc}): its tasks' lease lapsed before "
                    "this commit (option lease_s, default 3600 s, from when the first task staged its "
                    "rows) and the garbage collector removed it; raise lease_s or make micro-batches smaller"
                ) from exc
            commit_ingest(plan, [part], opts.url, store_options=opts.store)
        except IngestConflict as exc:
            abort_ingest(plan, [part], opts.url, store_options=opts.store)
            raise IngestConflict(
                f"micro-batch {batch} of this stream was committed before with other rows ({exc}); the "
                "query's checkpoint location was probably cleared, so Spark numbers its batches from 0 "
                "again: give the query a new checkpointLocation or a new ingest_id option"
            ) from exc
        except BaseException:
            abort_ingest(plan, [part], opts.url, store_options=opts.store)  # keeps them if the CAS landed
            raise
        if self.compact:
            self._compact(iid)

    def _compact(self, iid: str) -> None:
        """Compaction passes here, when the compactor's policy asks for one after this commit.

        Each micro-batch adds a sorted run on top of the tree, and nothing else merges them
        while the stream owns the database (each commit claims it, fencing a writer and its
        compactor), so reads would check ever more runs. The policy is the compactor's
        (``Settings.compactor``, or its defaults): merges of similar-sized runs, and a full
        merge when the runs above the last exceed its space amplification. A failure is
        logged, not raised: the micro-batch is committed, and the next one tries again.
        """
        from .. import admin
        from ..compaction import Compactor, schedule
        from ..settings import CompactorOptions

        opts = self.opts
        settings = write_settings(opts)
        copts = settings.compactor or CompactorOptions()
        store = opts.store or None
        try:
            m = admin.read_manifest(opts.url, store_options=store)
            if not (schedule(m, copts, "data") or schedule(m, copts, "index")):
                return
            comp = Compactor.open(opts.url, copts, settings=settings, store_options=store)
            try:
                comp.run_until_idle(MAX_COMPACTION_PASSES)
            finally:
                comp.close()
        except ShaleError as exc:
            log.warning(
                "stream ingest %s is committed; compacting after it failed (the next tries again): %s",
                iid,
                exc,
            )

    def _delete(
        self, runs: list[StagedRun], leases: list[JobLease], iid: str, *, sweep: bool = False
    ) -> None:
        """The micro-batch's staged runs and its tasks' leases, in one request (a bulk delete;
        its order does not matter once the commit or abort is over).

        ``sweep`` (a committed micro-batch that staged rows): also the task leases and staged
        runs earlier, uncommitted attempts of this query left (:func:`abandoned_stream_leases`).
        Spark calls no abort for a query stopped mid-micro-batch, and its task leases kept
        the garbage collector from everything born after them for ``lease_s`` (1 h)."""
        doomed = [r.path for r in runs] + [paths.job_path(le.id) for le in leases]
        if not doomed:
            return
        try:
            store = open_ingest_store(self.opts.url, store_options=self.opts.store)
        except Exception as exc:  # noqa: BLE001
            log.warning("stream ingest %s: could not delete its staged runs and leases: %s", iid, exc)
            return
        with closing(store):
            if sweep:
                try:
                    doomed += abandoned_stream_leases(store, self.prefix, [le.id for le in leases])
                except ShaleError as exc:  # they lapse after lease_s, as before
                    log.warning("stream ingest %s: could not look for earlier attempts' leases: %s", iid, exc)
            _delete_quietly(store, doomed, f"stream ingest {iid}: its staged runs and leases")


def _delete_quietly(store: ObjectStore, doomed: list[str], what: str) -> None:
    """Best effort: what is left the garbage collector takes later (a lease once it lapses after
    ``lease_s``, then the runs it kept)."""
    try:
        store.delete_many(doomed)
    except Exception as exc:  # noqa: BLE001
        log.warning("%s: could not delete them: %s", what, exc)


def _runs(messages: Sequence[WriterCommitMessage | None]) -> list[StagedRun]:
    return [m.run for m in messages if isinstance(m, StagedMessage) and m.run is not None]


def _leases(messages: Sequence[WriterCommitMessage | None]) -> list[JobLease]:
    return [m.lease for m in messages if isinstance(m, StagedMessage) and m.lease is not None]


__all__ = ["STREAM_ONLY", "ShaleStreamWriter", "StagedMessage", "sink_id", "stream_writer"]

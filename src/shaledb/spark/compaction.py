"""Compaction as a Spark job: key-range subcompactions in tasks, one commit as the compactor.

The driver (the calling process) opens a :class:`~shaledb.Compactor`, which
claims ``compactor_epoch`` and so fences any other compactor (an embedded
one pauses, and resumes when this job closes its compactor). For each job
the scheduler proposes it cuts the key space into ranges of similar input
size (``Compactor.plan_ranges``), holds the job's lease while one Spark task per range runs
``Compactor.execute_range`` (the executor's own code: same merge, same
tombstone and expiry rules, same SST format), and commits the concatenated
outputs with one manifest CAS (``Compactor.commit``), which re-checks the
epoch and the sources exactly as the single-process compactor does. So the
same inputs give the same database: the new sorted run holds the same
entries; only where its SSTs are cut may differ (at range boundaries too).

Tasks write SSTs and nothing else. A failed or speculative attempt leaves
SSTs no commit names; the lease keeps the garbage collector off them until
the job ends, then GC reclaims them. If the commit is refused (fenced, or the
sources changed) the job's outputs are deleted and the error says why.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..clock import SYSTEM_CLOCK
from ..compaction import CompactionAborted, CompactionSpec, Compactor, RangeResult
from ..errors import FencedError
from ..numbers import check_int
from ..settings import CompactorOptions, Settings
from ..store.stack import open_stack

log = logging.getLogger("shaledb.spark")


@dataclass
class SparkCompactionReport:
    """What :func:`compact` did."""

    jobs: list[str] = field(default_factory=list)
    committed: int = 0
    aborted: int = 0
    tasks: int = 0
    input_bytes: int = 0
    bytes_written: int = 0
    entries_read: int = 0
    entries_written: int = 0
    duration_s: float = 0.0
    manifest_id: int = 0

    @property
    def did_work(self) -> bool:
        return bool(self.jobs)


def _run_range(
    url: str,
    store_options: dict[str, Any],
    settings: Settings,
    options: CompactorOptions,
    spec: CompactionSpec,
    item: tuple[int, tuple[bytes | None, bytes | None]],
    lease_id: str,
) -> tuple[int, RangeResult]:
    """One subcompaction, in a Spark task (no epoch claim, no lease, no commit; its outputs
    never born before the driver's lease ``lease_id`` started, whatever the task's clock)."""
    index, (lo, hi) = item
    rng = random.Random()
    store = open_stack(url, None, store_options, settings, SYSTEM_CLOCK, rng)
    c = Compactor(store, options, settings=settings, clock=SYSTEM_CLOCK, rng=rng)
    return index, c.execute_range(spec, lo, hi, lease_id=lease_id)


def _heartbeat(lease: Any, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            lease.beat()
        except Exception as exc:  # noqa: BLE001 - a missed renewal is retried next second
            log.warning("could not renew the compaction lease: %s", exc)


def compact(
    spark: Any,
    url: str,
    *,
    settings: Settings | None = None,
    options: CompactorOptions | None = None,
    partitions: int | None = None,
    until_settled: bool = False,
    store_options: dict[str, Any] | None = None,
) -> SparkCompactionReport:
    """Run the compactions the scheduler proposes now, each as one Spark job.

    ``partitions`` (default: Spark's default parallelism) bounds the key
    ranges per job. With ``until_settled`` it schedules again after each pass
    until nothing is left to do.

    Raises:
        FencedError: another compactor claimed the database meanwhile.
    """
    settings = settings or Settings()
    options = options or settings.compactor or CompactorOptions()
    sopts = dict(store_options or {})
    sc = spark.sparkContext
    n = int(sc.defaultParallelism) if partitions is None else check_int("partitions", partitions, minimum=1)
    report = SparkCompactionReport()
    started = time.monotonic()
    c = Compactor.open(url, options, settings=settings, store_options=sopts)
    try:
        while True:
            specs = c.schedule()
            if not specs:
                break
            for spec in specs:
                _run_job(sc, c, url, sopts, settings, options, spec, n, report)
            if not until_settled:
                break
        report.manifest_id = c.latest().id
    finally:
        c.close()  # gives the role back: a writer's embedded compactor it fenced resumes
    report.duration_s = time.monotonic() - started
    return report


def _run_job(
    sc: Any,
    c: Compactor,
    url: str,
    sopts: dict[str, Any],
    settings: Settings,
    options: CompactorOptions,
    spec: CompactionSpec,
    n: int,
    report: SparkCompactionReport,
) -> None:
    ranges = c.plan_ranges(spec, n)
    report.jobs.append(spec.describe())
    report.tasks += len(ranges)
    sc.setJobDescription(f"shaledb compaction: {spec.describe()} in {len(ranges)} key ranges")
    with c.lease(spec.describe()) as lease:
        stop = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(lease, stop), daemon=True)
        beat.start()
        try:
            work = sc.parallelize(list(enumerate(ranges)), len(ranges))
            job = lease.job_id
            results = work.map(lambda it: _run_range(url, sopts, settings, options, spec, it, job)).collect()
        finally:
            stop.set()
            beat.join()
            sc.setJobDescription(None)
        outs = [r for _, r in sorted(results, key=lambda x: x[0])]
        ssts = [s for r in outs for s in r.ssts]
        try:
            c.commit(spec, ssts)
        except (CompactionAborted, FencedError) as exc:
            c.executor.discard(ssts)
            if isinstance(exc, FencedError):
                raise
            report.aborted += 1
            log.info("compaction aborted: %s", exc)
            return
    report.committed += 1
    report.input_bytes += spec.input_bytes
    report.bytes_written += sum(r.bytes_written for r in outs)
    report.entries_read += sum(r.entries_read for r in outs)
    report.entries_written += sum(r.entries_written for r in outs)
    log.info(
        "compacted %s on Spark: %d ranges, %d SSTs / %d bytes out",
        spec.describe(),
        len(ranges),
        len(ssts),
        sum(r.bytes_written for r in outs),
    )


__all__ = ["SparkCompactionReport", "compact"]

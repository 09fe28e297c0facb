"""Metrics of a writer: counters and histograms as ``Db.metrics()``, and exporters.

Counting costs the hot path almost nothing: puts and their bytes are counted
under the write lock the put already holds, gets and scans with one unlocked
integer increment (exact with one thread; concurrent threads may lose a few
counts, which monitoring tolerates and a lock per get would not be worth),
WAL objects under the WAL's own condition lock, store requests and errors by
the accounting wrapper every store already has
(:class:`~shaledb.store.InstrumentedStore`). Durations (store requests by
kind, memtable flushes, compactions, write stalls) go into fixed-bucket
:class:`Histogram` objects, which take a lock per observation: they are
observed once per store request or background job, never per key.

Exporters turn ``metrics()`` into another library's objects on each scrape,
never a hand-written exposition format: :class:`PrometheusCollector`
(``prometheus_client``, the ``metrics`` extra).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .base import ObjectMeta, ObjectStore
from .wrappers import OP_KINDS, PerCallStore, T, find_wrapper

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds (seconds) of the duration histograms: a local read to a slow compaction."""


class Histogram:
    """Counts of observations per bucket (upper bounds ``buckets``), their sum and count."""

    __slots__ = ("_counts", "_lock", "_sum", "buckets")

    def __init__(self, buckets: Sequence[float] = BUCKETS_S) -> None:
        self.buckets = tuple(buckets)
        self._counts = [0] * (len(self.buckets) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> dict[str, Any]:
        """``{"buckets": [[le, cumulative count], ...], "sum": s, "count": n}`` (le ``inf`` last)."""
        with self._lock:
            counts = list(self._counts)
            total = self._sum
        cum = 0
        out = []
        for le, c in zip((*self.buckets, float("inf")), counts):
            cum += c
            out.append([le, cum])
        return {"buckets": out, "sum": total, "count": cum}


class StoreTimer:
    """A latency histogram per store operation kind (:data:`~shaledb.store.wrappers.OP_KINDS`)."""

    def __init__(self) -> None:
        self.latency = {k: Histogram() for k in OP_KINDS}


class TimedStore(PerCallStore):
    """Records each call's latency by kind into ``timer`` (failed calls too).

    Sits under the retrying wrapper beside the accounting one, so each attempt
    is one observation, as each attempt is one request.
    """

    def __init__(self, inner: ObjectStore, timer: StoreTimer | None = None) -> None:
        super().__init__(inner)
        self.timer = timer or StoreTimer()

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        t = time.perf_counter()
        try:
            return fn()
        finally:
            self.timer.latency[kind].observe(time.perf_counter() - t)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        t = time.perf_counter()
        try:
            yield from self.inner.list(prefix, offset=offset)
        finally:
            self.timer.latency["list"].observe(time.perf_counter() - t)


class WriterMetrics:
    """The histograms and event counts a writer keeps (the counters live where they are counted)."""

    def __init__(self) -> None:
        self.flush_s = Histogram()
        self.compaction_s = Histogram()
        self.write_stall_s = Histogram()
        self.write_stalls = 0
        self.l0_stalls = 0
        self.fenced = 0
        self.txn_commits = 0
        self.txn_conflicts = 0
        self.txn_rollbacks = 0
        self._txn_lock = threading.Lock()

    def count_txn(self, outcome: str) -> None:
        """One transaction ended: ``"commits"``, ``"conflicts"`` (its commit found a conflict:
        nothing written) or ``"rollbacks"``. Under a lock: once per transaction, exact."""
        name = f"txn_{outcome}"
        with self._txn_lock:
            setattr(self, name, getattr(self, name) + 1)


def collect(db: Any) -> dict[str, Any]:
    """``Db.metrics()``: every counter, gauge and histogram of the writer ``db``, as plain data.

    Names end in ``_total`` for counters, ``_seconds`` for histograms; the rest
    are gauges. Store figures cover every request of this handle's store stack.
    """
    m = db.manifest
    wm: WriterMetrics = db.metrics_state
    out: dict[str, Any] = {
        "puts_total": db._m_puts,
        "put_bytes_total": db._m_put_bytes,
        "gets_total": db._m_gets,
        "scans_total": db._m_scans,
        "wal_objects_total": db.wal.objects_written,
        "wal_bytes_total": db.wal.bytes_written,
        "cache_hits_total": db.cache.hits,
        "cache_misses_total": db.cache.misses,
        "write_stalls_total": wm.write_stalls,
        "l0_stalls_total": wm.l0_stalls,
        "fenced_total": wm.fenced,
        # A writer stopped by a background failure (an outage past the retry budget, fencing)
        # refuses every call until reopened; nothing else in a scrape showed it.
        "stopped": int(db._failure is not None),
        "txn_commits_total": wm.txn_commits,
        "txn_conflicts_total": wm.txn_conflicts,
        "txn_rollbacks_total": wm.txn_rollbacks,
        "l0_ssts": len(m.data.l0),
        "sorted_runs": len(m.data.runs),
        "memtable_bytes": db._mem.nbytes,
        "unflushed_bytes": db._unflushed,
        "seq": db._seq,
        "durable_seq": db.wal.durable_seq,
        "flush_seconds": wm.flush_s.snapshot(),
        "compaction_seconds": wm.compaction_s.snapshot(),
        "write_stall_seconds": wm.write_stall_s.snapshot(),
    }
    out.update(store_metrics(db.store))
    return out


def store_metrics(store: ObjectStore) -> dict[str, Any]:
    """What the wrappers of one handle's store stack counted: requests, errors and bytes by
    kind, the disk cache's figures and the request latency per kind (only the wrappers
    present in the stack report)."""
    from .disk_cache import DiskCachedStore
    from .retrying import RetryingStore
    from .wrappers import InstrumentedStore

    out: dict[str, Any] = {}
    retrying = find_wrapper(store, RetryingStore)
    if retrying is not None:
        # store_errors_total counts failed attempts, which retries usually absorb; these say
        # how often the store needed them, and how many calls failed for good (an outage).
        out["store_retries_total"] = retrying.retries
        out["store_calls_failed_total"] = retrying.exhausted
    inst = find_wrapper(store, InstrumentedStore)
    if inst is not None:
        s = inst.snapshot()
        out["store_requests_total"] = dict(s.requests)
        out["store_errors_total"] = dict(s.errors)
        out["store_bytes_read_total"] = s.bytes_read
        out["store_bytes_written_total"] = s.bytes_written
    cached = find_wrapper(store, DiskCachedStore)
    if cached is not None:
        out.update(cached.stats())
    timed = find_wrapper(store, TimedStore)
    if timed is not None:
        out["store_request_seconds"] = {
            k: h.snapshot() for k, h in timed.timer.latency.items() if h.snapshot()["count"]
        }
    return out


HELP: dict[str, str] = {
    "puts_total": (
        "keys this writer accepted (puts, deletes and merges), counted when applied, before the "
        "WAL write: a durable write that then failed (Unavailable) is counted too"
    ),
    "put_bytes_total": "bytes of keys and values this writer accepted (counted as puts_total)",
    "gets_total": "keys looked up (get and get_many)",
    "scans_total": "scans started",
    "wal_objects_total": "WAL objects written",
    "wal_bytes_total": "bytes of WAL objects written",
    "cache_hits_total": "block cache hits",
    "cache_misses_total": "block cache misses",
    "write_stalls_total": "writes that waited for memtable space",
    "l0_stalls_total": "memtable flushes that waited for compaction (L0 at l0_max_ssts)",
    "fenced_total": "times this handle found itself fenced by a newer writer",
    "stopped": "1 once a background failure (the store failing past the retry budget, fencing) "
    "stopped this writer: it refuses writes and reads until closed and opened again",
    "txn_commits_total": "transactions committed (read-only ones included)",
    "txn_conflicts_total": "transaction commits refused with TransactionConflict (nothing written)",
    "txn_rollbacks_total": "transactions rolled back (rollback(), or a with block left by an exception)",
    "l0_ssts": "L0 SSTs in the version this handle reads",
    "sorted_runs": "sorted runs in the version this handle reads",
    "memtable_bytes": "bytes in the memtable (a reader: in its replayed WAL tables)",
    "unflushed_bytes": "bytes written but not yet in an L0 SST",
    "seq": "last sequence number applied",
    "durable_seq": "last sequence number durable in the WAL",
    "flush_seconds": "memtable flush durations",
    "compaction_seconds": "durations of the embedded compactor's jobs",
    "write_stall_seconds": "how long writes waited for memtable space",
    "polls_total": "manifest and WAL polls of a reader",
    "reestablished_total": "checkpoints a reader took on a new version (each SST change, or after expiry)",
    "refreshed_total": "extensions of a reader's checkpoint expiry",
    "wal_objects_replayed_total": "WAL objects a reader replayed",
    "manifest_id": "id of the manifest version this handle reads",
    "memtables": "in-memory tables of replayed WAL entries a reader holds",
    "own_checkpoints": "checkpoints this reader holds",
    "store_requests_total": "object-store requests by kind",
    "store_errors_total": (
        "failed object-store requests by kind, each attempt (retried ones too; a missing object is no error)"
    ),
    "store_retries_total": "object-store requests that were retries of a failed one",
    "store_calls_failed_total": (
        "object-store calls that failed for good (retries spent): the caller got Unavailable"
    ),
    "store_bytes_read_total": "bytes read from the object store",
    "store_bytes_written_total": "bytes written to the object store",
    "store_request_seconds": "object-store request latency by kind",
    "disk_cache_hits_total": "disk cache parts hit",
    "disk_cache_misses_total": "disk cache parts missed",
    "disk_cache_bytes_read_total": "bytes served from the disk cache",
    "disk_cache_corrupt_total": "damaged disk cache parts dropped",
    "disk_cache_errors_total": "disk cache failures (reads went to the store)",
    "disk_cache_bytes": "bytes in the disk cache",
    "disk_cache_limit_bytes": "the disk cache's bound",
}
"""The HELP text of each metric a scrape shows (it said only the metric's name again)."""


def _help(name: str) -> str:
    return HELP.get(name, f"shaledb {name}")


class MetricsSource(Protocol):
    """What :class:`PrometheusCollector` reads: a ``Db`` or ``DbReader``, or either's asyncio
    handle. (The collector took ``Any``: a type checker let anything through, and the mistake
    showed only at the first scrape.)"""

    def metrics(self) -> dict[str, object]: ...


class PrometheusCollector:
    """A ``prometheus_client`` collector of one ``Db`` or ``DbReader`` (either's asyncio
    handle too): register it, and every scrape reads ``db.metrics()`` (``prometheus_client``
    is the optional ``metrics`` extra).

        from prometheus_client import REGISTRY, start_http_server
        REGISTRY.register(PrometheusCollector(db))
        start_http_server(9100)
    """

    def __init__(
        self, db: MetricsSource, prefix: str = "shaledb", labels: Mapping[str, str] | None = None
    ) -> None:
        self.db = db
        self.prefix = prefix
        self.labels = dict(labels or {})

    def describe(self) -> list[Metric]:
        return []  # collected on demand: no fixed descriptions (avoids a scrape at register time)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        names = list(self.labels)
        values = [self.labels[n] for n in names]
        p = self.prefix
        snapshot: dict[str, Any] = self.db.metrics()  # (each value's shape depends on its name)
        for name, v in snapshot.items():
            full = f"{p}_{name}"
            if name.endswith("_seconds") and isinstance(v, dict) and "buckets" in v:
                fam_h = HistogramMetricFamily(full, _help(name), labels=names)
                fam_h.add_metric(values, _buckets(v), v["sum"])
                yield fam_h
            elif name == "store_request_seconds":
                fam = HistogramMetricFamily(full, _help(name), labels=[*names, "kind"])
                for kind, h in sorted(v.items()):
                    fam.add_metric([*values, kind], _buckets(h), h["sum"])
                yield fam
            elif isinstance(v, dict):
                base = full.removesuffix("_total")
                fam_c = CounterMetricFamily(base, _help(name), labels=[*names, "kind"])
                for kind, n in sorted(v.items()):
                    fam_c.add_metric([*values, kind], n)
                yield fam_c
            elif name.endswith("_total"):
                fam_n = CounterMetricFamily(full.removesuffix("_total"), _help(name), labels=names)
                fam_n.add_metric(values, v)
                yield fam_n
            else:
                fam_g = GaugeMetricFamily(full, _help(name), labels=names)
                fam_g.add_metric(values, v)
                yield fam_g


def _buckets(h: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [("+Inf" if le == float("inf") else repr(float(le)), n) for le, n in h["buckets"]]


__all__ = [
    "Histogram",
    "MetricsSource",
    "PrometheusCollector",
    "StoreTimer",
    "TimedStore",
    "WriterMetrics",
    "collect",
    "store_metrics",
]

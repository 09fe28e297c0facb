"""The values an ingest's steps exchange, its errors, leases and fingerprints.

Everything here is pure data or a single store call, so every process of an
ingest (driver, tasks, commit) can import it cheaply. See ``shaledb.bulk.ingest``.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...clock import Clock
from ...errors import FencedError, InvalidArgument, ShaleError
from ...format import paths
from ...keys import check_field
from ...manifest.model import IngestRecord, JournalFile, Manifest, SstInfo
from ...numbers import counted, human_size
from ...settings import MiB
from ...store.base import ObjectStore

log = logging.getLogger("shaledb.ingest")

INGEST_HISTORY = 64
"""How many committed ingest ids the manifest remembers (oldest dropped first)."""

LEASE_EPOCH = 2**63 - 1
"""The compactor epoch an ingest lease records: no compactor epoch supersedes it."""

DUPLICATES = ("error", "last")


def holds_data(m: Manifest | None) -> bool:
    """True if the database may hold entries: SSTs, WAL objects not yet flushed, or a parent."""
    if m is None:
        return False
    unflushed = m.next_wal_id - 1 > m.replay_after_wal_id
    return bool(m.data.l0 or m.data.runs or m.journal or unflushed or m.parent is not None)


MAX_INGEST_ID_CHARS = 200
STREAMS = ("keys", "key_lengths", "values", "value_lengths", "metadata", "metadata_lengths")
"""The byte streams a fingerprint covers, each CRC32C'd separately so parts combine."""


class IngestFenced(FencedError):
    """A writer (or another ingest's claim) opened the database after the ingest claimed it,
    or while it was claiming it; nothing was committed."""


class IngestConflict(ShaleError):
    """The ingest id was already committed with different rows; nothing was committed."""


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """What every step of one ingest must agree on (picklable, JSON-able).

    ``seq`` is the sequence number every entry carries; ``writer_epoch`` the
    epoch claimed at begin (None for ``behind``); ``committed_manifest`` is
    set when the id was already committed at begin (then nothing is written).
    ``index_fields`` are the secondary-index fields the rows bring terms for;
    ``terms_checkpoint`` (set when the database already has index terms) pins
    the version whose terms the rows replace, so each part can look them up;
    ``value_separation_threshold`` sends values of at least that many bytes
    to value-journal objects (None: every value inline).
    """

    ingest_id: str
    behind: bool
    seq: int
    writer_epoch: int | None
    lease_id: str | None
    lease_s: float
    began_s: float
    committed_manifest: int | None = None
    duplicates: str = "error"
    block_size_bytes: int = 4096
    compression: str = "none"
    bloom_bits_per_key: int = 10
    max_sst_size_bytes: int = 64 * MiB
    index_fields: tuple[str, ...] = ()
    terms_checkpoint: str | None = None
    value_separation_threshold: int | None = None
    overwrite: bool = False
    """The commit replaces the database's whole contents (data, index, journal) in its CAS."""
    require_empty: bool = False
    """The commit refuses a database that holds data (Spark's errorifexists)."""
    created_epoch: int | None = None
    """Set when begin found no database and created it (the writer epoch it left): an abort
    then deletes the database again if nothing else happened to it (:func:`abort_ingest`)."""
    lease_adopted: bool = False
    """The lease is one the caller wrote before the begin (a stream micro-batch's tasks take it
    before they stage their rows, :class:`JobLease`): commit and abort leave it to the caller,
    which deletes it with its staged runs in one request."""

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__slots__}
        d["index_fields"] = list(self.index_fields)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IngestPlan:
        kw = dict(d)
        kw["index_fields"] = tuple(kw.get("index_fields", ()))
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class IngestPart:
    """One partition's output: its SSTs (in key order) and a fingerprint of its rows.

    ``index_ssts`` hold the part's index-tree entries (in index-key order);
    ``journal`` the value-journal objects its large values went to.
    """

    partition: int
    attempt: str
    ssts: tuple[SstInfo, ...]
    rows: int
    first_key: bytes | None
    last_key: bytes | None
    streams: tuple[tuple[int, int], ...]
    """(crc32c, length) of each fingerprint stream (see :data:`STREAMS`)."""
    index_ssts: tuple[SstInfo, ...] = ()
    journal: tuple[JournalFile, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(s.size for s in (*self.ssts, *self.index_ssts)) + sum(j.size for j in self.journal)

    @property
    def objects(self) -> int:
        return len(self.ssts) + len(self.index_ssts) + len(self.journal)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What :func:`commit_ingest` did."""

    ingest_id: str
    manifest_id: int
    placement: str
    """"run" (top sorted run), "l0", "bottom" (behind), "empty", or "already committed"."""
    run_ids: tuple[int, ...]
    rows: int
    ssts: int
    """SSTs written (data and index trees)."""
    bytes: int
    """Of the SSTs and the value-journal objects."""
    seq: int
    journal: int = 0
    """Value-journal objects written (large values, ``value_separation_threshold``)."""

    @property
    def noop(self) -> bool:
        return self.placement == "already committed"

    def describe(self) -> str:
        where = {
            "run": f"as sorted run {', '.join(map(str, self.run_ids))} on top of the tree",
            "bottom": f"below everything as sorted run {', '.join(map(str, self.run_ids))}",
            "l0": "as L0 SSTs (an L0 SST overlapped, or the parts overlapped)",
            "empty": "(no rows)",
            "already committed": "(already committed: nothing to do)",
        }[self.placement]
        journal = f" and {counted(self.journal, 'journal object')}" if self.journal else ""
        return (
            f"ingest {self.ingest_id}: {counted(self.rows, 'row')} in {counted(self.ssts, 'SST')}{journal} "
            f"({human_size(self.bytes)}) "
            f"{where}, manifest {self.manifest_id}, seq {self.seq}"
        )


# ----------------------------------------------------------------- helpers


def check_ingest_id(ingest_id: str) -> str:
    if (
        not isinstance(ingest_id, str)
        or not 0 < len(ingest_id) <= MAX_INGEST_ID_CHARS
        or not ingest_id.isprintable()
    ):
        raise InvalidArgument(
            f"an ingest id is 1..{MAX_INGEST_ID_CHARS} printable characters, got {ingest_id!r}"
        )
    return ingest_id


def check_index_fields(fields: Sequence[str]) -> tuple[str, ...]:
    out = tuple(map(check_field, fields))
    if len(set(out)) != len(out):
        raise InvalidArgument(f"index fields repeat: {list(out)}")
    return out


def find_record(m: Manifest, ingest_id: str) -> IngestRecord | None:
    for g in m.ingests:
        if g.id == ingest_id:
            return g
    return None


@dataclass(frozen=True, slots=True)
class JobLease:
    """A job lease written before an ingest's begin (picklable): its ULID, whose time is the
    start from which the garbage collector keeps unreferenced outputs, and the wall time it
    was written (for its renewal). A stream micro-batch's tasks take one each before they
    stage their rows (:func:`take_lease`): the micro-batch's commit begins only after them."""

    id: str
    written_s: float


def take_lease(
    store: ObjectStore,
    job: str,
    lease_s: float,
    clock: Clock,
    rng: random.Random,
    *,
    stream: str | None = None,
) -> JobLease:
    """Write a new ingest lease named by a ULID of ``clock``'s now (one PUT); outputs named
    with :attr:`JobLease.id` as their floor are never born before it started. ``stream``:
    the sink id of the stream query whose task takes it (:func:`put_lease`)."""
    now = clock.now()
    lease = JobLease(paths.new_ulid(now, rng), now)
    put_lease(store, lease.id, job, lease_s, now, stream=stream)
    return lease


def put_lease(
    store: ObjectStore, lease_id: str, job: str, lease_s: float, now_s: float, *, stream: str | None = None
) -> None:
    """Write an ingest lease (docs/format/leases.md). ``stream`` is recorded for a stream
    query's task lease: the query's next commit deletes those its earlier, uncommitted
    attempts left (a query stopped mid-micro-batch gets no abort), which kept the garbage
    collector from everything born after them for ``lease_s``."""
    body: dict[str, object] = {
        "epoch": LEASE_EPOCH,
        "lease_s": lease_s,
        "job": job,
        "kind": "ingest",
        "renewed_s": now_s,
    }
    if stream is not None:
        body["stream"] = stream
    store.put(paths.job_path(lease_id), json.dumps(body).encode())


def abandoned_stream_leases(store: ObjectStore, stream: str, keep: Sequence[str]) -> list[str]:
    """The task leases of stream query ``stream`` but ``keep`` (lease ids), and the runs
    staged under them: what earlier, uncommitted attempts of the query left (one LIST, a GET
    per other job lease, a LIST per one found). Called by the query's commit, when no other
    attempt of it runs (Spark runs its micro-batches one after another). Only leases that
    record ``stream`` qualify: another query's, a batch ingest's, a compaction's and those of
    an older shaledb (no ``stream`` field) are left to lapse."""
    mine, found = set(keep), []
    for meta in store.list(paths.JOB_DIR):
        lid = paths.parse_job_id(meta.path)
        if lid is None or lid in mine:
            continue
        try:
            body = json.loads(store.get(meta.path))
        except (ShaleError, ValueError):  # gone since the listing, or unreadable: not ours to take
            continue
        if isinstance(body, dict) and body.get("kind") == "ingest" and body.get("stream") == stream:
            found += [m.path for m in store.list(paths.stage_prefix(lid))]
            found.append(meta.path)
    return found


def write_lease(store: ObjectStore, plan: IngestPlan, now_s: float) -> None:
    if plan.lease_id is None:
        return
    put_lease(store, plan.lease_id, f"ingest {plan.ingest_id}", plan.lease_s, now_s)


def lease_due(plan: IngestPlan, now_s: float) -> bool:
    """Whether the lease the begin wrote may have used a quarter of its ``lease_s`` by
    ``now_s`` (wall time, as the garbage collector reads a lease's ``renewed_s``)."""
    return now_s - plan.began_s >= plan.lease_s / 4


def drop_lease(store: ObjectStore, plan: IngestPlan) -> None:
    if plan.lease_id is None or plan.lease_adopted:
        return  # none, or the caller's to delete (IngestPlan.lease_adopted)
    try:
        store.delete(paths.job_path(plan.lease_id))
    except ShaleError as exc:
        log.warning("ingest %s: could not delete its lease: %s", plan.ingest_id, exc)


_CRC32C_POLY = 0x82F63B78  # reflected


def _gf2_mul(a: int, b: int) -> int:
    """a * b modulo the CRC-32C polynomial (reflected bit order; zlib's multmodp)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                break
        m >>= 1
        b = (b >> 1) ^ _CRC32C_POLY if b & 1 else b >> 1
    return p


_X2N = [1 << 30]  # x^(2^k) mod p, starting at x^1
for _ in range(31):
    _X2N.append(_gf2_mul(_X2N[-1], _X2N[-1]))


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of ``a + b`` from ``crc(a)``, ``crc(b)`` and ``len(b)`` (zlib's crc32_combine)."""
    p = 1 << 31  # x^0
    n, k = len2, 3  # multiply by x^(8 * len2)
    while n:
        if n & 1:
            p = _gf2_mul(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _gf2_mul(p, crc1) ^ crc2


def fingerprint(parts: Sequence[IngestPart]) -> str:
    """The ingest's fingerprint: row count and each stream's CRC over the parts in key order.

    Empty (not compared) when the parts overlap, because then their order,
    and so the streams, depend on how the input happened to be partitioned.
    """
    live = sorted((p for p in parts if p.rows), key=lambda p: p.first_key or b"")
    for a, b in itertools.pairwise(live):
        assert a.last_key is not None and b.first_key is not None
        if a.last_key >= b.first_key:
            return ""
    crcs = [0] * len(STREAMS)
    for p in live:
        for i, (c, ln) in enumerate(p.streams):
            crcs[i] = crc32c_combine(crcs[i], c, ln)
    rows = sum(p.rows for p in live)
    return f"{rows}:" + "".join(f"{c:08x}" for c in crcs)


__all__ = [
    "DUPLICATES",
    "INGEST_HISTORY",
    "IngestConflict",
    "IngestFenced",
    "IngestPart",
    "IngestPlan",
    "IngestResult",
    "JobLease",
    "abandoned_stream_leases",
    "check_index_fields",
    "check_ingest_id",
    "crc32c_combine",
    "drop_lease",
    "find_record",
    "fingerprint",
    "lease_due",
    "put_lease",
    "take_lease",
    "write_lease",
]

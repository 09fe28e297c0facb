"""The compactor: claim the compactor epoch, then schedule, execute and commit.

Roles and naming: the *scheduler* (a pure function of the manifest) proposes
:class:`~shaledb.compaction.scheduler.CompactionSpec` values; a *job* runs one
spec: it takes a lease, the *executor* writes the new run's SSTs, and one
manifest CAS *commits* them. :class:`Compactor` does this for one database,
standalone (``Compactor.open(url, serve=True).run()`` or ``shaledb run-compactor``) or
embedded in the writer (:class:`EmbeddedCompactor`, a background thread).

Fencing (see docs/design/manifest-and-fencing.md). Opening a compactor bumps ``compactor_epoch`` by CAS,
unless a live standalone compactor holds the role: then it stands by and takes over only
once that one's role lease lapses (:mod:`~shaledb.compaction.role`; ``takeover=True``
fences at once, as every open did before).
Every commit re-checks the epoch inside its manifest mutator, so an older
compactor's next commit raises :class:`~shaledb.errors.FencedError` and its
outputs become orphans for the garbage collector. An embedded compactor that
is fenced by a standalone one pauses (the writer keeps running) and claims the
role again once that one closes: ``Compactor.close`` records its epoch as
released in the manifest (``ReleaseCompactorEpoch``). One whose writer was fenced
(another ``Db`` opened the database) stops instead, and says so.

The commit (:func:`apply_compaction`) re-validates against the *latest*
manifest, because the writer keeps flushing while a job runs: the job's L0
sources must still be the oldest L0 SSTs and its runs must still be present
and consecutive, or the job is aborted (:class:`CompactionAborted`) and its
outputs are deleted. L0 SSTs flushed meanwhile are kept above the new run. A
writer's flush that wins the race for a manifest id only makes the CAS retry
with the mutator re-applied to the newer manifest, so it is never lost.

Job leases. While a job runs it keeps ``compactions/<ULID>.job`` (the ULID's
time is the job's start) and rewrites it every quarter of ``job_lease_s``.
The garbage collector reads the live leases of the current compactor epoch
and keeps every unreferenced SST created after the oldest one started, so a
job may run far longer than the GC's ``min_age_s`` without losing its
outputs before the commit. A killed compactor's lease goes stale (or its
epoch is superseded by the next compactor) and stops protecting anything.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..clock import SYSTEM_CLOCK, Clock
from ..engine.admission import hold_off
from ..engine.history import manifest_floor
from ..engine.host import ManifestHost, WriterHost
from ..engine.merging import OPT_MERGE_OPERATOR, Folder
from ..engine.parents import ExternalStores, settings_factory
from ..errors import ConflictError, FencedError, InvalidArgument, NotFound, ShaleError, Unavailable
from ..format import paths
from ..format.coding import CODECS
from ..manifest.edits import ClaimCompactorEpoch, Decorated, Edit, ReleaseCompactorEpoch
from ..manifest.model import TREE_NAMES, Manifest, SortedRun, SstInfo, Tree
from ..manifest.options import OPT_COMPACTOR_RELEASED
from ..manifest.store import ManifestStore
from ..merge import as_operator
from ..numbers import MAX_SECONDS
from ..settings import CompactorOptions, MiB, Settings
from ..store.base import ObjectStore
from ..store.parallel import Progress
from ..store.stack import close_quietly, open_stack
from .executor import ExecResult, Executor, KeyRange, RangeResult
from .index_rdels import OPT_CLEANED, cleaned_seq, cleaning_due, keep_above
from .role import Holder, Renewed, RoleLease, Standby
from .scheduler import CompactionSpec, schedule

if TYPE_CHECKING:
    from types import TracebackType

log = logging.getLogger("shaledb.compaction")

_LIST_EVERY_POLLS = 60
"""A standalone compactor probes for newer manifests with GETs and lists the
manifest directory every this many polls (probing can miss versions the GC
deleted)."""


class CompactionAborted(ConflictError):
    """The manifest changed under a job (its sources are gone); nothing was committed."""


# ----------------------------------------------------------------- commit


def apply_compaction(
    m: Manifest, spec: CompactionSpec, ssts: tuple[SstInfo, ...] | list[SstInfo], epoch: int
) -> Manifest:
    """``m`` with ``spec``'s sources replaced by a run of ``ssts`` (pure).

    Raises FencedError if another compactor took over, CompactionAborted if
    ``m`` no longer has the sources where the spec found them.
    """
    if m.compactor_epoch != epoch:
        raise FencedError(
            f"compactor epoch {m.compactor_epoch} took over; this compactor (epoch {epoch}) stops"
        )
    t = m.tree(spec.tree)
    k = len(spec.l0)
    if k and tuple(s.id for s in t.l0[len(t.l0) - k :]) != spec.l0_ids:
        raise CompactionAborted(f"{spec.describe()}: its L0 sources are no longer the oldest L0 SSTs")
    runs = list(t.runs)
    p = 0
    if spec.runs:
        ids = [r.id for r in runs]
        if spec.runs[0].id not in ids:
            raise CompactionAborted(f"{spec.describe()}: run {spec.runs[0].id} is gone")
        p = ids.index(spec.runs[0].id)
        window = runs[p : p + len(spec.runs)]
        if [_run_key(r) for r in window] != [_run_key(r) for r in spec.runs]:
            raise CompactionAborted(f"{spec.describe()}: its runs changed")
        if k and p != 0:
            raise CompactionAborted(f"{spec.describe()}: a newer run appeared above its L0 sources")
        if spec.bottom and p + len(spec.runs) != len(runs):
            raise CompactionAborted(f"{spec.describe()}: a run appeared below the bottom")
    elif spec.bottom and runs:
        raise CompactionAborted(f"{spec.describe()}: a run appeared below the bottom")
    used = {r.id for r in m.data.runs} | {r.id for r in m.index.runs}
    rid = spec.dest_run_id
    if rid in used:
        rid = max(m.next_run_id, max(used) + 1)
    new_run = [SortedRun(rid, tuple(ssts))] if ssts else []
    new_runs = (*runs[:p], *new_run, *runs[p + len(spec.runs) :])
    nxt = m.with_tree(spec.tree, Tree(t.l0[: len(t.l0) - k], new_runs))
    if spec.cleans_to is not None and spec.cleans_to > cleaned_seq(m):  # index_rdels.py
        opts = tuple(sorted({**dict(m.options), OPT_CLEANED: str(spec.cleans_to)}.items()))
        nxt = replace(nxt, options=opts)
    return replace(nxt, next_run_id=max(m.next_run_id, rid + 1))


@dataclass(frozen=True)
class CommitCompaction(Edit):
    """Replace ``spec``'s sources with a run of ``ssts`` (:func:`apply_compaction`), fenced by
    the compactor ``epoch`` and re-validated against the latest manifest on every attempt."""

    spec: CompactionSpec
    ssts: tuple[SstInfo, ...] | list[SstInfo]
    epoch: int

    def apply(self, m: Manifest) -> Manifest | None:
        return apply_compaction(m, self.spec, self.ssts, self.epoch)


def runs_below(m: Manifest, spec: CompactionSpec) -> tuple[SortedRun, ...]:
    """The runs of ``spec``'s tree older than its sources (none at the bottom)."""
    if spec.bottom:
        return ()
    runs = m.tree(spec.tree).runs
    if not spec.runs:
        return runs
    ids = [r.id for r in runs]
    last = spec.runs[-1].id
    return runs[ids.index(last) + 1 :] if last in ids else ()


def _run_key(r: SortedRun) -> tuple[int, tuple[str, ...]]:
    return r.id, tuple(s.id for s in r.ssts)


# ------------------------------------------------------------------ leases


class JobLease(Renewed):
    """``compactions/<ULID>.job`` while a job runs (see module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        rng: random.Random,
        epoch: int,
        lease_s: float,
        what: str,
        *,
        kind: str | None = None,
    ) -> None:
        self.job_id = paths.new_ulid(clock.now(), rng)
        super().__init__(store, clock, paths.job_path(self.job_id), lease_s)
        self.epoch = epoch
        self.what = what
        self.kind = kind
        """The lease's ``kind`` field (docs/format/leases.md): ``"backup"`` for a backup
        copying into the database, which protects every unreferenced object (:data:`COPY_KIND`)."""
        self.also: Callable[[], None] | None = None
        """Called on every :meth:`beat` (the standalone compactor's role lease renews with it)."""

    def body(self) -> dict[str, object]:
        body: dict[str, object] = {"epoch": self.epoch, "lease_s": self.lease_s, "job": self.what}
        if self.kind is not None:
            body["kind"] = self.kind
        return body

    def beat(self) -> None:
        super().beat()
        if self.also is not None:
            self.also()

    def __enter__(self) -> JobLease:
        self._write()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.store.delete(self.path)
        except ShaleError as exc:
            log.warning("could not remove job lease %s: %s", self.path, exc)


COPY_KIND = "backup"
"""The ``kind`` of a backup's job lease in its destination. A backup copies objects under the
ids (ULIDs) they have in the source, so they are "born" long before the lease started and
the ULID-time rule protects none of them; while such a lease is live the garbage collector
keeps every unreferenced object instead (``shaledb.admin.gc``)."""


def lease_kind(data: bytes) -> str | None:
    """A job lease's ``kind`` field, None if it has none (or is not a lease)."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    kind = body.get("kind") if isinstance(body, dict) else None
    return kind if isinstance(kind, str) else None


def read_lease(data: bytes) -> tuple[int, float] | None:
    """``(epoch, lease_s)`` from a lease object, None if it is not one."""
    try:
        body = json.loads(data)
        epoch, lease_s = body["epoch"], body["lease_s"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not isinstance(lease_s, (int, float)):
        return None
    try:
        seconds = float(lease_s)
    except OverflowError:  # an integer beyond float range
        return None
    if isinstance(lease_s, bool) or not 0 < seconds <= MAX_SECONDS:
        # Infinity (which Python's json reads) kept a job "live" for ever, and the GC
        # deleted nothing written after it; NaN and <= 0 are no lease either.
        return None
    return epoch, seconds


# ------------------------------------------------------------------ report


@dataclass
class CompactionReport:
    """What one :meth:`Compactor.run_once` did."""

    manifest_id: int = 0
    jobs: list[str] = field(default_factory=list)
    committed: int = 0
    aborted: int = 0
    input_bytes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    entries_read: int = 0
    entries_written: int = 0
    duration_s: float = 0.0
    held_by: str = ""
    """Set when this compactor stood by: the live compactor holding the role (nothing done)."""

    @property
    def did_work(self) -> bool:
        return bool(self.jobs)

    def add(self, res: ExecResult) -> None:
        """Count one executed job."""
        self.input_bytes += res.input_bytes
        self.bytes_read += res.bytes_read
        self.bytes_written += res.bytes_written
        self.entries_read += res.entries_read
        self.entries_written += res.entries_written

    def merge(self, other: CompactionReport) -> None:
        """Add ``other``'s counts to these (running totals)."""
        self.manifest_id = max(self.manifest_id, other.manifest_id)
        self.jobs.extend(other.jobs[-100:])
        del self.jobs[:-100]
        self.committed += other.committed
        self.aborted += other.aborted
        self.input_bytes += other.input_bytes
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        self.entries_read += other.entries_read
        self.entries_written += other.entries_written
        self.duration_s += other.duration_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_id": self.manifest_id,
            "jobs": list(self.jobs),
            "committed": self.committed,
            "aborted": self.aborted,
            "input_bytes": self.input_bytes,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "entries_read": self.entries_read,
            "entries_written": self.entries_written,
            "duration_s": round(self.duration_s, 3),
            **({"held_by": self.held_by} if self.held_by else {}),
        }


# --------------------------------------------------------------- compactor


class Compactor:
    """Compacts one database (see module docstring). Thread-safe to stop()."""

    @classmethod
    def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        options: CompactorOptions | None = None,
        *,
        store: ObjectStore | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
        settings: Settings | None = None,
        store_options: Mapping[str, object] | None = None,
        takeover: bool = False,
        serve: bool = False,
    ) -> Compactor:
        """Open a standalone compactor: claim ``compactor_epoch`` (fencing older ones), or
        stand by while another standalone compactor's role lease is live (:attr:`holder`
        says whose; :meth:`run` takes over once it lapses, :meth:`run_once` and
        :meth:`schedule` do nothing meanwhile). ``takeover=True`` claims at once.

        ``serve=True``: the caller goes on to :meth:`run` (``run-compactor`` without
        ``--once``), so the role lease says ``serving`` from its first write and another
        standalone compactor stands by for this one from the claim on. Without it the lease
        said "one-off run" until :meth:`run` rewrote it, and a standby polling between the two
        fenced a just-restarted ``run-compactor``. Leave it False for a one-off run
        (:meth:`run_once`), which a standby does not wait for.

        ``settings`` supplies the SST format (block size, compression, bloom
        bits) and store retries; ``options`` default to ``settings.compactor``.

        Raises:
            NotFound: no database at ``url``.
            InvalidArgument: neither ``url`` nor ``store`` given.
        """
        settings = settings or Settings()
        options = options or settings.compactor or CompactorOptions()
        if not isinstance(options, CompactorOptions):
            raise InvalidArgument(f"options must be a CompactorOptions, got {type(options).__name__}")
        clock = clock or SYSTEM_CLOCK
        rng = random.Random(seed)
        st = open_stack(url, store, store_options, settings, clock, rng)
        try:
            c = cls(st, options, settings=settings, clock=clock, rng=rng, store_options=store_options)
            c._serving = serve
            if takeover:
                c.claim()
            else:
                c._claim_unless_held()
        except BaseException:
            close_quietly(st if store is None else None)
            raise
        c.owned_store = st if store is None else None
        return c

    def __init__(
        self,
        store: ObjectStore,
        options: CompactorOptions,
        *,
        settings: Settings,
        clock: Clock,
        rng: random.Random,
        host: WriterHost | None = None,
        store_options: Mapping[str, object] | None = None,
    ) -> None:
        self.store = store
        self.owned_store: ObjectStore | None = None
        """The store :meth:`open` opened, closed by :meth:`close` (a passed-in store stays theirs)."""
        # A clone's ancestors, opened by URL (the writer's own resolver when embedded).
        self._own_external = host is None
        self.external = (
            host.parents
            if host is not None
            else ExternalStores(settings_factory(settings, clock, store_options))
        )
        self.options = options
        self.settings = settings
        self.clock = clock
        self.rng = rng
        self.host = host
        self.manifests = ManifestStore(store, clock, random.Random(rng.getrandbits(64)), author="compactor")
        max_sst, read_ahead, chunk = working_set(settings, options)
        self.executor = Executor(
            store,
            clock=clock,
            rng=random.Random(rng.getrandbits(64)),
            block_size=settings.block_size_bytes,
            codec=CODECS[settings.compression],
            bloom_bits_per_key=settings.bloom_bits_per_key,
            max_sst_size_bytes=max_sst,
            chunk_bytes=chunk,
            read_ahead_bytes=read_ahead,
            resolve=self._resolve_store,
        )
        self.executor.folder_for = self._merge_folder
        self.epoch: int | None = None
        self.manifest: Manifest | None = None
        self.holder: Holder | None = None
        """While this compactor stands by: the live compactor that holds the role."""
        self._role: RoleLease | None = None
        self._standby = Standby(store, clock)
        self._serving = False
        """In :meth:`run` (or opened with ``serve=True``): a role lease claimed now says
        ``serving`` from its first write."""
        self._polls = 0
        self._stop = threading.Event()
        self._wake = threading.Event()

    def _merge_folder(self) -> Folder:
        """The merge operator of these settings, checked against the manifest's record."""
        m = self.manifest
        if m is None:
            m = self.host.manifest if self.host is not None else self.manifests.require_latest()
        return Folder(as_operator(self.settings.merge_operator), m.option(OPT_MERGE_OPERATOR))

    def _resolve_store(self, index: int) -> ObjectStore:
        m = self.manifest
        if m is None:
            m = self.host.manifest if self.host is not None else self.manifests.require_latest()
        return self.external.store_for(index, m)

    # ------------------------------------------------------------ manifest

    def _update(self, edit: Edit) -> Manifest:
        if self.host is not None:
            m = self.host.update_manifest(Decorated(edit, self.host.decorate_manifest))
        else:
            m = self.manifests.update(
                edit, timeout_s=self.options.manifest_update_timeout_s, current=self.manifest
            )
        self.manifest = m
        return m

    def claim(self, lapsed: int | None = None) -> int:
        """Bump ``compactor_epoch`` (fencing older compactors); returns our epoch.

        ``lapsed``: only if the epoch is still that one (a standby's claim), else
        ``FencedError`` (another compactor claimed first; :class:`ClaimCompactorEpoch`)."""
        if self.host is None and self.manifests.read_latest() is None:
            raise NotFound(f"no database at {self.store.describe()}")
        m = self._update(ClaimCompactorEpoch(lapsed))
        self.epoch = m.compactor_epoch
        self.holder = None
        if self.host is None:  # standalone: a second one stands by while this lease is live
            token = f"{self.rng.getrandbits(64):016x}"
            self._role = RoleLease(
                self.store, self.clock, self.epoch, self.options.role_lease_s, token, serving=self._serving
            )
        log.info("compactor claimed epoch %d at manifest %d", self.epoch, m.id)
        return self.epoch

    def _claim_unless_held(self) -> bool:
        """Claim the role unless a live standalone compactor holds it; whether we hold it.

        Standing by logs once at INFO, naming the holder.

        The claim is conditional on the epoch seen lapse: when another standby claimed it
        first, this one stands by for that one instead of fencing it. A standby that watched
        the role (or lost such a race) gives a just-claimed epoch without a role lease
        ``role_lease_s`` to write it (:meth:`Standby.live_holder`); at open, an epoch without
        a lease (an embedded compactor's, a one-off's) is taken at once as before."""
        m = self.manifests.read_latest() if self.manifest is None else self.manifests.refresh(self.manifest)
        if m is None:
            raise NotFound(f"no database at {self.store.describe()}")
        self.manifest = m
        watched = self.holder is not None
        while True:
            h = self._standby.live_holder(m, self.options.role_lease_s if watched else 0.0)
            if h is not None:
                break
            was = self.holder
            try:
                epoch = self.claim(lapsed=m.compactor_epoch)
            except FencedError as exc:  # another compactor claimed between our look and our write
                log.info("compactor: %s; looking at its role lease instead of fencing it", exc)
                m = self.manifests.require_latest()
                self.manifest, watched = m, True
                continue
            if was is not None:  # a crash (or a kill) of the holder: worth a line without --verbose
                log.warning("compactor epoch %d takes over from %s: its lease lapsed", epoch, was.describe())
            return True
        if self.holder is None or self.holder.epoch != h.epoch:
            log.info(
                "compactor standing by: %s holds the role; taking over if its lease lapses "
                "(%.0fs without a renewal)",
                h.describe(),
                h.lease_s,
            )
        self.holder = h
        return False

    def _standing_by(self) -> bool:
        """Whether this standalone compactor still stands by (it claims once the lease lapsed)."""
        return self.holder is not None and self.epoch is None and not self._claim_unless_held()

    def _beat(self) -> None:
        if self._role is not None:
            self._role.beat()

    def latest(self) -> Manifest:
        """The newest manifest this compactor knows (cheap: probes, rarely lists)."""
        if self.host is not None:
            return self.host.manifest
        self._polls += 1
        if self.manifest is None or self._polls % _LIST_EVERY_POLLS == 0:
            m = self.manifests.require_latest()
        else:
            m = self.manifests.refresh(self.manifest)
        self.manifest = m
        return m

    def _check_epoch(self, m: Manifest) -> None:
        if self.epoch is None:
            raise InvalidArgument("the compactor has not claimed an epoch (use Compactor.open)")
        if m.compactor_epoch != self.epoch:
            if self._role is not None:
                self._role.drop()
                self._role = None
            h = self._standby.state(m)[1]
            who = h.describe() if h is not None else f"compactor epoch {m.compactor_epoch}"
            raise FencedError(f"{who} took over; this compactor (epoch {self.epoch}) stops")

    # ------------------------------------------------------------ the work

    def schedule(self, m: Manifest | None = None) -> list[CompactionSpec]:
        """The jobs worth running on the latest manifest (both trees); none while this
        compactor stands by (:attr:`holder`)."""
        if self._standing_by():
            return []
        self._beat()
        m = m or self.latest()
        self._check_epoch(m)
        if not m.initialized or m.destroyed_at_s is not None:
            return []
        specs: list[CompactionSpec] = []
        floor = manifest_floor(m, int(self.clock.now() * 1000))  # a history window: keep its versions
        keep = keep_above(m)  # an indexed database: range tombstones stay until the index is clean
        due = cleaning_due(m, self.executor.meta, floor)
        for tree in TREE_NAMES:
            if tree != TREE_NAMES[0] and due is not None:  # the whole index tree, cleaned
                t = m.tree(tree)
                ssts, upto = due
                found = [CompactionSpec(tree, t.l0, t.runs, 0, True, "index terms of range-deleted keys")]
                found = [replace(found[0], data_range_dels=ssts, cleans_to=upto)]
            else:
                found = schedule(m, self.options, tree)
            for spec in found:
                specs.append(
                    replace(
                        spec,
                        dest_run_id=m.next_run_id + len(specs),
                        history_floor=floor,  # (the index tree too: index_query at a time-travel snapshot)
                        range_dels_keep_above=keep if tree == TREE_NAMES[0] else None,
                        below=runs_below(m, spec) if tree == TREE_NAMES[0] else (),
                    )
                )
        return specs

    def plan_ranges(self, spec: CompactionSpec, n: int | None = None) -> list[KeyRange]:
        """Key ranges for subcompactions (``n`` defaults to ``max_subcompactions``)."""
        return self.executor.plan_ranges(spec, n or self.options.max_subcompactions)

    def execute_range(
        self, spec: CompactionSpec, lo: bytes | None, hi: bytes | None, *, lease_id: str | None = None
    ) -> RangeResult:
        """Compact one key range of ``spec`` (no lease, no commit: for distributed runs).

        ``lease_id`` is the job id of the lease the range runs under (``JobLease.job_id``, held
        by the process that commits): the outputs are then never born before that lease started,
        whatever this machine's clock says. The garbage collector keeps unreferenced outputs born
        after a live lease started; an output of a task whose clock ran behind the lease
        holder's was protected by ``min_age_s`` alone.
        """
        if lease_id is not None:
            start = paths.ulid_time_s(lease_id)
            self.executor.ids_not_before_s = max(self.executor.ids_not_before_s, start)
        return self.executor.execute_range(spec, lo, hi)

    def lease(self, what: str) -> JobLease:
        """A job lease for work on this compactor's epoch (use as a context manager)."""
        if self.epoch is None:
            raise InvalidArgument("the compactor has not claimed an epoch (use Compactor.open)")
        lease = JobLease(self.store, self.clock, self.rng, self.epoch, self.options.job_lease_s, what)
        lease.also = self._beat  # the role lease too: a long job must not look like a crash
        return lease

    def commit(self, spec: CompactionSpec, ssts: tuple[SstInfo, ...] | list[SstInfo]) -> Manifest:
        """Replace ``spec``'s sources with a run of ``ssts`` in one manifest CAS.

        Raises:
            FencedError: a newer compactor claimed the database.
            CompactionAborted: the sources changed; nothing was committed.
        """
        if self.epoch is None:
            raise InvalidArgument("the compactor has not claimed an epoch (use Compactor.open)")
        epoch = self.epoch
        return self._update(CommitCompaction(spec, ssts, epoch))

    def run_job(self, spec: CompactionSpec, progress: Progress | None = None) -> ExecResult:
        """Lease, execute and commit one spec; on abort or fencing the outputs are deleted.

        ``progress(bytes read, input bytes)`` is called as the merge advances.
        """
        with self.lease(spec.describe()) as lease:
            beat = lease.beat
            host = self.host
            if host is not None:  # embedded: flushes go first while writers wait for memory

                def beat() -> None:
                    hold_off(host.flush_first, self._stop, lease.beat)

            res = self.executor.execute(
                spec,
                max_subcompactions=self.options.max_subcompactions,
                heartbeat=beat,
                progress=progress,
            )
            try:
                self.commit(spec, res.ssts)
            except (CompactionAborted, FencedError):
                self.executor.discard(res.ssts)
                raise
        return res

    def run_once(self, progress: Progress | None = None) -> CompactionReport:
        """Run every job the scheduler proposes now, one after another.

        ``progress`` is passed to each job (:meth:`run_job`).

        Raises:
            FencedError: a newer compactor took over (stop using this one).
        """
        started = self.clock.monotonic()
        report = CompactionReport()
        specs = self.schedule()
        if self.holder is not None:
            report.held_by = self.holder.describe()
        for spec in specs:
            if self._stop.is_set():
                break
            report.jobs.append(spec.describe())
            try:
                res = self.run_job(spec, progress)
            except CompactionAborted as exc:
                report.aborted += 1
                log.info("compaction aborted: %s", exc)
                continue
            report.committed += 1
            report.add(res)
            mb_s = res.input_bytes / 1e6 / res.duration_s if res.duration_s > 0 else 0.0
            log.info(
                "compacted %s: %d bytes in, %d SSTs / %d bytes out, %d ranges, %.1f MB/s",
                spec.describe(),
                res.input_bytes,
                len(res.ssts),
                res.bytes_written,
                res.ranges,
                mb_s,
            )
        report.manifest_id = (self.manifest or self.latest()).id
        report.duration_s = self.clock.monotonic() - started
        return report

    def run_until_idle(self, max_passes: int) -> int:
        """Passes until one does no work (a pass's output can make the next job eligible),
        at most ``max_passes``; the number of passes that did work.

        Raises:
            FencedError: a newer compactor took over.
        """
        worked = 0
        for _ in range(max_passes):
            if not self.run_once().did_work:
                break
            worked += 1
        return worked

    def run(self, on_report: Callable[[CompactionReport], None] | None = None) -> None:
        """Compact until :meth:`stop`, polling every ``poll_interval_s``.

        ``on_report`` is called with the report of every pass that did work.

        A pass that fails with :class:`~shaledb.errors.Unavailable` (the store did not answer
        within the retry budget) is logged and tried again at the next poll, as the embedded
        compactor does: before, a store outage over a minute ended ``run-compactor`` for good.

        A compactor that stands by (:attr:`holder`) polls the holder's role lease every
        quarter of ``role_lease_s`` and takes over once it lapses; one that holds the role
        renews its own lease as it goes.

        Raises:
            FencedError: a newer compactor took over.
        """
        self._serving = True
        try:
            self._run(on_report)
        finally:
            self._serving = False
            if self._role is not None:
                self._role.serve(False)

    def _run(self, on_report: Callable[[CompactionReport], None] | None) -> None:
        serving = False
        while not self._stop.is_set():
            try:
                if self._standing_by():
                    self.clock.wait(self._wake, self.options.role_lease_s / 4)
                    self._wake.clear()
                    continue
                if not serving and self._role is not None:
                    self._role.serve(True)  # a standby waits for us from now on
                    serving = True
                self._beat()
                report = self.run_once()
            except Unavailable as exc:
                log.warning(
                    "compaction pass failed, retrying in %.1fs: %s", self.options.poll_interval_s, exc
                )
                self.clock.wait(self._wake, self.options.poll_interval_s)
                self._wake.clear()
                continue
            if report.did_work:
                if on_report is not None:
                    on_report(report)
                continue
            self.clock.wait(self._wake, min(self.options.poll_interval_s, self.options.role_lease_s / 4))
            self._wake.clear()

    def wake(self) -> None:
        """Look for work now instead of at the next poll."""
        self._wake.set()

    def stop(self) -> None:
        """Make :meth:`run` return after the current job."""
        self._stop.set()
        self._wake.set()

    def close(self) -> None:
        """Stop, and give the compactor role up (:meth:`release`), so a writer's embedded
        compactor this one fenced resumes; then close what :meth:`open` opened."""
        self.stop()
        if self.host is None and self.epoch is not None:
            self.release()
        close_quietly(self.external if self._own_external else None, self.owned_store)
        self.owned_store = None

    def release(self) -> None:
        """Record in the manifest that this compactor's epoch gave the role up (one CAS;
        nothing if another compactor took over since). An embedded compactor fenced by this
        one sees the mark and claims the role again; a failure is logged (the embedded one
        then stays paused until its writer reopens, as before this existed)."""
        epoch, self.epoch = self.epoch, None
        role, self._role = self._role, None
        if epoch is None:
            return
        try:
            m = self._update(ReleaseCompactorEpoch(epoch))
        except ShaleError as exc:
            log.warning("compactor epoch %d could not give its role back: %s", epoch, exc)
            return
        finally:
            if role is not None:  # after the release: a standby never sees a released role leased
                role.drop()
        if m.compactor_epoch == epoch:  # (a fenced one has nothing to give back: it said
            log.info("compactor epoch %d released the role", epoch)  # "released" all the same)

    def __enter__(self) -> Compactor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Compactor({self.store.describe()}, epoch={self.epoch})"


def working_set(settings: Settings, options: CompactorOptions) -> tuple[int, int, int]:
    """``(output SST size, read-ahead per source, chunk)`` bytes of a compaction.

    A compaction holds one output SST while it builds it (object stores take
    whole objects), a read-ahead buffer per source and one decoded chunk of
    input. All three are capped from ``max_unflushed_bytes``, the budget a
    user sets for the writer's write-side memory, so shrinking that budget
    shrinks compaction's memory too: outputs at most a quarter of it,
    read-ahead buffers (all sources together) an eighth, a chunk a sixteenth.
    The memtables (which the budget also covers) and an L0 SST being built
    are in memory at the same time. With the
    default budget (256 MiB) the caps are above the defaults (64 MiB outputs,
    4 MiB read-ahead and chunks) and change nothing.
    """
    budget = settings.max_unflushed_bytes
    max_sst = min(options.max_sst_size_bytes, max(1 * MiB, budget // 4))
    read_ahead = min(4 * MiB, max(256 * 1024, budget // (8 * options.max_sources)))
    chunk = min(4 * MiB, max(256 * 1024, budget // 16))
    return max_sst, read_ahead, chunk


class EmbeddedCompactor:
    """A compactor thread inside the writer (``Settings.compactor`` not None).

    Fenced with its writer (another ``Db`` opened the database): stops, and logs so.
    Fenced by a standalone compactor: pauses (logged at INFO: expected, nothing to do), and
    claims the role again once that compactor closes and releases it
    (``ReleaseCompactorEpoch``, seen in the manifests the writer reads anyway: no request
    of its own). Before, it stopped until the
    writer reopened, and a one-off ``run-compactor --once`` or Spark compaction left the
    writer stalled on L0 for good. Other failures are logged and retried at the next
    poll, so a flaky store does not stop compaction for good.

    With standalone compactors keeping role leases (:mod:`~shaledb.compaction.role`), it
    also starts paused when a live one holds the role as its writer opens (it used to fence
    it, and the standalone one exited), and resumes when that one's lease lapses (killed
    without closing), not only on a release. It reads the lease (one GET, with a manifest
    probe) at the writer's open and, while paused, every quarter of ``role_lease_s``.
    """

    def __init__(self, host: WriterHost, options: CompactorOptions) -> None:
        self.compactor = Compactor(
            host.store,
            options,
            settings=host.settings,
            clock=host.clock,
            rng=random.Random(host.rng.getrandbits(64)),
            host=host,
        )
        self.host = host
        self.fenced: FencedError | None = None
        """Set while paused: the fencing that paused it."""
        self.writer_fenced = False
        """A newer writer fenced the writer: this compactor stopped for good (``fenced`` says how)."""
        self.last_error: BaseException | None = None
        self.reports = 0
        self.totals = CompactionReport()
        """Everything this thread compacted (``jobs`` keeps the last 100)."""
        self.idle = False
        """The last pass found nothing to do."""
        self._looked_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="shaledb-compactor", daemon=True)
        self._thread.start()

    def _writer_fenced_by(self) -> int | None:
        """The newer writer epoch that fenced this compactor's writer, or None while the
        writer holds the database (or the manifest cannot be read: then it was a compactor).

        Read from the store: the writer's own view is as old as its last write, and it
        may not have noticed the fence yet."""
        try:
            latest = self.host.manifests.refresh(self.host.manifest)
        except ShaleError as exc:
            log.debug("embedded compactor: could not read the manifest after a fence: %s", exc)
            return None
        return latest.writer_epoch if latest.writer_epoch != self.host.epoch else None

    def _released(self) -> bool:
        """Whether the compactor that fenced this one has given the role up."""
        m = self.host.manifest
        return m.option(OPT_COMPACTOR_RELEASED) == str(m.compactor_epoch)

    def _standalone_state(self) -> str:
        """The role lease's state (:meth:`Standby.state`) for the latest manifest; ``"live"``
        between reads (at most one every quarter of ``role_lease_s``) and when unreadable."""
        c = self.compactor
        now = c.clock.monotonic()
        if self._looked_at is not None and now - self._looked_at < c.options.role_lease_s / 4:
            return "live"
        self._looked_at = now
        try:
            state, h = c._standby.state(self.host.manifests.refresh(self.host.manifest))
        except ShaleError as exc:
            log.debug("embedded compactor: could not read the compactor role lease: %s", exc)
            return "live"
        if state == "live" and h is not None and self.fenced is None:
            self.fenced = FencedError(f"{h.describe()} holds the role")
            log.info(
                "embedded compactor starts paused: standalone %s holds the role; it resumes when "
                "that one closes or its lease lapses",
                h.describe(),
            )
        return state

    def _run(self) -> None:
        c = self.compactor
        opts = c.options
        while not c._stop.is_set():
            try:
                if c.epoch is None:
                    if self.fenced is None:  # the writer's open: a live standalone one keeps the role
                        held = self._standalone_state() == "live"
                    else:  # paused: until released, or the lease of the one that fenced us lapsed
                        held = not self._released() and self._standalone_state() != "lapsed"
                    if held:
                        c.clock.wait(c._wake, opts.poll_interval_s)
                        c._wake.clear()
                        continue
                    c.claim()
                    if self.fenced is not None:
                        log.info(
                            "embedded compactor resumes with epoch %d (the other compactor closed or "
                            "its lease lapsed)",
                            c.epoch,
                        )
                        self.fenced = None
                report = c.run_once()
                self.reports += 1
                self.totals.merge(report)
                self.idle = not report.did_work
                if report.did_work:
                    if c.host is not None:
                        c.host.metrics_state.compaction_s.observe(report.duration_s)
                    continue
            except FencedError as exc:
                self.fenced = exc
                newer = self._writer_fenced_by()
                if newer is not None:
                    # Not another compactor: a newer writer fenced ours, which stops for good.
                    # (This said it paused for a compactor holding the role -- naming its own
                    # epoch, as the fenced writer's view was all it read -- and would resume.)
                    self.writer_fenced = True
                    log.warning(
                        "embedded compactor (epoch %s) stops: its writer (writer epoch %d) was fenced "
                        "by writer epoch %d, another Db that opened the database",
                        c.epoch,
                        self.host.epoch,
                        newer,
                    )
                    return
                log.info(
                    "embedded compactor (epoch %s) pauses: another compactor holds the role "
                    "(compactor epoch %d); it resumes when that one closes",
                    c.epoch,
                    self.host.manifest.compactor_epoch,
                )
                c.epoch = None
            except Exception as exc:  # noqa: BLE001 - logged and retried; the writer keeps going
                self.last_error = exc
                log.error("embedded compaction failed (retrying in %.1fs): %s", opts.poll_interval_s, exc)
            c.clock.wait(c._wake, opts.poll_interval_s)
            c._wake.clear()

    def wake(self) -> None:
        self.compactor.wake()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self.compactor.stop()
        self._thread.join()


__all__ = [
    "CompactionAborted",
    "CompactionReport",
    "Compactor",
    "EmbeddedCompactor",
    "JobLease",
    "ManifestHost",
    "CommitCompaction",
    "apply_compaction",
    "COPY_KIND",
    "lease_kind",
    "read_lease",
]

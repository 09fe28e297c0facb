"""Beginning, committing and aborting an ingest (the driver's side; see ``shaledb.bulk.ingest``)."""

from __future__ import annotations

import itertools
import random
import sys
import uuid
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...admin.checkpoint import delete_checkpoint
from ...admin.destruction import delete_database, live_checkpoints
from ...clock import SYSTEM_CLOCK, Clock
from ...db.writer import Db
from ...engine.parents import ExternalStores, default_factory
from ...errors import FencedError, InvalidArgument, InvalidDbState, NotFound, ObjectNotFound, ShaleError
from ...format import paths
from ...manifest.edits import Edit, destroyed, without_checkpoints
from ...manifest.model import IngestRecord, JournalFile, Manifest, SortedRun, SstInfo, Tree
from ...manifest.options import OPT_COMPLETE, OPT_INDEXED
from ...manifest.store import ManifestStore
from ...numbers import check_seconds
from ...settings import MiB, RetryOptions, Settings
from ...store.base import ObjectStore
from ...store.parallel import run_bounded
from ...store.stack import open_stack
from .dupcheck import check_cross_duplicates
from .model import (
    DUPLICATES,
    INGEST_HISTORY,
    IngestConflict,
    IngestFenced,
    IngestPart,
    IngestPlan,
    IngestResult,
    JobLease,
    check_index_fields,
    check_ingest_id,
    drop_lease,
    find_record,
    fingerprint,
    holds_data,
    lease_due,
    log,
    write_lease,
)
from .parts import delete_outputs, part_outputs, write_part


def begin_ingest(
    url: str | None = None,
    *,
    ingest_id: str | None = None,
    behind: bool = False,
    duplicates: str = "error",
    index_fields: Sequence[str] = (),
    settings: Settings | None = None,
    max_sst_size_bytes: int | None = None,
    lease_s: float = 3600.0,
    create_if_missing: bool = True,
    overwrite: bool = False,
    require_empty: bool = False,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    lease: JobLease | None = None,
) -> IngestPlan:
    """Start an ingest (see module docstring): claim the database unless ``behind``.

    ``settings`` supply the SST format (block size, compression, bloom bits),
    ``value_separation_threshold`` (values of at least that size go to
    value-journal objects) and, for a claim, the settings the short-lived
    writer opens with; ``max_sst_size_bytes`` (default: the compactor's) cuts
    output SSTs and journal objects. ``index_fields`` names the secondary-index
    fields the parts bring terms for (``PartWriter.add(indexes=)``); a claim of
    a database that already has index terms pins its version in a checkpoint
    (deleted by commit or abort) so the parts can look up the terms their rows
    replace. Behind mode cannot take index terms: its rows sit below newer
    versions whose terms the index already reflects.

    ``overwrite``: the commit replaces the database's whole contents -- data
    and index trees, value-journal objects -- with the ingest's in the same
    CAS (readers see the old version or the new; checkpoints taken before
    keep the old one). ``require_empty``: refuse a database that holds data,
    here and again in the commit's CAS.

    ``lease``: a job lease the caller wrote before any output (a stream micro-batch's tasks
    take one each before they stage their rows, :func:`~.model.take_lease`). The ingest adopts
    it rather than writing its own -- rewriting it only once a quarter of ``lease_s`` may be
    gone -- and commit and abort leave it to the caller to delete (``IngestPlan.lease_adopted``),
    so the micro-batch's runs and everything the ingest writes are under one lease at no
    request more.

    Raises:
        IngestFenced: a writer or another ingest claimed the database while begin opened it.
        DatabaseDestroyed, InvalidDbState, NotFound: the database cannot take writes.
        InvalidArgument: a bad id, duplicates policy or lease.
    """
    settings = settings or Settings()
    if duplicates not in DUPLICATES:
        raise InvalidArgument(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    check_seconds("lease_s", lease_s)
    if lease is not None:
        paths.check_ulid(lease.id)
    iid = check_ingest_id(ingest_id) if ingest_id is not None else uuid.uuid4().hex
    fields = check_index_fields(index_fields)
    if overwrite and behind:
        raise InvalidArgument("an overwrite replaces everything: it cannot load behind existing data")
    if behind and fields:
        raise InvalidArgument(
            "an ingest behind existing data cannot write index terms (newer versions of its keys "
            "would keep stale terms in the index); ingest without ingest_behind"
        )
    clock = clock or SYSTEM_CLOCK
    rng = random.Random(seed)
    st = open_stack(url, store, store_options, settings, clock, rng)
    sst_max = max_sst_size_bytes or (
        settings.compactor.max_sst_size_bytes if settings.compactor else 64 * MiB
    )
    base = IngestPlan(
        ingest_id=iid,
        behind=behind,
        seq=0,
        writer_epoch=None,
        lease_id=None,
        lease_s=float(lease_s),
        began_s=clock.now(),
        duplicates=duplicates,
        block_size_bytes=settings.block_size_bytes,
        compression=settings.compression,
        bloom_bits_per_key=settings.bloom_bits_per_key,
        max_sst_size_bytes=sst_max,
        index_fields=fields,
        value_separation_threshold=settings.value_separation_threshold,
        overwrite=overwrite,
        require_empty=require_empty,
    )
    ms = ManifestStore(st, clock, random.Random(rng.getrandbits(64)), author="ingest")
    m = ms.read_latest()
    if m is not None:
        done = find_record(m, iid)
        if done is not None:
            log.info("ingest %s was committed at manifest %d: nothing to write", iid, done.manifest_id)
            return replace(base, seq=done.seq, committed_manifest=done.manifest_id)
        _check_usable(m, st)
        if require_empty and holds_data(m):
            raise InvalidArgument(_not_empty(st))
    elif not create_if_missing:
        raise NotFound(f"no database at {st.describe()}")
    if behind and m is not None:
        plan = base
    else:
        # Claim: fence any live writer, move what its WAL holds into L0, reserve a seq.
        # It reads nothing: no SST's index and filter (a request each) are worth fetching.
        claim = settings.replace(compactor=None, garbage_collector=None, pin_metadata_on_open=False)
        # The URL (with the store) lets a creating open check the new root against other
        # databases' on cloud stores too (shaledb.store.new_root).
        # The manifest read above starts the claim's CAS: on S3 a read is two requests (LIST
        # and GET) per Spark write, and the CAS makes a version landed since then a retry.
        terms_cp: str | None = None
        try:
            db = Db._open(
                url,
                store=st,
                store_options=dict(store_options) if store_options is not None else None,
                settings=claim,
                clock=clock,
                seed=rng.getrandbits(64),
                latest=m,
            )
            try:
                db.flush(memtable=True)
                seq = int(db.stats()["seq"]) + 1
                epoch = db.epoch
                if not behind and not overwrite and dict(db.manifest.options).get(OPT_INDEXED) == "1":
                    cp = db.create_checkpoint(lifetime=lease_s, name=f"ingest {iid}")
                    terms_cp = str(cp.id)
            finally:
                db.close()
        except FencedError as exc:
            # Another claim (a writer, or another ingest: a stream's micro-batch, a second
            # job) took the database while this one was taking it. The writer's own words
            # ("this writer (epoch 3) opened") named a writer the user never started.
            raise IngestFenced(
                f"ingest {iid}: a writer or another ingest claimed the database while this ingest was "
                f"claiming it ({exc}); nothing was written. Re-run the job once the other one is done "
                "(jobs writing one database at the same time fence each other), or use ingest_behind"
            ) from exc
        plan = replace(
            base,
            seq=0 if behind else seq,
            writer_epoch=None if behind else epoch,
            terms_checkpoint=terms_cp,
            created_epoch=epoch if m is None else None,
        )
    if lease is None:
        plan = replace(plan, lease_id=paths.new_ulid(clock.now(), rng))
        write_lease(st, plan, clock.now())
    else:
        # A task's clock may run ahead of this one: count its lease as written no later than now.
        plan = replace(plan, lease_id=lease.id, began_s=min(lease.written_s, clock.now()), lease_adopted=True)
        if lease_due(plan, clock.now()):
            plan = replace(plan, began_s=clock.now())
            write_lease(st, plan, plan.began_s)
    log.info(
        "ingest %s began (%s, seq %d%s)",
        iid,
        "behind" if behind else "claim",
        plan.seq,
        "" if plan.writer_epoch is None else f", writer epoch {plan.writer_epoch}",
    )
    return plan


def _check_outputs(store: ObjectStore, plan: IngestPlan, chosen: Sequence[IngestPart]) -> None:
    """NotFound unless every object the parts name still exists: a manifest must never name
    a missing SST. One HEAD each, :data:`CHECK_WORKERS` at a time (one after another, a load of
    1,600 SSTs waited 1,600 round trips here: most of a minute on S3)."""

    def check(item: tuple[int, str]) -> None:
        partition, name = item
        try:
            store.head(name)
        except ObjectNotFound:
            raise NotFound(
                f"ingest {plan.ingest_id}: {name} of partition {partition} is gone (its lease lapsed "
                "and the garbage collector removed it); re-run the job"
            ) from None

    names = [
        (p.partition, name)
        for p in chosen
        for name in (
            *(paths.sst_path(s.id) for s in (*p.ssts, *p.index_ssts)),
            *(paths.journal_path(j.id) for j in p.journal),
        )
    ]
    for _ in run_bounded(check, names, lambda _: 0, workers=CHECK_WORKERS):
        pass


CHECK_WORKERS = 16


def _not_empty(store: ObjectStore) -> str:
    return (
        f"the database at {store.describe()} already holds data (save mode errorifexists, Spark's "
        'default): use mode("append") to add to it or mode("overwrite") to replace it'
    )


def _emptied(m: Manifest) -> Manifest:
    """``m`` without contents: what an overwrite places its SSTs into (checkpoints stay)."""
    opts = tuple((k, v) for k, v in m.options if k != OPT_INDEXED)
    return replace(m, data=Tree(), index=Tree(), journal=(), options=opts)


def _check_usable(m: Manifest, store: ObjectStore) -> None:
    if m.destroyed_at_s is not None:
        raise destroyed(store.describe(), m)
    if not m.initialized:
        raise InvalidDbState(
            f"database at {store.describe()} is a clone whose initialization did not finish: "
            "open it with Db.open_from_checkpoint first"
        )


def _select_parts(parts: Sequence[IngestPart | None], ingest_id: str) -> list[IngestPart]:
    """One part per partition number; a missing part means a failed task."""
    if any(p is None for p in parts):
        raise InvalidArgument(f"ingest {ingest_id}: a task produced no part (it failed); abort instead")
    chosen: dict[int, IngestPart] = {}
    for p in parts:
        assert p is not None
        if p.partition in chosen:
            log.warning(
                "ingest %s: partition %d came twice (attempts %s and %s); keeping the first, "
                "the other's SSTs are left to the garbage collector",
                ingest_id,
                p.partition,
                chosen[p.partition].attempt,
                p.attempt,
            )
            continue
        chosen[p.partition] = p
    return [chosen[k] for k in sorted(chosen)]


def _overlaps_any(l0: Sequence[SstInfo], lasts: list[bytes], ssts: Sequence[SstInfo]) -> bool:
    """True if an SST of ``l0`` overlaps any of ``ssts`` (sorted by key, ``lasts`` their last keys)."""
    for s in l0:
        i = bisect_left(lasts, s.first_key)
        if i < len(ssts) and ssts[i].first_key <= s.last_key:
            return True
    return False


def _place(m: Manifest, plan: IngestPlan, parts: list[IngestPart]) -> tuple[Manifest, str, tuple[int, ...]]:
    """``m`` with the parts' SSTs placed (see module docstring), the placement and new run ids."""
    live = [p for p in parts if p.ssts]
    if not live:
        return m, "empty", ()
    by_key = sorted(live, key=lambda p: (p.first_key or b"", p.partition))
    disjoint = all(a.ssts[-1].last_key < b.ssts[0].first_key for a, b in itertools.pairwise(by_key))
    rid = max(
        m.next_run_id,
        max((r.id for t in (m.data, m.index) for r in t.runs), default=0) + 1,
    )
    t = m.data
    newest_first = [p.ssts for p in sorted(live, key=lambda p: -p.partition)]
    if plan.behind:
        groups = [tuple(s for p in by_key for s in p.ssts)] if disjoint else newest_first
        new_runs = tuple(SortedRun(rid + i, g) for i, g in enumerate(groups))
        tree = Tree(t.l0, (*t.runs, *new_runs))
        return _with(m, tree, rid + len(groups)), "bottom", tuple(r.id for r in new_runs)
    ssts = [s for p in by_key for s in p.ssts]
    if disjoint and not _overlaps_any(t.l0, [s.last_key for s in ssts], ssts):
        tree = Tree(t.l0, (SortedRun(rid, tuple(ssts)), *t.runs))
        return _with(m, tree, rid + 1), "run", (rid,)
    tree = Tree((*(s for g in newest_first for s in g), *t.l0), t.runs)
    return _with(m, tree, m.next_run_id), "l0", ()


def _place_index(m: Manifest, parts: list[IngestPart]) -> Manifest:
    """``m`` with the parts' index SSTs on top of the index tree (claim mode only).

    Parts' index entries interleave (index keys order by field and term
    first) but never share a key, so each part becomes a sorted run of its
    own on top; if an index L0 SST overlaps them (it holds older entries that
    must not shadow the ingest's), they go into L0 in front of it instead.
    """
    groups = [p.index_ssts for p in parts if p.index_ssts]
    if not groups:
        return m
    t = m.index
    flat = sorted((s for g in groups for s in g), key=lambda s: s.first_key)
    if _overlaps_any(t.l0, [s.last_key for s in flat], flat):
        return replace(m, index=Tree((*flat, *t.l0), t.runs))
    rid = m.next_run_id
    runs = tuple(SortedRun(rid + i, g) for i, g in enumerate(groups))
    return replace(m, index=Tree(t.l0, (*runs, *t.runs)), next_run_id=rid + len(runs))


def _with_extras(m: Manifest, plan: IngestPlan, parts: list[IngestPart]) -> Manifest:
    """Index SSTs, journal files and the options an ingest's rows change."""
    m = _place_index(m, parts)
    journal = tuple(j for p in parts for j in p.journal)
    if journal:
        m = replace(m, journal=(*journal, *m.journal) if plan.behind else (*m.journal, *journal))
    opts = dict(m.options)
    if any(p.index_ssts for p in parts):
        opts[OPT_INDEXED] = "1"
    if any(p.rows for p in parts) and opts.get(OPT_COMPLETE) == "1":
        opts[OPT_COMPLETE] = "0"  # ingested rows are not all in the journal: rebuild could not restore them
    out = tuple(sorted(opts.items()))
    if plan.terms_checkpoint is not None:
        m = without_checkpoints(m, {uuid.UUID(plan.terms_checkpoint)})
    return m if out == m.options else replace(m, options=out)


def _with(m: Manifest, tree: Tree, next_run_id: int) -> Manifest:
    return replace(m, data=tree, next_run_id=max(m.next_run_id, next_run_id))


@dataclass(frozen=True)
class CommitIngest(Edit):
    """Add every chosen part's SSTs (and journal files) to the manifest in one CAS and record
    the ingest id (see docs/design/bulk-ingest.md and :func:`commit_ingest`).

    Idempotent per ingest id: a record of the id already present is no change (a different
    fingerprint is ``IngestConflict``). Claim mode is fenced by the writer epoch it claimed.
    ``outcome`` is the return channel, refilled on every attempt: ``placement``,
    ``manifest_id``, ``runs`` and, when the id was already committed, ``used`` (object ids
    the manifest references).
    """

    plan: IngestPlan
    chosen: list[IngestPart]
    st: ObjectStore
    clock: Clock
    rows: int
    fp: str
    outcome: dict[str, Any] = field(default_factory=dict)

    def apply(self, m: Manifest) -> Manifest | None:
        self.outcome.clear()
        done = find_record(m, self.plan.ingest_id)
        if done is not None:
            if done.fingerprint and self.fp and done.fingerprint != self.fp:
                raise IngestConflict(
                    f"ingest id {self.plan.ingest_id!r} was committed at manifest {done.manifest_id} "
                    f"with other rows (fingerprint {done.fingerprint}, now {self.fp}); use a new ingest id"
                )
            used = {s.id for s in m.all_ssts()} | {j.id for j in m.journal}
            self.outcome.update(
                placement="already committed", manifest_id=done.manifest_id, runs=(), used=used
            )
            return None
        if self.plan.committed_manifest is not None:
            raise IngestConflict(
                f"ingest id {self.plan.ingest_id!r} was committed when this run began but is no longer "
                "recorded (more recent ingests pushed it out); use a new ingest id"
            )
        _check_usable(m, self.st)
        if not self.plan.behind and m.writer_epoch != self.plan.writer_epoch:
            raise IngestFenced(
                f"ingest {self.plan.ingest_id}: a writer or another ingest opened the database (writer "
                f"epoch {m.writer_epoch}) after this ingest claimed it at epoch {self.plan.writer_epoch}; "
                "nothing was committed. Stop the writer (or wait for the other job) and re-run the job, "
                "or use ingest_behind"
            )
        if self.plan.require_empty and holds_data(m):
            raise InvalidArgument(_not_empty(self.st))
        nxt, placement, runs = _place(_emptied(m) if self.plan.overwrite else m, self.plan, self.chosen)
        nxt = _with_extras(nxt, self.plan, self.chosen)
        record = IngestRecord(
            self.plan.ingest_id, m.id + 1, self.clock.now(), self.rows, self.plan.seq, self.fp
        )
        nxt = replace(
            nxt,
            last_l0_seq=max(m.last_l0_seq, self.plan.seq),
            ingests=(*m.ingests, record)[-INGEST_HISTORY:],
        )
        self.outcome.update(placement=placement, manifest_id=m.id + 1, runs=runs)
        return nxt


def commit_ingest(
    plan: IngestPlan,
    parts: Sequence[IngestPart | None],
    url: str | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    clock: Clock | None = None,
    timeout_s: float = 300.0,
) -> IngestResult:
    """Add every part's SSTs to the manifest in one CAS and record the ingest id.

    Raises:
        IngestFenced: a writer opened since begin (claim mode); nothing committed.
        IngestConflict: the id was committed before with different rows.
        NotFound: an SST of a part is missing (the lease lapsed and GC took it).
        DatabaseDestroyed, InvalidDbState: the database cannot take the ingest.
    """
    settings = settings or Settings()
    clock = clock or SYSTEM_CLOCK
    rng = random.Random()
    st = open_stack(url, store, store_options, settings, clock, rng)
    chosen = _select_parts(parts, plan.ingest_id)
    fp = fingerprint(chosen)
    rows = sum(p.rows for p in chosen)
    nssts = sum(p.objects for p in chosen)
    njournal = sum(len(p.journal) for p in chosen)
    nbytes = sum(p.bytes for p in chosen)
    if plan.committed_manifest is None:
        check_cross_duplicates(st, chosen, plan.duplicates)
    if plan.committed_manifest is None and nssts:
        if lease_due(plan, clock.now()):
            write_lease(st, plan, clock.now())  # keep the GC off while we check and commit
        _check_outputs(st, plan, chosen)
    edit = CommitIngest(plan, chosen, st, clock, rows, fp)
    outcome = edit.outcome

    ms = ManifestStore(st, clock, random.Random(rng.getrandbits(64)), author="ingest")
    ms.update(edit, timeout_s=timeout_s)
    # Committed: nothing after this point may raise, or a caller (Spark's abort()) would
    # take a committed ingest for a failed one.
    _drop_terms_checkpoint(ms, plan, timeout_s)
    drop_lease(st, plan)
    res = IngestResult(
        ingest_id=plan.ingest_id,
        manifest_id=int(outcome["manifest_id"]),
        placement=str(outcome["placement"]),
        run_ids=tuple(outcome["runs"]),
        rows=rows,
        ssts=nssts - njournal,
        bytes=nbytes,
        seq=plan.seq,
        journal=njournal,
    )
    if res.noop:  # a concurrent run of the same id won: this run's copies are not needed
        used = outcome["used"]
        ssts, journal = part_outputs(chosen)
        delete_outputs(st, [s for s in ssts if s.id not in used], [j for j in journal if j.id not in used])
    line = res.describe()
    log.info("%s", line)
    _progress(line)
    return res


def _drop_terms_checkpoint(ms: ManifestStore, plan: IngestPlan, timeout_s: float) -> None:
    """The commit drops the terms checkpoint in its CAS; a no-op commit or an abort does it
    here, best effort: the checkpoint expires with the lease's lifetime anyway."""
    if plan.terms_checkpoint is None:
        return
    try:
        delete_checkpoint(ms, plan.terms_checkpoint, timeout_s=timeout_s, missing_ok=True)
    except ShaleError as exc:
        log.warning("ingest %s: could not drop its terms checkpoint: %s", plan.ingest_id, exc)


def _progress(line: str) -> None:
    """One line per commit on the process's real stderr (Spark captures ``sys.stderr``)."""
    stream = sys.__stderr__
    if stream is not None:
        try:
            stream.write(f"shaledb: {line}\n")
            stream.flush()
        except (OSError, ValueError):
            pass


def abort_ingest(
    plan: IngestPlan,
    parts: Sequence[IngestPart | None],
    url: str | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
) -> int:
    """Delete the outputs of the parts that did finish, and the lease; returns how many
    objects were deleted.

    Spark calls this after a failed ``commit()`` too, and a commit can fail
    after its CAS landed (a lost response, a timeout on the way back). So the
    outputs are deleted only when the latest manifest shows the ingest was not
    committed; when it was, or when the manifest cannot be read, nothing is
    deleted and the garbage collector removes whatever no version references.
    Attempts that died mid-way leave outputs no part names: the garbage
    collector removes them once the lease is gone and they are old enough.
    """
    st = open_stack(url, store, store_options, settings or Settings(), SYSTEM_CLOCK, random.Random())
    ms = ManifestStore(st, SYSTEM_CLOCK, random.Random(), author="ingest")
    ssts, journal = part_outputs(parts)
    if ssts or journal:
        kept = _committed(ms, plan, ssts, journal)
        if kept:
            log.warning("ingest %s: abort deletes nothing: %s", plan.ingest_id, kept)
            ssts, journal = [], []
        else:
            delete_outputs(st, ssts, journal)
    _drop_terms_checkpoint(ms, plan, 300.0)
    drop_lease(st, plan)
    log.info(
        "ingest %s aborted: %d SSTs and %d journal objects deleted", plan.ingest_id, len(ssts), len(journal)
    )
    if plan.created_epoch is not None:
        drop_created_database(ms, plan, store_options)
    return len(ssts) + len(journal)


@dataclass(frozen=True)
class DropUnusedDatabase(Edit):
    """Mark destroyed (fencing, as a hard destroy does) the database a failed first ingest
    created, unless anything else happened to it: a writer opened it after the ingest's begin
    (another epoch), it holds data or records an ingest, a checkpoint other than a writer's is
    live, or it is a clone. ``kept`` says why it stayed."""

    epoch: int
    clock: Clock
    kept: list[str] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        self.kept.clear()
        if m.destroyed_at_s is not None:
            return None
        if m.writer_epoch != self.epoch:
            self.kept.append(f"a writer opened it since (writer epoch {m.writer_epoch}, not {self.epoch})")
        elif holds_data(m) or m.index.l0 or m.index.runs or m.ingests or m.external_dbs:
            self.kept.append("it holds data")
        elif live_checkpoints(m, self.clock.now(), include_writer=False):
            self.kept.append("a checkpoint of it is live")
        if self.kept:
            return None
        return replace(m, writer_epoch=m.writer_epoch + 1, checkpoints=(), destroyed_at_s=self.clock.now())


def drop_created_database(
    ms: ManifestStore, plan: IngestPlan, store_options: Mapping[str, Any] | None, timeout_s: float = 300.0
) -> bool:
    """Delete the database a failed ingest's begin created (:attr:`IngestPlan.created_epoch`),
    so its URL holds nothing, as before the job: a retry creates it afresh and a read says
    there is no database, instead of finding an empty one. Kept when anything else happened to
    it since (:class:`DropUnusedDatabase`); best effort (an error is logged, the database stays
    empty). True if it was deleted."""
    assert plan.created_epoch is not None
    where = ms.store.describe()
    edit = DropUnusedDatabase(plan.created_epoch, SYSTEM_CLOCK)
    try:
        m = ms.update(edit, timeout_s=timeout_s)
        if m.destroyed_at_s is None:
            log.info(
                "ingest %s: keeps the database it created at %s: %s", plan.ingest_id, where, edit.kept[0]
            )
            return False
        factory = default_factory(RetryOptions(), SYSTEM_CLOCK, random.Random(), store_options)
        external = ExternalStores(factory)
        try:
            delete_database(ms, m, external, SYSTEM_CLOCK, timeout_s)
        finally:
            external.close()
    except ShaleError as exc:
        log.warning(
            "ingest %s: could not delete the database it created at %s: %s", plan.ingest_id, where, exc
        )
        return False
    log.info("ingest %s failed: deleted the database it had created at %s", plan.ingest_id, where)
    return True


def _committed(
    ms: ManifestStore, plan: IngestPlan, ssts: Sequence[SstInfo], journal: Sequence[JournalFile]
) -> str | None:
    """Why an abort must keep these outputs (None: nothing says the ingest committed)."""
    try:
        m = ms.read_latest()
    except ShaleError as exc:
        return f"the manifest could not be read to rule out a commit ({exc})"
    if m is None:
        return None
    done = find_record(m, plan.ingest_id)
    if done is not None:
        return f"it was committed at manifest {done.manifest_id}"
    used = {s.id for s in m.all_ssts()} | {j.id for j in m.journal}
    if any(s.id in used for s in ssts) or any(j.id in used for j in journal):
        return f"manifest {m.id} references its outputs"
    return None


def ingest_columns(
    url: str | None,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    metadata: Sequence[bytes | None] | None = None,
    *,
    indexes: Mapping[str, Sequence[Any]] | None = None,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    **begin: Any,
) -> IngestResult:
    """Begin, write one part and commit: bulk-load sorted columns without Spark.

    ``indexes`` maps index fields to term columns (see ``PartWriter.add``);
    ``begin`` takes :func:`begin_ingest`'s keyword arguments (``ingest_id``,
    ``behind``, ``duplicates``, ...).
    """
    settings = settings or Settings()
    st = open_stack(url, store, store_options, settings, SYSTEM_CLOCK, random.Random())
    plan = begin_ingest(
        url,
        store=st,
        store_options=store_options,
        settings=settings,
        index_fields=tuple(indexes or ()),
        **begin,
    )
    try:
        part = write_part(st, plan, 0, keys, values, metadata, indexes=indexes)
    except BaseException:
        abort_ingest(plan, [], store=st)
        raise
    return commit_ingest(plan, [part], store=st, settings=settings)


__all__ = ["abort_ingest", "begin_ingest", "commit_ingest", "ingest_columns"]

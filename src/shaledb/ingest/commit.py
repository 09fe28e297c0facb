"""Beginning, committing and aborting an ingest (the driver's side; see ``shaledb.ingest``)."""

from __future__ import annotations

import itertools
import random
import sys
import uuid
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import paths
from ..clock import SYSTEM_CLOCK, Clock
from ..db import Db
from ..errors import DatabaseDestroyed, InvalidArgument, InvalidDbState, NotFound, ObjectNotFound
from ..manifest.model import IngestRecord, Manifest, SortedRun, SstInfo, Tree
from ..manifest.store import ManifestStore
from ..settings import MiB, Settings
from ..store.base import ObjectStore
from .model import (
    DUPLICATES,
    INGEST_HISTORY,
    IngestConflict,
    IngestFenced,
    IngestPart,
    IngestPlan,
    IngestResult,
    check_ingest_id,
    drop_lease,
    find_record,
    fingerprint,
    log,
    write_lease,
)
from .parts import delete_ssts, open_store_stack, write_part


def begin_ingest(
    url: str | None = None,
    *,
    ingest_id: str | None = None,
    behind: bool = False,
    duplicates: str = "error",
    settings: Settings | None = None,
    max_sst_size_bytes: int | None = None,
    lease_s: float = 3600.0,
    create_if_missing: bool = True,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
) -> IngestPlan:
    """Start an ingest (see module docstring): claim the database unless ``behind``.

    ``settings`` supply the SST format (block size, compression, bloom bits)
    and, for a claim, the settings the short-lived writer opens with;
    ``max_sst_size_bytes`` (default: the compactor's) cuts output SSTs.

    Raises:
        FencedError: another writer claimed the database while begin opened it.
        DatabaseDestroyed, InvalidDbState, NotFound: the database cannot take writes.
        InvalidArgument: a bad id, duplicates policy or lease.
    """
    settings = settings or Settings()
    if duplicates not in DUPLICATES:
        raise InvalidArgument(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    if not lease_s > 0:
        raise InvalidArgument(f"lease_s must be positive, got {lease_s!r}")
    iid = check_ingest_id(ingest_id) if ingest_id is not None else uuid.uuid4().hex
    clock = clock or SYSTEM_CLOCK
    rng = random.Random(seed)
    st = open_store_stack(url, store, store_options, settings, clock, rng)
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
    )
    ms = ManifestStore(st, clock, random.Random(rng.getrandbits(64)), author="ingest")
    m = ms.read_latest()
    if m is not None:
        done = find_record(m, iid)
        if done is not None:
            log.info("ingest %s was committed at manifest %d: nothing to write", iid, done.manifest_id)
            return replace(base, seq=done.seq, committed_manifest=done.manifest_id)
        _check_usable(m, st)
    elif not create_if_missing:
        raise NotFound(f"no database at {st.describe()}")
    if behind and m is not None:
        plan = base
    else:
        # Claim: fence any live writer, move what its WAL holds into L0, reserve a seq.
        claim = settings.replace(compactor=None, garbage_collector=None)
        db = Db.open(store=st, settings=claim, clock=clock, seed=rng.getrandbits(64))
        try:
            db.flush(memtable=True)
            seq = int(db.stats()["seq"]) + 1
            epoch = db.epoch
        finally:
            db.close()
        plan = replace(base, seq=0 if behind else seq, writer_epoch=None if behind else epoch)
    plan = replace(plan, lease_id=paths.new_ulid(clock.now(), rng))
    write_lease(st, plan, clock.now())
    log.info(
        "ingest %s began (%s, seq %d%s)",
        iid,
        "behind" if behind else "claim",
        plan.seq,
        "" if plan.writer_epoch is None else f", writer epoch {plan.writer_epoch}",
    )
    return plan


def _check_usable(m: Manifest, store: ObjectStore) -> None:
    if m.destroyed_at_s is not None:
        raise DatabaseDestroyed(f"database at {store.describe()} was destroyed")
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
    if plan.behind:
        groups = (
            [tuple(s for p in by_key for s in p.ssts)]
            if disjoint
            else [p.ssts for p in sorted(live, key=lambda p: -p.partition)]
        )
        new_runs = tuple(SortedRun(rid + i, g) for i, g in enumerate(groups))
        tree = Tree(t.l0, (*t.runs, *new_runs))
        return _with(m, tree, rid + len(groups)), "bottom", tuple(r.id for r in new_runs)
    ssts = [s for p in by_key for s in p.ssts]
    if disjoint and not _overlaps_any(t.l0, [s.last_key for s in ssts], ssts):
        tree = Tree(t.l0, (SortedRun(rid, tuple(ssts)), *t.runs))
        return _with(m, tree, rid + 1), "run", (rid,)
    newest_first = [s for p in sorted(live, key=lambda p: -p.partition) for s in p.ssts]
    tree = Tree((*newest_first, *t.l0), t.runs)
    return _with(m, tree, m.next_run_id), "l0", ()


def _with(m: Manifest, tree: Tree, next_run_id: int) -> Manifest:
    return replace(m, data=tree, next_run_id=max(m.next_run_id, next_run_id))


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
    st = open_store_stack(url, store, store_options, settings, clock, rng)
    chosen = _select_parts(parts, plan.ingest_id)
    fp = fingerprint(chosen)
    rows = sum(p.rows for p in chosen)
    nssts = sum(len(p.ssts) for p in chosen)
    nbytes = sum(p.bytes for p in chosen)
    if plan.committed_manifest is None and nssts:
        write_lease(st, plan, clock.now())  # keep the GC off while we check and commit
        for p in chosen:
            for s in p.ssts:
                try:
                    st.head(paths.sst_path(s.id))
                except ObjectNotFound:
                    raise NotFound(
                        f"ingest {plan.ingest_id}: SST {s.id} of partition {p.partition} is gone "
                        "(its lease lapsed and the garbage collector removed it); re-run the job"
                    ) from None
    outcome: dict[str, Any] = {}

    def mutate(m: Manifest) -> Manifest | None:
        outcome.clear()
        done = find_record(m, plan.ingest_id)
        if done is not None:
            if done.fingerprint and fp and done.fingerprint != fp:
                raise IngestConflict(
                    f"ingest id {plan.ingest_id!r} was committed at manifest {done.manifest_id} with other "
                    f"rows (fingerprint {done.fingerprint}, now {fp}); use a new ingest id"
                )
            used = {s.id for s in m.all_ssts()}
            outcome.update(placement="already committed", manifest_id=done.manifest_id, runs=(), used=used)
            return None
        if plan.committed_manifest is not None:
            raise IngestConflict(
                f"ingest id {plan.ingest_id!r} was committed when this run began but is no longer "
                "recorded (more recent ingests pushed it out); use a new ingest id"
            )
        _check_usable(m, st)
        if not plan.behind and m.writer_epoch != plan.writer_epoch:
            raise IngestFenced(
                f"ingest {plan.ingest_id}: a writer opened the database (writer epoch {m.writer_epoch}) "
                f"after this ingest claimed it at epoch {plan.writer_epoch}; nothing was committed. "
                "Stop the writer and re-run the job, or use ingest_behind"
            )
        nxt, placement, runs = _place(m, plan, chosen)
        record = IngestRecord(plan.ingest_id, m.id + 1, clock.now(), rows, plan.seq, fp)
        nxt = replace(
            nxt,
            last_l0_seq=max(m.last_l0_seq, plan.seq),
            ingests=(*m.ingests, record)[-INGEST_HISTORY:],
        )
        outcome.update(placement=placement, manifest_id=m.id + 1, runs=runs)
        return nxt

    ms = ManifestStore(st, clock, random.Random(rng.getrandbits(64)), author="ingest")
    ms.update(mutate, timeout_s=timeout_s)
    drop_lease(st, plan)
    res = IngestResult(
        ingest_id=plan.ingest_id,
        manifest_id=int(outcome["manifest_id"]),
        placement=str(outcome["placement"]),
        run_ids=tuple(outcome["runs"]),
        rows=rows,
        ssts=nssts,
        bytes=nbytes,
        seq=plan.seq,
    )
    if res.noop:  # a concurrent run of the same id won: this run's copies are not needed
        used = outcome["used"]
        delete_ssts(st, [s for p in chosen for s in p.ssts if s.id not in used])
    line = res.describe()
    log.info("%s", line)
    _progress(line)
    return res


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
    """Delete the SSTs of the parts that did finish and the lease; returns SSTs deleted.

    Attempts that died mid-way leave SSTs no part names: the garbage
    collector removes them once the lease is gone and they are old enough.
    """
    st = open_store_stack(url, store, store_options, settings or Settings(), SYSTEM_CLOCK, random.Random())
    ssts = [s for p in parts if p is not None for s in p.ssts]
    delete_ssts(st, ssts)
    drop_lease(st, plan)
    log.info("ingest %s aborted: %d SSTs deleted", plan.ingest_id, len(ssts))
    return len(ssts)


def ingest_columns(
    url: str | None,
    keys: Sequence[bytes],
    values: Sequence[bytes],
    metadata: Sequence[bytes | None] | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    **begin: Any,
) -> IngestResult:
    """Begin, write one part and commit: bulk-load sorted columns without Spark.

    ``begin`` takes :func:`begin_ingest`'s keyword arguments (``ingest_id``,
    ``behind``, ``duplicates``, ...).
    """
    settings = settings or Settings()
    st = open_store_stack(url, store, store_options, settings, SYSTEM_CLOCK, random.Random())
    plan = begin_ingest(store=st, settings=settings, **begin)
    try:
        part = write_part(st, plan, 0, keys, values, metadata)
    except BaseException:
        abort_ingest(plan, [], store=st)
        raise
    return commit_ingest(plan, [part], store=st, settings=settings)


__all__ = ["abort_ingest", "begin_ingest", "commit_ingest", "ingest_columns"]

"""Invariants checked on (current, proposed) before every manifest write.

A bug that would write a manifest breaking one of these raises
``ManifestInvariantError`` instead of persisting a broken database. The checks
are linear in the number of SSTs, cheap next to an object-store round trip.
"""

from __future__ import annotations

from .model import Manifest, SortedRun, Tree


class ManifestInvariantError(AssertionError):
    """A proposed manifest breaks an invariant: a bug, never a user error."""


def _check_run(run: SortedRun, name: str) -> None:
    prev = None
    for s in run.ssts:
        if s.first_key > s.last_key:
            raise ManifestInvariantError(f"{name} run {run.id}: SST {s.id} has first_key > last_key")
        if prev is not None and prev.last_key >= s.first_key:
            raise ManifestInvariantError(
                f"{name} run {run.id}: SSTs {prev.id} and {s.id} overlap or are unsorted"
            )
        prev = s


def _check_tree(tree: Tree, name: str, next_run_id: int) -> None:
    run_ids = set()
    for run in tree.runs:
        if run.id in run_ids:
            raise ManifestInvariantError(f"{name}: duplicate sorted run id {run.id}")
        if run.id >= next_run_id:
            raise ManifestInvariantError(f"{name}: run id {run.id} >= next_run_id {next_run_id}")
        if not run.ssts:
            raise ManifestInvariantError(f"{name}: sorted run {run.id} is empty")
        run_ids.add(run.id)
        _check_run(run, name)


def check_manifest(m: Manifest) -> None:
    """Invariants of one manifest on its own."""
    if m.replay_after_wal_id >= m.next_wal_id:
        raise ManifestInvariantError("replay_after_wal_id must be < next_wal_id")
    seen: set[str] = set()
    for s in m.all_ssts():
        if s.id in seen:
            raise ManifestInvariantError(f"SST {s.id} appears twice")
        seen.add(s.id)
        if s.db > len(m.external_dbs):
            raise ManifestInvariantError(f"SST {s.id} refers to unknown external db {s.db}")
    run_ids: set[int] = set()
    for name in ("data", "index"):
        tree = m.tree(name)
        _check_tree(tree, name, m.next_run_id)
        for run in tree.runs:
            if run.id in run_ids:
                raise ManifestInvariantError(f"run id {run.id} used by two trees")
            run_ids.add(run.id)
    journal_ids: set[str] = set()
    for j in m.journal:
        if j.id in journal_ids:
            raise ManifestInvariantError(f"journal file {j.id} appears twice")
        journal_ids.add(j.id)
        if j.db > len(m.external_dbs):
            raise ManifestInvariantError(f"journal file {j.id} refers to unknown external db {j.db}")
    cp_ids = set()
    for cp in m.checkpoints:
        if cp.id in cp_ids:
            raise ManifestInvariantError(f"checkpoint {cp.id} appears twice")
        cp_ids.add(cp.id)
        if cp.manifest_id > m.id:
            raise ManifestInvariantError(f"checkpoint {cp.id} refers to future manifest {cp.manifest_id}")
    prev_wal = m.replay_after_wal_id
    for w in m.tracked_wals:
        if w.id <= prev_wal:
            raise ManifestInvariantError(f"tracked WAL {w.id} is obsolete or out of order")
        prev_wal = w.id
        if w.id >= m.next_wal_id:
            raise ManifestInvariantError(f"tracked WAL {w.id} >= next_wal_id {m.next_wal_id}")


def check_transition(current: Manifest | None, proposed: Manifest) -> None:
    """Invariants between consecutive versions (and of the proposed one)."""
    check_manifest(proposed)
    if current is None:
        return
    if proposed.id != current.id + 1:
        raise ManifestInvariantError(f"manifest {proposed.id} does not follow {current.id}")
    for field in ("writer_epoch", "compactor_epoch", "next_wal_id", "replay_after_wal_id", "last_l0_seq"):
        if getattr(proposed, field) < getattr(current, field):
            raise ManifestInvariantError(
                f"{field} went backwards: {getattr(current, field)} -> {getattr(proposed, field)}"
            )
    if current.initialized and not proposed.initialized:
        raise ManifestInvariantError("an initialized database cannot become uninitialized")
    if proposed.next_run_id < current.next_run_id:
        raise ManifestInvariantError("next_run_id went backwards")

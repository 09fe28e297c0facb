"""The crash soak (shaledb.testing.crashsoak): kill -9 of every role, then check everything.

``test_crash_soak_short`` is the ``make test`` tier: at least 25 kills over a
local directory and the S3 server, value separation off and on, every role
at least once. ``test_crash_soak`` is ``make soak`` (marker ``soak``, not part
of ``make test``); its size comes from the environment:

* ``SHALEDB_SOAK_WRITER_KILLS`` (default 500) and ``SHALEDB_SOAK_OTHER_KILLS``
  (default 100), spread over the four databases;
* ``SHALEDB_SOAK_MAX_S``: start no new round after this many seconds (the
  figures printed then say what ran);
* ``SHALEDB_SOAK_WEIGHTS``: the databases' shares of the kills, e.g. ``3,1,3,1``
  (local, S3, local with value separation, S3 with value separation; default equal);
* ``SHALEDB_SOAK_ROTATE``: move each database on to a fresh one after this many
  rounds (default 60; 0: never), which keeps S3 listings short (see crashsoak);
* ``SHALEDB_SOAK_SEED`` (default: random, printed).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shaledb.testing.crashsoak import SoakTarget, run_soak
from shaledb.testing.seeds import test_seed
from shaledb.testing.soak_worker import ROLES


def _seed() -> int:
    return test_seed("SHALEDB_SOAK_SEED")


def test_crash_soak_short(tmp_path: Path, soak_targets: list[tuple[SoakTarget, bool]]) -> None:
    others = len(ROLES) - 1
    stats = run_soak(
        soak_targets, tmp_path / "work", writer_kills=25 - others, other_kills=others, seed=_seed()
    )
    assert sum(stats.kills.values()) >= 25
    assert set(stats.kills) == set(ROLES), stats.kills
    assert stats.acknowledged_lost == 0
    assert stats.writes_acknowledged > 100, stats.summary()
    assert stats.reader_states_checked > 0, stats.summary()


@pytest.mark.soak
def test_crash_soak(tmp_path: Path, soak_targets: list[tuple[SoakTarget, bool]]) -> None:
    stats = run_soak(
        soak_targets,
        tmp_path / "work",
        writer_kills=int(os.environ.get("SHALEDB_SOAK_WRITER_KILLS", "500")),
        other_kills=int(os.environ.get("SHALEDB_SOAK_OTHER_KILLS", "100")),
        seed=_seed(),
        max_seconds=float(os.environ["SHALEDB_SOAK_MAX_S"]) if os.environ.get("SHALEDB_SOAK_MAX_S") else None,
        weights=[int(w) for w in os.environ["SHALEDB_SOAK_WEIGHTS"].split(",")]
        if os.environ.get("SHALEDB_SOAK_WEIGHTS")
        else None,
        rotate_every=int(os.environ.get("SHALEDB_SOAK_ROTATE", "60")) or None,
    )
    assert stats.acknowledged_lost == 0


def test_the_soak_destroys_the_clones_and_backups_of_a_round_once_checked(tmp_path: Path) -> None:
    """Kept clones pin their parent's objects forever (and backups copy it whole), which made
    long soaks ever slower; after its checks a round releases them."""
    from shaledb import admin
    from shaledb.testing.crashsoak import CrashSoak
    from shaledb.testing.ledger import read_ledger

    target = SoakTarget("local", str(tmp_path / "db"), str(tmp_path / "aux"))
    soak = CrashSoak(target, tmp_path / "work", vsep=False, kill_after_s=(1.0, 1.5))
    made: set[str] = set()
    for i in range(6):  # until a clone and a backup were started (a loaded machine is slow)
        role = "clone" if i % 2 == 0 else "backup"
        soak.round(role, 7 + i)
        made |= {
            rec[role] for rec in read_ledger(tmp_path / "work" / f"local-{i}-{role}.jsonl") if role in rec
        }
        if any("clone-" in m for m in made) and any("backup-" in m for m in made):
            break
    assert soak.stats.released == len(made) >= 2, soak.stats.summary()
    # No checkpoint that never expires (a clone's); a killed backup's own one has a lifetime.
    assert [c for c in admin.list_checkpoints(target.url) if c.expire_time_s is None] == []
    assert [p for p in (tmp_path / "aux").rglob("*") if p.is_file()] == []


def test_the_soak_collects_garbage_between_rounds_and_moves_on_to_fresh_databases(tmp_path: Path) -> None:
    """Manifests of killed sessions are collected between rounds, and every ``rotate_every``
    rounds the soak continues on a fresh sibling database (fences are never collected)."""
    from shaledb.testing.crashsoak import CrashSoak

    target = SoakTarget("local", str(tmp_path / "db"), str(tmp_path / "aux"))
    soak = CrashSoak(target, tmp_path / "work", vsep=False, kill_after_s=(0.3, 0.5), rotate_every=2)
    for i in range(3):
        soak.round("writer", 10 + i)
    assert soak.stats.gc_passes == 3 and soak.stats.gc_deleted > 0, soak.stats.summary()
    assert soak.stats.rotations == 1 and soak.url == f"{target.url}-g1"
    assert len(list((tmp_path / "db" / "manifest").iterdir())) <= 2  # the latest (and a fresh one)

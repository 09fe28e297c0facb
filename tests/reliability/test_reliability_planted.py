"""Planted bugs (shaledb.testing.plants): each is caught by the check meant to guard its protocol.

Every test plants one bug from the test side and asserts that the check
*fails* -- with an assertion of the model or the consistency checker, or with
a typed error of shaledb detecting the damage -- not with an error of the
plant itself. The table in docs/reliability.md lists which check catches which
bug; ``test_reliability_checks.py`` shows each check passes without its bug.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_checks import CHECKS, memory_url

from shaledb.errors import ShaleError
from shaledb.testing.crashsoak import CrashSoak, SoakFailure, SoakTarget
from shaledb.testing.plants import PLANTS, planted
from shaledb.testing.seeds import test_seed

CAUGHT_BY: dict[str, str] = {
    "ack_before_wal": "acknowledged_writes_survive_a_crash",
    "wal_replay_drops_last_object": "acknowledged_writes_survive_a_crash",
    "skip_epoch_check": "a_fenced_writer_cannot_write",
    "gc_ignores_min_age": "gc_keeps_young_objects",
    "tombstone_dropped_early": "deletes_stay_deleted_through_compaction",
    "manifest_cas_as_overwrite": "concurrent_manifest_updates_both_land",
    "journal_drops_live_value": "journal_compaction_keeps_live_values",
    "reader_skips_wal_gap": "reader_follows_a_collected_wal_object",
    "clone_init_not_idempotent": "clone_creation_resumes_after_a_crash",
}


def test_every_plant_has_a_check() -> None:
    assert set(CAUGHT_BY) == set(PLANTS)
    assert len(PLANTS) >= 8


@pytest.mark.parametrize("plant", sorted(CAUGHT_BY))
def test_planted_bug_is_caught(plant: str) -> None:
    check = CHECKS[CAUGHT_BY[plant]]
    with memory_url() as url, planted(plant), pytest.raises((AssertionError, ShaleError)) as caught:
        check(url)
    print(f"{plant}: caught by {CAUGHT_BY[plant]}: {type(caught.value).__name__}: {str(caught.value)[:300]}")


def test_plants_are_removed_afterwards() -> None:
    """The patching itself: a plant leaves nothing behind (the other tests rely on it)."""
    for name in PLANTS:
        before = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in PLANTS[name]()]
        with planted(name):
            assert any(getattr(obj, attr) is not old for obj, attr, old in before)
        assert all(getattr(obj, attr) is old for obj, attr, old in before)


def test_the_crash_soak_catches_a_recovery_that_drops_the_last_wal_object(tmp_path: Path) -> None:
    """A bug planted in the soak's processes and its checking side: the first kill's
    reopen loses acknowledged writes, and the soak's model says which."""
    seed = test_seed()
    plant = "wal_replay_drops_last_object"
    target = SoakTarget("planted", str(tmp_path / "db"), str(tmp_path / "aux"), {"SHALEDB_TEST_PLANT": plant})
    soak = CrashSoak(target, tmp_path / "work", vsep=False, kill_after_s=(0.3, 0.6))
    # A round misses the plant when its kill lands where the newest WAL object holds no
    # acknowledged write that is not also in an SST (timing: 3 rounds all missed it once
    # under load); the soak stops at the first catch, so more rounds cost only on a miss.
    with planted(plant), pytest.raises(SoakFailure, match=r"not allowed|matches no prefix|CorruptionError"):
        for r in range(8):
            soak.round("writer", seed + r)

"""Seeds for randomized tests: fresh each run, printed, and replayable."""

from __future__ import annotations

import os
import random


def test_seed() -> int:
    """A fresh seed (or ``SHALEDB_TEST_SEED``), printed so a failure can be replayed."""
    env = os.environ.get("SHALEDB_TEST_SEED")
    seed = int(env) if env else random.randrange(1 << 31)
    print(f"seed={seed} (rerun with SHALEDB_TEST_SEED={seed})")
    return seed


test_seed.__test__ = False  # type: ignore[attr-defined]  # not a test itself

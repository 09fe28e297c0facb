"""Seeds for randomized tests: fresh each run, printed, and replayable.

``SHALEDB_TEST_SEED=N`` replays any randomized test: every test that makes its
own seed takes it from here, so one variable and one printed line serve them all
(older per-suite variables such as ``SHALEDB_FUZZ_SEED`` still work as aliases).
"""

from __future__ import annotations

import os
import random

ENV = "SHALEDB_TEST_SEED"


def run_seed(*aliases: str) -> int:
    """``SHALEDB_TEST_SEED`` (or the first alias set), else a fresh seed; not printed.

    For a seed drawn once per run at import time, where printing would be lost:
    the caller reports it with a failure (see :func:`replay_line`).
    """
    for name in (ENV, *aliases):
        env = os.environ.get(name)
        if env:
            return int(env)
    return random.SystemRandom().randrange(1, 1 << 31)


def replay_line(seed: int) -> str:
    """The line that tells a user how to rerun with ``seed``."""
    return f"seed={seed} (rerun with {ENV}={seed})"


def test_seed(*aliases: str) -> int:
    """A fresh seed (or ``SHALEDB_TEST_SEED``), printed so a failure can be replayed."""
    seed = run_seed(*aliases)
    print(replay_line(seed))
    return seed


test_seed.__test__ = False  # type: ignore[attr-defined]  # not a test itself

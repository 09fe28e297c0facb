"""Shared by the edge tests: one fuzz seed per run, printed with any failure (``conftest.py``).

``SHALEDB_TEST_SEED`` (alias ``SHALEDB_FUZZ_SEED``) replays a run;
``SHALEDB_FUZZ_EXAMPLES`` scales every property test's example count (e.g. 2000 for a long local run).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

from hypothesis import HealthCheck, seed, settings

from shaledb.testing.seeds import run_seed

FUZZ_SEED = run_seed("SHALEDB_FUZZ_SEED")
"""One seed per test run; every randomized edge test derives its randomness from it."""

_EXAMPLES = os.environ.get("SHALEDB_FUZZ_EXAMPLES")


def fuzz(max_examples: int, deadline_s: float = 5.0) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings seeded with FUZZ_SEED (no example database: the seed replays)."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        configured = settings(
            max_examples=int(_EXAMPLES) if _EXAMPLES else max_examples,
            deadline=timedelta(seconds=deadline_s),
            database=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )(fn)
        return seed(FUZZ_SEED)(configured)

    return wrap

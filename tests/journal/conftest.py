"""Value-journal tests: fixtures, and the seed of every randomized test.

Randomized tests draw from ``SHALEDB_TEST_SEED`` (a fresh one per run
otherwise; ``SHALEDB_JOURNAL_SEED`` is an older alias); each prints it, and a
failing test's report ends with the command that replays it. The model-based
test runs under Hypothesis, which prints its own reproduction blob.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from journal_kit import JOURNAL_SEED

from shaledb.testing.seeds import replay_line


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        report.sections.append(
            ("journal test seed", f"SHALEDB_TEST_SEED={JOURNAL_SEED} .venv/bin/pytest '{item.nodeid}'")
        )
    return report


@pytest.fixture
def seed() -> int:
    print(replay_line(JOURNAL_SEED))
    return JOURNAL_SEED

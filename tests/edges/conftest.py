"""Edge tests: a failing randomized test's report ends with the seed that replays it."""

from __future__ import annotations

from collections.abc import Generator

import pytest
from edges_kit import FUZZ_SEED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        report.sections.append(
            ("edge fuzz seed", f"SHALEDB_TEST_SEED={FUZZ_SEED} .venv/bin/pytest '{item.nodeid}'")
        )
    return report

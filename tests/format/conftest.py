"""Format tests: every randomized test draws from one seed per run (``FUZZ_SEED``).

A failing test's report ends with the seed and the command line that replays
it, so a fuzz failure found in CI can be reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from format_testkit import FUZZ_SEED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        report.sections.append(
            ("format fuzz seed", f"SHALEDB_TEST_SEED={FUZZ_SEED} .venv/bin/pytest '{item.nodeid}'")
        )
    return report

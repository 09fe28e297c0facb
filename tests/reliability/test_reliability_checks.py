"""The protocol checks of reliability_checks.py on shaledb as it is: each must pass (the
planted-bug tests then show each one fails when its protocol is broken). The checks that
are tests of the suite (SUITE_TESTS) run in their own folders."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from reliability_checks import CHECKS, SUITE_TESTS, memory_url


@pytest.mark.parametrize("name", sorted(set(CHECKS) - SUITE_TESTS))
def test_check_passes(name: str) -> None:
    check: Callable[[str], None] = CHECKS[name]
    with memory_url() as url:
        check(url)

"""Fixtures of the store tests: a manual clock (fresh stores come from ``tests/conftest.py``)."""

from __future__ import annotations

import pytest
from store_testkit import ManualClock


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()

"""Fixtures of the engine tests: a fresh store of each kind (memory, then local directory)."""

from __future__ import annotations

import pytest

from shaledb.store import ObjectStore, open_store
from shaledb.testing.seeds import test_seed


@pytest.fixture
def store(url: str) -> ObjectStore:
    """A fresh, empty store of each kind (``url`` is parametrized over both)."""
    return open_store(url)


@pytest.fixture
def seed() -> int:
    """A fresh seed for a randomized test, printed so that a failure can be replayed."""
    return test_seed()

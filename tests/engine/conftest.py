"""Fixtures of the engine tests: a fresh store of each kind (memory, then local directory)."""

from __future__ import annotations

import pytest

from shaledb.store import ObjectStore, open_store


@pytest.fixture
def store(url: str) -> ObjectStore:
    """A fresh, empty store of each kind (``url`` is parametrized over both)."""
    return open_store(url)

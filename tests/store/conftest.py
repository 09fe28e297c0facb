"""Fixtures of the store tests: a manual clock and fresh stores of each kind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_testkit import ManualClock

from shaledb.store import ObjectStore, drop_memory_store, open_store


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def memory_store() -> Iterator[ObjectStore]:
    name = f"t-{uuid.uuid4().hex}"
    yield open_store(f"memory://{name}")
    drop_memory_store(name)


@pytest.fixture
def local_store(tmp_path: Path) -> ObjectStore:
    return open_store(str(tmp_path / "db"))

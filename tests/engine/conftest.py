"""Fixtures of the engine tests: fresh stores (memory and local directory)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaledb.store import ObjectStore, drop_memory_store, open_store


@pytest.fixture
def memory_store() -> Iterator[ObjectStore]:
    name = f"engine-{uuid.uuid4().hex}"
    yield open_store(f"memory://{name}")
    drop_memory_store(name)


@pytest.fixture
def local_store(tmp_path: Path) -> ObjectStore:
    return open_store(str(tmp_path / "db"))


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A fresh, empty store of each kind."""
    if request.param == "memory":
        name = f"engine-{uuid.uuid4().hex}"
        yield open_store(f"memory://{name}")
        drop_memory_store(name)
    else:
        yield open_store(str(tmp_path / "db"))

"""Fixtures of the checkpoint tests: fresh database URLs (memory and local directory)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaledb.store import drop_memory_store
from shaledb.testing.clock import ManualClock


@pytest.fixture(params=["memory", "local"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        name = f"cp-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        drop_memory_store(name)
    else:
        yield str(tmp_path / "db")


@pytest.fixture
def mem_url() -> Iterator[str]:
    name = f"cp-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    drop_memory_store(name)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()

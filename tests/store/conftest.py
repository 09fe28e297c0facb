"""Fixtures of the store tests: a manual clock and fresh stores of each kind."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaledb.store import ObjectStore, drop_memory_store, open_store


class ManualClock:
    """A clock that moves only when slept on or advanced; records every sleep."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self._now += max(0.0, seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if not event.is_set() and timeout:
            self.sleep(timeout)
        return event.is_set()


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

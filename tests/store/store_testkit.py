"""Helpers of the store tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import threading


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

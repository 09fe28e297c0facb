"""Time, injected.

The engine never calls ``time.time()`` or ``time.sleep()`` directly: it asks a
:class:`Clock`. Production uses :class:`SystemClock`; tests pass
``shaledb.testing.ManualClock`` so expiry, minimum ages and poll intervals are
deterministic.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time (for stored timestamps) and a waitable monotonic timer."""

    def now(self) -> float:
        """Seconds since the Unix epoch (wall clock, stored in manifests)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock's time."""
        ...

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait for ``event`` up to ``timeout`` seconds of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


SYSTEM_CLOCK = SystemClock()

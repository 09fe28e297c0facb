"""A manual clock for tests: time moves only when a test (or a sleeper) moves it.

It implements :class:`shaledb.clock.Clock`. With it, everything the engine
does "every N seconds" (the WAL flush interval, manifest polling, retry
backoff, manifest-update deadlines, TTL expiry) happens only when the test
says so, which keeps runs repeatable:

* :meth:`sleep` advances the clock by the slept amount at once when
  ``auto_advance`` is on (the default), so retry backoff costs no real time;
  with it off, a sleeper blocks until another thread advances the clock.
* :meth:`wait` blocks until the event is set (at once, in real time) or until
  the clock has been moved past the deadline. A thread waiting on a periodic
  timer therefore stays asleep until its event is set or a test advances time.
"""

from __future__ import annotations

import threading


class ManualClock:
    """Wall and monotonic time from one manual counter (see module docstring)."""

    def __init__(
        self, start: float = 1_000_000.0, *, auto_advance: bool = True, poll_s: float = 0.01
    ) -> None:
        self._now = float(start)
        self._cond = threading.Condition(threading.Lock())
        self._poll_s = poll_s
        self.auto_advance = auto_advance
        self.sleeps: list[float] = []
        """Every duration passed to :meth:`sleep`, in call order."""

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward (never backwards) and wake sleepers whose time has come."""
        if seconds < 0:
            raise ValueError("a manual clock only moves forward")
        with self._cond:
            self._now += seconds
            self._cond.notify_all()

    def sleep(self, seconds: float) -> None:
        with self._cond:
            self.sleeps.append(seconds)
        if seconds <= 0:
            return
        if self.auto_advance:
            self.advance(seconds)
            return
        with self._cond:
            deadline = self._now + seconds
            while self._now < deadline:
                self._cond.wait()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if timeout is None:
            return event.wait()
        deadline = self._now + timeout
        while not event.is_set():
            if self._now >= deadline:
                return event.is_set()
            # Real-time slices: an event wakes us at once; a moved clock within one slice.
            event.wait(self._poll_s)
        return True


__all__ = ["ManualClock"]

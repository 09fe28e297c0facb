"""One thread per process that notices cloud store calls waiting long, and says so once.

Why: an endpoint that accepts connections and never answers fails a request only at the HTTP
client's request timeout (30 s by default); :class:`~.retrying.RetryingStore`'s WARNING comes
after that first failure, so a user heard nothing for 30 s. Every call a ``RetryingStore`` over
a cloud store makes registers here for its duration (a dict insert and pop: no thread and no
lock per call); one daemon thread looks every :data:`CHECK_S` and logs one WARNING when a call has
waited :data:`STILL_WAITING_S` ("still waiting for bucket 'b' at http://host:9000: get x (5 s so
far; request timeout 30s)"): one per endpoint while its calls keep waiting, not one per call (a
silent store held every call of a process, and each said so: a reader prefetching WAL objects
printed a line for each). Once no call to it has been waiting that long, the next one is reported
again. Local and memory stores never register: they pay nothing.
A listing is watched while it waits for the store, not while its caller holds an item. Nor are
transfers above ``retrying.WATCH_MAX_BYTES`` and server-side copies, which may rightly take
longer than a few seconds: the request timeout still ends them.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time

_log = logging.getLogger("shaledb.store")

STILL_WAITING_S = 5.0
"""A call waiting this long on a cloud store is reported once at WARNING."""
CHECK_S = 1.0
"""How often the watchdog looks at the calls in flight."""


class Watchdog:
    """The cloud store calls in flight, and the thread that reports the slow ones."""

    def __init__(self) -> None:
        # token -> (started, where, what, request timeout). Written by the calling threads
        # (one insert, one pop each: atomic under the GIL), copied by the watchdog thread.
        self._calls: dict[int, tuple[float, str, str, str] | None] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()  # taken once per process, to start the thread

    def begin(self, where: str, what: str, request_timeout: str, token: int | None = None) -> int:
        """Register a call (or resume the paused ``token``: its wait starts now, and it is
        still reported at most once); pass the token to :meth:`end` when it returns or raises."""
        if token is None:
            token = next(self._ids)
        self._calls[token] = (time.monotonic(), where, what, request_timeout)
        if self._thread is None:
            self._start()
        return token

    def pause(self, token: int) -> None:
        """Not waiting on the store for now (a listing's caller holds an item)."""
        self._calls[token] = None

    def end(self, token: int) -> None:
        self._calls.pop(token, None)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name="shaledb-store-watchdog", daemon=True)
                t.start()
                self._thread = t

    def after_fork(self) -> None:
        """A forked child has no watchdog thread and none of its parent's calls."""
        self._calls = {}
        self._thread = None
        self._start_lock = threading.Lock()

    def _run(self) -> None:
        warned: set[int] = set()  # calls seen waiting long (each is reported at most once)
        reported: set[str] = set()  # endpoints with a reported call still waiting
        while True:
            time.sleep(CHECK_S)
            self._check(time.monotonic(), warned, reported)

    def _check(self, now: float, warned: set[int], reported: set[str]) -> None:
        calls = self._calls.copy()
        warned.intersection_update(calls.keys())  # (in place: &= with a keys view rebinds)
        waiting: set[str] = set()
        for token, call in calls.items():
            if call is None:
                continue
            started, where, what, timeout = call
            waited = now - started
            if waited < STILL_WAITING_S:
                continue
            waiting.add(where)
            if token not in warned:
                warned.add(token)
                if where not in reported:
                    reported.add(where)
                    _log.warning(
                        "still waiting for %s: %s (%.0f s so far; request timeout %s)",
                        where,
                        what,
                        waited,
                        timeout,
                    )
        reported.intersection_update(waiting)


WATCHDOG = Watchdog()
"""The process's watchdog (shared by every cloud store)."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG.after_fork)

__all__ = ["CHECK_S", "STILL_WAITING_S", "WATCHDOG", "Watchdog"]

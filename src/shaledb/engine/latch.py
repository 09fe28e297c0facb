"""A one-shot latch whose wait a KeyboardInterrupt can cut short without harm.

A durable write on the main thread waits for its WAL segment to be written by the
flusher thread. Ctrl-C raises KeyboardInterrupt in that wait, at any call. With a
``threading.Event`` that could break the latch for the other thread: ``Condition.wait``
on a plain lock re-takes the lock in Python code (``_acquire_restore``), and an interrupt
landing just before it left the ``with`` block releasing a lock this thread no longer
held -- the one the flusher held while setting the latch, whose own release then raised
``RuntimeError: release unlocked lock`` and stopped the WAL (seen under a storm of
SIGINTs). Here a waiter never holds a shared lock while it waits: it blocks on a lock of
its own, which ``set`` releases; an interrupt leaves at most a stale waiter lock in the
list, released by ``set`` like the others.
"""

from __future__ import annotations

import _thread


class Latch:
    """``set`` once, ``wait`` from any number of threads (the subset of
    ``threading.Event`` the WAL uses: ``set``, ``is_set``, ``wait``)."""

    __slots__ = ("_flag", "_mutex", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._mutex = _thread.allocate_lock()
        self._waiters: list[_thread.LockType] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._mutex:
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for w in waiters:
            w.release()  # (each once: the list was taken whole)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or ``timeout`` seconds passed; whether it is set."""
        if self._flag:
            return True
        w = _thread.allocate_lock()
        w.acquire()
        with self._mutex:
            if self._flag:
                return True
            self._waiters.append(w)
        w.acquire(True, -1 if timeout is None else max(timeout, 0.0))
        return self._flag

"""Ctrl-C held back for the few instructions that start a writer's threads.

``threading.Thread.start()`` waits for the new thread to run; a ``KeyboardInterrupt`` raised in
that wait (Ctrl-C during ``Db.open``) leaves the thread running while the constructor that
started it never returns, so nothing can stop it. Before, a Ctrl-C that landed there left a
half-opened writer's WAL, flush, compactor or GC threads running for the rest of the process
(a GC pass every interval against the store of a handle nobody had), and ``Db.open``'s own
cleanup could not reach them. Starting a thread takes microseconds and no store round trip,
so holding the interrupt back there costs nothing a user could notice; it is raised as soon
as the block ends. Only on the main thread, and only while Python's default SIGINT handler
is installed (a program with its own handler keeps it untouched).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with SIGINT recorded instead of raised; raise ``KeyboardInterrupt`` after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []

    def later(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    signal.signal(signal.SIGINT, later)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if caught:
            raise KeyboardInterrupt

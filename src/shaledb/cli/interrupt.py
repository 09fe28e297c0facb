"""Ctrl-C ends a command promptly, also while it waits on a store that does not answer.

Python runs its SIGINT handler (``KeyboardInterrupt``) only when the main thread is back in the
interpreter, and a store request blocks the main thread inside obstore until the request
timeout (30 s): Ctrl-C on ``shaledb scan`` against a silent endpoint took 27 s to act, and a
``put`` then closed its writer through the same silent store. So while a command runs, the
C-level signal handler also writes the signal's number to a pipe
(:func:`signal.set_wakeup_fd`); a watcher thread wakes on it at once and, if the command has
not ended :data:`GRACE_S` later, prints one line and exits 130 without waiting for the store
(a writer killed there is a crash: what it acknowledged is durable, the rest was never
acknowledged). A second Ctrl-C exits at once. Commands that take SIGINT as their normal stop
(``run-compactor``, ``run-gc``: they install a handler of their own) are left alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_S = 2.0
"""How long the command gets to end by itself after Ctrl-C (its ``KeyboardInterrupt`` path)."""

EXIT_INTERRUPTED = 130


@contextmanager
def prompt_interrupts(grace_s: float = GRACE_S) -> Iterator[None]:
    """Within the block, Ctrl-C ends the process within ``grace_s`` whatever it waits on.

    Does nothing off the main thread (``set_wakeup_fd`` needs it), e.g. under a test runner
    that calls ``main`` from a worker thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read_end)
        os.close(write_end)
        yield
        return
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(read_end, done, grace_s), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        os.close(write_end)  # the watcher's read ends (EOF) and it closes its end


def _watch(read_end: int, done: threading.Event, grace_s: float) -> None:
    interrupts = 0
    try:
        while not done.is_set():
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGINT not in data or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                continue  # another signal, or a command that takes SIGINT as its stop
            interrupts += 1
            if interrupts > 1 or done.wait(grace_s) is False:
                sys.stderr.write("shaledb: interrupted\n")
                sys.stderr.flush()
                os._exit(EXIT_INTERRUPTED)
    finally:
        os.close(read_end)


__all__ = ["EXIT_INTERRUPTED", "GRACE_S", "prompt_interrupts"]

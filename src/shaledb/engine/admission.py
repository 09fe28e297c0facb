"""Flushes before compactions while writers wait for memory.

A writer waits (``Db._admit_locked``) while the bytes of memtables not yet in
L0 exceed ``Settings.max_unflushed_bytes``; only the memtable flusher ends
that wait. The flusher, the WAL writer and the embedded compactor are Python
threads sharing one interpreter lock, so a compaction running meanwhile takes
about half of the time the flush needs: the writers wait twice as long for work
that can be done later. RocksDB gives its flushes their own high-priority
threads for the same reason.

So while some writer waits for memory, the embedded compactor holds off
between chunks of its merge (:func:`hold_off`, called from its lease
heartbeat), in short steps that keep renewing its lease, until no writer waits
-- or until L0 is half way to ``Settings.l0_max_ssts``, from where a deeper L0
would make flushes stall on compaction (``flush.MemtableFlusher._stall_for_l0``)
and compaction must go on. Nothing about durability or the memory bound changes:
only which background thread goes first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

STEP_S = 0.05
"""How long one hold-off step waits before it looks again (and beats the lease)."""


def flush_first(stalled_writers: int, l0_ssts: int, l0_max_ssts: int, closing: bool) -> bool:
    """Whether a compaction should wait: writers are waiting for memory and L0 is shallow."""
    return stalled_writers > 0 and not closing and l0_ssts < max(1, l0_max_ssts // 2)


def hold_off(should_wait: Callable[[], bool], stop: threading.Event, beat: Callable[[], None]) -> None:
    """Wait while ``should_wait()`` says so (and ``stop`` is not set), beating ``beat``.

    The steps are real time, not the database clock's: this only yields the
    interpreter to the flusher, and a test's manual clock must not hold a
    compaction back once no writer waits."""
    while should_wait() and not stop.is_set():
        beat()
        stop.wait(STEP_S)
    beat()

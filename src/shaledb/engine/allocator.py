"""Keeping glibc's malloc from holding on to freed multi-megabyte buffers.

An LSM writer in CPython allocates and frees large buffers all the time: SSTs
being built, WAL objects, read-ahead chunks, decoded blocks. glibc serves
allocations above its mmap threshold (128 KiB at start) with ``mmap`` and
returns them to the OS on free, but it *raises* that threshold to the size of
every mmapped chunk freed, up to 32 MiB. After the first few SSTs, buffers of
several MiB therefore come from the heap, where freed space between live
objects cannot be returned and is reused only by allocations that fit. In the
memory benchmark that was 25-40 MiB of resident memory above what the
engine held (``docs/benchmarks.md``, memcheck); with the threshold fixed the
process follows the budgets.

Setting the threshold explicitly (``mallopt(M_MMAP_THRESHOLD)``) turns the
dynamic adjustment off. It is process-wide, so it is applied once, only on
glibc, and never over a threshold the user chose with the
``MALLOC_MMAP_THRESHOLD_`` environment variable. ``Settings`` carries the value
(``malloc_mmap_threshold_bytes``; None leaves malloc alone).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading

from ..settings import MAX_MMAP_THRESHOLD_BYTES

log = logging.getLogger("shaledb.allocator")  # the documented name (docs/logging.md)

_M_MMAP_THRESHOLD = -3  # <malloc.h>
_lock = threading.Lock()
_applied: int | None = None


def fix_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold at ``nbytes``; True if it is in force after the call.

    A later call with another value changes it (the last database opened
    decides); elsewhere than glibc, or when the environment set it, nothing
    happens.
    """
    global _applied
    if not 0 < nbytes <= MAX_MMAP_THRESHOLD_BYTES:
        raise ValueError(f"mmap threshold must be in (0, {MAX_MMAP_THRESHOLD_BYTES}] bytes, got {nbytes}")
    with _lock:
        if _applied == nbytes:
            return True
        if "MALLOC_MMAP_THRESHOLD_" in os.environ or platform.libc_ver()[0] != "glibc":
            return False
        try:
            libc = ctypes.CDLL(None)
            ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(nbytes)))
        except (OSError, AttributeError):  # no mallopt in this process's C library
            return False
        if ok:
            _applied = nbytes
            log.debug("glibc mmap threshold fixed at %d bytes", nbytes)
        return ok

"""Output buffers reused from one object to the next (WAL objects, L0 SSTs).

An object is built in memory and then put to the store. Built into a fresh
``bytearray``, every 4 KiB page of it is faulted in by the kernel while the
builder holds the interpreter lock, and unmapped again when it is freed; where
malloc serves such sizes with fresh mappings (``Settings.malloc_mmap_threshold_bytes``,
which the benchmarks set to 128 KiB), that is ~1.5-2.4 us a page: about half of
the time to build a 4 MiB WAL object of 4 KiB values (docs/benchmarks.md,
"overwrite of 4 KiB values", fourth attempt). A buffer built into before has
its pages already, so the builder (``SstBuilder(out=...)``) writes into one
taken from :class:`OutBuffers` and the store is handed a view of the object in
it; once the put has returned, the buffer goes back for the next object.

Reuse is safe only if the store keeps nothing of the bytes it was given (the
memory store keeps them: obstore's ``MemoryStore`` holds the caller's buffer
without copying). So :meth:`OutBuffers.give` checks before it keeps a buffer:
the view is released (which fails while anything holds an export of the view
itself) and then a zero-byte write to the buffer must succeed (``io.BytesIO``
refuses every write while any export of its memory is alive, such as a view
cut from ours). A buffer something still holds is dropped, never written
again; the store keeps its bytes as they were. And should a reference escape
both checks, a later write to the buffer raises instead of changing the bytes.
"""

from __future__ import annotations

import io
from collections import deque


class OutBuffers:
    """A few reusable ``io.BytesIO`` buffers of one writer thread's objects.

    ``keep``: how many idle buffers are held (each as large as the largest
    object built in it); more are made when all are out. Thread-safe.
    """

    def __init__(self, keep: int = 1) -> None:
        self.keep = max(1, keep)
        self._free: deque[io.BytesIO] = deque()
        self.reused = 0
        """Buffers taken that had been used before (their pages already in)."""
        self.dropped = 0
        """Buffers given back while something still held their bytes (not reused)."""

    def take(self) -> io.BytesIO:
        """A buffer to build one object in (from the start: ``SstBuilder`` seeks to 0)."""
        try:
            out = self._free.pop()
        except IndexError:
            return io.BytesIO()
        self.reused += 1
        return out

    def give(self, out: io.BytesIO, view: memoryview | None) -> bool:
        """Take ``out`` back once the object built in it (``view``, from
        ``SstBuilder.finish_view``) is written; ``view`` is released. False
        if something still holds the bytes: then ``out`` is not reused."""
        try:
            if view is not None:
                view.release()
            out.write(b"")  # raises BufferError while any export of its memory is alive
        except BufferError:
            self.dropped += 1
            return False
        if len(self._free) < self.keep:
            self._free.append(out)
        return True

    def clear(self) -> None:
        """Drop the idle buffers (their memory goes back to the allocator)."""
        self._free.clear()

    @property
    def idle(self) -> int:
        return len(self._free)

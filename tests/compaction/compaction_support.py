"""Helpers of the compaction tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from shaledb.format import paths
from shaledb.format.row import KIND_TOMBSTONE, TYPE_MASK, decode_payload
from shaledb.format.sst import SstBuilder, decode_sst
from shaledb.manifest.model import SstInfo
from shaledb.settings import Settings
from shaledb.store import ObjectStore, drop_memory_store, open_store

Row = tuple[bytes, int, int, bytes]


@contextmanager
def memory_store() -> Iterator[ObjectStore]:
    name = f"compaction-{uuid.uuid4().hex}"
    try:
        yield open_store(f"memory://{name}")
    finally:
        drop_memory_store(name)


_rng = random.Random(7)


def write_sst(store: ObjectStore, rows: Iterable[Row], *, block_size: int = 4096) -> SstInfo:
    """An SST of ``rows`` (sorted by key, versions newest first) written to ``compacted/``."""
    rows = list(rows)
    b = SstBuilder(block_size=block_size, nonce=_rng.getrandbits(128).to_bytes(16, "little"))
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    data, p = b.finish()
    sid = paths.new_ulid(1_700_000_000 + _rng.random(), _rng)
    store.put(paths.sst_path(sid), data, create=True)
    return SstInfo(sid, len(data), p.first_key, p.last_key, p.entries, p.min_seq, p.max_seq)


def read_rows(store: ObjectStore, ssts: Iterable[SstInfo]) -> list[Row]:
    out: list[Row] = []
    for s in ssts:
        _, blocks = decode_sst(store.get(paths.sst_path(s.id)))
        for b in blocks:
            out.extend(zip(b.keys, b.seqs, b.kinds, b.payloads(0, len(b))))
    return out


def visible(rows: Iterable[Row], now_ms: int) -> dict[bytes, bytes]:
    """What a reader sees in merged rows (first version per key wins)."""
    out: dict[bytes, bytes] = {}
    seen: set[bytes] = set()
    for k, _s, kind, p in rows:
        if k in seen:
            continue
        seen.add(k)
        if kind & TYPE_MASK == KIND_TOMBSTONE:
            continue
        body, _meta, exp = decode_payload(kind, p)
        if exp is not None and exp <= now_ms:
            continue
        out[k] = body
    return out


class FutureClock:
    """The system clock moved ``offset_s`` ahead: a GC using it sees every grace
    period and minimum age as passed, so only real pins protect objects."""

    def __init__(self, offset_s: float = 86_400.0) -> None:
        import time

        self._time = time
        self.offset_s = offset_s

    def now(self) -> float:
        return self._time.time() + self.offset_s

    def monotonic(self) -> float:
        return self._time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._time.sleep(seconds)

    def wait(self, event, timeout):  # type: ignore[no-untyped-def]
        return event.wait(timeout)


NO_BG = Settings(
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)
"""A writer with small L0 SSTs and no background compactor or collector: the test runs them."""

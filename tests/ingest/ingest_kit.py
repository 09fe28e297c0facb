"""Helpers of the bulk-ingest tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from shaledb import DbReader, DbReaderOptions, Settings
from shaledb.clock import SYSTEM_CLOCK
from shaledb.format import paths
from shaledb.format.sst import decode_sst
from shaledb.manifest.model import Manifest, SstInfo
from shaledb.manifest.store import ManifestStore
from shaledb.store import ObjectStore, open_store

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
"""A writer without background compaction or GC, so the tests see the exact tree."""


def latest(url: str) -> Manifest:
    m = ManifestStore(open_store(url), SYSTEM_CLOCK, random.Random(), author="test").read_latest()
    assert m is not None
    return m


def contents(url: str) -> dict[bytes, bytes]:
    """Every live key and value of the latest version (a reader that writes nothing)."""
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    with DbReader.open(url, options=opts) as r:
        return dict(r.scan())


def sst_rows(store: ObjectStore, ssts: list[SstInfo]) -> Iterator[tuple[bytes, int, int, bytes]]:
    for s in ssts:
        _, blocks = decode_sst(store.get(paths.sst_path(s.id)))
        for b in blocks:
            yield from zip(b.keys, b.seqs, b.kinds, b.payloads(0, len(b)))


def sorted_kv(
    n: int, rng: random.Random, *, prefix: bytes = b"k", vlen: int = 20
) -> tuple[list[bytes], list[bytes]]:
    keys = sorted({prefix + rng.randbytes(8) for _ in range(n)})
    return keys, [rng.randbytes(vlen) for _ in keys]

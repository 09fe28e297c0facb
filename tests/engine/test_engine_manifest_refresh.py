"""Manifest polling: cheap probes, and a periodic listing that crosses GC gaps."""

from __future__ import annotations

import random
from dataclasses import replace

from shaledb.format import paths
from shaledb.manifest import Manifest, ManifestStore
from shaledb.manifest.store import LIST_FALLBACK_INTERVAL_S
from shaledb.store import open_store
from shaledb.testing import ManualClock


def _chain(name: str, n: int) -> tuple[ManifestStore, ManualClock]:
    clock = ManualClock()
    ms = ManifestStore(open_store(f"memory://{name}"), clock, random.Random(1), author="test")
    m = ms.create_initial(Manifest(id=1))
    for _ in range(n - 1):
        m = ms.update(lambda cur: replace(cur, last_l0_seq=cur.last_l0_seq + 1), timeout_s=5, current=m)
    return ms, clock


def test_refresh_probes_forward() -> None:
    ms, clock = _chain("refresh-probe", 6)
    reader = ManifestStore(ms.store, clock, random.Random(2), author="reader")
    first = reader.read(1)
    assert reader.refresh(first).id == 6


def test_refresh_lists_to_cross_a_gc_gap() -> None:
    ms, clock = _chain("refresh-gap", 6)
    reader = ManifestStore(ms.store, clock, random.Random(2), author="reader")
    stale = reader.read(2)
    for mid in (3, 4, 5):  # what a GC does to old versions a stalled process never saw
        ms.store.delete(paths.manifest_path(mid))
    assert reader.refresh(stale).id == 2  # probing alone cannot see past the gap
    clock.advance(LIST_FALLBACK_INTERVAL_S)
    assert reader.refresh(stale).id == 6

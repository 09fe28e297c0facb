"""Manifest CAS under churn: a write that others built on at once is not applied twice,
while a stale write behind newer versions (the ABA case) is still refused."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from typing import Any

import pytest

from shaledb.errors import ConflictError
from shaledb.manifest.model import Manifest
from shaledb.manifest.store import ManifestStore
from shaledb.store import ObjectStore, StoreWrapper, drop_memory_store, open_store
from shaledb.testing.clock import ManualClock


class BuildOnTopOnce(StoreWrapper):
    """Right after the first manifest create through it, another process writes the next version."""

    def __init__(self, inner: ObjectStore, other: ManifestStore) -> None:
        super().__init__(inner)
        self.other = other
        self.done = False

    def put(self, path: str, data: Any, *, create: bool = False, attributes: Any = None) -> None:
        self.inner.put(path, data, create=create, attributes=attributes)
        if create and path.startswith("manifest/") and not self.done:
            self.done = True
            self.other.update(lambda m: replace(m, next_run_id=m.next_run_id + 100), timeout_s=5)


@pytest.fixture
def url() -> Any:
    name = f"chain-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    drop_memory_store(name)


def test_a_write_others_built_on_is_applied_once(url: str) -> None:
    clock = ManualClock()
    base = ManifestStore(open_store(url), clock, random.Random(1), author="a")
    base.create_initial(Manifest(id=1))
    other = ManifestStore(open_store(url), clock, random.Random(2), author="b")
    ms = ManifestStore(BuildOnTopOnce(open_store(url), other), clock, random.Random(3), author="c")
    applied = []

    def bump(m: Manifest) -> Manifest:
        applied.append(m.id)
        return replace(m, writer_epoch=m.writer_epoch + 1)

    written = ms.update(bump, timeout_s=5)
    assert applied == [1] and written.id == 2
    latest = base.require_latest()
    assert latest.id == 3 and latest.writer_epoch == 1 and latest.next_run_id == 101


def test_a_stale_write_behind_newer_versions_is_refused(url: str) -> None:
    clock = ManualClock()
    ms = ManifestStore(open_store(url), clock, random.Random(1), author="a")
    ms.create_initial(Manifest(id=1))
    for _ in range(3):
        ms.update(lambda m: replace(m, writer_epoch=m.writer_epoch + 1), timeout_s=5)
    stale = ManifestStore(open_store(url), clock, random.Random(9), author="stale")
    two = stale.read(2)
    open_store(url).delete("manifest/00000000000000000003.manifest")  # as the GC would
    with pytest.raises(ConflictError, match="not the latest"):
        stale.write_new(replace(two, id=3, writer_epoch=two.writer_epoch + 1), two)

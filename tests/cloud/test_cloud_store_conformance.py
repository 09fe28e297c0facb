"""The store conformance suite on the Azure and GCS emulators (issue 33).

Azurite (Azure Blob) and fake-gcs-server run on 127.0.0.1 for the session
(tests/emulators.py). Azure lists up to 5,000 blobs a page, so the listing test
puts more than that to cross a page boundary.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import AlreadyExists
from shaledb.settings import RetryOptions, Settings
from shaledb.store import ObjectStore, RetryingStore
from shaledb.store.base import PUT_ID_ATTRIBUTE
from shaledb.store.stack import wrap_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.store_suite import StoreTests


class TestAzurite(StoreTests):
    """Through the stack every role opens (retries over accounting): Azurite now and then
    resets a connection after a blob batch, which obstore uses for every delete; that is
    transient, and retried as on any store."""

    many_objects = 5_010

    @pytest.fixture
    def store(self, azure_url_factory: Callable[[], Any]) -> ObjectStore:
        return wrap_store(azure_url_factory().open(), Settings(), SYSTEM_CLOCK, random.Random(9))

    def test_delete_many(self, store: ObjectStore) -> None:
        """The suite's test at a tenth of its size: on Azurite ``delete_many`` sends one
        request per object (no 1,000-object request boundary to cross), and each costs
        the emulator 100-200 ms."""
        names = [f"bulk/{i:04d}" for i in range(120)]
        for n in names:
            store.put(n, b"1")
        store.put("bulk-keep", b"k")
        store.delete_many([*names[::2], "never/existed", names[0]])
        assert [m.path for m in store.list("bulk/")] == names[1::2]
        store.delete_many(names)
        assert list(store.list("bulk/")) == []
        assert store.get("bulk-keep") == b"k"


def test_ambiguous_create_on_azurite(azure_url_factory: Callable[[], Any]) -> None:
    """A create whose response was lost is claimed by its put id, stored as Azure blob metadata."""
    inner = azure_url_factory().open()
    faults = FaultInjectingStore(inner, seed=33)
    faults.add_rule("apply_then_fail", ops="put_create", nth=1)
    clock = ManualClock()
    st = RetryingStore(faults, RetryOptions(), clock, random.Random(1))
    st.put("manifest/1", b"epoch 1 nonce 9", create=True)
    assert st.ambiguities_resolved == 1
    assert len(inner.attributes("manifest/1")[PUT_ID_ATTRIBUTE]) == 32
    with pytest.raises(AlreadyExists):
        RetryingStore(inner, RetryOptions(), clock, random.Random(2)).put(
            "manifest/1", b"epoch 2", create=True
        )

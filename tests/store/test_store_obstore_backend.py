"""Backend-specific behaviour of the obstore adapter that the conformance suite cannot reach."""

from __future__ import annotations

import random
from typing import Any

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError
from store_testkit import ManualClock

from shaledb.errors import AlreadyExists, Unavailable
from shaledb.settings import RetryOptions
from shaledb.store import ObjectStore, RetryingStore


@pytest.fixture
def conflict_once(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The next conditional put answers like S3's 409 ConditionalRequestConflict.

    moto never sends that status, so it is injected where obstore hands it to
    us: object_store 0.14 maps a 409 on a create to AlreadyExists, applied or not.
    """
    real_put = obstore.put
    seen: list[str] = []

    def put(store: Any, path: str, data: Any, **kwargs: Any) -> Any:
        if kwargs.get("mode") == "create" and not seen:
            seen.append(path)
            raise AlreadyExistsError(f"Object at location {path} already exists: 409 Conflict")
        return real_put(store, path, data, **kwargs)

    monkeypatch.setattr(obstore, "put", put)
    return seen


def test_conflict_without_an_object_is_transient(memory_store: ObjectStore, conflict_once: list[str]) -> None:
    with pytest.raises(Unavailable, match="concurrent request"):
        memory_store.put("m/1", b"x", create=True)
    memory_store.put("m/1", b"x", create=True)
    assert memory_store.get("m/1") == b"x"


def test_conflict_is_retried(memory_store: ObjectStore, conflict_once: list[str]) -> None:
    st = RetryingStore(memory_store, RetryOptions(), ManualClock(), random.Random(1))
    st.put("m/1", b"nonce 1", create=True)
    assert conflict_once == ["m/1"]
    assert st.retries == 1
    assert memory_store.get("m/1") == b"nonce 1"


def test_conflict_with_object_is_already_exists(memory_store: ObjectStore, conflict_once: list[str]) -> None:
    conflict_once.append("disarmed")
    memory_store.put("m/1", b"first", create=True)
    with pytest.raises(AlreadyExists):
        memory_store.put("m/1", b"second", create=True)

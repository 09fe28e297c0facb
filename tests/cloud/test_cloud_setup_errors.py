"""Set-up mistakes on the emulated Azure store (Azurite) raise the same typed errors as on
S3 (tests/store/test_store_setup_errors.py), on the first response and without retries."""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

import emulators
from shaledb import Db
from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import BucketNotFound, EndpointUnreachable, ObjectNotFound, PermissionDenied, ShaleError
from shaledb.settings import Settings
from shaledb.store import RetryingStore, open_store
from shaledb.store.stack import wrap_store

FAST = 2.0  # seconds

OPS: dict[str, Callable[[Any], object]] = {
    "get": lambda st: st.get("some/object"),
    "put": lambda st: st.put("some/object", b"v"),
    "create": lambda st: st.put("some/object", b"v", create=True),
    "list": lambda st: list(st.list("manifest/")),
    "head": lambda st: st.head("some/object"),
}


def _stack(url: str, **options: Any) -> RetryingStore:
    return wrap_store(open_store(url, **options), Settings(), SYSTEM_CLOCK, random.Random(5))


def _timed_raise(kind: type[ShaleError], fn: Callable[[], object]) -> ShaleError:
    started = time.monotonic()
    with pytest.raises(kind) as info:
        fn()
    assert time.monotonic() - started < FAST
    return info.value


@pytest.mark.parametrize("op", sorted(OPS))
def test_missing_container_is_not_found(azurite_endpoint: str, op: str) -> None:
    loc = emulators.azure_location(azurite_endpoint, "db", container="no-such-container")
    store = _stack(loc.url, **loc.options)
    err = _timed_raise(BucketNotFound, lambda: OPS[op](store))
    assert "container 'no-such-container'" in str(err) and azurite_endpoint in str(err)
    assert store.retries == 0


def test_missing_container_db_open(azurite_endpoint: str) -> None:
    loc = emulators.azure_location(azurite_endpoint, "db", container="no-such-container")
    _timed_raise(BucketNotFound, lambda: Db.open(loc.url, store_options=loc.options))


@pytest.mark.parametrize("op", sorted(OPS))
def test_wrong_account_key_is_permission_denied(azurite_endpoint: str, op: str) -> None:
    loc = emulators.azure_location(azurite_endpoint, "db")
    wrong = base64.b64encode(b"not the account key".ljust(64, b"!")).decode()
    store = _stack(loc.url, **{**loc.options, "account_key": wrong})
    err = _timed_raise(PermissionDenied, lambda: OPS[op](store))
    assert "403" in str(err) and "AZURE_STORAGE_ACCOUNT_KEY" in str(err) and "account_key" in str(err)
    assert wrong not in str(err)
    assert store.retries == 0


def test_unreachable_endpoint(azurite_endpoint: str) -> None:
    endpoint = f"http://127.0.0.1:{emulators.free_port()}/{emulators.AZURITE_ACCOUNT}"
    loc = emulators.azure_location(endpoint, "db")
    store = _stack(loc.url, **loc.options)
    err = _timed_raise(EndpointUnreachable, lambda: store.get("x"))
    assert endpoint in str(err) and "AZURE_STORAGE_ENDPOINT" in str(err)


def test_missing_blob_in_an_existing_container_stays_object_not_found(
    azure_url_factory: Callable[[], Any],
) -> None:
    loc = azure_url_factory()
    store = _stack(loc.url, **loc.options)
    with pytest.raises(ObjectNotFound):
        store.head("absent")
    with pytest.raises(ObjectNotFound):
        store.get("absent")

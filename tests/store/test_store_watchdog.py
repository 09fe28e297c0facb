"""A store call to an endpoint that accepts connections and never answers is reported once,
early ("still waiting for ..."), instead of silence until the request timeout; a local or
memory store is never watched."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shaledb.errors import ShaleError
from shaledb.settings import RetryOptions
from shaledb.store import ObjectStore, RetryingStore, StoreWrapper, open_store
from shaledb.store import watchdog as watchdog_module
from shaledb.store.retrying import WATCH_MAX_BYTES


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An HTTP endpoint that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        t.join(5)
        for c in held:
            c.close()
        server.close()


def _s3_at(endpoint: str, *, timeout: str) -> ObjectStore:
    """An S3 store at ``endpoint`` (the silent one) whose requests give up after ``timeout``."""
    return open_store(
        "s3://bucket/db",
        endpoint=endpoint,
        allow_http=True,
        access_key_id="x",
        secret_access_key="y",
        client_options={"timeout": timeout},
    )


@pytest.fixture
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog_module, "STILL_WAITING_S", 0.2)
    monkeypatch.setattr(watchdog_module, "CHECK_S", 0.05)


def _still_waiting(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "still waiting for" in r.getMessage()]


@pytest.mark.usefixtures("quick_watchdog")
def test_a_silent_endpoint_is_reported_once_before_the_request_times_out(
    silent_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    inner = _s3_at(silent_endpoint, timeout="2s")
    st = RetryingStore(inner, RetryOptions(timeout_s=1.0))
    with caplog.at_level(logging.WARNING, logger="shaledb.store"), pytest.raises(ShaleError):
        st.get("some/object")
    said = _still_waiting(caplog)
    assert len(said) == 1, said
    assert silent_endpoint in said[0] and "get some/object" in said[0] and "request timeout 2s" in said[0]


@pytest.mark.usefixtures("quick_watchdog")
def test_a_large_transfer_is_left_to_the_request_timeout(
    silent_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A put above WATCH_MAX_BYTES may rightly take longer than a few seconds on a slow link:
    no "still waiting" for it (the request timeout still ends it)."""
    inner = _s3_at(silent_endpoint, timeout="1s")
    st = RetryingStore(inner, RetryOptions(timeout_s=0.5))
    with caplog.at_level(logging.WARNING, logger="shaledb.store"), pytest.raises(ShaleError):
        st.put("big", bytes(WATCH_MAX_BYTES + 1))
    assert _still_waiting(caplog) == []


class _SlowGets(StoreWrapper):
    def __init__(self, inner: object, release: threading.Event) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self._release = release

    def get(self, path: str) -> bytes:
        self._release.wait(1.0)
        return super().get(path)


@pytest.mark.usefixtures("quick_watchdog")
@pytest.mark.parametrize("url", ["memory://watchdog-test", "local"])
def test_local_and_memory_stores_are_not_watched(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = open_store(str(tmp_path) if url == "local" else url)
    base.put("k", b"v")
    st = RetryingStore(_SlowGets(base, threading.Event()))  # each get waits 1 s
    with caplog.at_level(logging.WARNING, logger="shaledb.store"):
        assert st.get("k") == b"v"
    assert _still_waiting(caplog) == []


@pytest.mark.usefixtures("quick_watchdog")
def test_a_listing_of_a_silent_endpoint_is_reported_once(
    silent_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening a database lists ``manifest/`` first: that listing is what a user waits on."""
    inner = _s3_at(silent_endpoint, timeout="1s")
    st = RetryingStore(inner, RetryOptions(timeout_s=1.5, initial_backoff_s=0.01))
    with caplog.at_level(logging.WARNING, logger="shaledb.store"), pytest.raises(ShaleError):
        list(st.list("manifest/"))  # two attempts of 1 s each
    said = _still_waiting(caplog)
    assert len(said) == 1, said
    assert silent_endpoint in said[0] and "list 'manifest/'" in said[0]


@pytest.mark.usefixtures("quick_watchdog")
def test_a_caller_holding_a_listed_item_is_not_the_store_waiting(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the store's waits count: a caller slow between items is not reported."""
    from shaledb.store.http_errors import CloudService
    from shaledb.store.obstore_store import ObstoreStore

    base = open_store("memory://watchdog-list")
    for i in range(3):
        base.put(f"p/{i}", b"v")
    # A memory store posing as a cloud one, so the listing is watched.
    monkeypatch.setattr(ObstoreStore, "service", property(lambda self: CloudService("s3", "b", "http://x")))
    st = RetryingStore(base)
    with caplog.at_level(logging.WARNING, logger="shaledb.store"):
        for _ in st.list("p/"):
            threading.Event().wait(0.4)  # the caller's own time, twice the threshold
    assert _still_waiting(caplog) == []


class Refusing(StoreWrapper):
    """A cloud store whose every get fails at once (connections refused after it answered)."""

    def get(self, path: str) -> bytes:
        from shaledb.errors import Unavailable

        raise Unavailable("HTTP error: error sending request (connection refused)")


@pytest.mark.usefixtures("quick_watchdog")
def test_a_store_failing_fast_is_not_reported_as_silent(caplog: pytest.LogCaptureFixture) -> None:
    """The watchdog timed the whole call, backoffs included, so a store refusing connections got
    "still waiting for ..." (it was not waiting: each attempt failed at once) beside the retry's
    own WARNING. It now times each attempt."""
    inner = open_store(
        "s3://bucket/db",
        endpoint="http://127.0.0.1:9",
        allow_http=True,
        access_key_id="x",
        secret_access_key="y",
    )
    st = RetryingStore(
        Refusing(inner), RetryOptions(initial_backoff_s=0.05, max_backoff_s=0.05, timeout_s=1.0)
    )
    with (
        caplog.at_level(logging.WARNING, logger="shaledb.store"),
        pytest.raises(ShaleError, match="failed after"),
    ):
        st.get("some/object")
    assert _still_waiting(caplog) == []


@pytest.mark.usefixtures("quick_watchdog")
def test_calls_waiting_together_on_a_silent_endpoint_make_one_line(
    silent_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Three calls held by one silent store said "still waiting" three times."""
    inner = _s3_at(silent_endpoint, timeout="2s")
    st = RetryingStore(inner, RetryOptions(timeout_s=1.0))
    errors: list[BaseException] = []

    def call(path: str) -> None:
        try:
            st.get(path)
        except ShaleError as exc:
            errors.append(exc)

    with caplog.at_level(logging.WARNING, logger="shaledb.store"):
        threads = [threading.Thread(target=call, args=(f"object/{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(errors) == 3
    said = _still_waiting(caplog)
    assert len(said) == 1, said


def test_a_silent_endpoint_is_reported_once_for_all_its_calls(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call waiting on a silent store said "still waiting" (a writer's WAL put, its flush's
    manifest read, a reader's 16 WAL prefetches: a line each). Now one line per endpoint while
    its calls keep waiting; another endpoint, or the same one after its calls ended, is
    reported again. (The checks are driven by hand with a clock 6 s ahead: no thread, no sleep.)"""
    import time

    monkeypatch.setattr(watchdog_module.Watchdog, "_start", lambda self: None)
    wd = watchdog_module.Watchdog()
    warned: set[int] = set()
    reported: set[str] = set()

    def check() -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="shaledb.store"):
            wd._check(time.monotonic() + 6.0, warned, reported)
        return _still_waiting(caplog)

    a = wd.begin("bucket 'b' at http://h:1", "put(create) wal/1.sst", "30s")
    b = wd.begin("bucket 'b' at http://h:1", "get manifest/2.manifest", "30s")
    said = check()
    assert len(said) == 1 and "bucket 'b' at http://h:1" in said[0], said
    other = wd.begin("bucket 'c' at http://h:2", "get x", "30s")
    assert len(check()) == 1  # another endpoint: its own line
    assert check() == []  # still the same outage: nothing more
    for token in (a, b, other):
        wd.end(token)
    assert check() == []
    wd.begin("bucket 'b' at http://h:1", "get manifest/3.manifest", "30s")
    assert len(check()) == 1  # a new wait after the calls ended

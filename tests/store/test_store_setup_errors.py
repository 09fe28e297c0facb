"""S3 set-up mistakes are told from outages, on the first response (issue 28, item 2).

A missing bucket, refused or missing credentials and an unreachable endpoint
each raise their own typed error at once, naming the bucket, the endpoint and
what to set; only transient failures are retried, and each retry is logged at
DEBUG on the ``shaledb.store`` logger. Against the local S3 server (moto); the
bad-credentials case runs a second moto server that checks signatures.
"""

from __future__ import annotations

import logging
import random
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import obstore
import obstore.store
import pytest

from shaledb import Db
from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import (
    BucketNotFound,
    EndpointUnreachable,
    InvalidArgument,
    NotFound,
    ObjectNotFound,
    PermissionDenied,
    ShaleError,
    Unavailable,
)
from shaledb.settings import RetryOptions, Settings
from shaledb.store import RetryingStore, open_store
from shaledb.store.http_errors import CloudService, classify
from shaledb.store.stack import wrap_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock

FAST = 2.0  # seconds: every set-up mistake is reported within this
MOTO_BUCKET = "shaledb-test"  # the session's moto bucket (tests/conftest.py)
MOTO_KEY = "testing"
MOTO_REGION = "us-east-1"

OPS: dict[str, Callable[[Any], object]] = {
    "get": lambda st: st.get("some/object"),
    "put": lambda st: st.put("some/object", b"v"),
    "create": lambda st: st.put("some/object", b"v", create=True),
    "list": lambda st: list(st.list("manifest/")),
    "head": lambda st: st.head("some/object"),
}


def _stack(url: str, **options: Any) -> RetryingStore:
    """The store a database opens (retries over accounting), with the default retry options."""
    return wrap_store(open_store(url, **options), Settings(), SYSTEM_CLOCK, random.Random(7))


def _timed_raise(kind: type[ShaleError], fn: Callable[[], object]) -> ShaleError:
    started = time.monotonic()
    with pytest.raises(kind) as info:
        fn()
    took = time.monotonic() - started
    assert took < FAST, f"{kind.__name__} took {took:.2f}s"
    return info.value


def _s3(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"endpoint": endpoint, "allow_http": True, "region": MOTO_REGION, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def checking_moto(moto_checking_endpoint: str) -> str:
    return moto_checking_endpoint


@pytest.mark.parametrize("op", sorted(OPS))
def test_missing_bucket_is_not_found_at_once(moto_endpoint: str, op: str) -> None:
    store = _stack(
        "s3://no-such-bucket-here/db",
        **_s3(moto_endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY),
    )
    err = _timed_raise(BucketNotFound, lambda: OPS[op](store))
    assert isinstance(err, NotFound) and not isinstance(err, ObjectNotFound)
    assert "no-such-bucket-here" in str(err) and moto_endpoint in str(err)
    assert store.retries == 0


def test_missing_bucket_db_open(moto_endpoint: str) -> None:
    opts = _s3(moto_endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
    err = _timed_raise(BucketNotFound, lambda: Db.open("s3://no-such-bucket-here/db", store_options=opts))
    assert "no-such-bucket-here" in str(err) and moto_endpoint in str(err)


def test_missing_object_in_an_existing_bucket_stays_object_not_found(
    s3_url_factory: Callable[[], Any],
) -> None:
    loc = s3_url_factory()
    store = _stack(loc.url, **loc.options)
    with pytest.raises(ObjectNotFound):
        store.head("absent")  # a HEAD's 404 has no body: the bucket is checked once
    with pytest.raises(ObjectNotFound):
        store.get("absent")


@pytest.mark.parametrize("op", sorted(OPS))
def test_refused_credentials_are_permission_denied(checking_moto: str, op: str) -> None:
    store = _stack(
        f"s3://{MOTO_BUCKET}/db",
        **_s3(checking_moto, access_key_id="AKIAWRONGWRONGWRONG", secret_access_key="not-the-secret-key"),
    )
    err = _timed_raise(PermissionDenied, lambda: OPS[op](store))
    text = str(err)
    assert "403" in text and MOTO_BUCKET in text and checking_moto in text
    assert "AWS_ACCESS_KEY_ID" in text and "access_key_id" in text
    assert "not-the-secret-key" not in text
    assert store.retries == 0


def test_refused_credentials_db_open(checking_moto: str) -> None:
    opts = _s3(checking_moto, access_key_id="AKIAWRONGWRONGWRONG", secret_access_key="not-the-secret-key")
    _timed_raise(PermissionDenied, lambda: Db.open(f"s3://{MOTO_BUCKET}/db", store_options=opts))


def test_missing_credentials_are_permission_denied(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key anywhere: obstore asks the instance metadata service (here a closed local
    port, as on any machine outside a cloud) and the user is told what to set."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    store = _stack(
        f"s3://{MOTO_BUCKET}/db", **_s3(moto_endpoint, metadata_endpoint=f"http://127.0.0.1:{_free_port()}")
    )
    err = _timed_raise(PermissionDenied, lambda: store.get("x"))
    assert "no credentials" in str(err) and "AWS_ACCESS_KEY_ID" in str(err)
    assert store.retries == 0


@pytest.mark.parametrize("host", ["closed-port", "unknown-host"])
def test_unreachable_endpoint_is_reported_at_once(host: str) -> None:
    endpoint = (
        f"http://127.0.0.1:{_free_port()}" if host == "closed-port" else "http://no-such-host.invalid:9000"
    )
    store = _stack(
        f"s3://{MOTO_BUCKET}/db", **_s3(endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
    )
    for op in OPS.values():
        err = _timed_raise(EndpointUnreachable, lambda op=op: op(store))  # type: ignore[misc]
        assert isinstance(err, Unavailable) and endpoint in str(err) and "AWS_ENDPOINT_URL" in str(err)
    assert ("does not resolve" in str(err)) == (host == "unknown-host")
    assert store.retries == 0
    opts = _s3(endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
    _timed_raise(EndpointUnreachable, lambda: Db.open(f"s3://{MOTO_BUCKET}/db", store_options=opts))


def test_connection_failure_after_an_answer_is_transient() -> None:
    """Once a store has answered, a refused connection is an outage (retried), not a set-up mistake."""
    service = CloudService("s3", MOTO_BUCKET, "http://127.0.0.1:1")
    inner = obstore.store.S3Store(
        MOTO_BUCKET,
        endpoint="http://127.0.0.1:1",
        region=MOTO_REGION,
        access_key_id=MOTO_KEY,
        secret_access_key=MOTO_KEY,
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    with pytest.raises(Exception) as info:
        obstore.get(inner, "x")  # a real refused connection, as obstore reports it
    assert isinstance(classify(info.value, "x", "s3://b", service, answered=False), EndpointUnreachable)
    assert classify(info.value, "x", "s3://b", service, answered=True) is None  # -> Unavailable, retried


def test_only_transient_failures_are_retried_and_each_retry_is_logged(
    mem_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    faults = FaultInjectingStore(open_store(mem_url), seed=3)
    faults.add_rule("fail_before", ops="get", times=2)  # two transient failures, then success
    store = RetryingStore(faults, RetryOptions(max_attempts=5), clock, random.Random(1))
    store.inner.put("k", b"v")
    with caplog.at_level(logging.DEBUG, logger="shaledb.store"):
        assert store.get("k") == b"v"
    lines = [r for r in caplog.records if r.name == "shaledb.store" and "retrying in" in r.getMessage()]
    assert len(lines) == 2 and store.retries == 2
    assert "attempt 1 of 5" in lines[0].getMessage() and "attempt 2 of 5" in lines[1].getMessage()
    assert all(r.levelno == logging.DEBUG for r in lines)


def test_set_up_mistakes_are_not_retried(tmp_path: Path) -> None:
    """A store raising a set-up mistake: the retrying wrapper gives it back at once."""

    class Refusing(FaultInjectingStore):
        def get(self, path: str) -> bytes:
            self.count += 1
            raise self.error

    base = open_store(str(tmp_path / "db"))
    for error in (
        PermissionDenied("refused"),
        BucketNotFound("no bucket"),
        EndpointUnreachable("no endpoint"),
    ):
        refusing = Refusing(base)
        refusing.count, refusing.error = 0, error  # type: ignore[attr-defined]
        store = RetryingStore(refusing, RetryOptions(max_attempts=5), ManualClock(), random.Random(1))
        with pytest.raises(type(error)):
            store.get("k")
        assert refusing.count == 1 and store.retries == 0  # type: ignore[attr-defined]


def test_an_endpoint_that_is_not_an_object_store_is_reported_at_once(tmp_path: Path) -> None:
    """A plain web server on the endpoint (here Python's, on loopback) answers a bucket
    listing with an HTML 404 page; before, that was retried for 7 s and reported as
    "unreachable, retry later"."""
    with _web_server(tmp_path) as endpoint:
        opts = _s3(endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
        store = _stack(f"s3://{MOTO_BUCKET}/db", **opts)
        err = _timed_raise(InvalidArgument, lambda: list(store.list("manifest/")))
        assert "HTTP 404" in str(err) and endpoint in str(err) and "AWS_ENDPOINT_URL" in str(err)
        assert store.retries == 0
        assert "has the path" not in str(err)
        _timed_raise(InvalidArgument, lambda: Db.open(f"s3://{MOTO_BUCKET}/db", store_options=opts))
        assert not list(tmp_path.iterdir()), "nothing was written"


def test_an_endpoint_with_the_bucket_in_its_path_says_so(moto_endpoint: str) -> None:
    """AWS_ENDPOINT_URL=http://host:port/bucket (the bucket put into the endpoint) made every
    listing go to /bucket/bucket and ended in "does not look like this object-store API"; the
    message now names the endpoint's path and where the bucket goes."""
    opts = _s3(f"{moto_endpoint}/{MOTO_BUCKET}", access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
    store = _stack(f"s3://{MOTO_BUCKET}/db", **opts)
    err = _timed_raise(InvalidArgument, lambda: list(store.list("manifest/")))
    assert f"the endpoint has the path '/{MOTO_BUCKET}'" in str(err) and "s3://BUCKET/prefix" in str(err)


def test_an_endpoint_answering_listings_with_a_web_page_is_reported_at_once(tmp_path: Path) -> None:
    """A plain web server whose directory matches the bucket answers the listing 200 with an
    HTML directory page; before, that was retried for 6 s, reported as "unreachable, retry
    later", and the whole page went into every retry's log line and the error."""
    (tmp_path / MOTO_BUCKET).mkdir()
    for i in range(200):  # a long page
        (tmp_path / MOTO_BUCKET / f"file-{i:04d}.txt").write_text("x")
    with _web_server(tmp_path) as endpoint:
        opts = _s3(endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
        store = _stack(f"s3://{MOTO_BUCKET}/db", **opts)
        err = _timed_raise(InvalidArgument, lambda: list(store.list("manifest/")))
        assert "not an object-store listing" in str(err) and endpoint in str(err)
        assert store.retries == 0 and len(str(err)) < 1000


# S3's answers for a bucket in another region (as AWS sends them; no local server does): a
# path-style request to the wrong regional endpoint gets a 301 with no Location header, a
# request signed for the wrong region a 400 whose body names the bucket's region.
_REDIRECT_BODY = (
    "<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>PermanentRedirect</Code><Message>The bucket "
    "you are attempting to access must be addressed using the specified endpoint.</Message>"
    f"<Endpoint>s3.eu-west-1.amazonaws.com</Endpoint><Bucket>{MOTO_BUCKET}</Bucket></Error>"
)
_SIGNED_FOR_WRONG_REGION_BODY = (
    "<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AuthorizationHeaderMalformed</Code><Message>"
    "The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'"
    "</Message><Region>eu-west-1</Region><RequestId>R</RequestId></Error>"
)


@pytest.mark.parametrize(
    ("status", "body", "named"),
    [(301, _REDIRECT_BODY, "another region"), (400, _SIGNED_FOR_WRONG_REGION_BODY, "region 'eu-west-1'")],
    ids=["redirect", "signed-for-another-region"],
)
def test_a_bucket_in_another_region_is_reported_at_once(
    tmp_path: Path, status: int, body: str, named: str
) -> None:
    """A region mismatch is a set-up mistake: InvalidArgument at once, saying which region
    setting to fix. Before, S3's 301 was retried for 6-8 s and reported as "the store is
    unreachable, retry later", the cause only at the end of the backend's text."""
    with _answering_server(status, body, {"x-amz-bucket-region": "eu-west-1"}) as endpoint:
        opts = _s3(endpoint, access_key_id=MOTO_KEY, secret_access_key=MOTO_KEY)
        store = _stack(f"s3://{MOTO_BUCKET}/db", **opts)
        for name, op in OPS.items():
            err = _timed_raise(InvalidArgument, lambda op=op: op(store))  # type: ignore[misc]
            if name == "head" and status == 400:  # an answer to HEAD has no body naming the region
                assert "region" in str(err)
                continue
            assert named in str(err) and "'us-east-1' as configured" in str(err)
            assert "AWS_REGION" in str(err) and "retry" not in str(err)
        assert store.retries == 0
        err = _timed_raise(InvalidArgument, lambda: Db.open(f"s3://{MOTO_BUCKET}/db", store_options=opts))
        assert "AWS_REGION" in str(err)


@contextmanager
def _answering_server(status: int, body: str, headers: dict[str, str]) -> Iterator[str]:
    """A web server answering every request with ``status``, ``headers`` and ``body``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    data = body.encode()

    class Answer(BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_backend_message_is_cut_in_an_error() -> None:
    """An error quoting a backend's message keeps its first line, cut at a few hundred
    characters (a response body in it once made each log line 20 KB)."""
    from shaledb.store.obstore_store import ObstoreStore

    store = ObstoreStore(obstore.store.MemoryStore(), description="memory://cut")
    err = store._error(RuntimeError("Generic error: body " + "x" * 20_000 + "\nsecond line"), "k")
    assert isinstance(err, Unavailable) and len(str(err)) < 500 and "(cut)" in str(err)


def test_a_secret_across_the_cut_is_scrubbed_whole() -> None:
    """The message is scrubbed before it is cut: cut first, a secret straddling the cut kept
    its head, which no longer matched the registered secret and went out as it was."""
    from shaledb.store.obstore_store import ObstoreStore
    from shaledb.store.scrub import register_secret

    secret = "Zq7secretvalueQ9w"
    register_secret(secret)
    store = ObstoreStore(obstore.store.MemoryStore(), description="memory://cut")
    err = store._error(RuntimeError("Generic error: body " + "y" * 270 + secret + "y" * 500), "k")
    assert "(cut)" in str(err) and "Zq7" not in str(err) and "<redacted>" in str(err)


@contextmanager
def _web_server(directory: Path) -> Iterator[str]:
    """A plain web server (not an object store) serving ``directory``: its endpoint URL."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

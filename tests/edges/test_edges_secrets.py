"""Audit finding 3: credentials in a URL are refused with a message saying where they go,
and the one scrubbing function keeps secrets out of descriptions, errors (and the errors
they chain), log lines and the CLI's --debug output. Also: a bucket name with a space is
refused up front (finding 5), not retried as if the store were unavailable."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from shaledb import Db, DbReader, InvalidArgument
from shaledb.cli import main
from shaledb.cli.output import EXIT_USAGE
from shaledb.store import open_store
from shaledb.store.scrub import REDACTED, ScrubFilter, register_secret, scrub, scrub_exception

SECRET = "wJalrXUtnFEMI0K7MDENG0bPxRfiCYzz"
AKID = "AKIAIOSFODNN7EXAMPLE"


def _chain_texts(exc: BaseException | None) -> list[str]:
    out: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out += [str(exc), repr(exc), repr(exc.args)]
        out += [repr(exc.__cause__), repr(exc.__context__)]
        exc = exc.__cause__ or exc.__context__
    return out


@pytest.mark.parametrize(
    "url",
    [
        f"s3://{AKID}:{SECRET}@bucket/db",
        f"s3://{SECRET}@bucket/db",
        f"gs://user:{SECRET}@bucket/db",
        f"az://acct:{SECRET}@container/db",
        f"memory://user:{SECRET}@name/db",
        f"file://user:{SECRET}@localhost/tmp/db",
    ],
)
def test_userinfo_in_url_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        open_store(url)
    msg = str(info.value)
    assert "credentials" in msg and "environment variables" in msg and "store options" in msg
    texts = _chain_texts(info.value)
    assert all(SECRET not in t for t in texts), texts
    assert all(AKID not in t for t in texts), texts


@pytest.mark.parametrize("opener", ["db", "reader"])
def test_handles_refuse_userinfo_urls(opener: str) -> None:
    url = f"s3://{AKID}:{SECRET}@bucket/db"
    with pytest.raises(InvalidArgument) as info:
        if opener == "db":
            Db.open(url)
        else:
            DbReader.open(url)
    assert all(SECRET not in t for t in _chain_texts(info.value))


def test_cli_debug_output_never_shows_the_secret(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--debug", "--path", f"s3://{AKID}:{SECRET}@bucket/db", "get", "k"])
    assert rc == EXIT_USAGE
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" in text  # --debug shows where the error came from ...
    assert SECRET not in text and AKID not in text  # ... but not the secret
    assert "environment variables" in text


@pytest.mark.parametrize("bucket", ["my bucket", "bucket\u00a0x", "-bucket", "bu/../x"[:2] + "\u2028"])
def test_bad_bucket_name_is_invalid_up_front(bucket: str) -> None:
    with pytest.raises(InvalidArgument, match="bucket"):
        open_store(f"s3://{bucket}/db", endpoint="http://127.0.0.1:9", allow_http=True)


def test_bucket_with_space_is_not_retried(s3_url_factory: Callable[[], Any]) -> None:
    loc = s3_url_factory()
    with pytest.raises(InvalidArgument, match="bucket"):
        Db.open("s3://my bucket/db", store_options=loc.options)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"GET https://b.s3.amazonaws.com/k?X-Amz-Signature={SECRET}&x=1", SECRET),
        (f"https://acct.blob.core.windows.net/c/k?sv=2021&sig={SECRET}", SECRET),
        (f"https://x/y?X-Amz-Credential={AKID}%2F20240101", AKID),
        (f"headers: {{'authorization': 'AWS4-HMAC-SHA256 Credential={SECRET}'}}", SECRET),
        (f"Authorization: Bearer {SECRET}", SECRET),
        (f'S3Store {{ secret_access_key: "{SECRET}", region: "x" }}', SECRET),
        (f"session_token={SECRET}", SECRET),
        (f"s3://{AKID}:{SECRET}@bucket/db", SECRET),
        (f"the id {AKID} is wrong", AKID),
    ],
)
def test_scrub_removes_secret_shapes(text: str, secret: str) -> None:
    out = scrub(text)
    assert secret not in out and REDACTED in out, out


def test_scrub_keeps_ordinary_text() -> None:
    for text in (
        "s3://bucket/db/manifest/00000000000000000001.manifest",
        "file:///tmp/a@b/db",
        "object not found: wal/00000000000000000003.wal",
        "a key may be at most 65535 bytes",
    ):
        assert scrub(text) == text


def test_scrub_knows_registered_and_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    register_secret("registered-" + SECRET)
    assert "registered-" not in scrub(f"x registered-{SECRET} y")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret-" + SECRET[:8])
    assert "envsecret-" not in scrub(f"boom envsecret-{SECRET[:8]} boom")


def test_scrub_exception_cleans_the_whole_chain() -> None:
    try:
        try:
            raise OSError(f"inner failure at https://h/k?X-Amz-Signature={SECRET}")
        except OSError as inner:
            raise RuntimeError(f"wrapped: password={SECRET}") from inner
    except RuntimeError as exc:
        outer = exc
    scrub_exception(outer)
    assert all(SECRET not in t for t in _chain_texts(outer))


def test_scrub_filter_cleans_log_records(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("shaledb.test_scrub")
    caplog.handler.addFilter(ScrubFilter())
    try:
        with caplog.at_level(logging.INFO):
            log.info("opening %s", f"s3://{AKID}:{SECRET}@bucket/db")
            try:
                raise ValueError(f"token={SECRET}")
            except ValueError:
                log.exception("failed")
        assert SECRET not in caplog.text and AKID not in caplog.text
    finally:
        caplog.handler.filters.clear()


def test_store_description_is_scrubbed() -> None:
    st = open_store(
        "s3://bucket/db?endpoint=http://127.0.0.1:9&region=x&allow_http=true",
        access_key_id=AKID,
        secret_access_key=SECRET,
    )
    assert SECRET not in st.describe() and SECRET not in repr(st) and AKID not in repr(st)

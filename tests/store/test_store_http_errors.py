"""The classification of cloud store failures (store/http_errors.py) and the backend options
shaledb sets (store/cloud_options.py), on the message shapes obstore produces.

The servers' own answers are tested end to end on moto and Azurite
(test_store_setup_errors.py, tests/cloud); these cases cover what no local server sends:
GCS's answers, throttling and server errors, which must stay retryable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shaledb.errors import BucketNotFound, EndpointUnreachable, InvalidArgument, PermissionDenied
from shaledb.store.cloud_options import bulk_deletes, cloud_service, with_backend_defaults
from shaledb.store.http_errors import CloudService, classify, http_status


class GenericError(Exception):
    """Stands in for obstore's exception of the same name: only its text is read."""


def _answer(method: str, url: str, status: str, body: str) -> GenericError:
    return GenericError(
        f"Generic GCS error: Error performing {method} {url} in 3ms - "
        f"Server returned non-2xx status code: {status}: {body}"
    )


GCS = CloudService("gs", "my-bucket", "https://storage.googleapis.com")


def test_gcs_missing_bucket() -> None:
    body = "<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchBucket</Code></Error>"
    err = classify(
        _answer("GET", "https://storage.googleapis.com/my-bucket/x", "404 Not Found", body),
        "x",
        "gs://my-bucket",
        GCS,
        False,
    )
    assert isinstance(err, BucketNotFound) and "bucket 'my-bucket'" in str(err)


@pytest.mark.parametrize("status", ["401 Unauthorized", "403 Forbidden"])
def test_gcs_refused_credentials(status: str) -> None:
    err = classify(
        _answer("PUT", "https://x/my-bucket/m", status, "<Error/>"), "m", "gs://my-bucket", GCS, True
    )
    assert isinstance(err, PermissionDenied)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(err) and "service_account_key" in str(err)


def test_gcs_no_credentials_from_the_metadata_server() -> None:
    exc = GenericError(
        "Generic GCS error: Error performing token request: Error performing GET "
        "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token in 2ms"
    )
    assert isinstance(classify(exc, "m", "gs://my-bucket", GCS, False), PermissionDenied)


@pytest.mark.parametrize(
    "status",
    ["429 Too Many Requests", "500 Internal Server Error", "503 Service Unavailable", "408 Request Timeout"],
)
def test_throttling_and_server_errors_stay_transient(status: str) -> None:
    exc = _answer("PUT", "https://x/my-bucket/m", status, "<Error><Code>SlowDown</Code></Error>")
    assert classify(exc, "m", "gs://my-bucket", GCS, False) is None  # -> Unavailable, retried


@pytest.mark.parametrize(
    "status", ["404 Not Found", "409 Conflict", "412 Precondition Failed", "416 Range Not Satisfiable"]
)
def test_answers_the_store_adapter_handles_are_left_to_it(status: str) -> None:
    exc = _answer("GET", "https://x/my-bucket/m", status, "<Error><Code>Other</Code></Error>")
    assert classify(exc, "m", "gs://my-bucket", GCS, True) is None


def test_other_client_errors_are_not_retried() -> None:
    exc = _answer(
        "PUT", "https://x/my-bucket/m", "400 Bad Request", "<Error><Code>InvalidArgument</Code></Error>"
    )
    err = classify(exc, "m", "gs://my-bucket", GCS, True)
    assert isinstance(err, InvalidArgument) and "HTTP 400" in str(err)


def test_a_reset_is_transient_even_before_the_first_answer() -> None:
    exc = GenericError(
        "Generic S3 error: Error performing GET http://h/b/x - HTTP error: "
        "error sending request ConnectionReset"
    )
    assert classify(exc, "x", "s3://b", CloudService("s3", "b"), False) is None


def test_dns_failure_before_the_first_answer() -> None:
    exc = GenericError(
        "Generic S3 error: Error performing GET http://h/b/x - HTTP error: "
        "error sending request ... dns error"
    )
    err = classify(exc, "x", "s3://b", CloudService("s3", "b", "http://h"), False)
    assert isinstance(err, EndpointUnreachable) and "does not resolve" in str(err)


def test_http_status() -> None:
    assert http_status("Server returned non-2xx status code: 403 Forbidden: <x/>") == 403
    assert http_status("HTTP error: error sending request") is None


def test_backend_retries_off_unless_given() -> None:
    assert with_backend_defaults({"region": "x"}) == {"region": "x", "retry_config": {"max_retries": 0}}
    mine = {"max_retries": 3}
    assert with_backend_defaults({"retry_config": mine})["retry_config"] is mine


def test_bulk_deletes_off_only_on_azurite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_USE_EMULATOR", raising=False)
    assert bulk_deletes("s3", {}) and bulk_deletes("gs", {}) and bulk_deletes("az", {"account_name": "prod"})
    assert not bulk_deletes("az", {"account_name": "devstoreaccount1"})
    assert not bulk_deletes("az", {"use_emulator": True})
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
    assert not bulk_deletes("az", {})


def test_cloud_service_names_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_BASE_URL", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_ENDPOINT", raising=False)
    assert cloud_service("s3", "b", {"endpoint": "http://e"}).where() == "bucket 'b' at http://e"
    assert cloud_service("s3", "b", {}).where() == "bucket 'b' at AWS S3"
    assert cloud_service("az", "c", {"endpoint": "http://a"}).where() == "container 'c' at http://a"
    key = '{"gcs_base_url": "http://g", "disable_oauth": true}'
    assert cloud_service("gs", "b", {"service_account_key": key}).endpoint == "http://g"
    assert cloud_service("gs", "b", {"base_url": "http://h"}).endpoint == "http://h"


def test_s3_request_timeout_is_transient_and_expired_token_is_refused() -> None:
    s3 = CloudService("s3", "b")
    timeout = _answer("PUT", "http://h/b/x", "400 Bad Request", "<Error><Code>RequestTimeout</Code></Error>")
    assert classify(timeout, "x", "s3://b", s3, True) is None
    expired = _answer("GET", "http://h/b/x", "400 Bad Request", "<Error><Code>ExpiredToken</Code></Error>")
    assert isinstance(classify(expired, "x", "s3://b", s3, True), PermissionDenied)


def test_a_failed_tls_handshake_before_any_answer_is_an_endpoint_mistake() -> None:
    """An https:// endpoint naming a plain-HTTP server (moto on loopback) was retried for 7 s
    and reported as "unreachable, retry later"; the text is what obstore 0.14 reports then."""
    exc = Exception(
        "Generic S3 error: Error performing list request: Error performing GET https://127.0.0.1:9/b "
        "- HTTP error: error sending request\n\nDebug source:\n inner: Http(HttpError { kind: Connect, "
        "error: InvalidMessage(InvalidContentType) })"
    )
    s3 = CloudService("s3", "b", "https://127.0.0.1:9")
    err = classify(exc, "manifest/", "s3://b", s3, False)
    assert isinstance(err, EndpointUnreachable) and "TLS handshake" in str(err)
    assert classify(exc, "manifest/", "s3://b", s3, True) is None  # after an answer: transient


def test_a_bare_404_on_a_listing_is_an_endpoint_mistake() -> None:
    """A listing's 404 without a missing-bucket code: the endpoint is not this API."""
    exc = Exception(
        "Generic S3 error: Error performing list request: Error performing GET http://127.0.0.1:9/b?"
        "list-type=2 in 1ms - Server returned non-2xx status code: 404 Not Found: <!DOCTYPE HTML>"
    )
    s3 = CloudService("s3", "b", "http://127.0.0.1:9")
    err = classify(exc, "manifest/", "s3://b", s3, True)
    assert isinstance(err, InvalidArgument) and "HTTP 404" in str(err)
    missing = Exception(str(exc).replace("<!DOCTYPE HTML>", "<Code>NoSuchBucket</Code>"))
    assert isinstance(classify(missing, "manifest/", "s3://b", s3, True), BucketNotFound)
    get_404 = Exception("Generic S3 error: Error performing GET http://127.0.0.1:9/b/x: 404 Not Found")
    assert classify(get_404, "x", "s3://b", s3, True) is None  # a missing object: the caller's case


def test_a_listing_answered_with_a_web_page_is_an_endpoint_mistake() -> None:
    """Some other web server on the endpoint answering a listing 200 with HTML (or a metrics
    exporter's text): obstore cannot parse it. That was retried for 6 s, reported as
    "unreachable, retry later", and quoted the whole page in each log line."""
    exc = Exception(
        "Generic S3 error: Got invalid list response: ill-formed document: expected `</meta>`, "
        "but `</head>` was found"
    )
    s3 = CloudService("s3", "b", "http://127.0.0.1:9")
    err = classify(exc, "manifest/", "s3://b", s3, False)
    assert isinstance(err, InvalidArgument)
    assert "not an object-store listing" in str(err) and "AWS_ENDPOINT_URL" in str(err)
    # A store that has answered before: an unreadable listing (a body cut short) is retried.
    assert classify(exc, "manifest/", "s3://b", s3, True) is None


def test_a_redirect_to_another_region_names_the_region_setting() -> None:
    """S3's 301 to a bucket's own region, as object_store reports it (it never follows one):
    a set-up mistake naming the region the requests were signed for and what to set."""
    exc = GenericError(
        "Generic S3 error: Error performing list request: Error performing GET "
        "https://s3.us-east-1.amazonaws.com/my-bucket?list-type=2 in 20ms - Received redirect "
        "without LOCATION, this normally indicates an incorrectly configured region"
    )
    service = cloud_service("s3", "my-bucket", {})
    assert service.region is None
    for answered in (False, True):  # a bucket does not change regions: never an outage
        err = classify(exc, "manifest/", "s3://my-bucket/db", service, answered)
        assert isinstance(err, InvalidArgument)
        assert "'us-east-1', the default" in str(err) and "AWS_REGION" in str(err)
    signed = cloud_service("s3", "my-bucket", {"region": "ap-south-1"})
    assert "'ap-south-1' as configured" in str(classify(exc, "m", "s3://my-bucket", signed, True))
    assert "AWS_REGION" not in str(classify(exc, "m", "gs://my-bucket", GCS, False))  # S3's advice only


def test_missing_credentials_with_an_aws_profile_say_profiles_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``aws configure`` a user has ~/.aws/credentials and no AWS_* keys; obstore reads no
    profile, and "no credentials found ... set AWS_ACCESS_KEY_ID" read as a bug. The message now
    says profiles are not read and how to export one's keys (it never reads the files)."""
    for name in ("AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    exc = GenericError(
        "Generic S3 error: Error performing token request: Error performing PUT "
        "http://169.254.169.254/latest/api/token in 2ms"
    )
    service = cloud_service("s3", "my-bucket", {})

    def message() -> str:
        err = classify(exc, "manifest/", "s3://my-bucket/db", service, False)
        assert isinstance(err, PermissionDenied) and "AWS_ACCESS_KEY_ID" in str(err)
        return str(err)

    assert "profile" not in message()  # nothing configured anywhere: the plain message
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert "does not read AWS profiles (~/.aws/credentials)" in message()
    assert 'eval "$(aws configure export-credentials --format env)"' in message()
    monkeypatch.setenv("AWS_PROFILE", "dev")
    assert "(AWS_PROFILE=dev)" in message() and "export-credentials --profile dev" in message()

"""Which cloud store failures are set-up mistakes, and which are outages.

obstore reports a missing bucket, a refused credential and a wrong endpoint
with the same exception classes as a missing object or a passing outage
(``NotFoundError``, ``GenericError``). Retrying a set-up mistake only delays
the answer (ten attempts, seconds) and hides it behind "retry later"; so the
first response is read here and a mistake is raised at once, naming the
bucket, the endpoint and what to set:

* a missing bucket or container (S3 and GCS ``NoSuchBucket``, Azure
  ``ContainerNotFound``) -> :class:`~shaledb.errors.BucketNotFound`;
* HTTP 401/403, or no credential found (the metadata endpoints that obstore
  asks when nothing is configured) -> :class:`~shaledb.errors.PermissionDenied`;
* a host that does not resolve or refuses connections, before the store has
  ever answered -> :class:`~shaledb.errors.EndpointUnreachable`;
* a bucket in another region than the one configured (S3's 301 without a
  ``Location``, or a 400 naming the bucket's region) -> :class:`~shaledb.errors.InvalidArgument`
  saying which region to set (retried, it cost a writer's open 6-8 s of "unreachable, retry
  later" that named the cause only at the end of the backend's text);
* other 4xx answers (a malformed request, an invalid bucket name), a bare 404
  on a listing, and a listing answered with a body that is not the store's
  (some other web server on the endpoint) -> :class:`~shaledb.errors.InvalidArgument`.

Everything else (5xx, 429, 408, timeouts, connection resets, and connection
failures of a store that answered before) stays
:class:`~shaledb.errors.Unavailable`, which :mod:`.retrying` retries.
Messages never repeat the backend's text, which may carry a signed URL.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import BucketNotFound, EndpointUnreachable, InvalidArgument, PermissionDenied, ShaleError
from .scrub import scrub

_STATUS = re.compile(r"status code: (\d{3})")
_BUCKET_MISSING = (
    "NoSuchBucket",
    "ContainerNotFound",
    "The specified bucket does not exist",
    "The specified container does not exist",
)
# Where obstore looks for credentials when none are configured: the instance
# metadata services of AWS (IMDS token and role paths), Google and Azure.
_NO_CREDENTIAL = (
    "/latest/api/token",
    "/latest/meta-data/iam",
    "169.254.170.2",
    "metadata.google.internal",
    "/computeMetadata/",
    "/metadata/identity/oauth2/token",
)
_CONNECT = ("dns error", "ConnectionRefused", "Connection refused", "tcp connect error")
_LIST_REQUEST = "Error performing list request"  # obstore's words for a failed listing
# obstore's words for a listing answered 2xx with a body that is not the store's XML (an HTML
# page, a metrics exporter's text): the endpoint is some other web server.
_BAD_LISTING = "invalid list response"
# A TLS handshake that fails at once (rustls' words): most often an https:// endpoint
# naming a plain-HTTP service, or a certificate the client does not trust.
_TLS = ("InvalidContentType", "invalid peer certificate", "UnknownIssuer", "HandshakeFailure")
# 4xx answers that are not set-up mistakes: handled by the caller (404 missing
# object, 409 S3's conflicting conditional request, 412 precondition, 416 range
# past the end) or transient (408 request timeout, 429 throttling).
_NOT_SETUP_4XX = frozenset({404, 408, 409, 412, 416, 429})
# 400 answers that are not mistakes in the request: S3 reports an idle upload as
# 400 RequestTimeout (transient), and expired session credentials as 400 ExpiredToken.
_TRANSIENT_400 = ("RequestTimeout",)
_CREDENTIAL_400 = ("ExpiredToken", "InvalidToken", "TokenRefreshRequired")
# A bucket in another region: S3 answers 301 PermanentRedirect with no Location header, which
# object_store reports in these words (it never follows it), or, for a request signed for the
# wrong region, 400 AuthorizationHeaderMalformed whose body names the bucket's <Region>.
_BARE_REDIRECT = "redirect without LOCATION"
_WRONG_REGION_400 = ("AuthorizationHeaderMalformed",)
_REGION_TAG = re.compile(r"<Region>([a-z0-9-]{1,40})</Region>")

_CREDENTIALS_HINT = {
    "s3": (
        "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus AWS_SESSION_TOKEN for temporary "
        "credentials), or pass the store options access_key_id and secret_access_key"
    ),
    "gs": (
        "set GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT_PATH / "
        "GOOGLE_SERVICE_ACCOUNT_KEY) to a service account key, or pass the store option "
        "service_account_path or service_account_key"
    ),
    "az": (
        "set AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN "
        "(or AZURE_CLIENT_ID / AZURE_CLIENT_SECRET / AZURE_TENANT_ID), or pass the store options "
        "account_name and account_key"
    ),
}
_ENDPOINT_HINT = {
    "s3": "AWS_ENDPOINT_URL or the store option endpoint",
    "gs": "GOOGLE_BASE_URL or the store option base_url",
    "az": "AZURE_STORAGE_ENDPOINT or the store option endpoint",
}


@dataclass(frozen=True)
class CloudService:
    """What a cloud store's messages name: scheme (``s3``, ``gs``, ``az``),
    bucket or container, and the endpoint (``None``: the service's default)."""

    scheme: str
    bucket: str
    endpoint: str | None = None
    region: str | None = None
    """The region requests are signed for (S3; ``None``: obstore's default, us-east-1)."""
    request_timeout: str = "30s"
    """The HTTP client's request timeout (``client_options["timeout"]``; obstore's default 30s)."""

    def where(self) -> str:
        kind = "container" if self.scheme == "az" else "bucket"
        at = self.endpoint or {"s3": "AWS S3", "gs": "Google Cloud Storage", "az": "Azure Blob Storage"}.get(
            self.scheme, self.scheme
        )
        return f"{kind} {self.bucket!r} at {scrub(at)}"  # an endpoint may carry user:password@


def http_status(text: str) -> int | None:
    """The HTTP status of the response an obstore error message reports, if any."""
    m = _STATUS.search(text)
    return int(m.group(1)) if m else None


def is_bucket_missing(text: str) -> bool:
    """Whether an error's text says the bucket or container itself is missing."""
    return any(marker in text for marker in _BUCKET_MISSING)


def bucket_missing(service: CloudService) -> BucketNotFound:
    return BucketNotFound(
        f"{service.where()} does not exist: create it, or fix the bucket in the URL "
        f"({service.scheme}://BUCKET/prefix) or the endpoint"
    )


def aws_profile_note() -> str:
    """What to do with an AWS profile, when the user has one: obstore reads neither
    ``AWS_PROFILE`` nor the shared files, so after ``aws configure`` (or ``aws sso login``) the
    bare "no credentials found" read as a bug. Names the profile or file, never their contents."""
    profile = os.environ.get("AWS_PROFILE")
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
        os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
    )
    found = [f for f in files if os.path.isfile(os.path.expanduser(f))]
    if not profile and not found:
        return ""
    what = f"AWS_PROFILE={profile}" if profile else found[0]
    choose = f" --profile {profile}" if profile else ""
    return (
        f"; shaledb does not read AWS profiles ({what}): export the profile's keys first, e.g. "
        f'eval "$(aws configure export-credentials{choose} --format env)"'
    )


def _endpoint_path_note(service: CloudService) -> str:
    """A path on the endpoint (``http://host:9000/bucket``) is the likely cause of a bare 404:
    the requests go to ``/bucket/bucket?list-type=2``. Said, not refused: a gateway may serve
    the API under a path."""
    path = urlsplit(service.endpoint or "").path.strip("/")
    if not path:
        return ""
    hint = (
        f"; the endpoint has the path '/{path}': an endpoint is scheme://host:port, the bucket goes "
        f"in the URL ({service.scheme}://BUCKET/prefix)"
    )
    return scrub(hint)


def wrong_region(service: CloudService, named: re.Match[str] | None) -> InvalidArgument:
    """The bucket lives in another region than the requests are signed for: which one to set."""
    signed = f"{service.region!r} as configured" if service.region else "'us-east-1', the default"
    if named is None:
        return InvalidArgument(
            f"{service.where()} is in another region than {signed} (S3 redirected the request): "
            "set AWS_REGION to the bucket's region (or ?region=... in the URL, or the store option region)"
        )
    actual = named.group(1)
    return InvalidArgument(
        f"{service.where()} is in region {actual!r}, not {signed}: set AWS_REGION={actual} "
        f"(or ?region={actual} in the URL, or the store option region)"
    )


def classify(
    exc: BaseException, path: str, description: str, service: CloudService, answered: bool
) -> ShaleError | None:
    """The set-up mistake ``exc`` reports, or ``None`` to keep the usual mapping.

    ``answered``: whether the store has answered any request before; until then
    a connection failure means a wrong endpoint rather than an outage.
    """
    text = str(exc)
    name = type(exc).__name__
    status = http_status(text)
    if is_bucket_missing(text):
        return bucket_missing(service)
    if any(marker in text for marker in _NO_CREDENTIAL):
        return PermissionDenied(
            f"no credentials found for {service.where()} (none configured, and the cloud metadata "
            f"service gave none); {_CREDENTIALS_HINT[service.scheme]}"
            + (aws_profile_note() if service.scheme == "s3" else "")
        )
    expired = status == 400 and any(code in text for code in _CREDENTIAL_400)
    if name in ("PermissionDeniedError", "UnauthenticatedError") or status in (401, 403) or expired:
        return PermissionDenied(
            f"{service.where()} refused access to {path} (HTTP {status or 403}): "
            f"the credentials are missing, wrong or lack permission; {_CREDENTIALS_HINT[service.scheme]}"
        )
    if status == 400 and any(code in text for code in _TRANSIENT_400):
        return None
    wrong_region_400 = status == 400 and any(code in text for code in _WRONG_REGION_400)
    if service.scheme == "s3" and (_BARE_REDIRECT in text or wrong_region_400):
        return wrong_region(service, _REGION_TAG.search(text))
    if status == 404 and _LIST_REQUEST in text:
        # A listing of a missing prefix is an empty 200, and of a missing bucket a 404
        # that says so (handled above): a bare 404 (say, a web server's HTML page) means
        # the endpoint is not this object-store API. Retrying would not change that.
        return InvalidArgument(
            f"{description}: the endpoint answered a listing of {service.where()} with HTTP 404 and "
            "no storage error: it does not look like this object-store API; check the endpoint "
            f"setting ({_ENDPOINT_HINT[service.scheme]}){_endpoint_path_note(service)}"
        )
    if status is None and _BAD_LISTING in text and not answered:
        # The server answered, with a body no object store sends: retrying gets the same page.
        # (Once the store has answered, an unreadable listing -- a body cut short -- is retried.)
        return InvalidArgument(
            f"{description}: the endpoint answered a listing of {service.where()} with a body that "
            "is not an object-store listing: it does not look like this object-store API; check the "
            f"endpoint setting ({_ENDPOINT_HINT[service.scheme]})"
        )
    if status is not None and 400 <= status < 500 and status not in _NOT_SETUP_4XX:
        return InvalidArgument(
            f"{description} rejected the request for {path} (HTTP {status}); check the bucket name, "
            "region, endpoint and options of this store"
        )
    if status is None and not answered and any(marker in text for marker in _TLS):
        return EndpointUnreachable(
            f"cannot reach {service.where()}: the TLS handshake failed (a plain-HTTP service behind an "
            "https:// endpoint, or an untrusted certificate); check the endpoint setting "
            f"({_ENDPOINT_HINT[service.scheme]})"
        )
    if status is None and not answered and any(marker in text for marker in _CONNECT):
        why = "its host name does not resolve" if "dns error" in text else "it refused the connection"
        return EndpointUnreachable(
            f"cannot reach {service.where()}: {why}; check the endpoint setting "
            f"({_ENDPOINT_HINT[service.scheme]}) and that the service is running"
        )
    return None


__all__ = [
    "CloudService",
    "aws_profile_note",
    "bucket_missing",
    "classify",
    "http_status",
    "is_bucket_missing",
    "wrong_region",
]

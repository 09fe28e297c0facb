"""Database URLs to stores.

Accepted forms:

* a plain local path (``./db``, ``~/db``, ``/var/lib/db``) or ``file:///abs/path``;
  the directory is created if needed and resolved to its real path;
* ``memory://NAME[/sub/path]`` -- process-wide, shared by every handle naming it;
* ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``.

Cloud credentials, region and endpoint come from keyword options of
:func:`open_store` or, failing that, from the usual environment variables:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``,
``AWS_ALLOW_HTTP``; ``GOOGLE_SERVICE_ACCOUNT[_KEY|_PATH]``,
``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_ACCOUNT_NAME``,
``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_SAS_TOKEN``, ... (obstore reads
the Google and Azure ones itself). Non-secret settings may also ride in the
URL query (``?endpoint=...&region=...&allow_http=true``); credentials may not,
because URLs end up in logs.

A query option is given once (a repeated one is refused). A plain local path takes no
query: a ``?`` in it is refused rather than made part of the directory's name; use a
``file://`` URL for options, and ``%3F`` (``%23``) there for a ``?`` (``#``) in a name.
No URL takes a ``#`` fragment.

Stores without conditional writes use the two-phase write: pass
``cas="sqlite:///abs/path/cas.db"`` (or add ``?cas=sqlite:///abs/path/cas.db``
to a URL). ``cas="none"`` hides conditional writes, for tests.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import obstore
import obstore.exceptions

from ..errors import InvalidArgument, InvalidPathError
from ..format.paths import check_relative_path
from .base import ObjectStore
from .cloud_options import bulk_deletes, canonical_options, cloud_service, with_backend_defaults
from .local_fs import real_root
from .local_store import LocalObstoreStore
from .obstore_store import ObstoreStore, shared_memory_store
from .scrub import SECRET_ENV, register_secret, scrub
from .twophase import TwoPhaseStore
from .wrappers import NoConditionalStore

_CLOUD_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az"}
_CLOUD_CLASSES: dict[str, Any] = {
    "s3": obstore.store.S3Store,
    "gs": obstore.store.GCSStore,
    "az": obstore.store.AzureStore,
}
_MEMORY_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
# A relative path that starts like a URL whose ':' was left out: "s3//bucket/db".
_SCHEME_WITHOUT_COLON = re.compile(r"(s3a?|gs|gcs|az|azure|memory|file)//", re.IGNORECASE)
_QUERY_KEYS = {"cas", "endpoint", "region", "allow_http"}
_SECRET_HINTS = ("secret", "token", "key", "password", "sas", "credential")

_S3_ENV = {
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
}
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,253}[A-Za-z0-9]|[A-Za-z0-9]")
_CREDENTIALS_GO = (
    "credentials go in environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_SESSION_TOKEN; GOOGLE_APPLICATION_CREDENTIALS; AZURE_STORAGE_ACCOUNT_KEY, ...) or in "
    "store options (store_options={'access_key_id': ..., 'secret_access_key': ...}; with Spark, "
    "options store.access_key_id and store.secret_access_key, or the variables, which local "
    "executors inherit)"
)


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise InvalidArgument(f"expected a boolean (true/false), got {value!r}")


def check_url_text(url: str) -> None:
    """Refuse an empty URL or one with a NUL or control character.

    Such a character can never name an object or a file, and the OS would
    reject it deep inside a path call with a bare ``ValueError``; refusing it
    here gives every entry point (open, clone parents, CLI) one typed error.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgument("database URL must be a non-empty string, e.g. 's3://bucket/db' or './db'")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidPathError("database URL contains a NUL or control character; remove it")


def _clean_prefix(raw: str, url: str) -> str:
    if "\\" in raw:
        raise InvalidPathError(f"use '/' to separate the parts of {scrub(url)!r}, not backslashes")
    prefix = raw.strip("/")
    if prefix:
        try:
            check_relative_path(prefix)
            check_relative_path(unquote(prefix))
        except InvalidPathError:
            raise InvalidPathError(
                f"the path in {scrub(url)!r} must be plain segments without '.', '..', empty parts or "
                "control characters; name the database directly, e.g. s3://bucket/dbs/mydb"
            ) from None
    return unquote(prefix)


def _split_query(query: str, url: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        low = key.lower()
        if any(h in low for h in _SECRET_HINTS):
            raise InvalidArgument(
                f"credentials must not be part of a URL ({key!r}); use environment variables or "
                "keyword options of open_store"
            )
        if low not in _QUERY_KEYS:
            raise InvalidArgument(
                f"unknown URL option {key!r} in {scrub(url.split('?', 1)[0])!r}; known: {sorted(_QUERY_KEYS)}"
            )
        if low in out:
            # Before, the last one silently won: ``?region=a&region=b`` opened region b.
            raise InvalidArgument(
                f"URL option {low!r} is given more than once in {scrub(url.split('?', 1)[0])!r}; give it once"
            )
        out[low] = value
    return out


def _refuse_query_in_path(url: str) -> None:
    """A plain local path holding ``?``: refused, not opened as a directory named with it.

    Before, ``/tmp/db?cas=sqlite:///tmp/cas.db`` opened the directory ``db?cas=...``
    without the two-phase write it asked for, while ``file:///tmp/db?cas=...`` applied
    it: a plain path is taken as written, so options in it were silently part of the
    name. Options go in a ``file://`` URL or in keywords, and a ``?`` that really is
    part of a directory's name is written ``%3F`` in a ``file://`` URL.
    """
    if "?" in url:
        raise InvalidPathError(
            f"the local path {scrub(url)!r} holds a '?': a plain path takes no URL options (they would "
            "become part of the directory's name); give options as keywords (cas=...) or in a file URL "
            "(file:///abs/path?cas=...), and write a '?' of a directory's name as %3F in a file URL"
        )


def _refuse_scheme_without_colon(url: str) -> None:
    """``s3//bucket/db`` (the ':' left out) is refused, not taken as a local path.

    As a plain path it named the directory ``./s3/bucket/db``: a writer created it there
    and reported success, and the user's data never reached the bucket. A local directory
    of that name is still reachable as ``./s3//...`` or an absolute path.
    """
    m = _SCHEME_WITHOUT_COLON.match(url)
    if m is not None:
        scheme = m.group(1)
        raise InvalidPathError(
            f"{scrub(url)!r} lacks the ':' of {scheme}://; write "
            f"{scheme}://{scrub(url[m.end() :])} (for a local directory of that name, write ./{scrub(url)})"
        )


def _refuse_fragment(url: str) -> None:
    """A ``#...`` after a URL was dropped without a word (``file:///tmp/db#x`` opened
    ``/tmp/db``); no store URL has a fragment, so it is refused."""
    if "#" in url:
        raise InvalidPathError(
            f"a database URL has no '#' part: {scrub(url.split('#', 1)[0])!r} was followed by one; "
            "remove it, or write a '#' of a name as %23"
        )


def _refuse_userinfo(scheme: str, netloc: str) -> None:
    """``scheme://user:secret@bucket/...``: refused, and the message does not repeat it.

    A secret holding ``/``, ``?`` or ``#`` (AWS secret keys often hold ``/``) ends the
    URL's authority early: ``s3://AKID:abc/def@bucket/db`` parses as the host ``AKID:abc``
    with no ``@`` in it. No bucket, container or memory name has a ``:``, so one in the
    authority is refused the same way, without repeating it (it is part of a secret or a
    port no store URL takes).
    """
    if not scheme or len(scheme) == 1:
        return
    if "@" in netloc:
        host = netloc.rpartition("@")[2]
        raise InvalidArgument(
            f"a database URL must not carry credentials ({scheme}://<redacted>@{host}/...): "
            f"remove the part before '@'; {_CREDENTIALS_GO}"
        )
    if ":" in netloc:
        raise InvalidArgument(
            f"a database URL must not carry credentials or a port ({scheme}://<redacted>/...): "
            f"name the bucket alone, e.g. {scheme}://BUCKET/prefix; {_CREDENTIALS_GO}"
        )


def _check_bucket(scheme: str, bucket: str) -> None:
    """Bucket and container names are plain (S3, GCS and Azure all forbid spaces and the
    like); a bad one is the caller's mistake, not a store failure to retry."""
    if not _BUCKET.fullmatch(bucket):
        raise InvalidArgument(
            f"invalid {scheme} bucket name {bucket!r}: use letters, digits, '.', '-' and '_', "
            "starting and ending with a letter or digit (at most 255 characters)"
        )


def store_options_dict(store_options: Any) -> dict[str, Any]:
    """``store_options`` (a mapping of option names, or None) as a dict for ``open_store(url, **...)``.

    Anything else is the caller's mistake: ``dict("x")`` raised a bare ValueError and
    ``**{1: ...}`` a TypeError.
    """
    if store_options is None:
        return {}
    if not isinstance(store_options, Mapping) or not all(isinstance(k, str) for k in store_options):
        raise InvalidArgument(
            f"store_options must be a dict of option names to values, got {type(store_options).__name__}"
        )
    return dict(store_options)


def open_store(url: str | os.PathLike[str], *, cas: str | None = None, **options: Any) -> ObjectStore:
    """Open the store rooted at ``url``.

    ``cas`` selects how create-if-absent works: ``None``/``"native"`` uses the
    backend's conditional writes, ``"sqlite://PATH"`` the two-phase write with
    its records in that SQLite file, ``"none"`` hides conditional writes.
    Other ``options`` configure cloud backends (``endpoint``, ``region``,
    ``access_key_id``, ``secret_access_key``, ``session_token``,
    ``allow_http``, ``client_options``, and any obstore config key).

    Raises:
        InvalidArgument: malformed URL or options (the message says what to change).
        InvalidPathError: the URL's path escapes or is malformed.
    """
    url = os.fspath(url) if isinstance(url, os.PathLike) else url  # pathlib.Path works as a URL
    check_url_text(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    _refuse_userinfo(scheme, parts.netloc)
    query: dict[str, str] = {}
    if not scheme or len(scheme) == 1:  # a plain path (len 1: a Windows drive letter)
        _refuse_query_in_path(url)
        _refuse_scheme_without_colon(url)
    else:
        query = _split_query(parts.query, url)
        _refuse_fragment(url)
    if "cas" in query:
        if cas is not None and cas != query["cas"]:
            raise InvalidArgument("cas given both in the URL and as an option; give it once")
        cas = query.pop("cas")
    if scheme in ("", "file") or len(scheme) == 1:  # len 1: a Windows drive letter
        if options:
            raise InvalidArgument(f"local directories take no options, got {sorted(options)}")
        if query:
            raise InvalidArgument(f"local directories take no URL options, got {sorted(query)}")
        store: ObjectStore = _open_local(url, parts.netloc, parts.path, scheme)
    elif scheme == "memory":
        if options or query:
            raise InvalidArgument("memory stores take no options")
        store = _open_memory(url, parts.netloc, parts.path)
    elif scheme in _CLOUD_SCHEMES:
        store = _open_cloud(url, _CLOUD_SCHEMES[scheme], parts.netloc, parts.path, {**query, **options})
    else:
        raise InvalidArgument(
            f"unsupported URL scheme {scheme!r}: use a local path, file://, memory://, s3://, gs:// or az://"
        )
    return _with_cas(store, cas)


def _with_cas(store: ObjectStore, cas: str | None) -> ObjectStore:
    if cas is None or cas == "native":
        return store
    if cas == "none":
        return NoConditionalStore(store)
    if cas.startswith("sqlite://"):
        path = cas[len("sqlite://") :]
        if not path:
            raise InvalidArgument(
                "cas='sqlite://PATH' needs a file path, e.g. sqlite:///var/lib/shaledb/cas.db"
            )
        return TwoPhaseStore(store, os.path.expanduser(path))
    raise InvalidArgument(f"cas must be 'native', 'none' or 'sqlite://PATH', got {cas!r}")


def _open_local(url: str, netloc: str, path: str, scheme: str) -> ObjectStore:
    if scheme == "file":
        if netloc not in ("", "localhost"):
            raise InvalidPathError(f"a file URL must not name a host: {scrub(url)!r}; use file:///abs/path")
        raw = unquote(path)
    else:
        raw = url
    if not raw:
        raise InvalidArgument(f"{scrub(url)!r} names no directory")
    directory = os.path.abspath(os.path.expanduser(raw))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise InvalidArgument(f"{directory} exists and is not a directory; a database needs a directory")
    real = real_root(directory)
    return LocalObstoreStore(real, description=f"file://{real}")


def _open_memory(url: str, netloc: str, path: str) -> ObjectStore:
    if not _MEMORY_NAME.fullmatch(netloc or ""):
        raise InvalidArgument(
            f"memory URL needs a name of letters, digits, '.', '_', '-': memory://NAME, got {scrub(url)!r}"
        )
    prefix = _clean_prefix(path, url)
    desc = f"memory://{netloc}/{prefix}" if prefix else f"memory://{netloc}"
    return ObstoreStore(shared_memory_store(netloc), root=prefix, description=desc, attributes=True)


def _is_secret_key(key: str) -> bool:
    return any(h in key.lower() for h in _SECRET_HINTS)


def _secret_values(options: Mapping[str, Any]) -> list[str]:
    found = [
        v for k, v in options.items() if isinstance(v, str) and any(h in k.lower() for h in _SECRET_HINTS)
    ]
    found += [os.environ[name] for name in SECRET_ENV if os.environ.get(name)]
    return [s for s in found if len(s) >= 4]


_ALLOW_HTTP_ENV = {"s3": "AWS_ALLOW_HTTP", "az": "AZURE_ALLOW_HTTP"}


def _refuse_plain_http(
    scheme: str,
    endpoint: str | None,
    client_options: Mapping[str, Any],
    kwargs: Mapping[str, Any],
    secrets: list[str],
) -> None:
    """An ``http://`` endpoint without ``allow_http`` is refused at open, naming the fix.

    Why an error and not an implied ``allow_http``: a plain-HTTP endpoint sends
    every request and its signature unencrypted, so it must be asked for; but
    the backend (obstore's HTTP client) only says "builder error" on the first
    request, which reads like an outage. Checking here gives the typed error at
    once. GCS is left out: its client accepts an ``http://`` base URL itself.
    """
    env = _ALLOW_HTTP_ENV.get(scheme)
    if env is None or not endpoint or not endpoint.lower().startswith("http://"):
        return
    allowed = client_options["allow_http"] if "allow_http" in client_options else os.environ.get(env, "")
    if _truthy(allowed):
        return
    if scheme == "az" and _truthy(
        kwargs.get("use_emulator") or os.environ.get("AZURE_STORAGE_USE_EMULATOR") or ""
    ):
        return  # the emulator flag allows HTTP itself
    raise InvalidArgument(
        f"the endpoint {scrub(endpoint, secrets)!r} is plain HTTP: set allow_http=True (store option, or "
        f"?allow_http=true in the URL, or {env}=true in the environment) to allow unencrypted requests, "
        "or use an https:// endpoint"
    )


def _refuse_schemeless_endpoint(scheme: str, endpoint: Any, secrets: list[str]) -> None:
    """An S3 or Azure endpoint must be an ``http://`` or ``https://`` URL.

    Why here: given ``127.0.0.1:9000`` the backend panics while signing every
    request (a Rust backtrace per retry) and the open ends seconds later as
    "unreachable, retry later"; the mistake is the caller's, so say it at once.
    """
    if scheme not in ("s3", "az") or not isinstance(endpoint, str) or not endpoint:
        return
    try:
        netloc = urlsplit(endpoint).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket, "http://[::1"
        netloc = ""
    if not endpoint.lower().startswith(("http://", "https://")) or not netloc:
        raise InvalidArgument(
            f"the endpoint {scrub(endpoint, secrets)!r} is not a URL: give it with its scheme, "
            "e.g. https://host:port (or http://host:port with allow_http)"
        )


def _open_cloud(url: str, scheme: str, bucket: str, path: str, options: dict[str, Any]) -> ObjectStore:
    if not bucket:
        raise InvalidArgument(f"{scheme} URL needs a bucket: {scheme}://BUCKET/prefix, got {scrub(url)!r}")
    _check_bucket(scheme, bucket)
    prefix = _clean_prefix(path, url)
    kwargs: dict[str, Any] = dict(options)
    raw_client_options = kwargs.pop("client_options", None) or {}
    if not isinstance(raw_client_options, Mapping):
        raise InvalidArgument(
            f"store option client_options must be a dict, got {type(raw_client_options).__name__}"
        )
    client_options: dict[str, Any] = dict(raw_client_options)
    if "allow_http" in kwargs:
        client_options["allow_http"] = _truthy(kwargs.pop("allow_http"))
    kwargs = canonical_options(scheme, kwargs)
    if scheme == "s3":
        for key, names in _S3_ENV.items():
            if key not in kwargs:
                value = next((os.environ[n] for n in names if os.environ.get(n)), None)
                if value:
                    kwargs[key] = value
        if "allow_http" not in client_options and os.environ.get("AWS_ALLOW_HTTP"):
            client_options["allow_http"] = _truthy(os.environ["AWS_ALLOW_HTTP"])
        if "endpoint" in kwargs:
            kwargs.setdefault("virtual_hosted_style_request", False)
            kwargs.setdefault("region", "us-east-1")  # custom endpoints rarely care, but signing needs one
        if "virtual_hosted_style_request" in kwargs:
            kwargs["virtual_hosted_style_request"] = _truthy(kwargs["virtual_hosted_style_request"])
    secrets = _secret_values(kwargs)
    register_secret(*secrets)
    base = f"{scheme}://{bucket}"
    cls: Any = {"s3": obstore.store.S3Store, "gs": obstore.store.GCSStore, "az": obstore.store.AzureStore}[
        scheme
    ]
    service = cloud_service(scheme, bucket, kwargs)
    if "timeout" in client_options:
        service = replace(service, request_timeout=str(client_options["timeout"]))
    _refuse_schemeless_endpoint(scheme, kwargs.get("endpoint"), secrets)
    _refuse_plain_http(scheme, service.endpoint, client_options, kwargs, secrets)
    kwargs = with_backend_defaults(kwargs)
    failure = None
    try:
        inner = cls(bucket, prefix=prefix or None, client_options=client_options or None, **kwargs)
    except (ValueError, TypeError, obstore.exceptions.BaseError) as exc:
        failure = scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, secrets)
    if failure is not None:  # raised outside the handler: no chained error carries the secret
        raise InvalidArgument(f"cannot open {base}: {failure}")
    return ObstoreStore(
        inner,
        description=f"{base}/{prefix}" if prefix else base,
        attributes=True,
        secrets=secrets,
        service=service,
        bulk_delete=bulk_deletes(scheme, kwargs),
    )

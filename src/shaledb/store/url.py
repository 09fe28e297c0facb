"""Database URLs to stores.

Accepted forms:

* a plain local path (``./db``, ``/var/lib/db``) or ``file:///abs/path``
* ``memory://NAME[/sub/path]`` -- process-wide, shared by every handle naming it
* ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix`` --
  credentials, region and endpoint from the usual environment variables
  (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``GOOGLE_SERVICE_ACCOUNT``,
  ``AZURE_STORAGE_ACCOUNT_NAME``, ...) or from ``options``.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

import obstore

from ..errors import InvalidArgument, InvalidPathError
from ..paths import check_relative_path
from .base import ObjectStore
from .obstore_store import ObstoreStore, shared_memory_store

_CLOUD_SCHEMES = {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss"}


def _clean_prefix(raw: str) -> str:
    prefix = unquote(raw).strip("/")
    if prefix:
        check_relative_path(prefix)
    return prefix


def _env_s3_options() -> dict[str, Any]:
    opts: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        opts["endpoint"] = endpoint
        if endpoint.startswith("http://"):
            opts["allow_http"] = True
    return opts


def open_store(url: str, **options: Any) -> ObjectStore:
    """Open the store rooted at ``url``; ``options`` go to the backend."""
    if not isinstance(url, str) or not url:
        raise InvalidArgument("database URL must be a non-empty string")
    if "\x00" in url:
        raise InvalidPathError("database URL contains a NUL character")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(parts.path) if scheme == "file" else url
        if scheme == "file" and parts.netloc not in ("", "localhost"):
            raise InvalidPathError(f"file URL must not name a host: {url!r}")
        abspath = os.path.abspath(path)
        os.makedirs(abspath, exist_ok=True)
        inner = obstore.store.LocalStore(prefix=abspath, mkdir=True)
        return ObstoreStore(inner, description=f"file://{abspath}", sort_listings=True)
    if scheme == "memory":
        name = parts.netloc
        if not name:
            raise InvalidArgument("memory URL needs a name: memory://NAME")
        prefix = _clean_prefix(parts.path)
        return ObstoreStore(
            shared_memory_store(name),
            root=prefix,
            description=f"memory://{name}/{prefix}",
            attributes=True,
        )
    if scheme in _CLOUD_SCHEMES:
        bucket = parts.netloc
        if not bucket:
            raise InvalidArgument(f"{scheme} URL needs a bucket: {scheme}://BUCKET/prefix")
        prefix = _clean_prefix(parts.path)
        base = f"{scheme}://{bucket}"
        kwargs: dict[str, Any] = dict(options)
        client_options: dict[str, Any] = dict(kwargs.pop("client_options", {}) or {})
        if scheme in ("s3", "s3a"):
            env = _env_s3_options()
            if env.pop("allow_http", False):
                client_options.setdefault("allow_http", True)
            for k, v in env.items():
                kwargs.setdefault(k, v)
            kwargs.setdefault("virtual_hosted_style_request", False)
            if "endpoint" in kwargs and not os.environ.get("AWS_REGION") and "region" not in kwargs:
                kwargs["region"] = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        try:
            inner = obstore.store.from_url(
                base, prefix=prefix or None, client_options=client_options or None, **kwargs
            )
        except Exception as exc:
            raise InvalidArgument(f"cannot open {scheme}://{bucket}: {exc}") from exc
        return ObstoreStore(
            inner,
            description=f"{base}/{prefix}",
            attributes=scheme in ("s3", "s3a", "gs", "gcs"),
        )
    raise InvalidArgument(
        f"unsupported URL scheme {scheme!r}: use a local path, file://, memory://, s3://, gs:// or az://"
    )

"""Backend options shaledb sets on the cloud stores it opens (S3, GCS, Azure).

* obstore's own retries are turned off (``max_retries=0``) unless the caller
  passes ``retry_config``: :class:`~.retrying.RetryingStore` retries instead,
  so only transient failures are retried, each retry is logged, and a set-up
  mistake (:mod:`.http_errors`) is reported on the first response instead of
  after ten silent attempts.
* :func:`cloud_service` says which bucket and endpoint the error messages name.
* :func:`bulk_deletes` turns bulk deletes off on the Azurite emulator. obstore
  sends every Azure delete, even of one blob, through the blob batch endpoint;
  Azurite spends 75-200 ms on each sub-request (a 256-blob batch took 20 s)
  and now and then resets the connection after a long batch, which fails the
  whole batch. One-blob batches, eight at a time, keep each request short and
  a reset costs one retried blob. Real Azure runs batches of 256 in one request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .http_errors import CloudService

NO_BACKEND_RETRIES: dict[str, Any] = {"max_retries": 0}


def with_backend_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` for an obstore cloud store, with shaledb's defaults added."""
    out = dict(kwargs)
    out.setdefault("retry_config", dict(NO_BACKEND_RETRIES))
    return out


AZURITE_ACCOUNT = "devstoreaccount1"  # the emulator's fixed development account


def bulk_deletes(scheme: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``delete_many`` may use the service's bulk delete (False on Azurite)."""
    if scheme != "az":
        return True
    account = kwargs.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    emulator = str(kwargs.get("use_emulator") or os.environ.get("AZURE_STORAGE_USE_EMULATOR") or "")
    return account != AZURITE_ACCOUNT and emulator.lower() not in ("1", "true")


def _gcs_base_url(kwargs: Mapping[str, Any]) -> str | None:
    key = kwargs.get("service_account_key") or os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY")
    if not isinstance(key, str):
        return None
    try:
        url = json.loads(key).get("gcs_base_url")
    except (ValueError, AttributeError):
        return None
    return url if isinstance(url, str) else None


def cloud_service(scheme: str, bucket: str, kwargs: Mapping[str, Any]) -> CloudService:
    """The bucket and endpoint a cloud store's error messages name."""
    endpoint: Any
    if scheme == "gs":
        endpoint = kwargs.get("base_url") or os.environ.get("GOOGLE_BASE_URL") or _gcs_base_url(kwargs)
    elif scheme == "az":
        endpoint = kwargs.get("endpoint") or os.environ.get("AZURE_STORAGE_ENDPOINT")
        if endpoint is None and str(kwargs.get("use_emulator", "")).lower() in ("1", "true"):
            endpoint = "the Azurite emulator (http://127.0.0.1:10000)"
    else:
        endpoint = kwargs.get("endpoint")
    region = kwargs.get("region") if scheme == "s3" else None
    return CloudService(scheme, bucket, str(endpoint) if endpoint else None, str(region) if region else None)


__all__ = ["AZURITE_ACCOUNT", "NO_BACKEND_RETRIES", "bulk_deletes", "cloud_service", "with_backend_defaults"]

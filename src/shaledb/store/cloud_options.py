"""Backend options shaledb sets on the cloud stores it opens (S3, GCS, Azure).

* obstore's own retries are turned off (``max_retries=0``) unless the caller
  passes ``retry_config``: :class:`~.retrying.RetryingStore` retries instead,
  so only transient failures are retried, each retry is logged, and a set-up
  mistake (:mod:`.http_errors`) is reported on the first response instead of
  after ten silent attempts.
* :func:`canonical_options` maps obstore's other names of an option (boto3's
  ``endpoint_url``, ``azure_storage_endpoint``, ``google_base_url``) to the one
  name shaledb reads, and refuses an option given under two names.
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

from ..errors import InvalidArgument
from .http_errors import CloudService

NO_BACKEND_RETRIES: dict[str, Any] = {"max_retries": 0}


def with_backend_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` for an obstore cloud store, with shaledb's defaults added."""
    out = dict(kwargs)
    out.setdefault("retry_config", dict(NO_BACKEND_RETRIES))
    return out


_ALIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "s3": {
        "access_key_id": ("aws_access_key_id",),
        "secret_access_key": ("aws_secret_access_key",),
        "session_token": ("aws_session_token", "aws_token", "token"),
        "region": ("aws_region", "aws_default_region", "default_region"),
        "endpoint": ("aws_endpoint", "aws_endpoint_url", "endpoint_url"),
    },
    "gs": {
        "base_url": ("google_base_url",),
        "service_account_key": ("google_service_account_key",),
        "service_account": ("google_service_account", "service_account_path", "google_service_account_path"),
        "application_credentials": ("google_application_credentials",),
        "bearer_token": ("google_bearer_token",),
        "skip_signature": ("google_skip_signature",),
    },
    "az": {
        "account_name": ("azure_storage_account_name",),
        "account_key": (
            "azure_storage_account_key",
            "azure_storage_access_key",
            "azure_storage_master_key",
            "access_key",
            "master_key",
        ),
        "client_id": ("azure_storage_client_id", "azure_client_id"),
        "client_secret": ("azure_storage_client_secret", "azure_client_secret"),
        "tenant_id": (
            "azure_storage_tenant_id",
            "azure_storage_authority_id",
            "azure_tenant_id",
            "azure_authority_id",
            "authority_id",
        ),
        "authority_host": ("azure_storage_authority_host", "azure_authority_host"),
        "sas_key": ("azure_storage_sas_key", "azure_storage_sas_token", "sas_token"),
        "token": ("azure_storage_token", "bearer_token"),
        "use_emulator": ("azure_storage_use_emulator",),
        "endpoint": ("azure_storage_endpoint", "azure_endpoint"),
        "msi_endpoint": ("azure_msi_endpoint", "azure_identity_endpoint", "identity_endpoint"),
        "object_id": ("azure_object_id",),
        "msi_resource_id": ("azure_msi_resource_id",),
        "federated_token_file": ("azure_federated_token_file",),
        "use_azure_cli": ("azure_use_azure_cli",),
        "use_fabric_endpoint": ("azure_use_fabric_endpoint",),
        "skip_signature": ("azure_skip_signature",),
        "disable_tagging": ("azure_disable_tagging",),
    },
}
"""The other names obstore takes (in any case) for a store option, by scheme: each group is one
key to obstore (given two of a group, it refuses "Duplicate key ..."), checked against obstore's
``S3Config`` / ``GCSConfig`` / ``AzureConfig`` and its parsers of those keys."""
_CANONICAL = {
    scheme: {alias: name for name, aliases in table.items() for alias in (name, *aliases)}
    for scheme, table in _ALIASES.items()
}


def canonical_options(scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """A cloud store's options under their one name here (S3: boto3's ``endpoint_url`` ->
    ``endpoint``; GCS: ``google_base_url`` -> ``base_url``; Azure: ``azure_storage_endpoint`` ->
    ``endpoint``, ``azure_storage_account_key`` -> ``account_key``; any case).

    Why: shaledb reads some options itself and only by the canonical name: it checks an S3 or
    Azure endpoint (plain HTTP, a scheme), names the endpoint in errors (S3 ``endpoint``, GCS
    ``base_url``, Azure ``endpoint``) and turns bulk deletes off on Azurite (``account_name``,
    ``use_emulator``). Given under another name, the endpoint skipped those checks (6-7 s of
    retries, then "unreachable") and errors named the default service; two names for one
    option failed at obstore with "Duplicate key ..." not saying which names were given. One
    option under two names is refused here, naming the names only (the values may be secrets).
    """
    table = _CANONICAL.get(scheme, {})
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in options.items():
        name = table.get(key.lower(), key)
        if name in given_as:
            raise InvalidArgument(
                f"store option {name!r} is given twice, as {given_as[name]!r} and {key!r}; give it once"
            )
        given_as[name] = key
        out[name] = value
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


__all__ = [
    "AZURITE_ACCOUNT",
    "NO_BACKEND_RETRIES",
    "bulk_deletes",
    "canonical_options",
    "cloud_service",
    "with_backend_defaults",
]

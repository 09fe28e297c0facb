"""The store stack every role opens: retries (resolving ambiguous creates) over accounting.

With ``Settings.disk_cache_dir`` the host-local disk cache sits between them
(``shaledb.store.disk_cache``): a hit makes no request, a miss is counted as
the GET it makes, and a failed miss is retried like any read.

One place decides how a URL (or an already open store) becomes the store a
writer, reader, compactor, garbage collector, ingest or admin call talks to,
so they all retry and count requests the same way.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
from typing import Any

from ..clock import Clock
from ..errors import InvalidArgument
from ..settings import Settings
from .base import ObjectStore
from .retrying import RetryingStore
from .url import open_store, store_options_dict
from .wrappers import InstrumentedStore

log = logging.getLogger(__name__)


def wrap_store(store: ObjectStore, settings: Settings, clock: Clock, rng: random.Random) -> RetryingStore:
    """``store`` under retries and accounting (a store already wrapped is returned as is)."""
    if isinstance(store, RetryingStore):
        return store
    from .metrics import TimedStore

    timed = TimedStore(store)
    counted: ObjectStore = InstrumentedStore(timed)
    if settings.disk_cache_dir is not None:
        from .disk_cache import DiskCachedStore, acquire

        counted = DiskCachedStore(counted, acquire(settings.disk_cache_dir, settings.disk_cache_bytes))
    return RetryingStore(counted, settings.retry, clock, random.Random(rng.getrandbits(64)))


def close_quietly(*resources: Any) -> None:
    """Close each of ``resources`` (None is skipped): a handle releasing what it opened.

    A failure to close one is logged and the others are still closed, so a
    handle's ``close`` (or a failed open cleaning up) always finishes.
    """
    for r in resources:
        if r is None:
            continue
        try:
            r.close()
        except Exception as exc:  # noqa: BLE001 - releasing must not stop half-way
            log.warning("could not close %r: %s", r, exc)


def open_stack(
    url: str | os.PathLike[str] | None,
    store: ObjectStore | None,
    store_options: Mapping[str, Any] | None,
    settings: Settings,
    clock: Clock,
    rng: random.Random,
) -> RetryingStore:
    """The wrapped store of ``url``, or of ``store`` when one is given."""
    if store is None:
        if url is None:
            raise InvalidArgument("give a database URL or a store")
        store = open_store(url, **store_options_dict(store_options))
    return wrap_store(store, settings, clock, rng)


__all__ = ["close_quietly", "open_stack", "wrap_store"]

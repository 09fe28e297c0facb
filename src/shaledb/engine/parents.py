"""SST path resolution across clone parents (see docs/design/checkpoints-readers-clones.md).

A clone's manifest references SSTs (and journal files) that live in other
databases: its parent, its parent's parent, and so on. ``SstInfo.db`` says
where each one lives: 0 is this database, ``i > 0`` is
``Manifest.external_dbs[i - 1]``. The list is *flattened* when a clone is
created (the parent's own external databases are inherited, the parent is
added), so resolving an SST never walks a chain of manifests at read time:
one index, one store.

Indexes are stable for the life of a database: entries are only ever added
when a clone is created, and only removed all at once when the clone is
detached (by then no SST refers to any of them). :class:`ExternalStores`
therefore caches ``index -> store`` for good, which also keeps in-flight reads
of an older view working while the manifest changes under them.

Every URL is validated before it is opened: it must parse as a store URL,
must not be the database's own URL (a cycle), must not repeat, and the list
is bounded (:data:`MAX_EXTERNAL_DBS`).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..clock import Clock
from ..errors import CorruptionError, InvalidArgument
from ..manifest.model import Manifest
from ..settings import RetryOptions
from ..store.base import ObjectStore
from ..store.local_fs import real_root
from ..store.retrying import RetryingStore
from ..store.roots import check_disjoint
from ..store.url import check_url_text, open_store, store_options_dict
from ..store.wrappers import InstrumentedStore

log = logging.getLogger(__name__)

MAX_EXTERNAL_DBS = 32
"""Longest chain of clone ancestors a database may reference."""

StoreFactory = Callable[[str], ObjectStore]
"""Opens the store of a database URL (parents of clones are opened by URL)."""


def canonical_url(url: str) -> str:
    """The form of a database URL recorded in manifests.

    Local paths become absolute ``file://`` URLs (a relative path would mean
    something else from another working directory); other URLs are kept as
    given, minus a trailing slash.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise InvalidArgument("a database URL must be a non-empty string or os.PathLike")
    check_url_text(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "" or len(scheme) == 1:
        return "file://" + real_root(os.path.abspath(os.path.expanduser(url)))
    if scheme == "file":
        return "file://" + real_root(parts.path or "/")
    return url.rstrip("/")


def same_database(a: str, b: str) -> bool:
    return canonical_url(a) == canonical_url(b)


def check_external_urls(own_url: str | None, urls: list[str]) -> None:
    """Refuse cycles, repeats and over-long chains (see module docstring)."""
    if len(urls) > MAX_EXTERNAL_DBS:
        raise InvalidArgument(
            f"a clone may reference at most {MAX_EXTERNAL_DBS} ancestor databases, this one needs {len(urls)}"
        )
    seen: set[str] = set()
    own = canonical_url(own_url) if own_url else None
    for u in urls:
        c = canonical_url(u)
        if own is not None and c == own:
            raise InvalidArgument(f"database {own_url} cannot be a clone of itself (directly or via {u})")
        if c in seen:
            raise InvalidArgument(f"database {u} appears twice among the ancestors of a clone")
        seen.add(c)
        if own_url is not None:
            check_disjoint(own_url, u, "ancestor")


def default_factory(
    retry: RetryOptions,
    clock: Clock,
    rng: random.Random,
    store_options: Mapping[str, Any] | None,
    *,
    disk_cache_dir: str | None = None,
    disk_cache_bytes: int = 0,
) -> StoreFactory:
    """Open a URL with ``open_store`` and the usual retrying, accounted stack.

    ``disk_cache_dir``, ``disk_cache_bytes``: the handle's (``Settings`` or
    ``DbReaderOptions``); with a directory the ancestors' SSTs and journal objects are read through
    the host's disk cache like the database's own (keys carry each store's URL).
    Without it a clone read its parent's SSTs -- all of a new clone's data --
    from the store on every block-cache miss, warm cache or not.
    """
    opts = store_options_dict(store_options)

    def open_url(url: str) -> ObjectStore:
        scheme = urlsplit(url).scheme.lower()
        kwargs = opts if scheme not in ("", "file", "memory") else {}
        counted: ObjectStore = InstrumentedStore(open_store(url, **kwargs))
        if disk_cache_dir is not None:
            from ..store.disk_cache import DiskCachedStore, acquire

            counted = DiskCachedStore(counted, acquire(disk_cache_dir, disk_cache_bytes))
        return RetryingStore(counted, retry, clock, random.Random(rng.getrandbits(64)))

    return open_url


class StoreSettings(Protocol):
    """What the ancestors' store stack takes from a handle's settings (``Settings``,
    ``DbReaderOptions``)."""

    @property
    def retry(self) -> RetryOptions: ...
    @property
    def disk_cache_dir(self) -> str | None: ...
    @property
    def disk_cache_bytes(self) -> int: ...


def settings_factory(
    settings: StoreSettings, clock: Clock, store_options: Mapping[str, Any] | None
) -> StoreFactory:
    """:func:`default_factory` with a handle's retries and disk cache."""
    return default_factory(
        settings.retry,
        clock,
        random.Random(),
        store_options,
        disk_cache_dir=settings.disk_cache_dir,
        disk_cache_bytes=settings.disk_cache_bytes,
    )


class ExternalStores:
    """Stores of the databases a clone references, opened once each. Thread-safe.

    ``preset`` maps URLs to stores already open (a caller that passed
    ``parent_store=``); anything else is opened with ``factory``. :meth:`close`
    closes the stores opened here (not the preset ones: they stay the
    caller's), unless ``owns_opened`` is False (a caller's factory may hand
    out stores it shares).
    """

    def __init__(
        self,
        factory: StoreFactory,
        *,
        own_url: str | None = None,
        preset: Mapping[str, ObjectStore] | None = None,
        owns_opened: bool = True,
    ) -> None:
        self._factory = factory
        self._owns_opened = owns_opened
        self._opened: list[ObjectStore] = []
        self._own = canonical_url(own_url) if own_url else None
        self._lock = threading.Lock()
        self._by_url: dict[str, ObjectStore] = {canonical_url(u): s for u, s in (preset or {}).items()}
        self._by_index: dict[int, ObjectStore] = {}

    @property
    def own_url(self) -> str | None:
        """The canonical URL of the database these are the ancestors of (None: unknown)."""
        return self._own

    def open_url(self, url: str) -> ObjectStore:
        """The store of database ``url`` (opened on first use)."""
        key = canonical_url(url)
        with self._lock:
            s = self._by_url.get(key)
        if s is not None:
            return s
        if self._own is not None and key == self._own:
            raise CorruptionError(f"manifest lists this database ({url}) as its own ancestor")
        store = self._factory(url)
        with self._lock:
            kept = self._by_url.setdefault(key, store)
            if kept is store:
                self._opened.append(store)
        if kept is not store and self._owns_opened:
            store.close()  # another thread opened it first
        return kept

    def close(self) -> None:
        """Close the stores this object opened (see class docstring); idempotent."""
        with self._lock:
            opened, self._opened = self._opened, []
            for key in [k for k, s in self._by_url.items() if any(s is o for o in opened)]:
                del self._by_url[key]
            self._by_index = {i: s for i, s in self._by_index.items() if not any(s is o for o in opened)}
        if self._owns_opened:
            for store in opened:
                try:
                    store.close()
                except Exception as exc:  # noqa: BLE001 - close the others regardless
                    log.warning("could not close %s: %s", store.describe(), exc)

    def store_for(self, index: int, manifest: Manifest) -> ObjectStore:
        """The store owning objects with ``db == index`` (index > 0) in ``manifest``."""
        with self._lock:
            s = self._by_index.get(index)
        if s is not None:
            return s
        if not 0 < index <= len(manifest.external_dbs):
            raise CorruptionError(
                f"an SST refers to external database #{index}, but manifest {manifest.id} "
                f"lists {len(manifest.external_dbs)}"
            )
        if len(manifest.external_dbs) > MAX_EXTERNAL_DBS:
            raise CorruptionError(f"manifest {manifest.id} lists more than {MAX_EXTERNAL_DBS} ancestors")
        store = self.open_url(manifest.external_dbs[index - 1].url)
        with self._lock:
            return self._by_index.setdefault(index, store)


__all__ = [
    "MAX_EXTERNAL_DBS",
    "ExternalStores",
    "StoreFactory",
    "canonical_url",
    "check_external_urls",
    "StoreSettings",
    "default_factory",
    "same_database",
    "settings_factory",
]

"""Before a new database is created: its root must not nest with another database's.

:mod:`.roots` refuses nesting where two roots are named together (a clone and
its ancestors, a backup and its source). A plain ``Db.open(url)`` names only
one root, so the other database has to be looked for in the store: an
existing database whose root contains the new one (``url`` lies in its
``tmp/`` folder, say) would have its garbage collector delete the new
database's objects as stale temporaries, and a new database around an
existing one would do the same to it.

The check runs only when a database is *created* (no manifest at its root
yet): that is the only moment a nesting can come about -- an existing
database was checked when it was created, and a database created later
around or inside it is refused then. Opening an existing database therefore
costs nothing extra. Creating one costs, on an object store:

* one listing of the new root (one request when it is empty, as a new root
  usually is), looking for ``<sub>/manifest/<id>.manifest`` below it;
* one listing of ``<ancestor>/manifest/`` per folder above the root, up to
  the bucket (``s3://bucket/team/db``: two requests, for ``team/`` and the
  bucket's top).

On a local directory the same questions are directory reads; in a memory
store they are in-process listings. Without a URL, or with a store passed in
and no store options, the ancestors of a cloud store cannot be reached with
the right credentials (the store's own are not ours to reuse for another
prefix, and the defaults may be none or another account's), so only the first
check runs (local and memory stores are reached through their description).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..clock import Clock
from ..errors import InvalidArgument
from ..format.paths import MANIFEST_DIR, OWN_DIRS, is_own, parse_manifest_id
from ..settings import Settings
from .base import ObjectStore
from .roots import foreign_roots, root_key

_CLOUD_KINDS = ("s3", "gs", "az")
log = logging.getLogger("shaledb.store")


def _refuse(url: str, where: str, other: str) -> InvalidArgument:
    return InvalidArgument(
        f"database {url} {where} database {other}: database roots must not nest (the garbage "
        "collector of the outer one would delete the inner one's objects as its own); choose a "
        "location outside it"
    )


def check_new_root(
    url: str | None,
    store: ObjectStore,
    store_options: Mapping[str, Any] | None,
    settings: Settings,
    clock: Clock,
    *,
    ancestors_reachable: bool = True,
) -> None:
    """InvalidArgument if the database about to be created in ``store`` (at ``url``, if
    known) contains another database's root or lies inside one (see module docstring).

    ``ancestors_reachable`` False: ``store`` was passed in by the caller and no
    ``store_options`` say how to reach the folders above it, so a cloud store's
    ancestors are not listed (see module docstring)."""
    name = url or store.describe()
    others = 0
    named: list[str] = []  # the first few, for the warning
    for meta in store.list(""):
        inner = foreign_roots([meta.path])
        if inner:
            sub = next(iter(inner)).rstrip("/")
            raise _refuse(name, "contains the root of", f"{name.rstrip('/')}/{sub}")
        if not is_own(meta.path):
            others += 1
            if len(named) < 3:
                named.append(repr(meta.path))
    if others:
        log.warning(
            "creating database %s in a location that already holds %d other object(s) (%s%s): the "
            "database writes and deletes only in its own folders (%s), so they stay as they are, "
            "destroying it included",
            name,
            others,
            ", ".join(named),
            ", ..." if others > 3 else "",
            " ".join(OWN_DIRS),
        )
    key = root_key(url or store.describe())
    if key is None:
        return
    kind, _bucket, segments = key
    if kind == "file":
        _check_local_ancestors(name, segments)
    elif kind == "memory" or (kind in _CLOUD_KINDS and url is not None and ancestors_reachable):
        _check_store_ancestors(name, url or store.describe(), kind, segments, store_options, settings, clock)


def _check_local_ancestors(name: str, segments: tuple[str, ...]) -> None:
    for i in range(len(segments)):
        folder = os.sep + os.sep.join(segments[:i])
        try:
            entries = os.listdir(os.path.join(folder, MANIFEST_DIR))
        except OSError:  # no manifest folder there (or not readable: not a database we can see)
            continue
        if any(parse_manifest_id(MANIFEST_DIR + e) is not None for e in entries):
            raise _refuse(name, "lies inside the root of", folder)


def _check_store_ancestors(
    name: str,
    url: str,
    kind: str,
    segments: tuple[str, ...],
    store_options: Mapping[str, Any] | None,
    settings: Settings,
    clock: Clock,
) -> None:
    from .stack import close_quietly, wrap_store
    from .url import open_store

    if not segments:
        return  # the database is the whole bucket / memory store: nothing above it
    parts = urlsplit(url.split(" (", 1)[0])
    top_url = f"{parts.scheme}://{parts.netloc}" + (f"?{parts.query}" if parts.query else "")
    opts = {} if kind == "memory" else dict(store_options or {})
    top = wrap_store(open_store(top_url, **opts), settings, clock, random.Random())
    try:
        for i in range(len(segments)):
            folder = "/".join(segments[:i])
            prefix = f"{folder}/{MANIFEST_DIR}" if folder else MANIFEST_DIR
            for meta in top.list(prefix):
                if parse_manifest_id(meta.path[len(prefix) - len(MANIFEST_DIR) :]) is not None:
                    other = f"{parts.scheme}://{parts.netloc}" + (f"/{folder}" if folder else "")
                    raise _refuse(name, "lies inside the root of", other)
    finally:
        close_quietly(top)


__all__ = ["check_new_root"]

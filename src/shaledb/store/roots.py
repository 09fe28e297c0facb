"""Database roots must not nest: one database's objects never lie inside another's root.

An outside audit placed a clone inside its parent's ``tmp/`` folder: it was
accepted (only a clone *equal* to its parent was refused), and the parent's
garbage collector later deleted every object of the clone as stale
temporaries. A database's garbage collector, destroy and backup pruning treat
everything under their root's prefixes as theirs, so any nesting -- either
way round, on any store kind -- is a hazard. :func:`check_disjoint` refuses it
where two roots meet: a clone and each of its ancestors, a backup's
destination and its source (and the source's ancestors).

:func:`root_key` reduces a URL (or a store's description) to what identifies
a root: the store kind, the bucket / memory store name (empty for local
paths), and the path segments (local paths resolved with ``realpath``).
:func:`foreign_roots` is the garbage collector's side of the same rule: roots of
other databases found inside a folder it cleans, which it then leaves alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from ..errors import InvalidArgument
from ..format.paths import parse_manifest_id

_KINDS = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az", "memory": "memory"}
_MANIFEST_SEGMENT = "/manifest/"

RootKey = tuple[str, str, tuple[str, ...]]


def root_key(url: str) -> RootKey | None:
    """(kind, bucket or name, path segments) of a database URL or store description;
    None when it is not a URL of a store kind (nothing to compare)."""
    if not isinstance(url, str) or not url:
        return None
    url = url.split(" (", 1)[0]  # a wrapper's description: "file:///x (two-phase writes via ...)"
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:
        raw = unquote(parts.path) if scheme == "file" else url
        try:
            real = os.path.realpath(os.path.abspath(os.path.expanduser(raw)))
        except OSError:  # a link this user may not read: nothing to compare
            return None
        return ("file", "", tuple(p for p in real.split(os.sep) if p))
    kind = _KINDS.get(scheme)
    if kind is None:
        return None
    return (kind, parts.netloc.rpartition("@")[2], tuple(p for p in unquote(parts.path).split("/") if p))


def nested(a: str, b: str) -> bool:
    """Whether the roots of ``a`` and ``b`` are equal or one lies inside the other."""
    ka, kb = root_key(a), root_key(b)
    if ka is None or kb is None or ka[:2] != kb[:2]:
        return False
    n = min(len(ka[2]), len(kb[2]))
    return ka[2][:n] == kb[2][:n]


def check_disjoint(url: str, other: str, relation: str) -> None:
    """InvalidArgument if database ``url`` and ``other`` (its ``relation``: "parent",
    "ancestor", "backup destination", ...) share a root or one lies inside the other."""
    if not nested(url, other):
        return
    ka, kb = root_key(url), root_key(other)
    assert ka is not None and kb is not None
    if ka == kb:
        where = "is the same database as"
    elif len(ka[2]) > len(kb[2]):
        where = "lies inside the root of"
    else:
        where = "contains the root of"
    raise InvalidArgument(
        f"database {url} {where} its {relation} {other}: database roots must not nest (the other "
        "database's garbage collector would treat its objects as its own); choose a location "
        "outside it"
    )


def foreign_roots(paths: Iterable[str]) -> set[str]:
    """Prefixes (ending in '/') of other databases' roots among object ``paths`` listed
    under a folder of this database: any ``.../manifest/<id>.manifest`` below it."""
    roots: set[str] = set()
    for p in paths:
        i = p.find(_MANIFEST_SEGMENT)
        if i > 0 and parse_manifest_id(p[i + 1 :]) is not None:
            roots.add(p[: i + 1])
    return roots


__all__ = ["check_disjoint", "foreign_roots", "nested", "root_key"]

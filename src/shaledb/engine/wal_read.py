"""Fetching WAL objects in id order, a window of GETs ahead (replay, readers, the
change feed, bulk reads); the codec is :mod:`shaledb.format.wal`."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence

from ..format import paths
from ..store.base import ObjectStore
from ..store.parallel import get_in_order


def fetch_wal_objects(
    store: ObjectStore, wal_ids: Sequence[int], read_ahead: int
) -> contextlib.closing[Generator[tuple[str, bytes | None], None, None]]:
    """``(path, data)`` of each WAL object in ``wal_ids``, in order (None: absent), fetched
    ``read_ahead`` at a time; use it in a ``with`` so stopping early cancels the GETs ahead."""
    return contextlib.closing(
        get_in_order(store, [paths.wal_path(w) for w in wal_ids], read_ahead=read_ahead)
    )

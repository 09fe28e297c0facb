"""One call on a database by URL, without a writer: its store stack, manifest store and
the stores of its parents (the admin functions, ``verify`` and ``backup`` use it)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..engine.parents import ExternalStores, canonical_url, default_factory
from ..manifest.store import ManifestStore
from ..settings import RetryOptions, Settings
from ..store.base import ObjectStore
from ..store.stack import close_quietly, open_stack


class AdminHandle:
    """Store stack, manifest store and parents' stores for one call on a database by URL:
    the admin functions, ``verify`` and ``backup`` all reach a database this way."""

    def __init__(
        self,
        url: str | os.PathLike[str] | None,
        store: ObjectStore | None,
        store_options: Mapping[str, Any] | None,
        clock: Clock | None,
        seed: int | None,
        author: str,
    ) -> None:
        self.clock = clock or SYSTEM_CLOCK
        self.rng = random.Random(seed)
        self._owns_store = store is None
        self.store = store = open_stack(url, store, store_options, Settings(), self.clock, self.rng)
        self.ms = ManifestStore(store, self.clock, self.rng, author=author)
        self.external = ExternalStores(
            default_factory(RetryOptions(), self.clock, random.Random(), store_options),
            own_url=canonical_url(os.fspath(url)) if url else None,
        )

    def close(self) -> None:
        """Close the stores this handle opened (a store passed in stays the caller's)."""
        close_quietly(self.external, self.store if self._owns_store else None)

    def __enter__(self) -> AdminHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["AdminHandle"]

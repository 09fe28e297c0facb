"""Shared pieces of the value-journal tests: settings, a rich model, helpers."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shaledb import Settings
from shaledb.admin.gc import GarbageCollector
from shaledb.settings import GcOptions, JournalOptions
from shaledb.store import ObjectStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import run_seed
from shaledb.testing.strategies import tiny_settings

JOURNAL_SEED = run_seed("SHALEDB_JOURNAL_SEED")
THRESHOLD = 64
"""Values of at least this many bytes go to the journal in these tests."""


def journal_settings(strategy: str | None = "retain", **overrides: Any) -> Settings:
    """Tiny settings (see ``tiny_settings``) with key/value separation on."""
    base: dict[str, Any] = {
        "value_separation_threshold": THRESHOLD,
        "journal_max_bytes": 4096,
        "journal": JournalOptions(recovery_strategy=strategy, sample_entries=32),
    }
    base.update(overrides)
    return tiny_settings(**base)


def wall_clock() -> ManualClock:
    """A manual clock that starts at the wall time (GC compares it with store timestamps)."""
    return ManualClock(start=time.time())


def collect(store: ObjectStore, clock: ManualClock, *, later_s: float = 0.0) -> Any:
    """One GC pass that deletes everything unreferenced right away (``later_s`` after now:
    a released writer pin expires after its grace of 60 s)."""
    gc_clock = ManualClock(start=max(clock.now(), time.time()) + 1 + later_s)
    gc = GarbageCollector(store, GcOptions(min_age_s=0), clock=gc_clock, rng=random.Random(1))
    return gc.run_once()


@dataclass
class Rec:
    """What the model knows about one key."""

    value: bytes
    metadata: bytes | None = None
    expires_ms: int | None = None
    terms: dict[str, tuple[bytes, ...]] = field(default_factory=dict)

    def alive(self, now_ms: int) -> bool:
        return self.expires_ms is None or self.expires_ms > now_ms


class RichModel:
    """Keys with values, metadata, expiry and index terms (all writes acknowledged)."""

    def __init__(self) -> None:
        self.state: dict[bytes, Rec] = {}

    def copy(self) -> RichModel:
        m = RichModel()
        m.state = dict(self.state)
        return m

    def live(self, now_ms: int) -> dict[bytes, Rec]:
        return {k: r for k, r in self.state.items() if r.alive(now_ms)}

    def put(
        self,
        key: bytes,
        value: bytes,
        now_ms: int,
        *,
        metadata: bytes | None = None,
        ttl_s: float | None = None,
        indexes: Mapping[str, Iterable[bytes]] | None = None,
    ) -> None:
        old = self.state.get(key)
        terms = dict(old.terms) if old is not None and old.alive(now_ms) else {}
        for f, ts in (indexes or {}).items():
            s = tuple(sorted(set(ts)))
            if s:
                terms[f] = s
            else:
                terms.pop(f, None)
        expires = None if ttl_s is None else now_ms + int(ttl_s * 1000)
        self.state[key] = Rec(value, metadata, expires, terms)

    def delete(self, key: bytes) -> None:
        self.state.pop(key, None)

    def items(self, now_ms: int) -> dict[bytes, bytes]:
        return {k: r.value for k, r in self.live(now_ms).items()}

    def index(
        self,
        fld: str,
        now_ms: int,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        start_key: bytes | None = None,
        regex: bytes | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]:
        rows = sorted((t, k) for k, r in self.live(now_ms).items() for t in r.terms.get(fld, ()))
        out = []
        for t, k in rows:
            if start is not None and t < start:
                continue
            if end is not None and t >= end:  # half-open, as scan (issue 28)
                continue
            if start_key is not None and t == start and k < start_key:
                continue
            if regex is not None and re.search(regex, t) is None:
                continue
            out.append((t, k))
        return out if limit is None else out[:limit]


__all__ = [
    "JOURNAL_SEED",
    "THRESHOLD",
    "Rec",
    "RichModel",
    "collect",
    "journal_settings",
    "wall_clock",
]

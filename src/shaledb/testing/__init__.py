"""The shipped test kit: fault injection, crash simulation, a manual clock, store conformance.

``StoreTests`` (in :mod:`shaledb.testing.store_suite`) needs pytest and is
imported lazily, so the rest of the kit works without it.
"""

from __future__ import annotations

from typing import Any

from .clock import ManualClock
from .faults import ACTIONS, OP_ALIASES, Call, FaultInjectingStore, FaultRule, SimulatedCrash

__all__ = [
    "ACTIONS",
    "OP_ALIASES",
    "Call",
    "FaultInjectingStore",
    "FaultRule",
    "ManualClock",
    "SimulatedCrash",
    "StoreTests",
]


def __getattr__(name: str) -> Any:
    if name == "StoreTests":
        from .store_suite import StoreTests

        return StoreTests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

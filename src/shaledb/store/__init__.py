"""Object storage: the contract, the obstore backend, URLs and wrappers.

Typical stack, outermost first: ``RetryingStore`` (transient failures and
ambiguous conditional puts) -> ``InstrumentedStore`` (cost accounting) ->
``TwoPhaseStore`` (only for stores without conditional writes) -> the backend
that :func:`open_store` builds from a URL.
"""

from .base import PUT_ID_ATTRIBUTE, ObjectMeta, ObjectStore
from .local_store import LocalObstoreStore
from .obstore_store import ObstoreStore, drop_memory_store, shared_memory_store
from .retrying import RetryingStore
from .twophase import TWO_PHASE_TMP_PREFIX, SqliteCasLog, TwoPhaseStore
from .url import open_store
from .wrappers import (
    OP_KINDS,
    InstrumentedStore,
    LatencyStore,
    NoConditionalStore,
    StoreStats,
    StoreWrapper,
)

__all__ = [
    "OP_KINDS",
    "PUT_ID_ATTRIBUTE",
    "TWO_PHASE_TMP_PREFIX",
    "InstrumentedStore",
    "LatencyStore",
    "LocalObstoreStore",
    "NoConditionalStore",
    "ObjectMeta",
    "ObjectStore",
    "ObstoreStore",
    "RetryingStore",
    "SqliteCasLog",
    "StoreStats",
    "StoreWrapper",
    "TwoPhaseStore",
    "drop_memory_store",
    "open_store",
    "shared_memory_store",
]

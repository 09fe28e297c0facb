"""shaledb: an embedded key-value store for Python on object storage.

    import shaledb
    with shaledb.Db.open("s3://bucket/db") as db:
        db.put(b"k", b"v")
        db.get(b"k")

Only the names in ``__all__`` are the public API.
"""

from .batch import WriteBatch
from .db import Db, Scan, Snapshot, WriteHandle
from .errors import (
    ClosedError,
    ConflictError,
    CorruptionError,
    FencedError,
    InvalidArgument,
    NotFound,
    ShaleError,
    Unavailable,
)
from .settings import CompactorOptions, GcOptions, RetryOptions, Settings

open = Db.open

__version__ = "0.1.0"

__all__ = [
    "ClosedError",
    "CompactorOptions",
    "ConflictError",
    "CorruptionError",
    "Db",
    "FencedError",
    "GcOptions",
    "InvalidArgument",
    "NotFound",
    "RetryOptions",
    "Scan",
    "Settings",
    "ShaleError",
    "Snapshot",
    "Unavailable",
    "WriteBatch",
    "WriteHandle",
    "open",
]

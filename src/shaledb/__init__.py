"""shaledb: an embedded key-value store for Python on object storage.

    import shaledb
    with shaledb.Db.open("s3://bucket/db") as db:
        db.put(b"k", b"v")
        db.get(b"k")

Only the names in ``__all__`` are the public API.
"""

from . import admin
from .admin.gc import GarbageCollector, GcReport
from .compaction import CompactionReport, Compactor
from .db.batch import WriteBatch, WriteHandle
from .db.reader import DbReader, DbReaderOptions, ReaderSnapshot
from .db.writer import Db, Scan, Snapshot
from .engine.indexes import Head
from .errors import (
    CheckpointNotFound,
    ClosedError,
    ConflictError,
    CorruptionError,
    DatabaseDestroyed,
    FencedError,
    InvalidArgument,
    InvalidDbState,
    NotFound,
    ShaleError,
    Unavailable,
)
from .journal.backup import BackupReport
from .journal.compaction import JournalCompactionReport
from .manifest.model import Checkpoint
from .settings import CompactorOptions, GcOptions, JournalOptions, RetryOptions, Settings

open = Db.open

__version__ = "0.1.0"

__all__ = [
    "CheckpointNotFound",
    "Checkpoint",
    "ClosedError",
    "CompactionReport",
    "Compactor",
    "CompactorOptions",
    "ConflictError",
    "CorruptionError",
    "DatabaseDestroyed",
    "Db",
    "DbReader",
    "DbReaderOptions",
    "FencedError",
    "GarbageCollector",
    "GcOptions",
    "GcReport",
    "Head",
    "BackupReport",
    "JournalCompactionReport",
    "JournalOptions",
    "InvalidArgument",
    "InvalidDbState",
    "NotFound",
    "ReaderSnapshot",
    "RetryOptions",
    "Scan",
    "Settings",
    "ShaleError",
    "Snapshot",
    "Unavailable",
    "WriteBatch",
    "WriteHandle",
    "admin",
    "open",
]

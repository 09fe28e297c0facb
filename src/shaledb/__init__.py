"""shaledb: an embedded key-value store for Python on object storage.

    import shaledb
    with shaledb.Db.open("s3://bucket/db") as db:
        db.put(b"k", b"v")
        db.get(b"k")

Only the names in ``__all__`` are the public API.
"""

import logging as _logging

from . import admin
from .admin.destruction import DestroyStatus
from .admin.gc import GarbageCollector, GcReport
from .compaction import CompactionReport, Compactor
from .db.batch import WriteBatch, WriteHandle
from .db.reader import DbReader, DbReaderOptions, ReaderSnapshot
from .db.txn import Transaction
from .db.writer import Db, Scan, Snapshot
from .engine.changes import Change, ChangeFeed, Cursor
from .engine.indexes import Head
from .errors import (
    AlreadyExists,
    BucketNotFound,
    CheckpointNotFound,
    ClosedError,
    ConflictError,
    CorruptionError,
    CursorAhead,
    CursorExpired,
    DatabaseDestroyed,
    EndpointUnreachable,
    ExtraMissing,
    ExtraMissingAttribute,
    FencedError,
    ForkedHandle,
    HistoryUnavailable,
    InvalidArgument,
    InvalidDbState,
    InvalidPathError,
    MergeError,
    MergeOperatorFailed,
    MergeOperatorMismatch,
    MergeOperatorMissing,
    NotFound,
    NotSupported,
    ObjectNotFound,
    PermissionDenied,
    PreconditionFailed,
    ReadOnlyError,
    SetupError,
    ShaleError,
    TransactionConflict,
    Unavailable,
    WrongThread,
)
from .journal.backup import BackupReport
from .journal.compaction import JournalCompactionReport
from .manifest.model import Checkpoint
from .merge import MergeOperator
from .settings import CompactorOptions, GcOptions, JournalOptions, RetryOptions, Settings

open = Db.open

# A library logs, the application decides where to (docs/logging.md): without a handler
# configured, shaledb's records go nowhere instead of to Python's last-resort stderr handler.
_logging.getLogger("shaledb").addHandler(_logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "BucketNotFound",
    "Change",
    "ChangeFeed",
    "CheckpointNotFound",
    "Checkpoint",
    "ClosedError",
    "CompactionReport",
    "Compactor",
    "CompactorOptions",
    "ConflictError",
    "CorruptionError",
    "Cursor",
    "CursorAhead",
    "CursorExpired",
    "DatabaseDestroyed",
    "Db",
    "DbReader",
    "DbReaderOptions",
    "DestroyStatus",
    "EndpointUnreachable",
    "ExtraMissing",
    "ExtraMissingAttribute",
    "FencedError",
    "ForkedHandle",
    "GarbageCollector",
    "GcOptions",
    "GcReport",
    "Head",
    "HistoryUnavailable",
    "BackupReport",
    "JournalCompactionReport",
    "JournalOptions",
    "InvalidArgument",
    "InvalidDbState",
    "InvalidPathError",
    "MergeError",
    "MergeOperator",
    "MergeOperatorFailed",
    "MergeOperatorMismatch",
    "MergeOperatorMissing",
    "NotFound",
    "NotSupported",
    "ObjectNotFound",
    "PermissionDenied",
    "PreconditionFailed",
    "ReadOnlyError",
    "SetupError",
    "ReaderSnapshot",
    "RetryOptions",
    "Scan",
    "Settings",
    "ShaleError",
    "Snapshot",
    "Transaction",
    "TransactionConflict",
    "Unavailable",
    "WriteBatch",
    "WriteHandle",
    "WrongThread",
    "admin",
    "open",
]

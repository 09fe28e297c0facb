"""shaledb: an embedded key-value store for Python on object storage."""

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

__all__ = [
    "ClosedError",
    "CompactorOptions",
    "ConflictError",
    "CorruptionError",
    "FencedError",
    "GcOptions",
    "InvalidArgument",
    "NotFound",
    "RetryOptions",
    "Settings",
    "ShaleError",
    "Unavailable",
]

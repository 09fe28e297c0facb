"""The manifest: model, invariants and CAS store."""

from .model import (
    Checkpoint,
    ExternalDb,
    JournalFile,
    Manifest,
    ParentRef,
    SortedRun,
    SstInfo,
    TrackedWal,
    Tree,
)
from .store import ManifestStore

__all__ = [
    "Checkpoint",
    "ExternalDb",
    "JournalFile",
    "Manifest",
    "ManifestStore",
    "ParentRef",
    "SortedRun",
    "SstInfo",
    "TrackedWal",
    "Tree",
]

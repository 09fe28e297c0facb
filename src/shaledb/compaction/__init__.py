"""Compaction: a pure scheduler, a columnar executor and the compactor role.

``scheduler`` (which merges to run, from the manifest alone) ->
``executor`` (merge source SSTs into one sorted run's SSTs) ->
``compactor`` (epoch, job leases, the manifest commit, the run loop).
"""

from .compactor import (
    CompactionAborted,
    CompactionReport,
    Compactor,
    EmbeddedCompactor,
    JobLease,
    apply_compaction,
)
from .executor import ExecResult, Executor, RangeResult
from .scheduler import CompactionSpec, format_shape, parse_shape, schedule

__all__ = [
    "CompactionAborted",
    "CompactionReport",
    "CompactionSpec",
    "Compactor",
    "EmbeddedCompactor",
    "ExecResult",
    "Executor",
    "JobLease",
    "RangeResult",
    "apply_compaction",
    "format_shape",
    "parse_shape",
    "schedule",
]

"""Helpers of these tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

from shaledb import Settings

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
"""A writer without embedded background services: the test controls every manifest write."""

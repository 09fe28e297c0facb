"""A DbReader following a writer, in real processes, on the emulated Azure store (Azurite):
the S3 test's own body with emulator locations (``emulator_url_factory``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_readers_processes import test_reader_processes_on_s3 as test_reader_processes_on_emulator


@pytest.fixture
def s3_url_factory(emulator_url_factory: Callable[[], Any]) -> Callable[[], Any]:
    return emulator_url_factory


__all__ = ["test_reader_processes_on_emulator"]

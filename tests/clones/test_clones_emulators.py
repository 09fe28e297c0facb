"""Checkpoint and clone on the emulated Azure store (Azurite): the S3 test's own body with
emulator locations (``emulator_url_factory``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_clones import test_clone_on_s3 as test_clone_on_emulator


@pytest.fixture
def s3_url_factory(emulator_url_factory: Callable[[], Any]) -> Callable[[], Any]:
    return emulator_url_factory


__all__ = ["test_clone_on_emulator"]

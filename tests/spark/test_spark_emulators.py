"""The Spark ingest, checkpoint read and compaction on the emulated Azure store (Azurite),
reached only through ``store.*`` options: the S3 test's own body with emulator locations
(``emulator_url_factory``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from test_spark_s3 import test_ingest_read_and_compact_on_s3 as test_ingest_read_and_compact_on_emulator  # noqa: E402


@pytest.fixture
def s3_url_factory(emulator_url_factory: Callable[[], Any]) -> Callable[[], Any]:
    return emulator_url_factory


__all__ = ["test_ingest_read_and_compact_on_emulator"]

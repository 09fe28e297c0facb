"""Write options parsed on the driver (no JVM: the core suite runs these)."""

from __future__ import annotations

import pytest

from shaledb.errors import InvalidArgument
from shaledb.spark.schema import WriteOptions

COLUMNS = {"key": "binary", "value": "binary"}


def test_keep_page_cache_is_off_unless_asked_and_must_be_a_boolean() -> None:
    assert WriteOptions.parse({"path": "/tmp/x"}, COLUMNS).keep_page_cache is False
    assert WriteOptions.parse({"path": "/tmp/x", "keep_page_cache": "True"}, COLUMNS).keep_page_cache is True
    with pytest.raises(InvalidArgument, match="option keep_page_cache must be true or false, got 'maybe'"):
        WriteOptions.parse({"path": "/tmp/x", "keep_page_cache": "maybe"}, COLUMNS)

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


def test_every_option_is_in_the_code_table_and_the_docs_tables() -> None:
    """docs/spark.md's write and read option tables list exactly the code's table."""
    import re
    from pathlib import Path

    from shaledb.spark.options import OPTIONS

    text = (Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    tables = {}
    for kind in ("Write options", "Read options"):
        body = text.split(f"### {kind}", 1)[1].split("\n\n", 2)[1]
        tables[kind] = {m for m in re.findall(r"^\| `([^`]+)` \|", body, re.M)} - {"store.<name>"}
    assert tables["Write options"] == {o.name for o in OPTIONS if o.write}
    assert tables["Read options"] == {o.name for o in OPTIONS if o.read}


def test_unknown_names_are_refused_with_the_closest_and_bad_values_name_the_option() -> None:
    from shaledb.spark.schema import ReadOptions

    with pytest.raises(InvalidArgument, match="unknown shaledb option 'keycol'; did you mean 'key'"):
        WriteOptions.parse({"path": "/tmp/x", "keycol": "key"}, COLUMNS)
    with pytest.raises(InvalidArgument, match="did you mean 'prefix'"):
        ReadOptions.parse({"path": "/tmp/x", "prefx": "k"})
    with pytest.raises(InvalidArgument, match="option compression must be one of"):
        WriteOptions.parse({"path": "/tmp/x", "compression": "gzip"}, COLUMNS)
    with pytest.raises(InvalidArgument, match=r"option testing\.fail_partition must be an integer"):
        WriteOptions.parse({"path": "/tmp/x", "testing.fail_partition": "x"}, COLUMNS)
    with pytest.raises(InvalidArgument, match="needs option order_by"):
        WriteOptions.parse({"path": "/tmp/x", "on_duplicate": "last"}, COLUMNS)
    with pytest.raises(InvalidArgument, match="option save_mode must be one of"):
        WriteOptions.parse({"path": "/tmp/x", "save_mode": "replace"}, COLUMNS)
    # Spark's catalog keys and store options pass.
    ReadOptions.parse({"path": "/tmp/x", "store.endpoint": "e", "owner": "me", "option.key_type": "binary"})

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
    # Delta Lake's, Paimon's and Iceberg's options say what shaledb does instead (Delta's
    # timestampAsOf was refused with the list of every option and no hint).
    foreign = (
        (ReadOptions.parse, "timestampAsOf", "option checkpoint"),
        (ReadOptions.parse, "versionAsOf", "option version"),
        (ReadOptions.parse, "scan.snapshot-id", "option checkpoint"),
        (lambda o: WriteOptions.parse(o, COLUMNS), "mergeSchema", "value_columns"),
        (lambda o: WriteOptions.parse(o, COLUMNS), "replaceWhere", "no partial overwrite"),
    )
    for parse, name, says in foreign:
        with pytest.raises(InvalidArgument) as err:
            parse({"path": "/tmp/x", name: "1"})
        assert str(err.value).startswith(f"{name!r} is not a shaledb option: ") and says in str(err.value)
    # Spark's catalog keys and store options pass.
    ReadOptions.parse({"path": "/tmp/x", "store.endpoint": "e", "owner": "me", "option.key_type": "binary"})


WRITE_NUMBERS = (
    "value_separation_threshold",
    "block_size_bytes",
    "bloom_bits_per_key",
    "max_sst_size_bytes",
    "lease_s",
    "testing.fail_partition",
)
READ_NUMBERS = ("version", "checkpoint_lifetime_s", "partitions")
BAD_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e400", "-1", "-0.5", str(2**63), "9" * 40, "1e300", "big", "")


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_every_numeric_option_goes_through_the_one_numeric_check(value: str) -> None:
    """NaN, infinities, negatives and huge values are an InvalidArgument naming the option
    and its range (shaledb.numbers.check_number), as in every option class and the CLI;
    before, ``lease_s=inf`` and ``checkpoint_lifetime_s=1e400`` passed, and integer options
    had no upper bound."""
    from shaledb.spark.schema import ReadOptions

    for name in WRITE_NUMBERS:
        with pytest.raises(InvalidArgument, match=rf"^option {name} must be .*>=? .* and <= .*; got "):
            WriteOptions.parse({"path": "/tmp/x", name: value}, COLUMNS)
    for name in READ_NUMBERS:
        with pytest.raises(InvalidArgument, match=rf"^option {name} must be .*>=? .* and <= .*; got "):
            ReadOptions.parse({"path": "/tmp/x", name: value})


def test_numeric_options_in_range_parse_and_messages_carry_units() -> None:
    from shaledb.spark.schema import ReadOptions

    w = WriteOptions.parse(
        {"path": "/tmp/x", "block_size_bytes": " 8192 ", "lease_s": "1.5", "bloom_bits_per_key": "0"}, COLUMNS
    )
    assert (w.block_size_bytes, w.lease_s, w.bloom_bits_per_key) == (8192, 1.5, 0)
    r = ReadOptions.parse({"path": "/tmp/x", "checkpoint_lifetime_s": "never", "partitions": "3"})
    assert (r.checkpoint_lifetime_s, r.partitions) == (None, 3)
    with pytest.raises(InvalidArgument, match=r"option lease_s must be a finite number of seconds, > 0"):
        WriteOptions.parse({"path": "/tmp/x", "lease_s": "none"}, COLUMNS)
    with pytest.raises(
        InvalidArgument, match=r"block_size_bytes must be an integer number of bytes, >= 256 and <= 16777216"
    ):
        WriteOptions.parse({"path": "/tmp/x", "block_size_bytes": "17000000"}, COLUMNS)
    with pytest.raises(
        InvalidArgument, match=r"max_sst_size_bytes must be an integer number of bytes, >= 4096"
    ):
        WriteOptions.parse({"path": "/tmp/x", "max_sst_size_bytes": "4095"}, COLUMNS)


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_the_change_streams_max_changes_per_trigger_goes_through_the_numeric_check(value: str) -> None:
    pytest.importorskip("pyspark")
    from shaledb.spark.stream import CHANGES_SCHEMA, ShaleChangeStream

    with pytest.raises(
        InvalidArgument, match=r"^option maxChangesPerTrigger must be an integer, >= 1 and <= "
    ):
        ShaleChangeStream({"path": "/tmp/x", "maxChangesPerTrigger": value}, CHANGES_SCHEMA)


def test_type_and_choice_values_take_any_case() -> None:
    """Spark users write SQL type names in any case (key_type 'STRING'); every option naming a
    type or a choice takes any case, as option names do."""
    from shaledb.spark.schema import ReadOptions

    opts = ReadOptions.parse({"path": "/tmp/x", "key_type": "STRING", "value_type": " String "})
    assert (opts.key_type, opts.value_type) == ("string", "string")
    assert ReadOptions.parse({"path": "/tmp/x", "key_type": "Binary"}).key_type == "binary"
    with pytest.raises(InvalidArgument, match="option key_type must be one of"):
        ReadOptions.parse({"path": "/tmp/x", "key_type": "varchar"})
    given = {"path": "/tmp/x", "compression": "LZ4", "save_mode": "Overwrite", "on_duplicate": "ERROR"}
    w = WriteOptions.parse(given, COLUMNS)
    assert (w.compression, w.save_mode, w.duplicates) == ("lz4", "overwrite", "error")
    assert WriteOptions.parse({"path": "/tmp/x", "ingest_behind": "TRUE"}, COLUMNS).behind is True


def test_a_column_named_metadata_beside_a_value_is_the_metadata_as_a_read_names_it() -> None:
    """A read's rows (key, value, seq, metadata) written with save() lost their metadata: only a
    table write mapped the column. Beside a value column, a text column named metadata is the
    metadata now; without a value column it stays part of the JSON value, as before."""
    read = {"key": "binary", "value": "binary", "seq": "bigint", "metadata": "binary"}
    assert WriteOptions.parse({"path": "/tmp/x"}, read).metadata == "metadata"
    assert WriteOptions.parse({"path": "/tmp/x", "value": "seq2"}, {**read, "seq2": "string"}).metadata == (
        "metadata"
    )
    plain = WriteOptions.parse({"path": "/tmp/x"}, {"key": "string", "metadata": "string", "x": "int"})
    assert plain.metadata is None and plain.value_columns == ("metadata", "x")
    odd = WriteOptions.parse({"path": "/tmp/x"}, {"key": "string", "value": "string", "metadata": "int"})
    assert odd.metadata is None  # not text: ignored, as any other column beside a value
    assert WriteOptions.parse({"path": "/tmp/x", "metadata": "m"}, {**read, "m": "string"}).metadata == "m"


def test_a_key_or_value_of_another_type_is_told_what_to_do_about_it() -> None:
    """The hint was the same for every column, "leave out the value option", also for a key
    and for a value column no option named."""
    with pytest.raises(InvalidArgument) as err:
        WriteOptions.parse({"path": "/tmp/x", "key": "id"}, {"id": "bigint", "value": "string"})
    assert "column 'id' must be binary or string, not bigint; cast it (e.g. col('id')" in str(err.value)
    assert "value option" not in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        WriteOptions.parse({"path": "/tmp/x"}, {"key": "string", "value": "int"})
    assert "a column named value is the value unless options say otherwise" in str(err.value)
    with pytest.raises(InvalidArgument, match="leave out option value"):
        WriteOptions.parse({"path": "/tmp/x", "value": "v"}, {"key": "string", "v": "int"})
    with pytest.raises(InvalidArgument, match=r"the DataFrame has no value: .* \(columns: \['key'\]\)"):
        WriteOptions.parse({"path": "/tmp/x"}, {"key": "string"})

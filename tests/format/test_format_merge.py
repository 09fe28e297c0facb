"""Merge entries (kind 3, SST format version 2): codec round trip, damage, versions."""

from __future__ import annotations

import pytest
from format_testkit import build_table, merge_rows, small_rows

from shaledb.errors import CorruptionError
from shaledb.format.merge import decode_merge, encode_merge, merge_operand
from shaledb.format.row import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE
from shaledb.format.sst import FORMAT_VERSION, MERGE_FORMAT_VERSION, decode_sst, encode_footer, parse_footer


def test_round_trip() -> None:
    assert decode_merge(encode_merge([b"a", b""])) == (None, [b"a", b""])
    assert decode_merge(encode_merge([b"x"], (KIND_TOMBSTONE, b""))) == ((KIND_TOMBSTONE, b""), [b"x"])
    assert merge_operand(encode_merge([b"op"])) == b"op"
    with pytest.raises(ValueError):
        encode_merge([])
    with pytest.raises(ValueError):
        encode_merge([b"a"], (KIND_MERGE, b""))


def test_every_truncation_and_bad_flag_is_corruption() -> None:
    raw = encode_merge([b"abc", b"de"], (KIND_VALUE, b"base"))
    for n in range(len(raw)):
        with pytest.raises(CorruptionError):
            decode_merge(raw[:n])
    with pytest.raises(CorruptionError):
        decode_merge(raw + b"\x00")
    with pytest.raises(CorruptionError):
        decode_merge(b"\x02" + raw[1:])  # unknown flag
    with pytest.raises(CorruptionError):
        decode_merge(b"\x01\x03" + raw[2:])  # a merge as the base
    with pytest.raises(CorruptionError):
        merge_operand(encode_merge([b"a", b"b"]))  # a WAL merge entry holds one operand


def test_version_two_only_with_merges() -> None:
    plain = build_table(small_rows())
    merged = build_table(merge_rows())
    assert parse_footer(plain, len(plain)).version == FORMAT_VERSION == 1
    assert parse_footer(merged, len(merged)).version == MERGE_FORMAT_VERSION == 2
    meta, _ = decode_sst(merged)
    assert meta.props.entries == 3
    # The same bytes labelled version 1: a merge entry a version-1 SST cannot hold.
    f = parse_footer(merged, len(merged))
    relabelled = merged[: -len(encode_footer(f))] + encode_footer(
        type(f)(f.index_off, f.index_len, f.filter_off, f.filter_len, f.props_off, f.props_len, 1)
    )
    with pytest.raises(CorruptionError, match="version 1 holds a merge"):
        decode_sst(relabelled)

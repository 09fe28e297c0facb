"""The two filter hashes: the spec's definition, the numpy column form against the
per-key form, false-positive rates, and reading filters of either version."""

from __future__ import annotations

import random
import struct

import pytest
from format_testkit import FUZZ_SEED, fuzz
from hypothesis import given
from hypothesis import strategies as st

from shaledb.errors import CorruptionError
from shaledb.format.bloom import (
    BLAKE2B,
    HASHES,
    WORDMIX,
    BloomFilter,
    build_filter,
    filter_from_column,
    key_hash,
    key_hash_wordmix,
    probe_mask,
    wordmix_column,
)

# The column tests need numpy and pyarrow (the spark extra): they run with the Spark tests.
numpy_tests = pytest.mark.spark


def spec_wordmix(key: bytes) -> int:
    """docs/format/bloom.md, version 2, written out a second time from the text."""

    def fmix(x: int) -> int:
        x ^= x >> 33
        x = x * 0xFF51AFD7ED558CCD % (1 << 64)
        x ^= x >> 33
        x = x * 0xC4CEB9FE1A85EC53 % (1 << 64)
        return x ^ (x >> 33)

    padded = key + bytes(-len(key) % 8)
    lo = len(key)
    for (w,) in struct.iter_unpack("<Q", padded):
        lo = fmix(lo ^ w)
    return lo | fmix(lo ^ 0x9E3779B97F4A7C15) << 64


def column(keys: list[bytes], skip: int = 0) -> tuple[object, object]:
    """``wordmix_column`` of ``keys`` as an Arrow array, sliced ``skip`` rows in
    (so the offsets do not start at 0, as in a slice of a Spark batch)."""
    pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    from shaledb.bulk.ingest.arrow import binary_buffers

    return wordmix_column(*binary_buffers(pa.array([b"x" * 3] * skip + keys, pa.binary()).slice(skip)))


@pytest.fixture(scope="module")
def arrow_loaded() -> None:
    """pyarrow and the column code imported once, before any timed example: the first example
    imported them inside the fuzz deadline (1 s, for decoding) and took 2.2 s on a loaded machine."""
    column([b"warm"])


def joined(lo: object, hi: object) -> list[int]:
    return [int(a) | int(b) << 64 for a, b in zip(lo, hi)]  # type: ignore[call-overload]


def test_wordmix_follows_the_spec() -> None:
    for key in [b"", b"a", b"apple", b"12345678", b"123456789", bytes(16), bytes(17), b"\xff" * 40]:
        assert key_hash_wordmix(key) == spec_wordmix(key), key
    # Trailing zero bytes are not padding: the length is hashed first.
    assert len({key_hash_wordmix(b"ab" + bytes(i)) for i in range(10)}) == 10
    assert key_hash_wordmix(b"apple") == 0x2D8550B7B28742D01F62FBF808A17340


@numpy_tests
@pytest.mark.usefixtures("arrow_loaded")
@fuzz(200)
@given(
    keys=st.lists(st.binary(max_size=70), max_size=200),
    fixed=st.sampled_from([None, 1, 8, 16, 24]),
    skip=st.integers(0, 3),
)
def test_column_hashes_equal_per_key_hashes(keys: list[bytes], fixed: int | None, skip: int) -> None:
    if fixed is not None:  # equal lengths take the in-place path when a multiple of 8
        keys = [(k + bytes(fixed))[:fixed] for k in keys]
    lo, hi = column(keys, skip)
    assert joined(lo, hi) == [key_hash_wordmix(k) for k in keys]


@numpy_tests
@pytest.mark.usefixtures("arrow_loaded")
@fuzz(100)
@given(keys=st.sets(st.binary(min_size=1, max_size=40), max_size=300), bits=st.integers(1, 20))
def test_column_filter_equals_the_reference_build(keys: set[bytes], bits: int) -> None:
    ks = sorted(keys)
    lo, hi = column(ks)
    data = filter_from_column(lo, hi, bits, WORDMIX)
    assert data == build_filter(map(key_hash_wordmix, ks), len(ks), bits, WORDMIX)
    f = BloomFilter(data)
    assert f.version == WORDMIX and all(f.may_contain_key(k) for k in ks)


@pytest.mark.parametrize("version", [BLAKE2B, WORDMIX])
@pytest.mark.parametrize("key_bytes", [8, 16, 23])
def test_false_positive_rate_at_ten_bits_per_key(version: int, key_bytes: int) -> None:
    rng = random.Random(FUZZ_SEED + key_bytes)
    keys = {rng.randbytes(key_bytes) for _ in range(20_000)}
    f = BloomFilter(build_filter(map(HASHES[version], keys), len(keys), 10, version))
    probes = [p for p in (rng.randbytes(key_bytes) for _ in range(50_000)) if p not in keys]
    rate = sum(map(f.may_contain_key, probes)) / len(probes)
    print(f"version {version}, {key_bytes}-byte keys: false positives {rate:.4f}")
    assert rate < 0.02  # about 1% expected (bloom.md)


def test_sequential_keys_spread_over_blocks() -> None:
    """Keys that differ in one byte (row ids) must not crowd a few blocks."""
    keys = [b"row%08d" % i for i in range(20_000)]
    f = BloomFilter(build_filter(map(key_hash_wordmix, keys), len(keys), 10, WORDMIX))
    used = {(key_hash_wordmix(k) & 0xFFFFFFFF) % f.num_blocks for k in keys}
    assert len(used) > 0.95 * f.num_blocks
    absent = [b"row%08d" % i for i in range(20_000, 70_000)]
    assert sum(map(f.may_contain_key, absent)) / len(absent) < 0.02


def test_a_filter_answers_with_its_own_hash() -> None:
    keys = [b"apple", b"banana", b"cherry"]
    v1 = BloomFilter(build_filter(map(key_hash, keys), 3, 10, BLAKE2B))
    v2 = BloomFilter(build_filter(map(key_hash_wordmix, keys), 3, 10, WORDMIX))
    assert v1.mask_key != v2.mask_key
    for k in keys:
        assert v1.query(k) == (key_hash(k), probe_mask(key_hash(k), v1.probes))
        assert v2.query(k) == (key_hash_wordmix(k), probe_mask(key_hash_wordmix(k), v2.probes))
        assert v1.may_contain_key(k) and v2.may_contain_key(k)


@pytest.mark.parametrize("version", [0, 3, 255])
def test_unknown_filter_versions_are_corruption(version: int) -> None:
    data = bytearray(build_filter([key_hash(b"k")], 1, 10))
    data[0] = version
    with pytest.raises(CorruptionError, match=f"unsupported filter version {version}"):
        BloomFilter(bytes(data))

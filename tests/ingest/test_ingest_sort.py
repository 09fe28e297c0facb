"""The Spark writer's sort of a partition's keys: numpy's for fixed widths, Arrow's otherwise.

Needs the spark extra (pyarrow, numpy), so it runs with the Spark tests; it starts no JVM.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shaledb.bulk.ingest import sort_indices

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

pytestmark = pytest.mark.spark


def _ints(order: object) -> list[int]:
    """Indices from numpy or Arrow (whose scalars take no ``int()`` before pyarrow 20)."""
    import numpy as np

    return [int(i) for i in np.asarray(order)]


def stable_order(keys: list[bytes]) -> list[int]:
    return sorted(range(len(keys)), key=lambda i: (keys[i], i))


@settings(max_examples=150, deadline=None)
@given(
    width=st.sampled_from([1, 7, 8, 12, 16, 24, 32, 40]),
    raw=st.lists(st.binary(min_size=40, max_size=40), max_size=60),
    alphabet=st.sampled_from([b"\x00\x01", b"\x00\xff\x80", None]),
    skip=st.integers(0, 2),
    ragged=st.booleans(),
)
def test_sort_is_stable_and_byte_ordered(
    width: int, raw: list[bytes], alphabet: bytes | None, skip: int, ragged: bool
) -> None:
    # Few distinct bytes make ties and shared prefixes; zero bytes test that none is padding.
    keys = [bytes(alphabet[b % len(alphabet)] for b in r[:width]) if alphabet else r[:width] for r in raw]
    if ragged and keys:
        keys[0] = keys[0][: max(1, width // 2)]  # one shorter key: the Arrow path
    arr = pa.array([b"pad"] * skip + keys, pa.binary()).slice(skip)
    got = sort_indices(arr)
    assert _ints(got) == stable_order(keys)


def test_large_binary_and_string_columns_sort_too() -> None:
    keys = [b"b" * 16, b"a" * 16, b"b" * 16, b"a" * 15 + b"b"]
    for arr in (pa.array(keys, pa.large_binary()), pa.array([k.decode() for k in keys], pa.string())):
        assert _ints(sort_indices(arr)) == stable_order(keys)

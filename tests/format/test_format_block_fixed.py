"""Blocks whose keys or values are all one width are split by one ``struct`` call
(``format/block.py``): they must decode to exactly what the slicing path gives."""

from __future__ import annotations

import random

import pytest

from shaledb.errors import CorruptionError
from shaledb.format.block import decode_block, encode_block
from shaledb.testing.seeds import test_seed


def _sliced(payload: bytes) -> tuple[list[bytes], list[bytes]]:
    b = decode_block(payload)
    return list(b.keys), list(b.payloads(0, len(b)))


@pytest.mark.parametrize("kw,vw", [(16, 100), (8, 0), (5, 7), (16, None), (None, 100), (None, None)])
def test_fixed_width_columns_decode_like_sliced_ones(kw: int | None, vw: int | None) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for n in (1, 2, 3, 36, 256, 257):
        keys = sorted(rng.randbytes(kw if kw is not None else rng.randrange(1, 30)) for _ in range(n))
        vals = [rng.randbytes(vw if vw is not None else rng.randrange(0, 50)) for _ in range(n)]
        seqs = [rng.randrange(1, 1 << 40) for _ in range(n)]
        b = decode_block(encode_block(keys, seqs, bytes(n), vals))
        assert list(b.keys) == keys
        assert [b.payload(i) for i in range(n)] == vals
        assert list(b.payloads(1, n - 1)) == vals[1 : n - 1]
        assert b.seqs.tolist() == seqs
        # split columns come out as tuples; values of mixed widths stay in their blob (random
        # widths can all come out equal, most often at n = 2: then the values are one width)
        one_width = len({len(v) for v in vals}) == 1
        assert (b.pays is not None) == (one_width and 2 <= n <= 256)


def test_offsets_of_equal_total_but_uneven_widths_are_not_taken_for_fixed() -> None:
    keys = [b"aa", b"bbbb", b"cc", b"dddd"]  # 12 bytes, 4 keys: 3 each on average
    vals = [b"x", b"yyyyy", b"zzz", b"w"]
    b = decode_block(encode_block(keys, [1, 2, 3, 4], bytes(4), vals))
    assert list(b.keys) == keys and list(b.payloads(0, 4)) == vals and b.pays is None


def test_offsets_that_decrease_are_refused_though_the_total_is_fixed_width() -> None:
    payload = bytearray(encode_block([b"a" * 4, b"b" * 4], [1, 2], bytes(2), [b"1" * 4, b"2" * 4]))
    payload[4 + 4 : 4 + 8] = (9).to_bytes(4, "little")  # key offset 1: 4 -> 9, past the end (8)
    with pytest.raises(CorruptionError):
        decode_block(bytes(payload))
    payload = bytearray(encode_block([b"a" * 4, b"b" * 4], [1, 2], bytes(2), [b"1" * 4, b"2" * 4]))
    payload[4 + 12 + 4 : 4 + 12 + 8] = (9).to_bytes(4, "little")  # value offset 1 likewise
    with pytest.raises(CorruptionError):
        decode_block(bytes(payload))

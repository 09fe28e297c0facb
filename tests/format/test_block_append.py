"""Large blocks appended in pieces (``format/block_append.py``) are the plain path's bytes.

``append_columns`` must write exactly ``framed(encode_columns(...), CODEC_NONE)``
(no format change), a builder that takes it must produce the objects it produced
before, and the blocks it writes must stay checked: a flipped bit is refused.
Seeded (the seed is printed on failure).
"""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from shaledb.errors import CorruptionError
from shaledb.format import block_append, sst
from shaledb.format.block import decode_block, encode_columns, encode_single
from shaledb.format.block_append import MIN_VALUE_BYTES, PIECE_BYTES, append_columns, append_singles, worth_it
from shaledb.format.coding import CODEC_NONE, framed, unframe_block
from shaledb.format.sst import SST_TABLE, SST_WAL, SstBuilder, decode_data_block, decode_sst
from shaledb.testing.seeds import test_seed


def _plain(keys: list[bytes], seqs: list[int], kinds: bytes, vals: list[bytes]) -> bytes:
    body, tail = framed(
        encode_columns(keys, array("Q", seqs), kinds, vals, list(map(len, keys)), list(map(len, vals))),
        CODEC_NONE,
    )
    return body + tail


def _columns(
    rng: random.Random, n: int, lo: int, hi: int
) -> tuple[list[bytes], list[int], bytes, list[bytes]]:
    keys = [rng.randbytes(rng.randrange(0, 20)) for _ in range(n)]
    seqs = [rng.randrange(1 << 64) for _ in range(n)]
    kinds = bytes(rng.choice([0, 1, 3]) for _ in range(n))
    vals = [rng.randbytes(rng.randrange(lo, hi)) for _ in range(n)]
    return keys, seqs, kinds, vals


def test_append_columns_writes_the_plain_bytes() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for case in range(40):
        n = rng.randrange(1, 120)
        # values around and across the piece size: runs of many, one value per piece, larger ones
        lo = rng.choice([0, 100, 4000, PIECE_BYTES - 50])
        keys, seqs, kinds, vals = _columns(rng, n, lo, lo + rng.choice([1, 300, 2 * PIECE_BYTES]))
        data = bytearray(rng.randbytes(rng.randrange(0, 50)))  # whatever the object held before
        before = bytes(data)
        size = append_columns(
            data, keys, array("Q", seqs), kinds, vals, list(map(len, keys)), list(map(len, vals))
        )
        want = _plain(keys, seqs, kinds, vals)
        assert bytes(data) == before + want, (seed, case)
        assert size == len(want), (seed, case)
        blk = decode_block(unframe_block(want))
        assert list(blk.keys) == keys and list(blk.payloads(0, n)) == vals, (seed, case)


def test_a_value_that_is_not_bytes_appends_nothing() -> None:
    data = bytearray(b"head")
    vals = [b"x" * 300_000, bytearray(b"y" * 300_000)]
    with pytest.raises(TypeError):
        append_columns(data, [b"a", b"b"], array("Q", [1, 2]), bytes(2), vals, [1, 1], [300_000, 300_000])  # type: ignore[list-item]
    assert data == b"head"


def test_only_large_blocks_of_large_values_take_it() -> None:
    assert worth_it(100, 100 * 4096)
    assert worth_it(1, MIN_VALUE_BYTES)
    assert not worth_it(100, MIN_VALUE_BYTES - 1)  # small block: the plain way
    assert not worth_it(10_000, 10_000 * 100)  # many small values: the plain way


def _builder(kind: int) -> SstBuilder:
    return SstBuilder(kind=kind, block_size=4096, codec=CODEC_NONE, bloom_bits_per_key=10, nonce=b"n" * 16)


@pytest.mark.parametrize("kind", [SST_TABLE, SST_WAL])
def test_a_builder_writes_the_objects_it_wrote_before(kind: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways through ``SstBuilder.add_many``: pieces, and the plain way forced."""
    seed = test_seed()
    rng = random.Random(seed)
    calls = {"pieces": 0}
    real = block_append.append_columns

    def counting(*a: Any, **kw: Any) -> int:
        calls["pieces"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(sst, "append_columns", counting)
    for case in range(12):
        n = rng.randrange(1, 400)
        if kind == SST_TABLE:
            keys = sorted({rng.randbytes(rng.randrange(1, 12)) for _ in range(n)})
            n = len(keys)
        else:
            keys = [rng.randbytes(rng.randrange(1, 12)) for _ in range(n)]
        # WAL: batches of up to 120 entries share a sequence number, so blocks are large
        seqs = (
            [rng.randrange(1, 1000) for _ in range(n)]
            if kind == SST_TABLE
            else sorted(rng.randrange(1, n // 60 + 2) for _ in range(n))
        )
        kinds = [rng.choice([0, 0, 1, 3]) for _ in range(n)]
        pays = [b"" if k == 1 else rng.randbytes(rng.choice([10, 2000, 4096, 9000])) for k in kinds]
        calls_before = calls["pieces"]
        fast = _builder(kind)
        fast.add_many(keys, seqs, kinds, pays)
        monkeypatch.setattr(sst, "worth_it", lambda n, b: False)
        ref = _builder(kind)
        ref.add_many(keys, seqs, kinds, pays)
        monkeypatch.setattr(sst, "worth_it", worth_it)
        assert fast.block_layout() == ref.block_layout(), (seed, case)
        got, want = fast.finish(), ref.finish()
        assert got == want, (seed, case)
        _meta, blocks = decode_sst(got[0])
        assert [k for blk in blocks for k in blk.keys] == list(keys), (seed, case)
        if kind == SST_WAL and n >= 300:
            assert calls["pieces"] > calls_before, (seed, case)  # the case did exercise the new way


def test_a_flipped_bit_in_a_block_written_in_pieces_is_refused() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    keys, seqs, kinds, vals = _columns(rng, 40, 4000, 5000)
    data = bytearray()
    append_columns(data, keys, array("Q", seqs), kinds, vals, list(map(len, keys)), list(map(len, vals)))
    stored = bytes(data)
    assert list(decode_data_block(stored).keys) == keys
    for _ in range(200):
        i = rng.randrange(len(stored) * 8)
        bad = bytearray(stored)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(CorruptionError):
            decode_data_block(bytes(bad))


def test_append_singles_writes_the_plain_bytes() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for case in range(30):
        n = rng.randrange(1, 60)
        keys, seqs, kinds, vals = _columns(rng, n, rng.choice([0, 4096, 70_000]), 80_000)
        data = bytearray(rng.randbytes(rng.randrange(0, 50)))
        before = bytes(data)
        sizes = append_singles(data, keys, seqs, kinds, vals)
        want = [framed(encode_single(k, s, t, v), CODEC_NONE) for k, s, t, v in zip(keys, seqs, kinds, vals)]
        assert bytes(data) == before + b"".join(b + t for b, t in want), (seed, case)
        assert sizes == [len(b) + len(t) for b, t in want], (seed, case)
        pos = len(before)
        for i, size in enumerate(sizes):  # each is a block that decodes to its entry
            blk = decode_data_block(bytes(data[pos : pos + size]))
            assert (blk.keys[0], blk.seqs[0], blk.kinds[0], blk.payload(0)) == (
                keys[i],
                seqs[i],
                kinds[i],
                vals[i],
            ), (seed, case)
            pos += size


def test_singles_with_a_value_that_is_not_bytes_append_nothing() -> None:
    data = bytearray(b"head")
    with pytest.raises(TypeError):
        append_singles(data, [b"a", b"b"], [1, 2], bytes(2), [b"x" * 5000, bytearray(5000)])  # type: ignore[list-item]
    assert data == b"head"
    b = _builder(SST_TABLE)  # the builder takes the plain way for them
    b.add_many([b"a", b"b"], [1, 2], [0, 0], [b"x" * 5000, bytearray(b"y" * 5000)])  # type: ignore[list-item]
    ref = _builder(SST_TABLE)
    ref.add_many([b"a", b"b"], [1, 2], [0, 0], [b"x" * 5000, b"y" * 5000])
    assert b.finish() == ref.finish()

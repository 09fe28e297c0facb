"""``format.block.decode_stored``: a stored block of a shape seen before is checked and
decoded in place. It must give exactly what ``decode_block(unframe_block(...))`` gives,
and find every damage the general path finds."""

from __future__ import annotations

import random

import pytest

from shaledb.errors import CorruptionError
from shaledb.format import block as block_mod
from shaledb.format.block import decode_block, decode_stored, encode_block
from shaledb.format.coding import CODEC_LZ4, CODEC_NONE, frame_block, unframe_block
from shaledb.testing.seeds import test_seed


def _stored(rng: random.Random, n: int, kw: int | None, vw: int | None, codec: int = CODEC_NONE) -> bytes:
    keys = sorted(rng.randbytes(kw if kw is not None else rng.randrange(1, 20)) for _ in range(n))
    vals = [rng.randbytes(vw if vw is not None else rng.randrange(0, 30)) for _ in range(n)]
    seqs = [rng.randrange(1, 1 << 56) for _ in range(n)]
    kinds = bytes(rng.choice((0, 0, 0, 1)) for _ in range(n))
    return frame_block(encode_block(keys, seqs, kinds, vals), codec)


def _columns(b: block_mod.Block) -> tuple[list[bytes], list[int], bytes, list[bytes]]:
    return list(b.keys), b.seqs.tolist(), bytes(b.kinds), list(b.payloads(0, len(b.keys)))


def _general(stored: bytes) -> tuple[list[bytes], list[int], bytes, list[bytes]]:
    return _columns(decode_block(unframe_block(stored)))


@pytest.fixture
def seed() -> int:
    return test_seed()


def test_known_shapes_decode_in_place_as_the_general_path_does(seed: int) -> None:
    rng = random.Random(seed)
    block_mod._shapes.clear()
    for kw, vw in ((16, 100), (8, 8), (24, 0), (16, None), (None, 100)):
        for n in (1, 2, 37, 256):
            first = _stored(rng, n, kw, vw)
            assert _columns(decode_stored(first)) == _general(first)  # learns the shape
            for _ in range(3):  # same shape, other contents: the fast path
                other = _stored(rng, n, kw, vw)
                assert len(other) == len(first) or None in (kw, vw)
                assert _columns(decode_stored(other)) == _general(other)
    # every fixed-width pair was learnt; a column of mixed widths never is
    assert block_mod._shapes


def test_every_flipped_bit_of_a_known_shape_is_caught(seed: int) -> None:
    rng = random.Random(seed)
    block_mod._shapes.clear()
    good = _stored(rng, 6, 8, 8)
    decode_stored(good)
    assert len(good) in block_mod._shapes  # the next decodes take the fast path
    for pos in range(len(good)):
        for bit in range(8):
            bad = bytearray(good)
            bad[pos] ^= 1 << bit
            with pytest.raises(CorruptionError):
                decode_stored(bytes(bad))
        assert _columns(decode_stored(good)) == _general(good)  # the shape is still trusted


def test_truncated_and_extended_copies_of_a_known_shape_are_refused(seed: int) -> None:
    rng = random.Random(seed)
    block_mod._shapes.clear()
    good = _stored(rng, 20, 16, 32)
    decode_stored(good)
    for bad in (good[:-1], good[1:], good + b"\0", b"\0" + good[:-1], bytes(len(good))):
        with pytest.raises(CorruptionError):
            decode_stored(bad)


def test_look_alike_blocks_of_the_same_size_take_the_general_path(seed: int) -> None:
    """Same stored size, other widths, counts, a compressed body or an unknown kind
    under a valid checksum: each decodes (or fails) as the general path says."""
    rng = random.Random(seed)
    block_mod._shapes.clear()
    a = _stored(rng, 10, 8, 24)  # 10 * 32 bytes of keys and values
    decode_stored(a)
    look_alikes = [
        _stored(rng, 10, 16, 16),  # other widths, same totals
        _stored(rng, 10, 4, 28),
    ]
    keys = [bytes([i]) * (8 if i % 2 else 9) for i in range(10)]  # mixed widths, same totals
    vals = [bytes([i]) * (24 if i % 2 else 23) for i in range(10)]
    look_alikes.append(frame_block(encode_block(keys, list(range(1, 11)), bytes(10), vals), CODEC_NONE))
    for other in look_alikes:
        assert len(other) == len(a)
        assert _columns(decode_stored(other)) == _general(other)
        assert _columns(decode_stored(a)) == _general(a)
    # an unknown kind, framed with a valid checksum: refused on either path
    payload = bytearray(unframe_block(a))
    kinds_at = 4 + 8 * 11 + 8 * 10
    payload[kinds_at + 3] = 0x7F
    forged = frame_block(bytes(payload), CODEC_NONE)
    assert len(forged) == len(a)
    with pytest.raises(CorruptionError, match="kind"):
        decode_stored(forged)
    # a compressed block is never decoded in place
    z = _stored(random.Random(seed), 64, 8, 64, CODEC_LZ4)
    assert _columns(decode_stored(z)) == _general(z)
    assert _columns(decode_stored(z)) == _general(z)


def test_a_bytearray_or_memoryview_block_decodes_on_the_general_path(seed: int) -> None:
    rng = random.Random(seed)
    block_mod._shapes.clear()
    good = _stored(rng, 12, 8, 8)
    decode_stored(good)
    assert _columns(decode_stored(bytearray(good))) == _general(good)  # type: ignore[arg-type]


def test_a_shape_is_learnt_even_when_its_decode_fills_the_column_cache(seed: int) -> None:
    """The column shapes (``_fixed``) are a bounded cache cleared when full. A decode that
    splits the keys (filling it) and then the values (clearing it) used to lose the keys'
    shape before learning the block's: the block, and every one like it, then took the
    general path until a decode happened to learn it -- how many did depended on what
    earlier blocks of the process had left in the cache."""
    rng = random.Random(seed)
    block_mod._shapes.clear()
    block_mod._fixed.clear()
    for i in range(block_mod._FIXED_CACHE_MAX - 1):  # one slot left: the keys' split takes it
        block_mod._fixed_shape(1000 + i, 2)
    first = _stored(rng, 40, 12, 30)
    assert _columns(decode_stored(first)) == _general(first)
    assert len(first) in block_mod._shapes  # learnt at the first decode
    other = _stored(rng, 40, 12, 30)
    assert block_mod.stored_shape(other, 0, len(other)) is not None  # the next one is read in place
    block_mod._fixed.clear()  # (the filler shapes are of no use to later tests)

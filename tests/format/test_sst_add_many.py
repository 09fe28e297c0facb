"""``SstBuilder.add_many`` writes the bytes it wrote when it emitted block by block.

``add_many`` cuts every block first and accounts for them once (and packs
one-entry blocks, large values, with one ``struct`` call); the objects must be
byte for byte those of the per-block path (``_emit`` on the blocks the old loop
cut, kept here as the reference): no format change. Seeded, table and WAL SSTs,
values from empty to several blocks long, tombstones and merges.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

import pytest

from shaledb.format.coding import CODEC_LZ4, CODEC_NONE
from shaledb.format.sst import SST_TABLE, SST_WAL, SstBuilder, decode_sst
from shaledb.testing.seeds import test_seed


def _reference(
    b: SstBuilder, keys: Sequence[bytes], seqs: Sequence[int], kinds: Sequence[int], pays: Sequence[bytes]
) -> None:
    """The per-block loop ``add_many`` used to run."""
    n = len(keys)
    cum = list(accumulate(len(k) + len(p) for k, p in zip(keys, pays)))
    lo = base = 0
    while lo < n:
        hi = min(n, bisect_left(cum, base + b.block_size, lo) + 1)
        if b.kind != SST_TABLE:
            while hi < n and seqs[hi] == seqs[hi - 1]:
                hi += 1
        b._emit(keys[lo:hi], seqs[lo:hi], kinds[lo:hi], pays[lo:hi])
        base = cum[hi - 1]
        lo = hi


def _builder(kind: int, codec: int, block_size: int) -> SstBuilder:
    return SstBuilder(kind=kind, block_size=block_size, codec=codec, bloom_bits_per_key=10, nonce=b"n" * 16)


@pytest.mark.parametrize("kind", [SST_TABLE, SST_WAL])
def test_add_many_writes_the_per_block_bytes(kind: int) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for case in range(60):
        n = rng.randrange(1, 300)
        big = rng.random() < 0.3  # every entry at least a block: the one-entry path
        block_size = rng.choice([64, 256, 4096])
        if kind == SST_TABLE:
            keys = sorted({rng.randbytes(rng.randrange(1, 12)) for _ in range(n)})
            n = len(keys)
            seqs = [rng.randrange(1, 1000) for _ in range(n)]
        else:
            keys = [rng.randbytes(rng.randrange(1, 12)) for _ in range(n)]
            seqs = sorted(rng.randrange(1, n // 3 + 2) for _ in range(n))  # batches share a seq
        kinds = [rng.choice([0, 0, 0, 1, 3]) for _ in range(n)]
        lo_len = block_size if big else 0
        pays = [b"" if k == 1 else rng.randbytes(rng.randrange(lo_len, lo_len + 300)) for k in kinds]
        codec = rng.choice([CODEC_NONE, CODEC_LZ4])
        split = rng.randrange(n + 1)  # two calls, as a flush or a compaction output makes
        fast, ref = _builder(kind, codec, block_size), _builder(kind, codec, block_size)
        for a, z in ((0, split), (split, n)):
            if a < z:
                fast.add_many(keys[a:z], seqs[a:z], kinds[a:z], pays[a:z])
                _reference(ref, keys[a:z], seqs[a:z], kinds[a:z], pays[a:z])
        assert fast.block_layout() == ref.block_layout(), (seed, case)
        got, want = fast.finish(), ref.finish()
        assert got == want, (seed, case)
        _meta, blocks = decode_sst(got[0])
        assert [k for blk in blocks for k in blk.keys] == list(keys)

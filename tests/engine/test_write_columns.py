"""The batched write path's shortcuts (issue 30 item 5, fillseq in batches).

* A batch built only by ``put_many`` is *plain*: it carries the byte count
  ``put_many`` took, and ``Db.write`` skips the merge, extras and range checks.
  Any other addition (``put``, ``delete``, ``merge``, ``delete_range``, rich
  puts) must make the batch take the general path again, and ``clear`` makes it
  plain and empty.
* The WAL writer buffers entries as columns (keys, an ``array`` of sequence
  numbers, a ``bytearray`` of kinds, payloads) and encodes objects from them.
* A fixed-width column's packed offsets come from a cache.

Model-based: random mixes of plain batches (sorted runs past every key written,
unsorted, keys repeated within a batch) and general ones, single puts, deletes
and merges, checked against a dict after every write, after a reopen that
replays the WAL objects, and after a flush; with and without value separation
(values located in WAL objects from the columns). Seeds are printed by
``test_seed``.
"""

from __future__ import annotations

import random
from array import array
from itertools import accumulate

import pytest

from shaledb import Db, WriteBatch
from shaledb.format.coding import pack_u32s
from shaledb.format.offsets import FIXED_MAX_ENTRIES, fixed_offsets, packed_offsets
from shaledb.store import open_store
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed
from shaledb.testing.strategies import tiny_settings


def _recount(b: WriteBatch) -> int:
    return sum(map(len, b._keys)) + sum(map(len, b._payloads))


def test_only_put_many_batches_are_plain_and_every_batch_counts_its_bytes() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(300):
        b = WriteBatch()
        plain = True
        for _ in range(rng.randrange(0, 6)):
            op = rng.randrange(8)
            k = b"k%02d" % rng.randrange(30)
            if op < 4:
                b.put_many(
                    [(b"k%02d" % rng.randrange(30), rng.randbytes(rng.randrange(0, 9))) for _ in range(3)]
                )
            elif op == 4:
                b.put(k, b"v")
                plain = False
            elif op == 5:
                b.delete(k)
                plain = False
            elif op == 6:
                b.merge(k, b"m")
                plain = False
            else:
                b.delete_range(*sorted((k, b"k%02d" % rng.randrange(30))))
                plain = plain and not b._ranged  # (an empty range adds nothing)
            if rng.random() < 0.05:
                b.clear()
                plain = True
        assert b._plain() == plain, seed
        assert b._entry_bytes() == _recount(b), seed
        if plain:
            assert b._counted == _recount(b) and set(b._kinds) <= {0}, seed


def _key(rng: random.Random) -> bytes:
    return b"k%04d" % rng.randrange(400)


@pytest.mark.parametrize("separation", [None, 24])
def test_model_plain_and_general_writes_across_reopen_and_flush(separation: int | None) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    store = open_store(f"memory://write-columns-{seed}-{separation}")
    settings = tiny_settings(merge_operator="append", value_separation_threshold=separation)
    db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed)
    model: dict[bytes, bytes] = {}
    top = 0  # sorted runs continue past every key written so far

    def check(where: str) -> None:
        for k in rng.sample(sorted(model), min(20, len(model))):
            assert db.get(k) == model[k], (seed, where, k)
        assert db.get(b"absent") is None, (seed, where)

    try:
        for step in range(150):
            op = rng.randrange(10)
            n = rng.randrange(1, 30)
            if op < 3:  # a sorted run of fresh keys (the fillseq shape)
                keys = [b"s%06d" % (top + i) for i in range(n)]
                top += n
                vals = [rng.randbytes(rng.randrange(0, 60)) for _ in keys]
                db.write(WriteBatch().put_many(keys, vals), durable=rng.random() < 0.2)
                model.update(zip(keys, vals))
            elif op < 6:  # unsorted, overwriting, keys repeated within the batch
                pairs = [(_key(rng), rng.randbytes(rng.randrange(0, 60))) for _ in range(n)]
                db.write(WriteBatch().put_many(pairs), durable=rng.random() < 0.2)
                model.update(pairs)
            elif op < 8:  # a general batch: plain puts first, then other kinds
                b = WriteBatch().put_many([(_key(rng), b"p%d" % step) for _ in range(n)])
                model.update(dict.fromkeys(b._keys, b"p%d" % step))
                k = _key(rng)
                if rng.random() < 0.5:
                    b.delete(k)
                    model.pop(k, None)
                else:
                    b.merge(k, b"+m")
                    model[k] = model.get(k, b"") + b"+m"
                b.put(k, b"last", metadata=b"meta")
                model[k] = b"last"
                db.write(b)
            elif op == 8:
                k = _key(rng)
                db.put(k, b"one%d" % step, durable=False)
                model[k] = b"one%d" % step
            else:
                k = _key(rng)
                db.merge(k, b"+x", durable=False)
                model[k] = model.get(k, b"") + b"+x"
            if step % 25 == 24:
                check(f"step {step}")
            if step in (60, 120):  # the WAL objects written from the columns are replayed
                db.close()
                db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed + step)
                check(f"reopen at {step}")
            if step == 90:
                db.flush(memtable=True)
                check("flush")
        assert dict(db.scan()) == model, seed
    finally:
        db.close()
    db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed + 1000)
    try:
        assert dict(db.scan()) == model, seed
    finally:
        db.close()


def _reference(lens: list[int]) -> bytes:
    return pack_u32s(array("I", accumulate(lens, initial=0)))


def test_packed_offsets_are_the_running_sums() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    cases: list[list[int]] = [
        [],
        [0],
        [5],
        [0, 0, 0],
        [16] * 2,
        [16] * FIXED_MAX_ENTRIES,
        [7] * (FIXED_MAX_ENTRIES + 1),
    ]
    for _ in range(300):
        n = rng.randrange(0, 300)
        w = rng.randrange(0, 40)
        lens = [w] * n
        if n and rng.random() < 0.5:
            lens[rng.randrange(n)] = rng.randrange(0, 40)  # one entry of another width (maybe the same)
        cases.append(lens)
    for lens in cases:
        assert packed_offsets(lens) == _reference(lens), (seed, lens[:5], len(lens))
        assert packed_offsets(iter(lens)) == _reference(lens), seed  # any iterable of lengths
    assert fixed_offsets(100, 3) == _reference([100] * 3)
    with pytest.raises(OverflowError):
        packed_offsets([1 << 31] * 3)  # past 4 GiB, as the array would say

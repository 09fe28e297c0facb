"""``WriteBatch.put_many``: many puts in one call, checked column by column.

A batch built with ``put_many`` must be the batch ``put`` per pair would build
(model-based against a dict, seeded, mixed with ``put``, ``delete`` and
``delete_range``, across a memtable flush and a reopen); a bad key, value or
pair anywhere raises the ``InvalidArgument`` that ``put`` raises and leaves
the batch as it was.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from shaledb import Db, InvalidArgument, WriteBatch, aio
from shaledb.keys import MAX_KEY_BYTES
from shaledb.store import open_store
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed
from shaledb.testing.strategies import tiny_settings


def _columns(b: WriteBatch) -> tuple[list[bytes], list[int], list[bytes]]:
    return list(b._keys), list(b._kinds), list(b._payloads)


def _key(rng: random.Random) -> bytes:
    return b"k%03d" % rng.randrange(60)


def test_put_many_builds_the_batch_put_builds() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(200):
        pairs = [(_key(rng), rng.randbytes(rng.randrange(0, 40))) for _ in range(rng.randrange(0, 30))]
        one = WriteBatch().put(b"first", b"x")
        for k, v in pairs:
            one.put(k, v)
        form = rng.randrange(4)
        many = WriteBatch().put(b"first", b"x")
        if form == 0:
            many.put_many(pairs)
        elif form == 1:
            many.put_many([k for k, _ in pairs], [v for _, v in pairs])
        elif form == 2:
            many.put_many(iter(pairs))  # any iterable of pairs
        else:
            many.put_many(tuple(list(p) for p in pairs))  # pairs as lists
        assert _columns(many) == _columns(one)
        assert (
            many._entry_bytes()
            == one._entry_bytes()
            == sum(len(k) + len(v) for k, v in [(b"first", b"x"), *pairs])
        )


def test_put_many_takes_a_mapping_and_bytes_likes() -> None:
    b = WriteBatch().put_many({b"a": b"1", b"b": bytearray(b"2")})
    b.put_many([bytearray(b"c"), memoryview(b"d")], [b"3", memoryview(b"4")])
    assert _columns(b) == ([b"a", b"b", b"c", b"d"], [0, 0, 0, 0], [b"1", b"2", b"3", b"4"])
    assert all(type(x) is bytes for x in b._keys + b._payloads)
    assert len(WriteBatch().put_many([])) == 0
    assert len(WriteBatch().put_many([], [])) == 0


BAD: list[tuple[str, Any, Any, str]] = [
    ("str key", [(b"a", b"1"), ("b", b"2")], None, "encode text first"),
    ("empty key", [(b"a", b"1"), (b"", b"2")], None, "must not be empty"),
    ("long key", [(b"a", b"1"), (b"k" * (MAX_KEY_BYTES + 1), b"2")], None, "at most 65535"),
    ("int value", [(b"a", b"1"), (b"b", 2)], None, "values are bytes, got int"),
    ("str value", [(b"a", "1")], None, "encode text first"),
    ("None key", [(None, b"1")], None, "keys are bytes, got NoneType"),
    ("short pair", [(b"a", b"1"), (b"b",)], None, "one of 1 items"),
    ("long pair", [(b"a", b"1", b"x"), (b"b", b"2", b"y")], None, "one of 3 items"),
    ("bare key", [(b"a", b"1"), b"b"], None, "got bytes"),
    ("not pairs", b"ab", None, "got bytes"),
    ("not iterable", 5, None, "got int"),
    ("lengths differ", [b"a", b"b"], [b"1"], "2 keys and 1 values"),
    ("keys a str", "ab", [b"1", b"2"], "keys must be a sequence"),
    ("values a set", [b"a"], {b"1"}, "values must be a sequence"),
    ("bad key in columns", [b"a", b""], [b"1", b"2"], "must not be empty"),
    ("bad value in columns", [b"a", b"b"], [b"1", None], "values are bytes, got NoneType"),
]


@pytest.mark.parametrize(("pairs", "values", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_entry_anywhere_raises_and_changes_nothing(pairs: Any, values: Any, message: str) -> None:
    b = WriteBatch().put(b"kept", b"v").put_many([(b"also", b"kept")])
    before = (_columns(b), b._entry_bytes())
    with pytest.raises(InvalidArgument, match=message):
        if values is None:
            b.put_many(pairs)
        else:
            b.put_many(pairs, values)
    assert (_columns(b), b._entry_bytes()) == before


def test_put_many_raises_what_put_raises() -> None:
    for bad_key in ("s", b"", b"x" * (MAX_KEY_BYTES + 1), 3, None):
        with pytest.raises(InvalidArgument) as by_put:
            WriteBatch().put(bad_key, b"v")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument) as by_many:
            WriteBatch().put_many([(b"ok", b"v"), (bad_key, b"v")])  # type: ignore[list-item]
        assert str(by_many.value) == str(by_put.value)


def test_model_put_many_against_a_dict_across_flush_and_reopen() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    store = open_store(f"memory://put-many-{seed}")
    settings = tiny_settings()
    db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed)
    model: dict[bytes, bytes] = {}
    try:
        for step in range(120):
            b = WriteBatch()
            for _ in range(rng.randrange(1, 4)):
                op = rng.randrange(10)
                if op < 6:
                    pairs = [
                        (_key(rng), rng.randbytes(rng.randrange(1, 50))) for _ in range(rng.randrange(1, 40))
                    ]
                    if rng.random() < 0.5:
                        b.put_many(pairs)
                    else:
                        b.put_many([k for k, _ in pairs], [v for _, v in pairs])
                    model.update(pairs)
                elif op < 8:
                    k = _key(rng)
                    b.delete(k)
                    model.pop(k, None)
                elif op < 9:
                    k, v = _key(rng), rng.randbytes(5)
                    b.put(k, v)
                    model[k] = v
                else:
                    lo, hi = sorted((_key(rng), _key(rng)))
                    b.delete_range(lo, hi)
                    for k in [k for k in model if lo <= k < hi]:
                        del model[k]
            db.write(b, durable=rng.random() < 0.2)
            if step % 40 == 39:
                db.flush(memtable=True)
            if step == 80:
                db.close()
                db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed + 1)
            probe = _key(rng)
            assert db.get(probe) == model.get(probe), (seed, step, probe)
        assert dict(db.scan()) == model
    finally:
        db.close()


def test_put_many_through_aio() -> None:
    async def main() -> dict[bytes, bytes]:
        db = await aio.Db.open(store=open_store("memory://put-many-aio"), settings=tiny_settings())
        try:
            await db.write(WriteBatch().put_many([(b"a", b"1"), (b"b", b"2")]))
            async with db.batch() as b:
                b.put_many([b"c"], [b"3"])
            return {k: v async for k, v in db.scan()}
        finally:
            await db.close()

    assert asyncio.run(main()) == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_long_columns_check_each_length_once_the_total_passes_the_bound() -> None:
    keys = [b"%040d" % i for i in range(2000)]  # 80,000 key bytes: over MAX_KEY_BYTES in total
    b = WriteBatch().put_many(keys, [b""] * 2000)
    assert len(b) == 2000 and b._entry_bytes() == 80_000
    with pytest.raises(InvalidArgument, match="at most 65535"):
        b.put_many([*keys, b"k" * (MAX_KEY_BYTES + 1)], [b""] * 2001)
    assert len(b) == 2000

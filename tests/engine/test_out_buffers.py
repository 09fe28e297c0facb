"""WAL objects and L0 SSTs are built in reused buffers (shaledb.format.out_buffers): every
object reads back as it was written, on a store that lets the buffer be reused (a local
directory) and on one that keeps the bytes it was given (memory: never reused there)."""

from __future__ import annotations

import random

from shaledb import Db, WriteBatch
from shaledb.format.out_buffers import OutBuffers
from shaledb.format.sst import SstBuilder, decode_sst
from shaledb.format.wal import encode_wal_columns
from shaledb.store import ObjectStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.strategies import tiny_settings


def test_objects_built_in_reused_buffers_read_back(store: ObjectStore, url: str, seed: int) -> None:
    rng = random.Random(seed)
    settings = tiny_settings(wal_max_bytes=64 * 1024, l0_sst_size_bytes=256 * 1024, block_size_bytes=4096)
    model: dict[bytes, bytes] = {}
    db = Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed)
    try:
        for _ in range(60):
            batch = {
                b"k%04d" % rng.randrange(500): rng.randbytes(rng.randrange(100, 9_000)) for _ in range(20)
            }
            db.write(WriteBatch().put_many(list(batch.items())), durable=False)
            model.update(batch)
        db.flush()
        wal = db.wal.buffers
        if url.startswith("memory"):
            # obstore's memory store keeps the very buffer it was given: never reuse one
            assert wal.reused == 0 and wal.dropped > 0
        else:
            assert wal.reused > 0 and wal.dropped == 0
        assert {k: db.get(k) for k in model} == model
    finally:
        db.close()
    with Db.open(store=store, settings=settings, clock=ManualClock(), seed=seed + 1) as again:
        assert dict(again.scan()) == model


def test_builder_in_a_reused_buffer_writes_the_same_bytes(seed: int) -> None:
    """An object built over a longer one left in the buffer is the object alone."""
    rng = random.Random(seed)
    bufs = OutBuffers(1)
    for n in (400, 40, 400, 3):  # long, short (over the long one's bytes), long again, tiny
        keys = sorted({rng.randbytes(8) for _ in range(n)})
        vals = [rng.randbytes(rng.choice((10, 5000))) for _ in keys]
        args = (keys, list(range(1, len(keys) + 1)), [0] * len(keys), vals)
        plain = SstBuilder(block_size=4096)
        plain.add_many(*args)
        want, props = plain.finish()
        out = bufs.take()
        reused = SstBuilder(block_size=4096, out=out)
        reused.add_many(*args)
        got, got_props = reused.finish_view()
        assert bytes(got) == want and got_props == props
        got.release()  # (what OutBuffers.give does: the buffer refuses writes while a view is out)
        kw = {"epoch": 1, "nonce": bytes(16), "created_at_ms": 0, "codec": 0}
        wal, _, _ = encode_wal_columns(*args, **kw, block_size=16384)
        wal2, _, _ = encode_wal_columns(*args, **kw, block_size=16384, out=out)
        assert bytes(wal2) == bytes(wal) and len(decode_sst(bytes(wal2))[1]) > 0
        assert bufs.give(out, wal2)
    assert bufs.reused == 3


def test_a_buffer_still_held_is_not_reused() -> None:
    """``give`` keeps a buffer only when nothing holds its bytes; a view cut from the
    object (as a store keeping it would hold) makes it drop the buffer."""
    bufs = OutBuffers(1)
    out = bufs.take()
    b = SstBuilder(out=out)
    b.add(b"k", 1, 0, b"v" * 1000)
    view, _ = b.finish_view()
    held = view[100:200]
    expect = bytes(held)
    assert not bufs.give(out, view)
    assert bufs.idle == 0 and bufs.dropped == 1
    assert bytes(held) == expect  # still the object's bytes: nothing writes over them

"""The memtable's sorted-key bookkeeping against a dict model (batches that overwrite,
repeat keys within a batch, and interleave sorted reads that merge the new keys)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shaledb.memtable import Memtable

keys = st.binary(min_size=1, max_size=3)
batches = st.lists(st.tuples(st.lists(keys, min_size=1, max_size=12), st.booleans()), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_put_many_keeps_sorted_keys_equal_to_the_model(script: list[tuple[list[bytes], bool]]) -> None:
    m = Memtable()
    model: dict[bytes, tuple[int, int, bytes]] = {}
    for seq, (ks, read) in enumerate(script, start=1):
        entries = [(seq, 0, k + b"@%d" % i) for i, k in enumerate(ks)]
        m.put_many(ks, entries)
        model.update(zip(ks, entries))
        if read:
            assert m.sorted_keys() == sorted(model)
    assert m.sorted_keys() == sorted(model)
    assert m.range_keys(b"\x01", b"\x80") == [k for k in sorted(model) if b"\x01" <= k < b"\x80"]
    assert [m.get(k) for k in sorted(model)] == [model[k] for k in sorted(model)]

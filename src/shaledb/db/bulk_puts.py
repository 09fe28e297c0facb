"""Checking many puts at once (``WriteBatch.put_many``): column by column, in C-level calls.

A call per key costs more than the rest of a batched write (docs/benchmarks.md,
"fillseq and overwrite after the write-path work"), so the checks ``put`` makes on one key and value -- bytes,
a key of 1 to ``MAX_KEY_BYTES`` bytes, a value of at most ``MAX_VALUE_BYTES`` --
are made on whole columns: ``map(type, ...)`` counted against ``bytes``, an
empty key found by one ``in``, and lengths bounded by the column's total (a
column whose total fits the bound has no entry over it; only otherwise is each
length looked at). Anything that is not plain ``bytes`` takes the per-entry
checks of :mod:`shaledb.keys`, which convert bytes-likes and raise the error
``put`` raises; nothing is returned until every entry passed, so a bad entry
anywhere leaves the batch as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..errors import InvalidArgument
from ..keys import MAX_KEY_BYTES, MAX_VALUE_BYTES, BytesLike, check_key, check_value

_PAIR_TYPES = (tuple, list)


def checked_columns(
    pairs: Iterable[tuple[BytesLike, BytesLike]] | Mapping[BytesLike, BytesLike] | Sequence[BytesLike],
    values: Sequence[BytesLike] | None,
) -> tuple[Sequence[bytes], Sequence[bytes], int]:
    """``(keys, values, key and value bytes)`` of ``put_many``'s arguments, checked; or
    InvalidArgument (the first bad entry's, as ``put`` words it). The byte count is the
    sum the length checks take anyway: ``Db.write`` accounts it without another pass."""
    if values is None:
        keys_in, vals_in = _split_pairs(pairs)
    else:
        keys_in, vals_in = _two_columns(pairs, values)
    keys, key_bytes = _keys(keys_in)
    vals, val_bytes = _values(vals_in)
    return keys, vals, key_bytes + val_bytes


def _split_pairs(pairs: object) -> tuple[Sequence[object], Sequence[object]]:
    if isinstance(pairs, Mapping):
        return list(pairs.keys()), list(pairs.values())
    if isinstance(pairs, (bytes, bytearray, memoryview, str)) or not isinstance(pairs, Iterable):
        raise InvalidArgument(
            f"put_many takes (key, value) pairs, a mapping, or keys and values; got {type(pairs).__name__}"
        )
    seq = pairs if type(pairs) is list or type(pairs) is tuple else list(pairs)
    n = len(seq)
    if not n:
        return (), ()
    # Every pair a tuple or list (one count), then all of length 2: zip's strict mode
    # fails on a length that differs from the first's, and the first must give 2 columns.
    kinds = list(map(type, seq))
    if kinds.count(tuple) != n and kinds.count(tuple) + kinds.count(list) != n:
        bad = next(p for p in seq if not isinstance(p, _PAIR_TYPES))
        raise InvalidArgument(f"put_many pairs are (key, value) tuples, got {type(bad).__name__}")
    try:
        cols = list(zip(*seq, strict=True))
    except ValueError:
        cols = []
    if len(cols) != 2:
        bad = next((p for p in seq if len(p) != 2), seq[0])
        raise InvalidArgument(f"put_many pairs are (key, value) tuples, got one of {len(bad)} items")
    return cols[0], cols[1]


def _two_columns(keys: object, values: object) -> tuple[Sequence[object], Sequence[object]]:
    for name, col in (("keys", keys), ("values", values)):
        if isinstance(col, (bytes, bytearray, memoryview, str, Mapping)) or not isinstance(col, Sequence):
            raise InvalidArgument(f"put_many {name} must be a sequence (a list), got {type(col).__name__}")
    assert isinstance(keys, Sequence) and isinstance(values, Sequence)
    if len(keys) != len(values):
        raise InvalidArgument(f"put_many got {len(keys)} keys and {len(values)} values")
    return keys, values


def _keys(col: Sequence[object]) -> tuple[Sequence[bytes], int]:
    """The keys (the caller's sequence itself when every key is plain bytes: the batch
    copies its items) and their bytes."""
    if list(map(type, col)).count(bytes) == len(col):
        ks: Sequence[bytes] = col  # type: ignore[assignment]  # (every item is bytes)
        if b"" not in ks:
            total = sum(map(len, ks))
            if _within(ks, total, MAX_KEY_BYTES):
                return ks, total
    ks = [check_key(k) for k in col]  # raises the first bad key's error
    return ks, sum(map(len, ks))


def _values(col: Sequence[object]) -> tuple[Sequence[bytes], int]:
    if list(map(type, col)).count(bytes) == len(col):
        vs: Sequence[bytes] = col  # type: ignore[assignment]
        total = sum(map(len, vs))
        if _within(vs, total, MAX_VALUE_BYTES):
            return vs, total
    vs = [check_value(v) for v in col]
    return vs, sum(map(len, vs))


def _within(col: Sequence[bytes], total: int, limit: int) -> bool:
    """No item longer than ``limit`` (a column whose ``total`` fits has none: no max)."""
    return total <= limit or max(map(len, col)) <= limit

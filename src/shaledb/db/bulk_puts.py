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
) -> tuple[Sequence[bytes], Sequence[bytes]]:
    """``(keys, values)`` of ``put_many``'s arguments, checked; or InvalidArgument (the
    first bad entry's, as ``put`` words it)."""
    if values is None:
        keys_in, vals_in = _split_pairs(pairs)
    else:
        keys_in, vals_in = _two_columns(pairs, values)
    return _keys(keys_in), _values(vals_in)


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
    if kinds.count(tuple) + kinds.count(list) != n:
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


def _keys(col: Sequence[object]) -> Sequence[bytes]:
    """The keys (the caller's sequence itself when every key is plain bytes: the batch
    copies its items)."""
    if list(map(type, col)).count(bytes) == len(col):
        ks: Sequence[bytes] = col  # type: ignore[assignment]  # (every item is bytes)
        if b"" not in ks and _within(ks, MAX_KEY_BYTES):
            return ks
    return [check_key(k) for k in col]  # raises the first bad key's error


def _values(col: Sequence[object]) -> Sequence[bytes]:
    if list(map(type, col)).count(bytes) == len(col):
        vs: Sequence[bytes] = col  # type: ignore[assignment]
        if _within(vs, MAX_VALUE_BYTES):
            return vs
    return [check_value(v) for v in col]


def _within(col: Sequence[bytes], limit: int) -> bool:
    """No item longer than ``limit`` (a column whose total fits has none: one sum, no max)."""
    return sum(map(len, col)) <= limit or max(map(len, col)) <= limit

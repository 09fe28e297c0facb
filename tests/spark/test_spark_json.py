"""The column-wise JSON value encoding gives json_values' bytes (pyarrow only; no JVM)."""

from __future__ import annotations

import datetime
import decimal
import random

import pytest

from shaledb.spark.schema import json_column, json_values
from shaledb.testing.seeds import test_seed

pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.spark  # needs pyarrow (the spark extra)

UTC = datetime.UTC


def _same(table) -> None:
    want = json_values(table.to_pylist())
    got = json_column(table)
    assert got.type == pa.binary()
    assert got.to_pylist() == want


def test_every_covered_type_and_edge_value_encodes_as_json_values_does():
    floats = [0.0, -0.0, 2.0, 1e-7, 1e22, 0.1, float("nan"), float("inf"), float("-inf"), None]
    n = len(floats)
    plain = ["", "ab", "é 日本 😀", None, "x", "y", "z", "w", "v", "u"]
    escaped = ['q"uote', "back\\slash", "new\nline", "\x01\x1f", "tab\t", None, "ok", "\u2028", "\x7f", "é"]
    t = pa.table(
        {
            "i8": pa.array([-128, 127, None, 0, 1, 2, 3, 4, 5, 6], pa.int8()),
            "u64": pa.array([2**64 - 1, 0, None, 1, 2, 3, 4, 5, 6, 7], pa.uint64()),
            "i64": pa.array([-(2**63), 2**63 - 1, 0, None, 1, 2, 3, 4, 5, 6], pa.int64()),
            "b": pa.array([True, False, None] + [True] * 7),
            "f64": pa.array(floats, pa.float64()),
            "f32": pa.array([0.1, 1.5, None, 3.0, -2.5, 1e-3, 7.0, 8.0, 9.0, 10.0], pa.float32()),
            "s": pa.array(plain, pa.string()),
            "esc": pa.array(escaped, pa.string()),
            "ls": pa.array(escaped, pa.large_string()),
            "bin": pa.array([b"\x00\xff", b"", None, b"abc", b"d", b"e", b"f", b"g", b"h", b"i"]),
            "d": pa.array([datetime.date(2013, 1, d) for d in range(1, n)] + [None], pa.date32()),
            "ts": pa.array(
                [datetime.datetime(2013, 1, 1, h, 0, 0, 5 * h) for h in range(n)], pa.timestamp("us")
            ),
            "tz": pa.array(
                [datetime.datetime(2013, 1, 1, h % 2, tzinfo=UTC) for h in range(n)], pa.timestamp("s", "UTC")
            ),
            "t": pa.array([datetime.time(h, 30) for h in range(n - 1)] + [None], pa.time64("us")),
            "dec": pa.array(
                [decimal.Decimal("1.50"), None] + [decimal.Decimal(k) for k in range(n - 2)],
                pa.decimal128(9, 2),
            ),
            "dur": pa.array(
                [datetime.timedelta(seconds=s, microseconds=7) for s in range(n - 1)] + [None],
                pa.duration("us"),
            ),
            "nul": pa.nulls(n),
            'na me "quoted"': pa.array(range(n)),
        }
    )
    _same(t)
    _same(t.slice(3, 4))
    _same(pa.concat_tables([t, t.slice(2, 5)]))  # several chunks per column


def test_random_tables_encode_as_json_values_does():
    seed = test_seed()
    rng = random.Random(seed)
    alphabet = ['"', "\\", "\n", "\x00", "a", "é", "😀", " ", "}", ","]
    for _ in range(20):
        n = rng.randint(0, 50)
        cols = {
            "i": pa.array([rng.choice([None, rng.randint(-(10**12), 10**12)]) for _ in range(n)], pa.int64()),
            "f": pa.array(
                [rng.choice([None, rng.uniform(-1e6, 1e6), rng.random() * 1e-9]) for _ in range(n)]
            ),
            "s": pa.array(
                [
                    "".join(rng.choices(alphabet, k=rng.randint(0, 6))) if rng.random() > 0.1 else None
                    for _ in range(n)
                ],
                pa.string(),
            ),
            "ts": pa.array(
                [
                    datetime.datetime(2013, 1, 1, tzinfo=UTC) + datetime.timedelta(hours=rng.randint(0, 30))
                    for _ in range(n)
                ],
                pa.timestamp("ms", "UTC"),
            ),
        }
        _same(pa.table(cols))


def test_other_types_and_repeated_names_fall_back_to_json_values():
    lists = pa.table(
        {"k": pa.array([1, 2]), "l": pa.array([[1, 2], None]), "st": pa.array([{"a": 1}, {"a": None}])}
    )
    _same(lists)
    repeated = pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["a", "a"])
    assert json_column(repeated).to_pylist() == json_values(repeated.to_pylist())
    _same(pa.table({"a": pa.array([], pa.int64())}))  # no rows
    assert json_column(pa.table({"a": [1, 2]}).select([])).to_pylist() == [b"{}", b"{}"]  # no columns


def test_floats_encode_as_repr_across_magnitudes_and_forms():
    """Arrow's float text is used only where it is ``repr``'s; random doubles of every
    magnitude (random bit patterns), short decimals, integers, the edges of the fixed-notation
    range, subnormals and float32 columns must all give ``json_values``' bytes."""
    import struct

    rng = random.Random(test_seed())
    bits = [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(20_000)]
    decimals = [round(rng.uniform(-1e6, 1e6), rng.randrange(0, 8)) for _ in range(20_000)]
    integers = [float(rng.randrange(-(10**17), 10**17)) for _ in range(5_000)]
    scaled = [rng.random() * 10.0 ** rng.randrange(-8, 20) for _ in range(20_000)]
    edges = [1e-4, 0.00009999999999999999, 1.0000000000000001e-4, 1e16, 9999999999999998.0, 1e15, 1e16 - 2]
    edges += [5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -0.0, 0.0, 1e-5, 123e-7]
    f64 = [*bits, *decimals, *integers, *scaled, *edges, None, float("nan"), float("-inf")]
    _same(pa.table({"x": pa.array(f64, pa.float64())}))
    f32 = [struct.unpack("<f", rng.randbytes(4))[0] for _ in range(5_000)] + [0.1, 1e-5, 3.0, None]
    _same(pa.table({"y": pa.array(f32, pa.float32())}))

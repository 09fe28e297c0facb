"""Merge operators: read-modify-write folded in by reads and compaction (``Db.merge``).

A merge operator is a plain function ``(key, existing, operands) -> bytes``:
``existing`` is the key's value below the operands (None when absent,
deleted or expired) and ``operands`` are the merged bytes, oldest first. It
must be deterministic and must not care how operands are grouped:
``f(k, f(k, e, a), b) == f(k, e, a + b)``, because reads, flushes and
compaction fold whatever they find at the time. It runs in the process that
reads or compacts, so it should be quick and must not touch the database.

A database records its operator's *name* in its manifest (like RocksDB's
``Name()``), and a handle opened with an operator of another name is refused
(:class:`~shaledb.errors.MergeOperatorMismatch`): folding one operator's
operands with another would silently give wrong values. A plain function is
named by its module and qualified name; :class:`MergeOperator` names one
explicitly, so renaming the function later is harmless. A callable whose name
cannot identify it -- a lambda, a nested function or closure, a bound method,
a ``functools.partial`` or other callable object -- is refused
(``InvalidArgument``): give it a name with :class:`MergeOperator`. The ready ones below
are found by name, so readers, Spark reads and standalone compactors fold
them without being told.
"""

from __future__ import annotations

import struct
import types
from collections.abc import Callable

from .errors import InvalidArgument

MergeFunction = Callable[[bytes, "bytes | None", list[bytes]], bytes]

_U64 = struct.Struct("<Q")
_MASK = (1 << 64) - 1


class MergeOperator:
    """A merge function with the name a database records for it."""

    __slots__ = ("check_operand", "fn", "name")

    def __init__(
        self, name: str, fn: MergeFunction, check_operand: Callable[[bytes], None] | None = None
    ) -> None:
        """``check_operand`` (optional) raises ``InvalidArgument`` for an operand the function
        can never fold: ``Db.merge`` then refuses it at once, instead of every later read of
        the key failing."""
        if not isinstance(name, str) or not name or len(name) > 200:
            raise InvalidArgument(f"a merge operator's name must be 1-200 characters, got {name!r}")
        if not callable(fn):
            raise InvalidArgument(f"a merge operator's function must be callable, got {fn!r}")
        if check_operand is not None and not callable(check_operand):
            raise InvalidArgument(f"a merge operator's check_operand must be callable, got {check_operand!r}")
        self.name = name
        self.fn = fn
        self.check_operand = check_operand

    def __call__(self, key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
        return self.fn(key, existing, operands)

    def __repr__(self) -> str:
        return f"MergeOperator({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MergeOperator) and other.name == self.name and other.fn is self.fn

    def __hash__(self) -> int:
        return hash(self.name)


def _u64(b: bytes, what: str) -> int:
    if len(b) != 8:
        raise InvalidArgument(f"add_u64: {what} must be 8 bytes (u64 little-endian), got {len(b)}")
    return int(_U64.unpack(b)[0])


def _u64_operand(op: bytes) -> None:
    if len(op) != 8:
        raise InvalidArgument(
            f"this merge operator takes 8-byte operands (u64 little-endian, e.g. n.to_bytes(8, 'little')), "
            f"got {len(op)} bytes"
        )


def _add_u64(key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
    total = 0 if existing is None else _u64(existing, "the existing value")
    for op in operands:
        total += _u64(op, "an operand")
    return _U64.pack(total & _MASK)


def _append(key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
    return b"".join(operands) if existing is None else existing + b"".join(operands)


def _max_u64(key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
    best = None if existing is None else _u64(existing, "the existing value")
    for op in operands:
        v = _u64(op, "an operand")
        if best is None or v > best:
            best = v
    assert best is not None
    return _U64.pack(best)


add_u64 = MergeOperator("shaledb.add_u64", _add_u64, _u64_operand)
"""Counters: the sum of 8-byte little-endian unsigned integers, wrapping at 2**64."""
append = MergeOperator("shaledb.append", _append)
"""Byte strings: the existing value followed by every operand."""
max_u64 = MergeOperator("shaledb.max_u64", _max_u64, _u64_operand)
"""The largest 8-byte little-endian unsigned integer seen."""

BUILTIN: dict[str, MergeOperator] = {op.name: op for op in (add_u64, append, max_u64)}
SHORT_NAMES = {"add_u64": add_u64, "append": append, "max_u64": max_u64}


def as_operator(spec: object) -> MergeOperator | None:
    """A :class:`MergeOperator` from what a caller gave: None, an operator, a ready
    one's name (``"add_u64"`` or ``"shaledb.add_u64"``) or a plain function."""
    if spec is None or isinstance(spec, MergeOperator):
        return spec
    if isinstance(spec, str):
        if spec.lower() == "none":  # TOML's None (shaledb.settings_load)
            return None
        op = SHORT_NAMES.get(spec) or BUILTIN.get(spec)
        if op is None:
            names = ", ".join(sorted(SHORT_NAMES))
            raise InvalidArgument(f"merge_operator: no ready operator named {spec!r} (ready: {names})")
        return op
    if callable(spec):
        return MergeOperator(_function_name(spec), spec)
    raise InvalidArgument(
        f"merge_operator must be a function (key, existing, operands) -> bytes, a MergeOperator "
        f"or a ready operator's name, got {type(spec).__name__}"
    )


def _function_name(fn: object) -> str:
    """The name a plain function is recorded by: ``module.qualname``, or InvalidArgument when
    that name cannot tell two operators apart. Every lambda is ``<lambda>`` and a nested
    function (``make(n).<locals>.op``) or a closure's behaviour is not in its name; a bound
    method, a ``functools.partial`` or a callable object shares its name with every other
    one of its kind. Recorded under such a name, a database reopened with a different lambda
    was not refused, and its merges folded with the other function, silently giving other
    values: the one safety the recorded name exists for."""
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None)
    plain = isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))
    if plain and isinstance(qual, str) and "<" not in qual:
        return f"{module}.{qual}"
    if not plain:
        what = f"a {type(fn).__name__} object"
    elif str(qual).endswith("<lambda>"):
        what = "a lambda"
    else:
        what = f"the nested function {qual}"
    raise InvalidArgument(
        f"merge_operator: {what} has no name that identifies it, and the database records its "
        "merge operator's name to refuse a different one when reopened; name it, e.g. "
        "shaledb.MergeOperator('myapp.concat', fn) (the name is yours: keep it stable), or pass "
        "a function defined at module level"
    )


__all__ = ["BUILTIN", "MergeFunction", "MergeOperator", "add_u64", "append", "as_operator", "max_u64"]

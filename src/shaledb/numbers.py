"""The one check of every number a caller hands shaledb: options, CLI arguments, per-call values.

An outside audit found NaN and infinite settings accepted in half the option
classes, each with its own hand-written check: ``GcOptions(min_age_s=nan)``
made the garbage collector delete objects written a moment ago (every
comparison with NaN is false, so "younger than min_age" never held),
``flush_interval_s=inf`` killed the WAL thread with ``OverflowError`` (a
``threading`` wait cannot take it) and ``put(ttl=inf)`` overflowed. So every
number goes through :func:`check_number`: it must be a real ``int`` or
``float`` (not a bool), finite, inside its range, and an integer where one is
meant. The message names the option, its unit (taken from the name's suffix:
``_s`` seconds, ``_bytes`` bytes, ``_pct`` percent) and the accepted range.

Upper bounds keep values inside what the machinery can represent: a duration
in seconds is at most :data:`MAX_SECONDS` (100 years, below
``threading.TIMEOUT_MAX``), an integer at most :data:`MAX_INT` (a signed
64-bit value, what the Rust store client and the formats take).
"""

from __future__ import annotations

import math
import re

from .errors import InvalidArgument

MAX_SECONDS = 100 * 365 * 86400.0
"""Longest duration any option or argument accepts (100 years)."""

MAX_INT = 2**63 - 1
"""Largest integer any option or argument accepts."""

_UNITS = (("_s", "seconds"), ("_bytes", "bytes"), ("_pct", "percent"), ("_ms", "milliseconds"))


def unit_of(name: str) -> str:
    """The unit an option's name carries (``flush_interval_s`` -> ``seconds``), or ``""``."""
    base = name.rsplit(".", 1)[-1]
    for suffix, unit in _UNITS:
        if base.endswith(suffix):
            return unit
    return ""


def _default_max(unit: str) -> float:
    if unit == "seconds":
        return MAX_SECONDS
    if unit == "percent":
        return 100.0
    return MAX_INT


def _fmt(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else repr(x)


def check_number(
    name: str,
    value: object,
    *,
    integer: bool = False,
    minimum: float = 0,
    above_minimum: bool = False,
    maximum: float | None = None,
    unit: str | None = None,
) -> float:
    """``value`` as a number, or InvalidArgument naming ``name``, the unit and the range.

    ``minimum`` is inclusive unless ``above_minimum`` (then the value must
    exceed it: "> 0" for intervals). ``maximum`` defaults by unit (see the
    module docstring). ``unit`` defaults to the one in ``name``'s suffix.
    """
    unit = unit_of(name) if unit is None else unit
    top = _default_max(unit) if maximum is None else maximum
    kind = ("an integer number" if unit else "an integer") if integer else "a finite number"
    lower = f"> {_fmt(minimum)}" if above_minimum else f">= {_fmt(minimum)}"
    expect = f"{kind}{f' of {unit}' if unit else ''}, {lower} and <= {_fmt(top)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument.of_option(
            name, f"{name} must be {expect}; got {value!r} ({type(value).__name__})"
        )
    if integer and not isinstance(value, int):
        raise InvalidArgument.of_option(name, f"{name} must be {expect}; got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument.of_option(name, f"{name} must be {expect}; got {value!r}")
    if value < minimum or (above_minimum and value == minimum) or value > top:
        raise InvalidArgument.of_option(name, f"{name} must be {expect}; got {value!r}")
    return value


def check_int(name: str, value: object, *, minimum: int = 0, maximum: int | None = None) -> int:
    """:func:`check_number` for integers (counts, sizes in bytes)."""
    out = check_number(name, value, integer=True, minimum=minimum, maximum=maximum)
    assert isinstance(out, int)
    return out


def check_seconds(
    name: str, value: object, *, allow_zero: bool = False, maximum: float = MAX_SECONDS
) -> float:
    """:func:`check_number` for a duration in seconds: finite, >= 0 (> 0 unless
    ``allow_zero``), at most ``maximum``."""
    return float(
        check_number(name, value, minimum=0, above_minimum=not allow_zero, maximum=maximum, unit="seconds")
    )


def check_flag(name: str, value: object) -> bool:
    """A yes/no argument: ``True`` or ``False`` only. Any truthy object used to count as
    yes, so ``scan(reverse="no")`` scanned in reverse and ``backup(prune="no")`` pruned."""
    if value is True or value is False:
        return value
    raise InvalidArgument(f"{name} must be True or False, got {value!r}")


_DECIMAL = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NON_FINITE = frozenset({"inf", "infinity", "nan"})


def int_from_text(name: str, text: str) -> int:
    """Typed text (an environment variable's value) as an integer: ASCII decimal digits
    with an optional sign, spaces around allowed, nothing else; InvalidArgument naming ``name``.

    ``int()`` also takes ``1_000``, other scripts' digits (Arabic-Indic U+0661 U+0660
    is 10) and, as the loader called it, ``0x10``: a value that reads as something else
    to a person (or to a tool checking the configuration) must not set a limit silently.
    The range is the option's own check (:func:`check_number`), which also says what a
    negative means.
    """
    t = text.strip()
    if _DECIMAL.fullmatch(t):
        try:
            return int(t)
        except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
            pass
    raise InvalidArgument(f"{name} must be an integer in plain decimal digits (e.g. 4096), got {text!r}")


def float_from_text(name: str, text: str) -> float:
    """Typed text as a number: ASCII decimal notation (``0.05``, ``5``, ``1e-3``), with an
    optional sign; InvalidArgument naming ``name`` for underscores, other scripts' digits
    and the like. ``inf`` and ``nan`` are read, for the option's own check to refuse them
    by name (:func:`check_number`: finite numbers only)."""
    t = text.strip()
    if _REAL.fullmatch(t) or t.lower().lstrip("+-") in _NON_FINITE:
        return float(t)
    raise InvalidArgument(
        f"{name} must be a number in plain decimal notation (e.g. 0.05 or 1e-3), got {text!r}"
    )


__all__ = [
    "MAX_INT",
    "MAX_SECONDS",
    "check_flag",
    "check_int",
    "check_number",
    "check_seconds",
    "float_from_text",
    "int_from_text",
    "unit_of",
]


def human_size(n: int) -> str:
    """A byte count as people read it (``312 B``, ``112.9 MiB``): the CLI and the ingest line
    Spark prints share it, so a size looks the same wherever shaledb shows one."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def counted(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``: a count with its noun, for lines people read."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"

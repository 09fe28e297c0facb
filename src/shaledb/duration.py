"""Durations as people type them: ``"7days 30min 10s"``, ``"1h30m"``, ``"250ms"``.

Checkpoint lifetimes, GC ages and poll intervals are given on the command line
and in configuration as text; APIs take a :class:`datetime.timedelta` or a
number of seconds. :func:`parse_duration` turns the first into the second and
:func:`to_seconds` accepts any of them, so every entry point validates the
same way (a negative, NaN or unparseable duration is an ``InvalidArgument``).
"""

from __future__ import annotations

import re
from datetime import timedelta

from .errors import InvalidArgument
from .numbers import check_seconds

_UNITS: dict[str, float] = {}
for _names, _secs in (
    (("years", "year", "yrs", "yr", "y"), 365 * 86400.0),
    (("weeks", "week", "w"), 7 * 86400.0),
    (("days", "day", "d"), 86400.0),
    (("hours", "hour", "hrs", "hr", "h"), 3600.0),
    (("minutes", "minute", "mins", "min", "m"), 60.0),
    (("seconds", "second", "secs", "sec", "s"), 1.0),
    (("milliseconds", "millisecond", "millis", "msec", "ms"), 0.001),
):
    for _n in _names:
        _UNITS[_n] = _secs

# ASCII: digits and unit letters as numbers.py reads them (no other scripts' digits).
_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*,?", re.IGNORECASE | re.ASCII)


def parse_duration(text: str) -> timedelta:
    """Parse ``"7days 30min 10s"`` (years/weeks/days/h/min/s/ms, any order, summed).

    A bare number is seconds. Units may be written out (``"2 hours"``) or
    abbreviated (``"2h"``), with or without spaces (``"1h30m"``). A year is
    365 days.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("a duration must be a non-empty string such as '7days 30min 10s'")
    pos = 0
    total = 0.0
    s = text.strip()
    if s.startswith("-"):
        raise InvalidArgument(f"a duration cannot be negative: got {text!r}")
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None or m.end() == pos:
            raise InvalidArgument(
                f"cannot parse duration {text!r} at {s[pos:]!r}; use e.g. '7days 30min 10s', '1h', '250ms'"
            )
        unit = m.group(2).lower()
        if unit == "" and m.end() < len(s):
            raise InvalidArgument(f"duration {text!r}: a number without a unit must stand alone")
        if unit and unit not in _UNITS:
            raise InvalidArgument(
                f"duration {text!r}: unknown unit {m.group(2)!r} (use years, days, h, min, s or ms)"
            )
        total += float(m.group(1)) * (_UNITS[unit] if unit else 1.0)
        pos = m.end()
    if total > timedelta.max.total_seconds():
        raise InvalidArgument(f"duration {text!r} is too long")
    return timedelta(seconds=total)


def to_seconds(
    value: timedelta | float | int | str | None, what: str = "duration", *, allow_zero: bool = True
) -> float | None:
    """Seconds from a timedelta, a number of seconds or a duration string; None stays None.

    Every refusal names ``what`` (the option), so a user who typed a bad duration in a
    config file or on the command line knows which one; ``allow_zero=False`` for
    durations where zero means nothing (a lifetime)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        secs: object = value.total_seconds()
    elif isinstance(value, str):
        try:
            secs = parse_duration(value).total_seconds()
        except InvalidArgument as exc:
            raise InvalidArgument.of_option(what, f"{what}: {exc}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = value
    else:
        raise InvalidArgument(f"{what} must be a timedelta, a number of seconds or a string, got {value!r}")
    return check_seconds(what, secs, allow_zero=allow_zero)


def format_duration(seconds: float) -> str:
    """A short human form (``"1d 2h 3min 4s"``), the inverse of :func:`parse_duration`."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    parts = []
    rest = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{unit}")
    return " ".join(parts) or "0s"


__all__ = ["format_duration", "parse_duration", "to_seconds"]

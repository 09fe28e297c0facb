"""Option spellings users type: durations as text or ``timedelta``, documented names.

Every duration option is stored in seconds in a field whose name ends in
``_s`` (``flush_interval_s``, ``manifest_poll_interval_s``...). Users may give
any of them as a number of seconds, a ``datetime.timedelta`` or a duration
string (``"250ms"``, ``"1h30m"``, ``"7days"``; ``shaledb.duration``). The
settings dataclasses declare such fields as :class:`Seconds` (a descriptor), so
type checkers accept every :data:`Duration` in the constructor while reading
the field gives a ``float``; the value is converted to seconds when it is
assigned. :func:`seconds_fields` does the same for plain dataclasses.

:func:`renamed` maps an old keyword spelling to its documented name with a
``DeprecationWarning`` (one convention: the ``_s`` names of the options
tables; the old names keep working).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import warnings
from datetime import timedelta
from typing import Any, Generic, TypeVar, overload

from .duration import to_seconds
from .errors import InvalidArgument

Duration = timedelta | float | str
"""What a duration option accepts: seconds (an int or a float), a timedelta, or a
duration string such as ``"250ms"`` or ``"1h30m"``."""

T = TypeVar("T")


def _field_seconds(owner: str, name: str, value: Any) -> Any:
    """``value`` in seconds if it is text or a timedelta; other values as given (the
    dataclass's ``__post_init__`` checks them, with its own messages).

    A negative duration (``"-5s"``, ``timedelta(seconds=-5)``) becomes its negative
    number of seconds, so the field's own range check refuses it, saying the range
    (``> 0`` for an interval): the duration parser's "cannot be negative" said neither."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("-") and not text.startswith("--"):
        secs = to_seconds(text[1:], f"{owner}.{name}")
        return None if secs is None else -secs
    return to_seconds(value, f"{owner}.{name}")  # (its errors name the option)


class Seconds(Generic[T]):
    """A dataclass field in seconds that accepts any :data:`Duration`.

    ``flush_interval_s: Seconds[float] = Seconds(0.1)`` (or ``Seconds[float |
    None]``). Why a descriptor: type checkers take a descriptor field's
    constructor argument type from ``__set__`` and its read type from
    ``__get__``, so ``Settings(flush_interval_s="1h")`` or a ``timedelta``
    type-checks under ``mypy --strict`` while every reader still sees a
    number of seconds. The value is converted on assignment (in the
    dataclass's ``__init__``) and kept in the instance's ``__dict__`` under
    the field's name; the owner must therefore not use ``slots=True``.
    """

    def __init__(self, default: T) -> None:
        self._default: T = default
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> T: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T:
        if obj is None:  # class access: dataclasses read the field's default here
            return self._default
        value: T = obj.__dict__[self._name]
        return value

    def __set__(self, obj: object, value: Duration | T) -> None:
        obj.__dict__[self._name] = _field_seconds(type(obj).__name__, self._name, value)


def seconds_fields(obj: Any) -> None:
    """Convert ``str``/``timedelta`` values of ``obj``'s ``*_s`` fields to seconds (in place, frozen ok)."""
    for f in dataclasses.fields(obj):
        if f.name.endswith("_s"):
            v = getattr(obj, f.name)
            secs = _field_seconds(type(obj).__name__, f.name, v)
            if secs is not v:
                object.__setattr__(obj, f.name, secs)


C = TypeVar("C", bound=type)


def suggest_keywords(cls: C) -> C:
    """Class decorator for an options dataclass: an unknown keyword raises the TypeError
    Python would, naming the closest fields (``Settings(flush_interval=1)``: did you mean
    flush_interval_s?), as the environment and TOML loaders do for their names."""
    init = getattr(cls, "__init__")  # noqa: B009 - mypy: the class's own __init__, not an instance's
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {key!r}{hint}")
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010 - mypy refuses assigning a method directly
    return cls


def renamed(kwargs: dict[str, Any], old: str, new: str, where: str) -> None:
    """Move ``kwargs[old]`` to ``kwargs[new]`` with a DeprecationWarning; both given is an error."""
    if old not in kwargs:
        return
    if new in kwargs:
        raise InvalidArgument(f"{where}: give {new} only ({old} is its old spelling)")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=3)
    kwargs[new] = kwargs.pop(old)

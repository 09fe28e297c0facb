"""Option spellings users type: durations as text or ``timedelta``, documented names.

Every duration option is stored in seconds in a field whose name ends in
``_s`` (``flush_interval_s``, ``manifest_poll_interval_s``...). Users may give
any of them as a number of seconds, a ``datetime.timedelta`` or a duration
string (``"250ms"``, ``"1h30m"``, ``"7days"``; ``shaledb.duration``):
:func:`seconds_fields` converts them when an options object is built, so the
rest of the code only sees floats.

:func:`renamed` maps an old keyword spelling to its documented name with a
``DeprecationWarning`` (one convention: the ``_s`` names of the options
tables; the old names keep working).
"""

from __future__ import annotations

import dataclasses
import warnings
from datetime import timedelta
from typing import Any

from .duration import to_seconds
from .errors import InvalidArgument


def seconds_fields(obj: Any) -> None:
    """Convert ``str``/``timedelta`` values of ``obj``'s ``*_s`` fields to seconds (in place, frozen ok)."""
    for f in dataclasses.fields(obj):
        if not f.name.endswith("_s"):
            continue
        v = getattr(obj, f.name)
        if isinstance(v, (str, timedelta)):
            what = f"{type(obj).__name__}.{f.name}"
            try:
                secs = to_seconds(v, what)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{what}: {exc}") from None
            object.__setattr__(obj, f.name, secs)


def renamed(kwargs: dict[str, Any], old: str, new: str, where: str) -> None:
    """Move ``kwargs[old]`` to ``kwargs[new]`` with a DeprecationWarning; both given is an error."""
    if old not in kwargs:
        return
    if new in kwargs:
        raise InvalidArgument(f"{where}: give {new} only ({old} is its old spelling)")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=3)
    kwargs[new] = kwargs.pop(old)

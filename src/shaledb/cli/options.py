"""How the ``shaledb`` command line is typed: global options anywhere, ``--version``,
checkpoints by name or UUID.

Global options (``--path``, ``--json``, ``--jsonl``, ``--debug``, ``--no-progress``) may
come before the command or after it (``shaledb list-checkpoints --json``):
each subcommand repeats them with ``argparse.SUPPRESS`` defaults, so a value
given after the command wins and one given before is not reset.

Wherever a command takes a checkpoint (``--checkpoint``, ``--id``,
``--source``), a UUID or a checkpoint name is accepted; a name must match
exactly one live checkpoint (``shaledb.admin.find_checkpoint``, which the API the commands
call resolves with; :func:`resolve_checkpoint` where a command prints the UUID).
"""

from __future__ import annotations

import argparse
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import InvalidArgument, InvalidPathError


def add_global_options(p: argparse.ArgumentParser, *, after_command: bool) -> None:
    """``--path``, ``--json``, ``--settings``, ``--verbose``, ``--debug``, ``--no-progress`` on ``p``.

    ``p`` is the main parser, or a command's (then the options may follow the command).
    """
    kw: dict[str, Any] = {"default": argparse.SUPPRESS} if after_command else {}
    g = p.add_argument_group("global options") if after_command else p
    g.add_argument(
        "--path", required=False, help="database URL (local path, file://, memory://, s3://, ...)", **kw
    )
    g.add_argument("--json", action="store_true", help="machine-readable JSON output", **kw)
    g.add_argument(
        "--jsonl",
        action="store_true",
        help="JSON lines: one compact JSON object per line (a listing's rows, for jq and head)",
        **kw,
    )
    g.add_argument(
        "--settings",
        dest="settings_file",
        metavar="FILE",
        help="TOML settings file (else SHALEDB_SETTINGS_FILE)",
        **kw,
    )
    g.add_argument(
        "--verbose",
        action="store_true",
        help="INFO logs of shaledb: opens, flushes, compactions, GC passes",
        **kw,
    )
    g.add_argument("--debug", action="store_true", help="show tracebacks and debug logs", **kw)
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress line on stderr (drawn only on a terminal)",
        **kw,
    )


NEGATIVE = re.compile(r"-\.?[0-9]")
"""What a negative value looks like (``-1h``, ``-5``, ``-.5``, ``-1e3``): no option name does."""


def attach_negative_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with each negative-looking value joined to the option it follows
    (``--lifetime -1h`` -> ``--lifetime=-1h``, ``-l -1h`` -> ``-l-1h``).

    argparse reads a token starting with ``-`` as an option unless it is a plain negative
    number, so ``create-checkpoint --lifetime -1h`` failed with "argument -l/--lifetime:
    expected one argument" -- about the command line's grammar, not the value. Joined, the
    value reaches the option's own check, which says what is wrong with it ("--lifetime must
    be positive: got -1h"). Only options that take one value are joined, nothing after ``--``."""
    takes = set(_value_options(parser))
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        if arg in takes and i + 1 < len(argv) and NEGATIVE.match(argv[i + 1]):
            value = argv[i + 1]
            out.append(f"{arg}={value}" if arg.startswith("--") else f"{arg}{value}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _value_options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """The option strings of ``parser`` and its commands' parsers that take one value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _value_options(sub)
        elif isinstance(action, (argparse._StoreAction, argparse._AppendAction)) and action.nargs is None:
            yield from action.option_strings


URL_OPTIONS = (("path", "--path"), ("parent", "--parent"), ("dest", "DEST"))
"""The arguments that name a database (attribute, as a user types it): checked by :func:`check_urls`."""


def check_urls(args: argparse.Namespace) -> None:
    """Refuse a plain local path holding ``?`` in the command line's terms.

    The store refuses it too (``shaledb.store.url``), but its message is the Python API's:
    "give options as keywords (cas=...)" -- a shell has no keywords. On the command line,
    options ride in a ``file://`` URL, and a ``?`` of a directory's name is ``%3F`` there;
    both URLs are spelled out from the path given, ready to paste."""
    from urllib.parse import quote

    for attr, shown in URL_OPTIONS:
        value = getattr(args, attr, None)
        if not isinstance(value, str) or "?" not in value:
            continue
        scheme = value.partition(":")[0] if ":" in value else ""
        if scheme and len(scheme) > 1 and value.partition(":")[2].startswith("//"):
            continue  # a URL: its query holds the options
        path, _, query = value.partition("?")
        opts = query or "cas=..."
        base = os.path.abspath(os.path.expanduser(path))
        named = quote(os.path.abspath(os.path.expanduser(value)), safe="/")
        raise InvalidPathError(
            f"{shown} {value!r} is a plain path holding a '?': a plain path takes no options. To pass "
            f"store options ({opts}), give a file URL: {shown} 'file://{base}?{opts}' (quoted for the "
            f"shell); if the '?' is part of the directory's name, write it as %3F in a file URL: "
            f"{shown} 'file://{named}'"
        )


def seconds_option(value: str | float | None, option: str) -> float | None:
    """An option's seconds from a plain number (``"90"``, ``"1e-3"``) or a duration (``"5m"``, ``"1h30m"``).

    These options were ``type=float``, so ``--min-age 1h`` failed with argparse's "invalid
    float value" while ``--lifetime 1h`` worked. Whatever ``float()`` read before is read the
    same way (``"inf"`` and ``"nan"`` still reach the option's own range check, which refuses
    them as before); anything else is a duration (:func:`shaledb.duration.parse_duration`), and
    one that is neither is refused naming the option and the value."""
    if value is None or isinstance(value, float):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    from ..duration import parse_duration

    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0  # "-5s": the option's range check says the range
    try:
        return sign * parse_duration(text[1:] if sign < 0 else text).total_seconds()
    except InvalidArgument as exc:
        raise InvalidArgument(f"{option} takes seconds or a duration such as '5m': {exc}") from None


SECONDS_HELP = "seconds, or a duration such as 5m or 1h30m"


def add_version(p: argparse.ArgumentParser) -> None:
    from .. import __version__

    p.add_argument("--version", action="version", version=f"shaledb {__version__}")


def register_extra_commands() -> None:
    """Import the modules whose commands are registered here (``delete``)."""
    from . import more  # noqa: F401 - registers its commands


def checkpoint_ref(text: str) -> str:
    """argparse type of a checkpoint reference: a UUID or a name (resolved by the command)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a checkpoint is named by its UUID or its name; got an empty string")
    return text


def resolve_checkpoint(url: str, ref: str | None) -> str | None:
    """The UUID (as text) of the checkpoint ``ref`` names at ``url``: a UUID as is, else a name.

    A name must match exactly one live checkpoint (``shaledb.admin.find_checkpoint``, which
    the API uses too): none raises ``CheckpointNotFound`` (exit 3), several ``InvalidArgument``.
    """
    if ref is None:
        return None
    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    from .. import admin

    return str(admin.find_checkpoint(url, ref).id)

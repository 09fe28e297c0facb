"""Keys and values that start with ``-``: what argparse makes of them, and the hints.

argparse reads any word starting with ``-`` as an option unless it is a plain negative
number. So ``put k -1h`` failed ("the following arguments are required: value") and
``put k v -x`` said only "unrecognized arguments: -x". Here: a word that looks negative
(``-1h``, ``-.5``: :data:`~shaledb.cli.options.NEGATIVE`, which no option name matches) is
a key or value (:func:`read_negative_words`), and a word read as an unknown option gets the
command line that passes it after ``--`` (:func:`dash_hint`), or, when no such line would
parse, the shape of one.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
from collections.abc import Sequence

from .options import NEGATIVE


def split_words(parser: argparse.ArgumentParser, words: Sequence[str]) -> tuple[list[str], list[str]]:
    """``words`` (after the command's name) as (its options with their values, the rest)."""
    options = parser._option_string_actions
    kept: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        action = options.get(word.split("=", 1)[0] if word.startswith("--") else word)
        if action is None:
            rest.append(word)
        else:
            kept.append(word)
            if action.nargs != 0 and "=" not in word and i + 1 < len(words):
                i += 1
                kept.append(words[i])
        i += 1
    return kept, rest


def _positionals(parser: argparse.ArgumentParser) -> tuple[int, float, list[str]]:
    """How many positional words ``parser`` takes (least, most) and their names."""
    least, most, names = 0, 0.0, []
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._SubParsersAction):
            continue
        names.append(str(action.metavar or action.dest).upper())
        if action.nargs is None:
            least, most = least + 1, most + 1
        elif isinstance(action.nargs, int):
            least, most = least + action.nargs, most + action.nargs
        elif action.nargs == "?":
            most += 1
        else:  # "*", "+", REMAINDER
            least += action.nargs == "+"
            most = float("inf")
    return least, most, names


def _command_at(parser: argparse.ArgumentParser, given: Sequence[str]) -> int | None:
    name = parser.prog.rsplit(" ", 1)[-1]  # a command's parser: "shaledb put"
    if name == "shaledb":
        return None
    return next((i for i, word in enumerate(given) if word == name), None)


def dash_hint(parser: argparse.ArgumentParser, given: Sequence[str]) -> str:
    """ "; to pass '-x' as a key or value, put it after '--': shaledb put -- k -x" when the
    command line holds a word that starts with '-' but is no option of its command, else "".

    ``put k -x`` could be a mistyped option as well as a value, so argparse's refusal stands;
    the hint says how to mean the value. The line keeps the command's own options before
    the ``--`` and is given only when it would parse (the right number of keys and values);
    otherwise (``put k v -x``: one word too many) the hint says the option is unknown and
    gives the shape of the line (``put -- KEY VALUE``)."""
    at = _command_at(parser, given)
    if at is None:
        return ""
    head, words = list(given[: at + 1]), list(given[at + 1 :])
    if "--" in words:
        return ""
    kept, rest = split_words(parser, words)
    stray = [w for w in rest if w.startswith("-") and len(w) > 1]
    if not stray:
        return ""
    least, most, names = _positionals(parser)
    near = near_option(parser, stray[0])
    if least <= len(rest) <= most:
        line = shlex.join(["shaledb", *head, *kept, "--", *rest])
        if near is not None:  # more likely a mistyped option than a value
            return (
                f"; {stray[0]!r} is no option of {parser.prog!r} (did you mean {near!r}?); "
                f"to pass it as a key or value, put it after '--': {line}"
            )
        return f"; to pass {stray[0]!r} as a key or value, put it after '--': {line}"
    meant = f"did you mean {near!r}? " if near is not None else ""
    hint = f"; {stray[0]!r} is no option of {parser.prog!r} ({meant}{parser.prog} --help lists them)"
    if not names:  # the command takes no keys or values: '--' would not help
        return hint
    line = shlex.join(["shaledb", *head, *kept, "--"])
    return f"{hint}; a key or value that starts with '-' goes after '--': {line} {' '.join(names)}"


def near_option(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The long option of ``parser`` spelled closest to ``word`` (``--jsn`` -> ``--json``,
    ``--min_age`` -> ``--min-age``), or None: a typo in an option got only "unrecognized
    arguments", while a typo in a command got the closest names."""
    typed = word.split("=", 1)[0]
    if not typed.startswith("--") or len(typed) < 4:
        return None
    names = sorted(o for o in parser._option_string_actions if o.startswith("--"))
    found = difflib.get_close_matches(typed, names, n=1, cutoff=0.75)
    return found[0] if found else None


def _hook_works() -> bool:
    """Whether argparse still honours its (private) negative-number pattern: set on a probe
    parser, ``-1h`` must parse as a positional. Checked, not assumed, so a Python whose
    argparse drops or renames the attribute falls back to :func:`read_negative_words`'s
    rewrite instead of silently refusing ``put k -1h``."""
    probe = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    probe.add_argument("value")
    if not hasattr(probe, "_negative_number_matcher"):
        return False
    probe._negative_number_matcher = NEGATIVE
    try:
        return bool(probe.parse_known_args(["-1h"])[0].value == "-1h")
    except (argparse.ArgumentError, SystemExit):
        return False


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands' parsers of ``parser`` by name (none for a command's own parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def read_negative_words(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Make ``parser`` and its commands' parsers read a negative-looking word
    (``put k -1h``) as a key or value, and return the command line to parse.

    argparse has no public switch for this in Python 3.11, so each parser gets
    :data:`NEGATIVE` as its negative-number pattern when that still works
    (:func:`_hook_works`). Otherwise the command's keys and values are moved after a
    ``--`` (``put k -1h`` -> ``put -- k -1h``), only when every word that starts with
    '-' is one of its options or looks negative (an abbreviated or mistyped option
    leaves the line as typed, for argparse to refuse)."""
    by_name = commands(parser)
    if _hook_works():
        for p in (parser, *by_name.values()):
            p._negative_number_matcher = NEGATIVE
        return argv
    at = 0
    while at < len(argv) and argv[at] not in by_name:  # skip global options and their values
        action = parser._option_string_actions.get(argv[at].split("=", 1)[0])
        if action is None:
            return argv  # no command: argparse says what is wrong
        at += 1 if action.nargs == 0 or "=" in argv[at] else 2
    if at >= len(argv):
        return argv
    kept, rest = split_words(by_name[argv[at]], argv[at + 1 :])
    dashed = [w for w in rest if w.startswith("-") and len(w) > 1]
    if "--" not in argv[at:] and dashed and all(NEGATIVE.match(w) for w in dashed):
        return [*argv[: at + 1], *kept, "--", *rest]
    return argv


def unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str], given: Sequence[str]) -> str:
    """argparse's "unrecognized arguments: -x", with :func:`dash_hint` when a word of
    ``extras`` starts with '-' (a key or value the user may have meant)."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    if any(re.match(r"-.", w) for w in extras):
        hint = dash_hint(parser, given)
        if not hint:  # a mistyped option before the command (``shaledb --jsn stats``)
            near = next((n for n in (near_option(parser, w) for w in extras) if n is not None), None)
            hint = f"; did you mean {near!r}?" if near is not None else ""
        message += hint
    return message

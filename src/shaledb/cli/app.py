"""The ``shaledb`` command line: ``shaledb --path URL <command> [options]``.

Global options (``--path``, ``--json``, ``--jsonl``, ``--verbose``, ``--debug``, ``--no-progress``) go
before or after the command (``shaledb.cli.options``). Keys and values are
UTF-8 text, ``0x...`` hex, or ``text:...`` for literal text that would
otherwise read as hex (``put text:0xford oxford``).

Output is a human table by default, JSON with ``--json``, JSON lines with ``--jsonl``; listings stream
(``shaledb.cli.stream``: constant memory, and ``| head`` ends them quietly);
long commands draw a progress line in bytes with a rate and ETA on stderr
when it is a terminal. Errors print
one line (``shaledb: error: ...``) unless ``--debug`` asks for the traceback.
Exit codes: 0 success, 1 a shaledb error (corruption, fenced, unavailable),
2 bad usage or arguments, 3 not found (missing database, checkpoint or key).

Commands register themselves with ``shaledb.cli.output.command``; each module
that adds a capability (compaction, checkpoints, the journal) adds its commands
in ``shaledb/cli/*.py`` and is listed in :data:`GROUPS`.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ..errors import InvalidArgument, NotFound, ShaleError
from ..store.scrub import ScrubFilter, scrub
from . import admin, compaction, core, feed, journal, more, settings, verify
from .dashes import commands, dash_hint, near_option, read_negative_words, unrecognized
from .interrupt import prompt_interrupts
from .options import (
    add_global_options,
    add_version,
    attach_negative_values,
    check_urls,
    register_extra_commands,
)
from .output import COMMANDS, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, Output
from .stream import silence_stdout

GROUPS = (core, compaction, admin, feed, journal, verify, settings, more)
"""The command modules, in the order their commands are listed (each registers its own)."""

LISTED = (
    *("get", "put", "delete", "delete-range", "scan", "head", "index-query", "changes"),
    *("stats", "read-manifest", "list-manifests", "verify"),
    *("create-checkpoint", "refresh-checkpoint", "delete-checkpoint", "list-checkpoints", "clone"),
    *("run-compactor", "run-gc", "compact-journal", "rebuild-ledger", "backup", "destroy"),
    *("bench", "settings"),
)
"""The order ``shaledb --help`` lists commands in: reading and writing keys first, then
inspection, checkpoints, maintenance and tools (docs/cli.md follows it). Commands not named
here (say, from an extension) come after, in their module's order."""

MEMORY_HINT = (
    "shaledb: note: a memory:// database lives only in the process that made it, and every "
    "shaledb command is a new process; use a directory (or s3://...) to keep data between commands\n"
)


class _Parser(argparse.ArgumentParser):
    """The top-level parser (and, as argparse makes them of its class, each command's): a
    mistyped command gets the closest command names instead of argparse's list of all 25
    (``shaledb gc`` -> did you mean 'run-gc'?); a key or value that reads as an option gets
    the command line that passes it (:func:`dash_hint`)."""

    commands: tuple[str, ...] = ()
    given: Sequence[str] = ()
    """The command line being parsed (set by :func:`main`), for :func:`dash_hint`."""

    def error(self, message: str) -> NoReturn:
        m = re.match(r"argument COMMAND: invalid choice: '([^']*)'", message)
        if m is not None and self.commands:
            message = f"unknown command {m.group(1)!r}{command_hint(m.group(1), self.commands)}"
            typo = self._mistyped_before(m.group(1))
            if typo is not None:  # ``--pth URL stats``: the URL was read as the command
                word, near = typo
                message = (
                    f"{word!r} is no option of shaledb (did you mean {near!r}?), so {m.group(1)!r} "
                    "was read as the command (shaledb --help lists the options and commands)"
                )
        elif message.startswith("the following arguments are required"):
            message += dash_hint(self, self.given)
        super().error(message)

    def _mistyped_before(self, word: str) -> tuple[str, str] | None:
        """(an unknown ``--option`` typed just before ``word``, the option it is spelled like)."""
        given = list(self.given)
        at = given.index(word) if word in given else -1
        if at < 1 or not given[at - 1].startswith("--") or given[at - 1] in self._option_string_actions:
            return None
        near = near_option(self, given[at - 1])
        return None if near is None else (given[at - 1], near)


_SYNONYMS = {"feed": ("changes",), "change-feed": ("changes",), "tail": ("changes",)}
"""Names the docs use for a command that are not in its name: "the change feed" is
``changes`` (``shaledb feed`` found no hint: not a word of it, nor spelled close)."""


def command_hint(given: str, names: Sequence[str]) -> str:
    """ "; did you mean ...?" naming commands that contain ``given`` as a word or are spelled
    close to it, then where the whole list is ("" is never returned: the list always is)."""
    word = given.lower()
    near = [n for n in names if word and word in n.split("-")]
    near += [n for n in _SYNONYMS.get(word, ()) if n in names and n not in near]
    near += [n for n in difflib.get_close_matches(word, names, n=3, cutoff=0.6) if n not in near]
    quoted = " or ".join(repr(n) for n in near[:3])
    return (f"; did you mean {quoted}?" if near else "") + " (shaledb --help lists the commands)"


def build_parser() -> argparse.ArgumentParser:
    register_extra_commands()
    parser = _Parser(
        prog="shaledb",
        description="Inspect and operate a shaledb database.",
        epilog="Global options may also follow the command: shaledb scan --path DB --json.",
    )
    add_version(parser)
    add_global_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    order = {g.__name__: i for i, g in enumerate(GROUPS)}
    listed = {name: i for i, name in enumerate(LISTED)}
    for name, help_text, configure, handler in sorted(
        COMMANDS, key=lambda c: (listed.get(c[0], len(LISTED)), order.get(c[3].__module__, len(GROUPS)))
    ):
        if name in seen:
            continue
        seen.add(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        add_global_options(p, after_command=True)
        p.set_defaults(handler=handler)
    parser.commands = tuple(sorted(seen))
    return parser


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and its commands' parsers."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out.extend(_parsers(sub))
    return out


def _scrub_logs() -> None:
    """Every log line the CLI writes passes through the one scrubbing function."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())


def _refuse_emptied_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """argparse strips a ``--`` given as an option's value (``--checkpoint=--``) and stores an
    empty list where one string was promised; refuse it as the usage error it is."""
    for name, value in vars(args).items():
        if isinstance(value, list) and not value:
            parser.error(f"--{name.replace('_', '-')} needs a value ('--' is not one)")


def _refuse_nul(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A shell cannot pass a NUL inside an argument (argv is C strings), so one can only come from
    a caller of ``main``; refuse it as a usage error before a path call fails on it deep inside."""
    for arg in argv:
        if "\x00" in arg:
            parser.error(f"argument {arg.replace(chr(0), '<NUL>')!r} contains a NUL character")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    _refuse_nul(parser, given)
    # A word that looks negative is an option's value (``--lifetime -1h``) or a key or value
    # (``put k -1h``), as ``-5`` already was: argparse read ``-1h`` as an unknown option.
    argv = read_negative_words(parser, attach_negative_values(parser, given))
    for p in _parsers(parser):
        if isinstance(p, _Parser):
            p.given = argv
    args, extras = parser.parse_known_args(argv)
    if extras:  # parse_args's refusal, naming the command and with dash_hint's line
        command = commands(parser).get(args.command, parser)
        command.error(unrecognized(command, extras, argv))
    _refuse_emptied_values(parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.verbose and not args.debug:
        # INFO of shaledb's own loggers only (what changes the database's shape or ownership:
        # docs/logging.md); other libraries stay at WARNING.
        logging.getLogger("shaledb").setLevel(logging.INFO)
    _scrub_logs()
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.path is None and not getattr(args, "no_path", False):
        parser.error("--path URL is required")
    out = Output(args.json, show_progress=not args.no_progress, as_jsonl=args.jsonl)
    try:
        check_urls(args)
        with prompt_interrupts():
            rc = args.handler(args, out)
        return EXIT_OK if rc is None else rc
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output left (`scan | head -1`): not an error
        silence_stdout()
        return EXIT_OK
    except (ShaleError, OSError) as exc:
        if args.debug:
            sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
        code = (
            EXIT_NOT_FOUND
            if isinstance(exc, NotFound)
            else EXIT_USAGE
            if isinstance(exc, InvalidArgument)
            else EXIT_ERROR
        )
        sys.stderr.write(f"shaledb: error: {type(exc).__name__}: {scrub(str(exc))}\n")
        if isinstance(exc, NotFound) and str(args.path or "").startswith("memory:"):
            # Each command is a new process, and a memory store lives only in the process
            # that made it: `put` then `get` on memory://x finds nothing, by design.
            sys.stderr.write(MEMORY_HINT)
        return code
    except Exception as exc:  # noqa: BLE001 - a bug: show where, but never a secret it carried
        sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
        return EXIT_ERROR

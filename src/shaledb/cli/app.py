"""The ``shaledb`` command line: ``shaledb --path URL <command> [options]``.

Output is a human table by default and JSON with ``--json``; long commands
draw a progress line on stderr when it is a terminal. Errors print
one line (``shaledb: error: ...``) unless ``--debug`` asks for the traceback.
Exit codes: 0 success, 1 a shaledb error (corruption, fenced, unavailable),
2 bad usage or arguments, 3 not found (missing database, checkpoint or key).

Commands register themselves with ``shaledb.cli.output.command``; each module
that adds a capability (compaction, checkpoints, the journal) adds its commands
in ``shaledb/cli/*.py`` and is listed in :data:`GROUPS`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..errors import InvalidArgument, NotFound, ShaleError
from . import admin, compaction, core, journal, verify
from .output import COMMANDS, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, Output

GROUPS = (core, compaction, admin, journal, verify)
"""The command modules, in the order their commands are listed (each registers its own)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shaledb", description="Inspect and operate a shaledb database.")
    parser.add_argument(
        "--path", required=False, help="database URL (local path, file://, memory://, s3://, ...)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable JSON output")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress line on stderr (drawn only on a terminal)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    order = {g.__name__: i for i, g in enumerate(GROUPS)}
    for name, help_text, configure, handler in sorted(COMMANDS, key=lambda c: order[c[3].__module__]):
        if name in seen:
            continue
        seen.add(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.path is None and not getattr(args, "no_path", False):
        parser.error("--path URL is required")
    out = Output(args.json, show_progress=not args.no_progress)
    try:
        rc = args.handler(args, out)
        return EXIT_OK if rc is None else rc
    except KeyboardInterrupt:
        return 130
    except (ShaleError, OSError) as exc:
        if args.debug:
            raise
        code = (
            EXIT_NOT_FOUND
            if isinstance(exc, NotFound)
            else EXIT_USAGE
            if isinstance(exc, InvalidArgument)
            else EXIT_ERROR
        )
        sys.stderr.write(f"shaledb: error: {type(exc).__name__}: {exc}\n")
        return code

"""CLI settings: where commands that open a writer get theirs, and ``shaledb settings``.

Commands read settings as a service does (``shaledb.settings_load``): the
defaults, then the TOML file named by ``--settings`` or ``SHALEDB_SETTINGS_FILE``,
then ``SHALEDB_*`` variables, then what the command itself must fix (CLI work
runs without the embedded compactor and collector).
"""

from __future__ import annotations

import argparse
from typing import Any

from .cli import Output, command
from .settings import Settings


def cli_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The settings a command opens a writer with."""
    from .settings_load import load_settings

    return load_settings(Settings, path=getattr(args, "settings_file", None), **overrides)


def _settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--defaults", action="store_true", help="print the defaults, not the effective settings")
    p.set_defaults(no_path=True)


@command("settings", "print settings as TOML: the effective ones (file + environment) or --defaults")(
    _settings_args
)
def settings(args: argparse.Namespace, out: Output) -> int | None:
    s = Settings() if args.defaults else cli_settings(args)
    if out.as_json:
        out.emit(s.to_dict())
    else:
        out.stream.write(s.to_toml())
    return None

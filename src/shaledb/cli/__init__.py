"""The ``shaledb`` command line: ``main`` parses and dispatches; one module per
command group registers its commands."""

from .app import main

__all__ = ["main"]

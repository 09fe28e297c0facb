"""The build backend: setuptools' own, with a wheel built from a clean staging directory.

Why: setuptools stages a wheel's files in ``build/lib`` and never empties it, so a module
deleted from ``src/`` since the last build (``pip wheel .``, ``pip install .``) was still
shipped in the next wheel, importable and stale. Every build here starts from an empty
``build/lib``; everything else is ``setuptools.build_meta`` unchanged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks this module does not change)

_STAGING = Path("build") / "lib"  # setuptools' default build_lib, relative to the project (the cwd)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    shutil.rmtree(_STAGING, ignore_errors=True)
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)

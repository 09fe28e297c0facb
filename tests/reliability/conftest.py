"""Fixtures of the reliability tests: soak targets on a local directory and on the S3 server."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shaledb.testing.crashsoak import SoakTarget


@pytest.fixture
def soak_targets(tmp_path: Path, s3_url_factory: Callable[[], Any]) -> list[tuple[SoakTarget, bool]]:
    """Four databases: local and S3, each with value separation off and on."""
    out: list[tuple[SoakTarget, bool]] = []
    for vsep in (False, True):
        local = tmp_path / f"local-{int(vsep)}"
        out.append((SoakTarget(f"local{int(vsep)}", str(local / "db"), str(local / "aux")), vsep))
        loc = s3_url_factory()
        aux = loc.url.rsplit("/", 1)[0] + f"/aux-{uuid.uuid4().hex}"
        out.append((SoakTarget(f"s3-{int(vsep)}", loc.url, aux, loc.env(), loc.options), vsep))
    return out

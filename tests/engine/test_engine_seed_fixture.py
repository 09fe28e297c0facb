"""The engine tests' ``seed`` fixture replays ``SHALEDB_TEST_SEED`` (it once ignored it)."""

from __future__ import annotations

import pytest


def test_the_seed_fixture_takes_shaledb_test_seed(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHALEDB_TEST_SEED", "4242")
    assert request.getfixturevalue("seed") == 4242
    assert "rerun with SHALEDB_TEST_SEED=4242" in capsys.readouterr().out

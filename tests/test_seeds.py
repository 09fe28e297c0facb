"""Every randomized test is replayable with one variable, ``SHALEDB_TEST_SEED``.

A test that draws its own seed (``random.randrange``, ``SystemRandom``,
``os.urandom``) or reads a suite-specific variable cannot be replayed with the
line ``test_seed()`` prints; they all go through ``shaledb.testing.seeds``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shaledb.testing.seeds import run_seed, test_seed

TESTS = Path(__file__).parent
OWN_SEED = re.compile(
    r"SystemRandom\(|os\.urandom\(|seed\w* = (int\()?random\.randrange|environ\.get\(\"SHALEDB_\w*SEED"
)


def test_no_randomized_test_makes_its_own_seed() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{n}: {line.strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OWN_SEED.search(line) and path != Path(__file__)
    ]
    assert not found, "use shaledb.testing.seeds.test_seed():\n" + "\n".join(found)


def test_the_variable_replays_a_seed_and_the_printed_line_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHALEDB_TEST_SEED", "12345")
    monkeypatch.setenv("SHALEDB_FUZZ_SEED", "999")
    assert test_seed("SHALEDB_FUZZ_SEED") == 12345
    assert "seed=12345 (rerun with SHALEDB_TEST_SEED=12345)" in capsys.readouterr().out
    monkeypatch.delenv("SHALEDB_TEST_SEED")
    assert run_seed("SHALEDB_FUZZ_SEED") == 999  # the older per-suite variable still works

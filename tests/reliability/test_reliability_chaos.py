"""Chaos: a writer and a reader process on the S3 server through the fault proxy, killed at
random moments, then the whole history checked (shaledb.testing.chaos).

``test_chaos_short`` runs in ``make test``; ``test_chaos`` is part of ``make soak``
(``SHALEDB_CHAOS_ROUNDS``, default 20; ``SHALEDB_CHAOS_SCALE`` multiplies every fault
rate, default 1: about 19% of requests faulted). Seeds are printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db
from shaledb.testing.chaos import run_chaos
from shaledb.testing.seeds import test_seed
from shaledb.testing.soak_worker import settings_for

RATES = {"delay": 0.05, "fail_before": 0.04, "reset_before": 0.03, "fail_after": 0.04, "reset_after": 0.03}


def _run(
    tmp_path: Path,
    moto_endpoint: str,
    s3_url_factory: Callable[[], Any],
    rounds: int,
    seed: int,
    round_s: tuple[float, float] = (1.0, 3.0),
) -> None:
    print(f"chaos seed {seed}")
    loc = s3_url_factory()
    stats, verdict = run_chaos(
        moto_endpoint,
        loc.url,
        {k: v for k, v in loc.env().items() if k != "AWS_ENDPOINT_URL"},
        lambda: Db.open(store=loc.open(), settings=settings_for(False)),
        tmp_path,
        seed=seed,
        rounds=rounds,
        rates={k: v * float(os.environ.get("SHALEDB_CHAOS_SCALE", "1")) for k, v in RATES.items()},
        round_s=round_s,
    )
    assert verdict.ok, f"seed {seed}: {verdict.reason}"
    assert sum(v for k, v in stats.faults.items() if k != "pass") > 0, stats.summary()
    assert stats.writes_acknowledged > 0, stats.summary()
    assert stats.reader_scans > 0, stats.summary()


def test_chaos_short(tmp_path: Path, moto_endpoint: str, s3_url_factory: Callable[[], Any]) -> None:
    _run(
        tmp_path,
        moto_endpoint,
        s3_url_factory,
        2,
        test_seed("SHALEDB_CHAOS_SEED"),
        round_s=(0.5, 1.5),
    )


@pytest.mark.soak
def test_chaos(tmp_path: Path, moto_endpoint: str, s3_url_factory: Callable[[], Any]) -> None:
    rounds = int(os.environ.get("SHALEDB_CHAOS_ROUNDS", "20"))
    _run(
        tmp_path,
        moto_endpoint,
        s3_url_factory,
        rounds,
        test_seed("SHALEDB_CHAOS_SEED"),
    )

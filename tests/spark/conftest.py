"""One local Spark session for the whole run (a JVM costs ~10 s to start).

``local[2,4]``: two cores, and up to four attempts per task (local mode
ignores ``spark.task.maxFailures`` unless the master says so), so a task
failure injected on a first attempt is retried. Speculation is switched on,
though Spark never launches a speculative copy on the host that runs the
original attempt, which on one machine means never: the speculation test
emulates what a losing attempt leaves behind (see test_spark_ingest.py).
Nothing here imports pyspark at collection time, so the core suite
(``-m "not spark"``) runs without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from shaledb import spark as shale_spark

    session = shale_spark.local_session(
        "shaledb-tests",
        master="local[2,4]",
        conf={
            "spark.driver.memory": "1g",
            "spark.speculation": "true",
            "spark.local.dir": str(tmp_path_factory.mktemp("spark-local")),
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
        },
    )
    yield session
    session.stop()

"""Whether Spark's Python workers can import shaledb (checked by ``register``).

PySpark starts its Python workers (and the planner processes that run a data
source's ``schema()``/``writer()``) with the interpreter named by
``PYSPARK_PYTHON`` when the ``SparkContext`` was made, else ``python3`` from
``PATH``. A user who runs ``.venv/bin/python job.py`` without activating the
venv gets workers on the system interpreter, and the first query fails deep
in a worker traceback with ``No module named 'shaledb'``. In local mode the
workers run on this host, so the mistake can be found before any job runs:
start that interpreter once and try the import. On a cluster the workers'
interpreters are not here to ask, so nothing is checked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache

from ..errors import SetupError

_CHECK_TIMEOUT_S = 60.0


def check_worker_python(python_exec: str, master: str) -> None:
    """Raise :class:`SetupError` when local Spark workers would run ``python_exec``
    and that interpreter cannot import shaledb; return otherwise (also when the
    master is not local, or the check itself could not decide)."""
    if not master.startswith("local"):
        return
    found = shutil.which(python_exec)
    if found is None:
        raise SetupError(
            f"Spark's Python workers would run {python_exec!r}, which is not on PATH; "
            f"set PYSPARK_PYTHON={sys.executable} before the SparkSession starts "
            "(or use shaledb.spark.local_session())"
        )
    if os.path.abspath(found) == os.path.abspath(sys.executable):
        return
    problem = _import_problem(os.path.abspath(found), os.environ.get("PYTHONPATH", ""))
    if problem:
        raise SetupError(
            f"Spark's Python workers would run {python_exec!r} ({found}), which cannot import "
            f"shaledb ({problem}); set PYSPARK_PYTHON={sys.executable} before the SparkSession "
            "starts (or use shaledb.spark.local_session())"
        )


@lru_cache(maxsize=8)
def _import_problem(python: str, pythonpath: str) -> str:
    """The ``ModuleNotFoundError`` line ``python`` prints importing shaledb, or "".

    Cached per interpreter and ``PYTHONPATH`` (workers inherit this process's
    environment in local mode): ``register`` may run often, a Python start-up
    costs tens of milliseconds. Any other failure (a timeout, a crash) answers
    "": the check only reports what it is sure of.
    """
    try:
        done = subprocess.run(
            [python, "-c", "import shaledb"],
            capture_output=True,
            text=True,
            timeout=_CHECK_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": pythonpath},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    if done.returncode == 0:
        return ""
    lines = [ln for ln in done.stderr.splitlines() if "No module named" in ln]
    return lines[-1].strip() if lines else ""


__all__ = ["check_worker_python"]

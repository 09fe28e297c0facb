"""Is the spark extra installed? If not, say so with the line that installs it.

Without pyspark or pyarrow, ``register`` failed with a bare ``ModuleNotFoundError: No
module named 'pyarrow'`` from deep inside the data source, which did not say that shaledb
has an extra for it. Here, kept apart from ``shaledb.spark`` so its submodules can use it
while the package is still loading.
"""

from __future__ import annotations

import importlib
import sys

from ..errors import ExtraMissing

EXTRA = ("pyspark", "pyarrow", "pandas")
"""The packages of the spark extra (``pip install 'shaledb[spark]'``)."""


def missing_extra() -> ExtraMissing | None:
    """The error naming the extra's missing packages and the install line, or None."""
    missing: list[str] = []
    said: list[str] = []
    for module in ("pyspark", "pyarrow"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(module)
            said.append(str(exc))
    if not missing:
        return None
    return ExtraMissing(
        f"shaledb.spark needs {' and '.join(missing)}, not installed "
        f"here ({sys.executable}): install the spark extra, pip install 'shaledb[spark]' "
        f"(PySpark with pyarrow and pandas; also Java 17); the imports said: {'; '.join(said)}"
    )


def extra_error(exc: ImportError) -> ImportError:
    """``exc``, or :class:`~shaledb.errors.ExtraMissing` when what it failed to import is a
    package of the extra (a submodule's ``import pyspark...`` re-raises this)."""
    if (exc.name or "").partition(".")[0] in EXTRA:
        return missing_extra() or exc
    return exc

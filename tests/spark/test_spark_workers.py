"""register() refuses a local session whose Python workers cannot import shaledb.

The interpreters are real: this one, and this one started isolated (``-I -S``:
no site-packages, no PYTHONPATH), which is what a worker on the system
``python3`` looks like to a user who ran ``.venv/bin/python job.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from shaledb.errors import SetupError
from shaledb.spark.workers import _import_problem, check_worker_python


def _python_without_shaledb(tmp_path: Path) -> str:
    script = tmp_path / "python-no-shaledb"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_this_interpreter_and_clusters_are_not_checked() -> None:
    check_worker_python(sys.executable, "local[2]")
    check_worker_python("no-such-python-anywhere", "spark://host:7077")  # not ours to ask


def test_a_worker_python_that_cannot_import_shaledb_is_refused(tmp_path: Path) -> None:
    exe = _python_without_shaledb(tmp_path)
    with pytest.raises(SetupError) as e:
        check_worker_python(exe, "local[2]")
    msg = str(e.value)
    assert "cannot import shaledb" in msg and "No module named 'shaledb'" in msg
    assert f"PYSPARK_PYTHON={sys.executable}" in msg and "local_session" in msg


def test_a_worker_python_missing_from_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SetupError, match="'python3', which is not on PATH"):
        check_worker_python("python3", "local[*]")


def test_another_interpreter_that_has_shaledb_passes(tmp_path: Path) -> None:
    """A different path to a working interpreter (a wrapper script) is asked, and passes."""
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    assert _import_problem(str(wrapper), os.environ.get("PYTHONPATH", "")) == ""
    check_worker_python(str(wrapper), "local[2]")


def test_a_failure_other_than_a_missing_module_does_not_block(tmp_path: Path) -> None:
    broken = tmp_path / "python-broken"
    broken.write_text("#!/bin/sh\necho 'Segmentation fault' >&2\nexit 139\n")
    broken.chmod(0o755)
    assert _import_problem(str(broken), "") == ""
    check_worker_python(str(broken), "local[2]")


@pytest.mark.spark
def test_register_checks_the_sessions_worker_python(spark: Any, tmp_path: Path) -> None:
    from shaledb import spark as shale_spark

    sc = spark.sparkContext
    before = sc.pythonExec
    sc.pythonExec = _python_without_shaledb(tmp_path)  # as if PYSPARK_PYTHON had named it
    try:
        with pytest.raises(SetupError, match="cannot import shaledb"):
            shale_spark.register(spark)
    finally:
        sc.pythonExec = before
    shale_spark.register(spark)  # the session's own interpreter passes
    assert spark.range(3).count() == 3


@pytest.mark.parametrize("module", ["pyspark", "pyarrow"])
def test_without_the_spark_extra_the_first_calls_name_it(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """register() and local_session() without a package of the spark extra: a SetupError naming
    ``pip install 'shaledb[spark]'``; before, register() raised ``ModuleNotFoundError: No module
    named 'pyarrow'`` from inside the data source and local_session() the same for pyspark.
    No session is started (the check comes first)."""
    from shaledb import spark as shale_spark

    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    for call in (lambda: shale_spark.register(object()), lambda: shale_spark.local_session("x")):
        with pytest.raises(SetupError) as e:
            call()
        # (names every missing package: the core suite's venv has neither, so "needs pyspark and
        # pyarrow" there, and a test of one hidden package must find its name among them)
        needs = str(e.value).partition("needs ")[2].partition(", not installed")[0].split(" and ")
        assert "pip install 'shaledb[spark]'" in str(e.value) and module in needs, str(e.value)


@pytest.mark.parametrize("submodule", ["source", "stream", "transforms", "load"])
def test_without_the_spark_extra_a_submodule_names_it(
    monkeypatch: pytest.MonkeyPatch, submodule: str
) -> None:
    """docs/service.md reads ``shaledb.spark.stream.CHANGES_SCHEMA`` after ``import shaledb.spark``:
    without the extra that raised a bare ``ModuleNotFoundError: No module named 'pyspark'``;
    it is the SetupError that ``register`` raises, naming ``pip install 'shaledb[spark]'``."""
    from shaledb import spark as shale_spark

    if submodule in vars(shale_spark):  # (loaded by an earlier test)
        monkeypatch.delattr(shale_spark, submodule)
    monkeypatch.delitem(sys.modules, f"shaledb.spark.{submodule}", raising=False)
    for module in [m for m in sys.modules if m.partition(".")[0] in ("pyspark", "pyarrow")] + [
        "pyspark",
        "pyarrow",
    ]:
        monkeypatch.setitem(sys.modules, module, None)  # as if neither were installed (nor imported)
    with pytest.raises(SetupError, match=r"pip install 'shaledb\[spark\]'"):
        getattr(shale_spark, submodule)


@pytest.mark.parametrize("submodule", ["source", "stream", "transforms", "load"])
def test_without_the_spark_extra_hasattr_says_no_and_imports_still_name_it(
    monkeypatch: pytest.MonkeyPatch, submodule: str
) -> None:
    """``hasattr(shaledb.spark, "stream")`` raised SetupError without the extra (``__getattr__``
    raised it, and hasattr lets anything but AttributeError through). The error of attribute
    access is now also an AttributeError, so hasattr says False and getattr's default is
    given; importing the submodule raises ExtraMissing, also an ImportError, with the same
    message (not the bare ``No module named 'pyspark'``)."""
    from shaledb import spark as shale_spark
    from shaledb.errors import ExtraMissing, ExtraMissingAttribute

    if submodule in vars(shale_spark):  # (loaded by an earlier test)
        monkeypatch.delattr(shale_spark, submodule)
    monkeypatch.delitem(sys.modules, f"shaledb.spark.{submodule}", raising=False)
    for module in [m for m in sys.modules if m.partition(".")[0] in ("pyspark", "pyarrow")] + [
        "pyspark",
        "pyarrow",
    ]:
        monkeypatch.setitem(sys.modules, module, None)  # as if neither were installed (nor imported)
    assert hasattr(shale_spark, submodule) is False
    assert getattr(shale_spark, submodule, "absent") == "absent"
    with pytest.raises(ExtraMissingAttribute, match=r"pip install 'shaledb\[spark\]'") as attr:
        getattr(shale_spark, submodule)
    assert isinstance(attr.value, AttributeError) and isinstance(attr.value, SetupError)
    with pytest.raises(ImportError, match=r"pip install 'shaledb\[spark\]'") as imported:
        exec(f"from shaledb.spark import {submodule}", {})
    assert isinstance(imported.value, ExtraMissing) and isinstance(imported.value, SetupError)
    assert f"shaledb.spark.{submodule}" not in sys.modules  # a failed import leaves nothing half-made

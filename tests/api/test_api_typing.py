"""The public API as a type checker sees it from a user's code (``py.typed`` ships it).

``typing_user/user_script.py`` uses the public API with ``assert_type`` on what it gets back,
and is checked with ``mypy --strict --disallow-any-expr``: a result that is ``Any`` (dbm's
``get`` and ``handle`` were), a union where the arguments decide the type (``index_query``
with ``return_terms=True``, ``fold_objects(order="sqn")``), or a parameter typed tighter than
what the rest of the API takes (``store_options`` a ``dict[str, Any]`` on ``Compactor.open``,
``GarbageCollector.open``, ``open_changes`` and ``dbm.open``, a ``Mapping`` elsewhere; a URL
typed ``str`` where a ``pathlib.Path`` works; ``PrometheusCollector`` taking ``Any``) fails
the check. ``typing_user/wrong.py`` holds deliberate mistakes (a ``# error: CODE`` comment on
each) that must be reported, each and nothing else, so a clean run means the checker saw real
types. The package's own modules are followed silently,
as a user's checker follows an installed package; ``make lint`` checks them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent / "typing_user"
SRC = Path(__file__).parents[2] / "src"


def test_a_user_script_type_checks_with_the_types_the_api_promises(tmp_path: Path) -> None:
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\n"
        "strict = True\n"
        "disallow_any_expr = True\n"
        "python_version = 3.11\n"
        f"mypy_path = {SRC}\n"
        f"cache_dir = {tmp_path / 'cache'}\n"
        "[mypy-shaledb.*]\n"
        "follow_imports = silent\n"
    )
    started = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            str(HERE / "user_script.py"),
            str(HERE / "wrong.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    print(f"mypy took {time.monotonic() - started:.1f}s")
    wrong = HERE / "wrong.py"
    expected = {
        f"{wrong}:{n}: [{m.group(1)}]"
        for n, line in enumerate(wrong.read_text().splitlines(), 1)
        if (m := re.search(r"# error: ([a-z-]+)", line))
    }
    assert expected, "wrong.py marks no mistake"
    found = {
        f"{m.group(1)}: [{m.group(2)}]"
        for m in re.finditer(r"^(.*?:\d+): (?:error|note): .*?(?:\[([a-z-]+)\])?$", p.stdout, re.M)
    }
    assert found == expected, p.stdout + p.stderr

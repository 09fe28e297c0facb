#!/usr/bin/env bash
# Create bench/.venv-anchors: a separate interpreter for the anchor engines.
#
# The anchors (SlateDB's Python binding, rocksdict, plyvel, lmdb) are what shaledb is
# compared with, not what it depends on, so they stay out of pyproject.toml and out of
# the project venv. This venv also gets shaledb itself (editable), so every engine can
# run under one interpreter; `bench/run.py suite` still picks the interpreter per engine
# (shaledb and pydict on .venv, anchors on .venv-anchors) and records it in each result.
#
# A package that fails to install is reported and skipped: the suite then records that
# engine as unavailable instead of stopping.
#
# Usage: bench/setup_anchors.sh            (from anywhere; PYTHON=python3.11 to choose)
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=bench/.venv-anchors
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || exit 1
    "${PIP[@]}" -U "pip>=24,<27" || true
fi

# Pinned to the versions in shared/bench/RESULTS.md so anchor figures line up with it.
ANCHORS=("slatedb==0.17.0" "rocksdict==0.3.29" "plyvel==1.5.1" "lmdb==3.0.0")
failed=()
for pkg in "${ANCHORS[@]}"; do
    if "${PIP[@]}" "$pkg"; then
        echo "installed $pkg"
    else
        echo "FAILED to install $pkg (the suite will mark that engine unavailable)" >&2
        failed+=("$pkg")
    fi
done

# shaledb itself (editable, with its test extra for moto_server and psutil) so that one
# interpreter can run every engine if wanted.
if "${PIP[@]}" -c requirements/lock.txt -e '.[test]'; then
    echo "installed shaledb (editable)"
else
    echo "FAILED to install shaledb into $VENV" >&2
    failed+=("shaledb")
fi

"$VENV/bin/python" - <<'PY'
import importlib
for mod in ("slatedb", "rocksdict", "plyvel", "lmdb", "shaledb"):
    try:
        importlib.import_module(mod)
        print("import ok:", mod)
    except Exception as exc:  # report and go on: a missing anchor is not fatal
        print("import FAILED:", mod, type(exc).__name__, exc)
PY

if [ ${#failed[@]} -gt 0 ]; then
    echo "not installed: ${failed[*]}" >&2
fi
exit 0

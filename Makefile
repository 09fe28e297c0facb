# shaledb: `make test` runs lint, types and the whole test suite; `make demo` runs the main job.
# Both create .venv and install what they need from PyPI, pinned by requirements/lock.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements/lock.txt
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c $(LOCK)

.PHONY: test test-core test-spark lint demo bench bench-anchors clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U "pip>=24,<27"

$(VENV)/.test: $(BIN)/python pyproject.toml $(LOCK)
	$(PIP) -e '.[test]'
	touch $@

$(VENV)/.spark: $(VENV)/.test
	$(PIP) -e '.[test,spark]'
	touch $@

lint: $(VENV)/.test
	$(BIN)/ruff check --no-cache src tests bench
	$(BIN)/ruff format --check --no-cache src tests bench
	$(BIN)/mypy

test-core: $(VENV)/.test
	$(BIN)/pytest -m "not spark" -p no:randomly

# mypy again once numpy and pyarrow are installed: without them their uses type-check as Any.
test-spark: $(VENV)/.spark
	$(BIN)/mypy
	$(BIN)/pytest -m spark

test: lint test-core test-spark

demo: $(VENV)/.spark
	$(BIN)/python -m shaledb.spark.demo $(DEMO_ARGS)

bench: $(VENV)/.spark
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# The engines shaledb is compared with (RocksDB, LevelDB, LMDB, SlateDB) live in their own venv.
bench-anchors:
	bench/setup_anchors.sh

lock:
	rm -rf /tmp/shaledb-lock && $(PYTHON) -m venv /tmp/shaledb-lock
	/tmp/shaledb-lock/bin/python -m pip install -q -U "pip>=24,<27"
	/tmp/shaledb-lock/bin/python -m pip install -q -e '.[test,spark]'
	/tmp/shaledb-lock/bin/python -m pip freeze --exclude-editable | grep -v '^-e' > $(LOCK)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

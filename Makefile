# shaledb: `make test` runs lint, types and the whole test suite; `make demo` runs the main job.
# Both create .venv and install what they need from PyPI, pinned by requirements/lock.txt.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements/lock.txt
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c $(LOCK)

.PHONY: help test test-core test-spark lint docs demo bench bench-anchors clean lock soak soak-spark

# A bare `make` prints this list (it used to create .venv: the first rule below was the default).
.DEFAULT_GOAL := help
help:
	@echo "make test           lint, types, the docs build and the whole test suite (creates .venv)"
	@echo "make test-core      the test suite without Spark and soak tests"
	@echo "make test-spark     the PySpark tests (Java 17 needed)"
	@echo "make lint           ruff check, ruff format --check, mypy --strict"
	@echo "make docs           the API reference from the docstrings into build/docs (mkdocs --strict)"
	@echo "make demo           the main job: the NYC flights pipeline on Spark (DEMO_ARGS=s3://...)"
	@echo "make soak           the kill -9 crash soak and chaos runs (SOAK_ARGS=..., not part of make test)"
	@echo "make soak-spark     Spark drivers killed and restarted (not part of make test)"
	@echo "make bench          the benchmarks (BENCH_ARGS=..., bench/README.md)"
	@echo "make bench-anchors  once: bench/.venv-anchors with RocksDB, LevelDB, LMDB, SlateDB"
	@echo "make lock           regenerate requirements/lock.txt"
	@echo "make clean          remove .venv, .servers and the tool caches"
	@echo "make .venv/.test    .venv with the test extra, pinned by requirements/lock.txt"
	@echo "make .venv/.spark   ... plus the spark and demo extras"
	@echo "make help           this list (also: make alone)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U "pip>=24,<27"

$(VENV)/.test: $(BIN)/python pyproject.toml $(LOCK)
	$(PIP) -e '.[test]'
	touch $@

$(VENV)/.spark: $(VENV)/.test
	$(PIP) -e '.[test,spark,demo]'
	touch $@

# Storage emulators the tests start (Azurite, from the npm registry), pinned by
# tests/servers/package-lock.json and installed into .servers/. A failed install does not
# stop the run: the tests that need the server are skipped and say why.
SERVERS := .servers
$(SERVERS)/.installed: tests/servers/package.json tests/servers/package-lock.json
	mkdir -p $(SERVERS)
	cp tests/servers/package.json tests/servers/package-lock.json $(SERVERS)/
	if cd $(SERVERS) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error; then \
		touch .installed; \
	else \
		echo "WARNING: could not install the storage emulators (npm ci in $(SERVERS)); their tests will be SKIPPED"; \
	fi
$(VENV)/.docs: $(VENV)/.test
	$(PIP) -e '.[test,docs]'
	touch $@

# The API reference from the docstrings (mkdocs.yml); --strict: a broken reference fails it.
docs: $(VENV)/.docs
	$(BIN)/mkdocs build --strict --quiet

lint: $(VENV)/.test
	$(BIN)/ruff check --no-cache src tests bench
	$(BIN)/ruff format --check --no-cache src tests bench
	$(BIN)/mypy

test-core: $(VENV)/.test $(SERVERS)/.installed
	$(BIN)/pytest -m "not spark and not soak" -p no:randomly

# mypy again once numpy and pyarrow are installed: without them their uses type-check as Any.
test-spark: $(VENV)/.spark $(SERVERS)/.installed
	$(BIN)/mypy
	$(BIN)/pytest -m "spark and not soak"

test: lint docs test-core test-spark

# kill -9 soak of every role on a local directory and the S3 server, and the chaos runs
# through the fault proxy; sized by SHALEDB_SOAK_* variables (docs/reliability.md).
soak: $(VENV)/.test
	$(BIN)/pytest -m soak -p no:randomly -s --timeout=0 tests/reliability $(SOAK_ARGS)

# Spark drivers SIGKILLed at random points and restarted (tests/spark, markers spark and soak):
# a minute or more each, so not part of make test.
soak-spark: $(VENV)/.spark
	$(BIN)/pytest -m "spark and soak" -p no:randomly -s tests/spark $(SOAK_ARGS)

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
	/tmp/shaledb-lock/bin/python -m pip install -q -e '.[test,spark,demo,docs]'
	/tmp/shaledb-lock/bin/python -m pip freeze --exclude-editable | grep -v '^-e' > $(LOCK)

clean:
	rm -rf $(VENV) $(SERVERS) .mypy_cache .ruff_cache .pytest_cache

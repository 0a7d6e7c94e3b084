# factoryctl — `make run` (demo on SQLite with example-factory/) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= .factory/demo

.PHONY: run test test-unit lint typecheck check install bench clean

# Default (lenient) editable mode: a finder maps exactly the six packages to this checkout ("compat" is
# deprecated and warned). The filter drops setuptools' "Editable installation." notice, which it raises
# as a warning only because pip shows nothing else (setuptools.warnings.InformationOnly).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Test data and tools from npm (package.json, pinned by package-lock.json): the official GitHub webhook
# example payloads and their signer, and the agent CLIs the worker presets drive in tests (Claude Code,
# Codex, Gemini CLI; ~900 MB). Without npm nothing is installed and `make test` says what that costs.
NODE_STAMP := node_modules/.package-lock.json
NPM := $(shell command -v npm 2>/dev/null)
$(NODE_STAMP): package-lock.json
ifeq ($(NPM),)
	@echo "warning: npm is not installed, so package.json's test data and agent CLIs are not: the tests" >&2
	@echo "  that read the GitHub webhook examples fail, and the tests that drive claude, codex and gemini" >&2
	@echo "  skip. Install Node.js 20+ with npm (apt-get install nodejs npm) and run make again." >&2
else
	npm ci --no-audit --no-fund
endif

install: $(STAMP) $(NODE_STAMP)

# `make run` needs the runtime dependencies only (not the dev extras: pytest, Playwright, mypy...); a venv
# that `make install` or `make test` made already has them. `make run PORT=8081 HOST=0.0.0.0`.
HOST ?= 127.0.0.1
PORT ?= 8080
RUN_STAMP := $(VENV)/.installed-runtime
$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

run: $(if $(wildcard $(STAMP)),$(STAMP),$(RUN_STAMP))
	$(BIN)/python -m factoryctl.demo --data-dir $(DATA) --host $(HOST) --port $(PORT) example-factory

# The suite runs on every core, up to 4 (pytest-xdist; a module stays on one worker, so its module-scoped
# servers start once). Each worker has its own SQLite files and its own PostgreSQL template database.
test: $(STAMP) $(NODE_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 -n auto --maxprocesses=4 --dist loadfile tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check store reconciler api factoryctl schemas safegit tests bench tools
	$(BIN)/ruff format --check store reconciler api factoryctl schemas safegit
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

# The API fuzz test (tests/integration/api/test_fuzz_api.py) with many more cases than `make test` runs;
# docs/api.md, "Fuzzing". FUZZ_SEED=N tries other cases.
.PHONY: fuzz
FUZZ_EXAMPLES ?= 1000
FUZZ_SEED ?= 20260131
fuzz: $(STAMP)
	FACTORY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FACTORY_FUZZ_SEED=$(FUZZ_SEED) \
		$(BIN)/python -m pytest -q -p no:cacheprovider -rP tests/integration/api/test_fuzz_api.py

# PNGs of every console page (docs/console/), from a seeded demo server driven by Chromium.
.PHONY: screenshots
screenshots: $(STAMP)
	$(BIN)/python tools/screenshots.py --out docs/console

# `make bench` lists the benchmarks; `make bench BENCH=console ARGS="--database-url postgresql://..."` runs one
# (bench/NAME.py --help; figures and commands: docs/benchmarks.md).
BENCH ?=
ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH) $(ARGS)

clean:
	rm -rf $(VENV) node_modules .factory .pytest_cache .mypy_cache .ruff_cache

# factoryctl — `make run` (demo on SQLite with example-factory/) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= .factory/demo

.PHONY: run test test-unit lint typecheck check install bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]" --config-settings editable_mode=compat
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m factoryctl.demo --data-dir $(DATA) example-factory

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check store reconciler api factoryctl schemas tests bench tools
	$(BIN)/ruff format --check store reconciler api factoryctl schemas
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .factory .pytest_cache .mypy_cache .ruff_cache

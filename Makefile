# lakelog developer tasks. Every target creates .venv on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help venv demo test test-fast lint bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,spark,s3]'
	touch $(STAMP)

venv: $(STAMP)  ## create .venv with everything installed

demo: $(STAMP)  ## run the end-to-end demo on local disk (no Spark)
	$(BIN)/python examples/demo.py

test: $(STAMP)  ## lint, type-check and run the whole test suite (Spark and S3 included)
	$(BIN)/ruff check lakelog tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --dist loadgroup

test-fast: $(STAMP)  ## the inner loop: no Spark, S3 server, process races or slow tests (< 3 min)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "not spark and not s3 and not processes and not slow"

lint: $(STAMP)  ## ruff + mypy
	$(BIN)/ruff check lakelog tests benchmarks examples
	$(BIN)/ruff format --check lakelog tests benchmarks examples
	$(BIN)/mypy

bench: $(STAMP)  ## run every benchmark (minutes; see docs/benchmarks.md)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:  ## remove .venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# dflash.deploy — developer entry points. `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
FIXTURES := build/fixtures
PYTEST_ARGS ?=

.PHONY: help setup pins lint fixtures unit fixture-tests chain sanity test bench clean

help:
	@echo "make setup     toolchain venv (.venv) with uv from requirements/toolchain.txt"
	@echo "make test      everything CI runs: lint, fixtures, unit, fixture chain, sanity"
	@echo "make fixtures  build the fixture packages into $(FIXTURES) (wheelhouse + simple index)"
	@echo "make bench     benchmarks (not part of make test)"

setup:
	@bash tools/setup.sh

# Regenerate the one pin file from requirements/toolchain.in (network).
pins: setup
	.tools/uv/bin/uv pip compile --quiet --python 3.11 requirements/toolchain.in -o requirements/toolchain.txt

lint: setup
	$(VENV)/bin/ruff check .
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH ansible-lint --offline --profile production -q

fixtures: setup
	$(PY) tests/fixtures/build.py --out $(FIXTURES)

# Module and module_utils unit tests.
unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

# The fixture packages themselves (ELF layout checked against pyelftools/readelf,
# wheel writer, sglang fixture server behaviour).
fixture-tests: fixtures
	$(VENV)/bin/pytest -q tests/fixtures $(PYTEST_ARGS)

# The seeds' failure chain (a)-(f), end to end in uv venvs from the fixture index.
chain: fixtures
	$(VENV)/bin/pytest -q tests/chain $(PYTEST_ARGS)

sanity: setup
	bash tools/sanity.sh

test: lint fixtures unit fixture-tests chain sanity
	@echo "make test: all stages passed"

bench: fixtures
	@set -e; for b in bench/bench_*.py; do [ -e "$$b" ] || continue; echo "== $$b"; $(PY) "$$b"; done

clean:
	rm -rf build tests/output .pytest_cache .ruff_cache

# dflash.deploy — developer entry points. `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
FIXTURES := build/fixtures
PYTEST_ARGS ?= --durations=15

.PHONY: help setup pins lint fixtures changelog-release unit integration fixture-tests chain sanity collection test bench bench-venv bench-deploy clean \
	lab-up lab-down lab-status lab-test lab-suite molecule test-shuffled demo test-matrix matrix-pins gpu-kit gpu-systemd-debs matrix-oldest \
	galaxy-import

help:
	@echo "make setup     toolchain venv (.venv) with uv from requirements/toolchain.txt"
	@echo "make test      everything CI runs: lint, fixtures, unit, fixture chain, sanity"
	@echo "make test-matrix  unit, sanity and the default scenario on ansible-core 2.19, 2.20, 2.21 with Python 3.12 (MATRIX_LAB=0: no lab; not part of make test)"
	@echo "make collection  build the collection tarball, install it into a clean path, ansible-doc from there"
	@echo "make galaxy-import  the built tarball through galaxy-importer, as Galaxy and Automation Hub import it"
	@echo "make fixtures  build the fixture packages into $(FIXTURES) (wheelhouse + simple index)"
	@echo "make bench     benchmarks (not part of make test)"
	@echo "make bench-deploy  deploy speed in the lab (BENCH_FLEET=8 fleet targets; not part of make test)"
	@echo "make lab-up    start the lab: systemd+sshd hosts ct129, ct200 in podman (LAB_TARGETS=N adds ct201…)"
	@echo "make lab-down  remove the lab (the cached base image stays)"
	@echo "make lab-test  lab up, the lab's own tests, lab down"
	@echo "make molecule  the deploy proofs (extensions/molecule) in the lab"
	@echo "make lab-suite  lab-test, then molecule, in one session of the lab (what make test runs)"
	@echo "make test-shuffled  the scenarios in a random order (SEED=N repeats one; not part of make test)"
	@echo "make demo      lab up, deploy ct200, print its /v1/models"
	@echo "make gpu-systemd-debs  systemd 252's Debian packages for the GPU machine (tests/gpu/systemd_ns.sh)"
	@echo "make gpu-kit   the GPU kit: tests/gpu/kit/*.txt downloaded (once), reduced, packed into .gpu-carry/kit (docs/validation.md)"

setup:
	@bash tools/setup.sh

# Regenerate the one pin file from requirements/toolchain.in (network).
pins: setup
	.tools/uv/bin/uv pip compile --quiet --python 3.12 requirements/toolchain.in -o requirements/toolchain.txt

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/antsibull-changelog lint
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH ansible-lint --offline --profile production -q

fixtures: setup
	$(PY) tests/fixtures/build.py --out $(FIXTURES)

# A release's changelog (antsibull-changelog release, which runs ansible-doc: the checkout's, on PATH).
changelog-release: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/antsibull-changelog release

# The pins of make test-matrix, one file per ansible-core line (requirements/matrix-<line>.in, network).
matrix-pins: setup
	for f in requirements/matrix-*.in; do \
	  .tools/uv/bin/uv pip compile --quiet --python 3.12 "$$f" -o "$${f%.in}.txt"; done

# Module and module_utils unit tests.
unit: setup
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

# Module behaviour end to end on fixture venvs: crash safety (named crash
# points, kill -9), read-only and full destinations, the fixture proofs.
integration: fixtures
	$(VENV)/bin/pytest -q tests/integration $(PYTEST_ARGS)

# The fixture packages themselves (ELF layout checked against pyelftools/readelf,
# wheel writer, sglang fixture server behaviour).
fixture-tests: fixtures
	$(VENV)/bin/pytest -q tests/fixtures $(PYTEST_ARGS)

# The incident's failure chain (a)-(f), end to end in uv venvs from the fixture index.
chain: fixtures
	$(VENV)/bin/pytest -q tests/chain $(PYTEST_ARGS)

sanity: setup
	bash tools/sanity.sh

# The collection as an operator gets it: ansible-galaxy collection build (no lab or
# dev files in the tarball), install into a clean path, ansible-doc of every module
# and role from the installed copy (tools/collection_check.py).
collection: setup
	$(PY) tools/collection_check.py

# The built tarball through galaxy-importer 0.4.44, the importer of Galaxy, Galaxy NG and Automation Hub, in its
# own venv (build/galaxy-importer, requirements/galaxy-importer.txt); fails on any warning, or a module, role or
# filter it finds undocumented (tools/galaxy_import.py; a copy names a stand-in repository until galaxy.yml has one).
galaxy-import: setup
	$(PY) tools/galaxy_import.py

# The lab (tools/lab/lab.py): podman hosts with systemd, sshd and the fixture
# NVIDIA driver on their own network, the fixture index on its gateway.
LAB := $(PY) tools/lab/lab.py

lab-up: fixtures
	$(LAB) up

lab-down:
	@if [ -x $(PY) ]; then $(LAB) down; fi

lab-status: setup
	$(LAB) status

# tests/lab with the lab up, under the lab's lock (tools/lab/session.sh); the lab
# goes down afterwards unless it was up before.
lab-test: fixtures
	tools/lab/session.sh $(VENV)/bin/pytest -q tests/lab $(PYTEST_ARGS)

# The deploy's proofs: molecule scenarios under extensions/molecule (create and
# destroy are tools/lab/lab.py up/down), all under one hold of the lab's lock, in two
# streams (tools/lab/molecule_streams.sh): once the artifacts both read are staged, MOLECULE_SCENARIOS
# on ct200, one after another, and beside them MOLECULE_TWIN_SCENARIOS on ct200's twin ct240
# (the lab's load leaves the two cores about half idle during one stream). Naming
# MOLECULE_SCENARIOS runs those alone, on ct200.
# extensions/molecule/config.yml holds what every scenario shares; each molecule.yml only what differs.
MOLECULE_SCENARIOS ?= default incident_failures drift check_mode two_instances offline host_failure fleet
MOLECULE_TWIN_DEFAULT := faults router
MOLECULE_TWIN_SCENARIOS ?= $(if $(filter command line environment,$(origin MOLECULE_SCENARIOS)),,$(MOLECULE_TWIN_DEFAULT))
# MOLECULE_VENV (relative to the checkout): whose molecule and ansible run the scenarios (make test-matrix sets it).
MOLECULE_VENV ?= $(VENV)
molecule: fixtures
	PATH=$(CURDIR)/$(MOLECULE_VENV)/bin:$$PATH tools/lab/session.sh tools/lab/molecule_streams.sh \
	  "$(MOLECULE_SCENARIOS)" "$(MOLECULE_TWIN_SCENARIOS)"

# The lab tests and then the scenarios in one session of the lab (one `lab.py up`, one `down`
# at the end, one hold of the lab's lock): what make test runs. The inner session.sh calls
# find the lab up and leave it so. Each scenario still starts from its own prepare.
lab-suite: fixtures
	tools/lab/session.sh bash -c 't=$$SECONDS; $(MAKE) --no-print-directory -o setup -o fixtures lab-test \
	  && echo "=== lab-test: $$((SECONDS - t)) s" && t=$$SECONDS \
	  && $(MAKE) --no-print-directory -o setup -o fixtures molecule && echo "=== molecule: $$((SECONDS - t)) s"'

# The scenarios in another order (not part of make test): SEED picks it (printed; the
# same SEED gives the same order), to find a scenario that leans on what another left.
SEED ?= $(shell date +%s)
test-shuffled: fixtures
	@order=$$($(PY) -c 'import random, sys; s = sys.argv[2:]; random.Random(int(sys.argv[1])).shuffle(s); print(" ".join(s))' \
	  $(SEED) $(MOLECULE_SCENARIOS) $(MOLECULE_TWIN_SCENARIOS)); echo "test-shuffled: SEED=$(SEED) order: $$order"; \
	  $(MAKE) --no-print-directory -o fixtures molecule MOLECULE_SCENARIOS="$$order"

# From a fresh clone: the lab, one deploy of ct200, and the server's answer.
demo: fixtures
	@start=$$SECONDS; $(LAB) up; \
	  t=$$SECONDS; PATH=$(CURDIR)/$(VENV)/bin:$$PATH ansible-playbook playbooks/deploy_dflash.yml -l ct200; \
	  echo "deploy: $$((SECONDS - t)) s; make demo: $$((SECONDS - start)) s"; \
	  $(PY) -c 'import urllib.request; print(urllib.request.urlopen("http://10.89.64.200:30001/v1/models", timeout=10).read().decode())'

# Mutation testing (cosmic-ray) of the modules' decision code, each file against the tests that cover it
# (pyproject.toml [tool.dflash-mutate]); in a copy of the checkout under build/mutate. Not part of make test.
# MUTATE_FILES="plugins/module_utils/abi_check.py ..." runs some files only; docs/mutation-history.md has the score.
.PHONY: mutate
mutate: fixtures
	@rm -f build/mutate/summary.txt
	$(PY) tests/unit/mutation/mutate.py $(MUTATE_FILES)

# Breaks of the product layer (roles, playbooks, templates, host scripts: tests/unit/mutation/roles_mutants.yml),
# one at a time in a copy of the checkout, each against the checks that must notice it. Not part of make test
# (about an hour with the baseline); MUTATE_ROLES=id,id runs some; the score goes to build/mutate/roles-summary.txt.
.PHONY: mutate-roles
mutate-roles: fixtures
	MUTATE_ROLES=$(MUTATE_ROLES) $(PY) tests/unit/mutation/mutate_roles.py

# Every stage in order, each timed (tools/run_stages.sh prints the table). The
# CPU-bound checks run one after another in a lane beside the lab's tests and
# scenarios (lab-suite: one session of the lab for both), which mostly wait on
# containers and servers (the machine is about half busy then):
# a+b runs lanes at once, x,y runs targets in order within a lane, ~x runs a
# lane under SCHED_IDLE and nice 19 (it takes only the CPU the lab tests leave idle).
TEST_STAGES := fixtures lab-suite+~lint,unit,integration,fixture-tests,chain,collection,galaxy-import,sanity

test: setup
	@bash tools/run_stages.sh $(TEST_STAGES)
	@echo "make test: all stages passed"

# The collection on each ansible-core line it supports (tools/test_matrix.sh; not part of make test):
# per line a venv (build/matrix/<line>/venv, Python 3.12, requirements/matrix-<line>.txt), unit tests,
# ansible-test sanity, the default molecule scenario in the lab; a table of results and times at the end.
# MATRIX_LAB=0 leaves the lab out; MATRIX_LINES="2.20" tests some lines only.
test-matrix: setup fixtures
	@bash tools/test_matrix.sh

# The oldest supported line beside the development one: unit tests and ansible-test sanity on ansible-core 2.19
# (the toolchain's 2.21 runs them in make test). Not in make test yet: in its niced lane it made the lab's
# scenarios 100-130 s slower each (2026-12-07), and under SCHED_IDLE a scenario 185 s slower (23:30), more than
# the 45-minute budget has; docs/test-runs.md.
matrix-oldest: setup fixtures
	@MATRIX_LINES=2.19 MATRIX_LAB=0 bash tools/test_matrix.sh

# Benchmarks run on a real torch 2.11 venv from PyPI (several GB, made once by
# bench-venv; set BENCH_VENV to reuse another) plus a synthetic tree. They are
# measurements against named baselines in the same run, not tests.
BENCH_VENV ?= /tmp/realtorch
BENCH_PIP ?= /tmp/piptool
UV := .tools/uv/bin/uv

bench-venv: setup
	@if [ ! -x $(BENCH_VENV)/bin/python ] || ! $(BENCH_VENV)/bin/python -c "import importlib.metadata as m; m.version('torch'); m.version('sglang-kernel')" 2>/dev/null; then \
	  echo "bench: installing torch==2.11.0 and sglang-kernel==0.4.2 into $(BENCH_VENV) (several GB)"; \
	  $(UV) venv --quiet --allow-existing $(BENCH_VENV); \
	  $(UV) pip install --quiet --python $(BENCH_VENV)/bin/python torch==2.11.0; \
	  $(UV) pip install --quiet --python $(BENCH_VENV)/bin/python --no-deps sglang-kernel==0.4.2; \
	fi
	@[ -x $(BENCH_PIP)/bin/pip ] || { $(UV) venv --quiet $(BENCH_PIP) && $(UV) pip install --quiet --python $(BENCH_PIP)/bin/python pip; }

bench: fixtures bench-venv
	@printf 'driver_version=580.95.05\ncuda_driver_version=13000\ndev_dir=/dev\n' > build/bench-gpus.conf
	$(PY) bench/bench_probe.py --venv $(BENCH_VENV) --pip $(BENCH_PIP)/bin/python --cpu 0 --repeat 7 \
	  --driver-lib $(FIXTURES)/driver/lib --gpu-config build/bench-gpus.conf
	$(PY) bench/bench_transplant.py --real $(BENCH_VENV) --json build/bench-transplant.json

# Deploy speed in the lab (bench/bench_deploy.py): first deploy, no-change re-run, re-run after a hand edit,
# per-phase times, controller CPU per host for 1 and BENCH_FLEET targets (0: skip). Not part of make test.
BENCH_FLEET ?= 8
bench-deploy: fixtures
	LAB_TARGETS=$(BENCH_FLEET) tools/lab/session.sh $(PY) bench/bench_deploy.py --repeat 3 --fleet $(BENCH_FLEET) \
	  --json build/bench-deploy.json

# The real wheels a GPU validation run carries (docs/validation.md): downloads only what the cache lacks.
gpu-kit:
	python3 tools/gpu_kit.py

# systemd for the GPU machine (tests/gpu/systemd_ns.sh): the exact Debian packages of tests/gpu/systemd-debs.txt
gpu-systemd-debs:
	mkdir -p .gpu-carry/systemd-debs
	cd .gpu-carry/systemd-debs && apt-get download $$(grep -v '^#' ../../tests/gpu/systemd-debs.txt)

clean:
	rm -rf build tests/output .pytest_cache .ruff_cache

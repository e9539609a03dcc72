# mathneuro — every target installs what it needs first (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

# pytest-xdist workers for the test tiers: one per CPU, at most 4 (make test JOBS=0: one process, no workers)
JOBS ?= $(shell $(PYTHON) -c 'import os; n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(); print(max(1, min(4, n or 1)))')

.PHONY: install test test-unit test-integration test-e2e test-slow test-slurm lint bench claims run clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip setuptools wheel
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[dev,launchers]'
	touch $(STAMP)

test: install  # unit + integration, in parallel: everything but e2e, slow and slurm
	$(PY) -m pytest -q -n $(JOBS) -m "not e2e and not slow and not slurm"

test-unit: install
	$(PY) -m pytest -q -n $(JOBS) -m "unit and not slow"

test-integration: install
	$(PY) -m pytest -q -n $(JOBS) -m "integration and not e2e and not slow and not slurm"

test-e2e: install  # whole-program scenarios of 12 s or more; .ci/run runs them after make test
	$(PY) -m pytest -q -n $(JOBS) -m "e2e and not slow and not slurm"

test-slow: install
	$(PY) -m pytest -q -m slow

# Starts a real single-node SLURM cluster (installs slurm-wlm and munge with apt when missing: root),
# runs sweeps on it through hydra/launcher=slurm, stops its daemons. See tests/slurm/cluster.py.
test-slurm: install
	$(PY) -m pytest -q -m slurm tests/slurm --durations=0

lint: install
	$(VENV)/bin/ruff check src tests experiments

bench: install
	$(PY) experiments/benchmarks/bench_identification.py

claims: install  # experiments/README.md's claims table, rebuilt from experiments/records (ANALYSIS_PLAN.md)
	$(PY) experiments/claims/claims.py --write

run: install  # MathNeuro against random pruning of the same counts on the embedded demo, paired intervals
	$(PY) -m mathneuro experiment=demo

clean:
	rm -rf $(VENV) outputs/* multirun

# mathneuro — every target installs what it needs first (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install test test-fast test-slow lint bench run clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip setuptools wheel
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[dev,launchers]'
	touch $(STAMP)

# make test includes the integration tests: a wheel built into a temporary folder and installed
# (non-editable) into a throwaway venv that reuses this one's packages, and process-per-job launchers.
test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow and not integration"

test-slow: install
	$(PY) -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check src tests experiments

bench: install
	$(PY) experiments/bench_identification.py

run: install
	$(PY) -m mathneuro

clean:
	rm -rf $(VENV) outputs/* multirun

# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ondevice-installed
PIP := $(PY) -m pip install -q --disable-pip-version-check

.PHONY: install demo test test-fast lint tables clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# CPU build of torch from the local file first; the extras' torch range is then already satisfied.
	$(PIP) torch==2.13.0
	$(PIP) -e ".[train,eval,export,dev,bench]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m ondevice demo $(DEMO_ARGS)

# Everything, slow tests included, with coverage. ONDEVICE_STRICT=1: a missing JDK, torch or other test
# dependency fails the run instead of skipping tests (a machine that runs `make test` must have them all).
test: $(STAMP)
	ONDEVICE_STRICT=1 $(PY) -m pytest -q -m "slow or not slow" --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

# The quick subset (no slow tests); skips allowed.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ondevice kernels export tests benchmarks

# Re-render the README/BENCHMARKS tables from benchmarks/results/ (tests/test_docs.py checks they match).
tables: $(STAMP)
	$(PY) benchmarks/tables.py

clean:
	rm -rf $(VENV) build *.egg-info

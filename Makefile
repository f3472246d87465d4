# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ondevice-installed
PIP := $(PY) -m pip install -q --disable-pip-version-check

.PHONY: install demo test lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# CPU build of torch from the local file first; the extras' torch range is then already satisfied.
	$(PIP) torch==2.13.0
	$(PIP) -e ".[train,eval,export,pairs,dev,bench]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ondevice demo $(DEMO_ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ondevice kernels export tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info

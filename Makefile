# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ondevice-installed
PIP := $(PY) -m pip install -q --disable-pip-version-check

.PHONY: install web-install demo test coverage test-fast test-gpu lint tables clean

# The web demo's tests need node + npm (onnxruntime-node/-web, pinned in web_demo/package-lock.json) and Debian's
# chromium, which Playwright (PyPI, in the dev extra) drives; nothing is downloaded from a browser CDN.
# ONNXRUNTIME_NODE_INSTALL=skip: onnxruntime-node's postinstall would fetch GPU binaries from an unreachable
# host; the CPU binaries ship in the package itself.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
WEB_STAMP := web_demo/node_modules/.ondevice-installed
# The Java core's SQLite catalog test reads catalogs through JDBC: Debian's sqlite-jdbc (driver + JNI library).
JDBC_STAMP := build/.sqlite-jdbc-installed

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# CPU build of torch from the local file first; the extras' torch range is then already satisfied.
	$(PIP) torch==2.13.0
	$(PIP) -e ".[train,eval,export,pairs,dev,bench,scale,interop]"
	touch $(STAMP)

$(WEB_STAMP): web_demo/package.json web_demo/package-lock.json
	command -v node >/dev/null && command -v npm >/dev/null || { apt-get update -q && $(APT_INSTALL) nodejs npm; }
	command -v chromium >/dev/null || { apt-get update -q && $(APT_INSTALL) chromium; }
	cd web_demo && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund
	touch $@

$(JDBC_STAMP):
	test -f /usr/share/java/sqlite-jdbc.jar || { apt-get update -q && $(APT_INSTALL) libxerial-sqlite-jdbc-java; }
	mkdir -p $(@D) && touch $@

install: $(STAMP) $(WEB_STAMP) $(JDBC_STAMP)

web-install: $(WEB_STAMP)

demo: $(STAMP)
	$(PY) -m ondevice demo $(DEMO_ARGS)

# Two pytest workers (pytest-xdist): one process keeps only ~1 of 2 cores busy (Numba compiling kernels, waiting on
# subprocesses). TEST_WORKERS=0 runs in one process. Measured times: docs/results/suite.md.
TEST_WORKERS ?= 2

# Everything, slow tests included; the 30 slowest tests are listed at the end (CI time budget). ONDEVICE_STRICT=1: a
# missing JDK, torch or other test dependency fails the run instead of skipping tests (a machine that runs `make test`
# must have them all). No coverage here: its tracer slows Numba's compiler; `make coverage` measures it.
SUITE := ONDEVICE_STRICT=1 $(PY) -m pytest -q -m "not gpu" -n $(TEST_WORKERS) --durations=30
test: $(STAMP) $(WEB_STAMP) $(JDBC_STAMP)
	$(SUITE) $(PYTEST_ARGS)

# The same run with line coverage of the ondevice package (report at the end, data in .coverage).
coverage: $(STAMP) $(WEB_STAMP) $(JDBC_STAMP)
	$(SUITE) --cov --cov-report=term:skip-covered $(PYTEST_ARGS)

# The quick subset (no slow tests); skips allowed.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Training on a CUDA GPU (`--device cuda`): needs a torch build with CUDA in the venv instead of the CPU one.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -m gpu $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ondevice kernels export tests benchmarks recipes lab web_demo/tools

# Re-render the README/BENCHMARKS tables from benchmarks/results/ (tests/test_docs.py checks they match).
tables: $(STAMP)
	$(PY) benchmarks/tables.py

clean:
	rm -rf $(VENV) build *.egg-info web_demo/node_modules web_demo/site

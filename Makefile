# perfgrid: `make reproduce` runs the full reproduction, `make test` the test suite.
# Both set everything up on a fresh Debian machine with Python 3.11+.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 16
# pytest-xdist workers for the tests that measure nothing (auto: one per CPU)
TEST_WORKERS ?= auto
# Debian packages the benchmarks compare against; missing ones are skipped, never faked.
# linux-perf: perf stat, for the kernel counters (perfgrid.measure.counters)
DEBS   ?= fio apache2-utils gcc erlang-nox linux-perf
# ... and what the tests use besides: a real browser for the report check.
TEST_DEBS ?= $(DEBS) chromium

.PHONY: reproduce quick test bench calibrate lint config-doc setup system-packages clean

reproduce: setup
	$(BIN)/snakemake --cores $(CORES)

quick: setup
	$(BIN)/snakemake --cores 2 --configfile config/quick.yaml

# In CI (CI=true) a tool of TEST_DEBS that cannot be installed fails here, and a test
# that skips fails the run (tests/conftest.py): CI passes only if every test ran.
# Two runs: first the tests marked serial (they measure, or wait for a quiet machine:
# tests/conftest.py), alone; then the rest in parallel, the users of one Snakemake fixture
# on one worker (loadgroup). Either may select nothing under PYTEST_ARGS (exit status 5).
# The serial run leaves the quick run in PERFGRID_QUICK_RUN, a folder of this make test
# alone (removed at its end), for the parallel run's user commands on its output.
# Bytecode is kept (__pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE is
# set: each pytest process rewrote and compiled every test module again (collecting took
# 5.0 s, 2.5 s with it kept), and every process a test starts compiled perfgrid again.
test: $(VENV)/.installed
	@bash .ci/system-packages.sh $(TEST_DEBS)
	export PYTHONDONTWRITEBYTECODE= PERFGRID_QUICK_RUN="$$(mktemp -d)" && trap 'rm -rf "$$PERFGRID_QUICK_RUN"' EXIT && \
	{ $(BIN)/python -m pytest -q -rs --durations=15 -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]; } && \
	{ $(BIN)/python -m pytest -q -rs --durations=15 -m "not serial" -n $(TEST_WORKERS) \
		--dist loadgroup $(PYTEST_ARGS) || [ $$? -eq 5 ]; }

# Speed facts of the harness (per-call overhead, Erlang spawn rate, how fast a load stops
# at its deadline), each printed beside its target: benchmark output, not unit tests.
bench: $(VENV)/.installed
	@bash .ci/system-packages.sh $(DEBS)
	$(BIN)/python tests/speed_facts.py

# The readings' statistics simulated through the production path (analysis.claims_of on
# synthetic tables, earlier runs recorded): coverage per claim structure, p_differ against
# a second run's reading, runs pooled; each figure beside its target (issue 57's
# acceptance). CALIBRATE_ARGS: e.g. --scale 0.2 --strict.
calibrate: $(VENV)/.installed
	$(BIN)/python tests/calibration.py $(CALIBRATE_ARGS)

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/snakemake --lint

# config/README.md's key tables, written again from the fixtures' and experiments' schema
# files, and a new experiment's section added (perfgrid.pipeline.configdoc;
# tests/test_config_readme.py holds them in step)
config-doc: $(VENV)/.installed
	$(BIN)/python -m perfgrid.pipeline.configdoc

setup: $(VENV)/.installed system-packages

# The venv, with perfgrid and its Python packages installed by uv (from PyPI, through the
# venv's pip): pip took ~60 s here, 20 of them resolving, uv 15 s from an empty cache.
# uv reads its own settings (UV_INDEX_URL, UV_EXTRA_INDEX_URL, UV_FIND_LINKS), not pip's.
# Byte-compiled at install: where PYTHONDONTWRITEBYTECODE is set, an import never writes a
# .pyc, and every benchmark and plot process would compile pandas, matplotlib and seaborn
# again (~3 s each: the quick run took 224 s, not 138 s).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[dev]'
	touch $@

# Installs what apt can (as root, or through sudo); otherwise prints what is missing
# and why those rows will be skipped.
system-packages:
	@bash .ci/system-packages.sh $(DEBS)

clean:
	rm -rf $(VENV) .snakemake

# Quick start on a fresh machine:
#   make bench    set up, build, run the benchmark (CPU)
#   make test     set up, build, run the test suite
#
# Variables: VENV (.venv), PYTHON (python3), MAX_JOBS (2), BENCH_ARGS, PYTEST_ARGS,
# TEST_WORKERS (2: pytest-xdist workers, each taking whole files, so that a file's
# shared compiled functions are compiled once; 0 runs the suite in one process).
VENV ?= .venv
PYTHON ?= python3
MAX_JOBS ?= 2
BENCH_ARGS ?=
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python

# The extension is rebuilt when any source, prototype or build file changes:
# ninja compiles the files that changed (setup.py keeps pip's build in
# build/temp.*), through ccache where setup_env.sh installed it (build/ccache).
# A full build takes 3-5 minutes on 2 cores; it shows one line per compiled
# object (scripts/build_progress.py filters `pip install -v`), e.g.
#   build: started; one line per compiled file, the whole output in build/build.log
#   build: op_extension._C
#   build: [ 7/18]  0:35  build/generated/isa/norm.avx2.cpp
#   build: linking op_extension._C
#   build: done in 3:52 (pip's full output: build/build.log)
# plus compiler errors and warnings in op_extension's own sources; pip's whole
# output is in build/build.log, whose last lines are printed if the build fails.
BUILD_INPUTS := setup.py pyproject.toml op_extension/_protos.py \
	$(shell find op_extension/csrc op_protos -type f 2>/dev/null)

.PHONY: setup build bench test clean

setup: $(VENV)/.deps

$(VENV)/.deps: scripts/setup_env.sh
	VENV=$(VENV) PYTHON=$(PYTHON) bash scripts/setup_env.sh
	touch $@

build: $(VENV)/.built

$(VENV)/.built: $(VENV)/.deps $(BUILD_INPUTS)
	MAX_JOBS=$(MAX_JOBS) $(PY) scripts/build_progress.py build/build.log \
		$(PY) -m pip install -v --no-build-isolation --no-deps -e .
	touch $@

bench: build
	$(PY) -m op_extension.bench $(BENCH_ARGS)

test: build
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

clean:
	rm -rf build op_extension/_C*.so $(VENV)/.built

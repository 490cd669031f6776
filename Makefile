# attnlearn — build / test entry points.  Every target sets up its own
# environment: a local .venv with the exact lock in requirements.txt plus the
# package installed editable (without re-resolving dependencies).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
STAMP  := $(VENV)/.installed

# Determinism: exported to every recipe, hence to Jupyter kernels and pytest.
export MPLBACKEND     := Agg
export PYTHONHASHSEED := 0
# Progress bars (attnlearn.progress) off: builds and stored outputs stay free of volatile text.
export ATTNLEARN_PROGRESS := 0
# Venv first on PATH, so any "python"/"jupyter" a tool spawns is the venv's.
export PATH           := $(BIN):$(PATH)
# Silence jupyter_core's platformdirs migration notice (would reach stderr).
export JUPYTER_PLATFORM_DIRS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Seed of the perturbation mode used by nb-test-perturbed (any integer).
PERTURB_SEED ?= 1

# Fail the book on any Sphinx warning (-W), also on missing references (-n),
# but report all of them before failing (--keep-going); rebuild every page
# (--all).  Cell errors fail too: _config.yml sets allow_errors: false, which
# turns an exception in a cell into a warning, and -W makes it fatal.
JB_FLAGS := --all -W -n --keep-going

.PHONY: sweeps help install book test unit-test unit-test-perturbed nb-test nb-test-perturbed browser-test clean

help:
	@echo "make book   - build the Jupyter Book (executes every notebook) into _build/html"
	@echo "make test   - unit tests (tests/, plain and with perturbed oracle answers), strict nbval"
	@echo "              of the stored notebook outputs (plain and perturbed), then the book"
	@echo "              build and the headless-browser test of every page"
	@echo "make sweeps - re-run the noise sweep into _build/ and compare it with the committed one"
	@echo "make browser-test - build the book, open every page in headless Chromium (offline)"
	@echo "make clean  - remove _build (HTML and browser screenshots)"

# The last step builds matplotlib's font cache now; otherwise the first notebook
# to import matplotlib prints "building the font cache" to stderr (a warning
# under stderr_output: warn, and an nbval mismatch).
$(STAMP): pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -r requirements.txt
	$(BIN)/pip install --no-deps -e .
	$(BIN)/python -c "import matplotlib.pyplot"
	touch $@

install: $(STAMP)

# _build/html is removed first, so no page of an earlier build (a chapter since
# renamed, a stray file) survives into the site or the browser test.
# Chapter 5 loads the committed noise sweep (29 400 seeded trials) from
# benchmarks/results/noise_sweep.json. A build never rewrites a tracked file:
# tests/test_noise.py re-runs a reduced version and checks it against the committed
# file with the tolerance documented in benchmarks/noise.py. `make sweeps` re-runs
# the full sweep into _build/ (~5 min on 2 cores) and compares it with the committed
# one; `python benchmarks/noise.py --save` (by hand) replaces the committed file.
# SWEEP_ARGS passes the engine: `make sweeps SWEEP_ARGS="--workers 8"` or
# `SWEEP_ARGS="--scheduler tcp://host:8786"` (a Dask cluster); the records do not change.
SWEEP_ARGS ?=
sweeps: install
	mkdir -p _build
	$(BIN)/python benchmarks/noise.py --out _build/noise_sweep.json $(SWEEP_ARGS)
	$(BIN)/python benchmarks/noise.py --compare benchmarks/results/noise_sweep.json _build/noise_sweep.json

book: install
	rm -rf _build/html
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/jupyter-book build . $(JB_FLAGS)

# Order matters (make runs prerequisites left to right and stops at the first
# failure): the fast checks first, then the book build (~2 min, executes every
# notebook), then the browser test of the HTML it produced.
test: unit-test unit-test-perturbed nb-test nb-test-perturbed browser-test

# The browser test needs the built book, so it runs in browser-test, not here.
# Two test workers on two cores: one BLAS thread each (the certificate's QR factorisations in a
# worker that spins two BLAS threads beside the other worker ran up to 50 times slower).
UNIT := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -p no:cacheprovider tests \
	--ignore=tests/test_book_browser.py
unit-test: install
	$(UNIT)

# The unit tests again with every float64 oracle answer moved by a few ulps (as nb-test-perturbed
# below): a test whose raise-or-return outcome flips here would flip on another CPU or BLAS kernel.
unit-test-perturbed: install
	ATTNLEARN_PERTURB=$(PERTURB_SEED) $(UNIT)

# Strict nbval (not --nbval-lax): every stored output must be reproduced.
# --nbval-current-env runs the notebooks with this venv's Python regardless of
# the kernelspec recorded in the notebook.
# One BLAS thread: the stored outputs do not depend on it, and a second thread spinning beside a
# busy core slowed chapter 7 several times over on a loaded 2-core machine (15 CPU minutes short
# of its fifth cell, against under 3 for the whole chapter with one thread).
NBVAL := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider --nbval \
	    --nbval-current-env --nbval-sanitize-with book/sanitize.cfg book/
nb-test: install
	$(NBVAL)

# The same, with every float64 oracle answer moved by a few ulps (the Oracle's
# perturbation mode, ATTNLEARN_PERTURB=<seed>): what another CPU, BLAS kernel or
# thread count does. The stored outputs must not change: a decision or a printed
# digit that does is a knife edge. The BLAS kernel itself is never set here.
nb-test-perturbed: install
	ATTNLEARN_PERTURB=$(PERTURB_SEED) $(NBVAL)

# Serves _build/html on 127.0.0.1 and opens every page in headless Chromium
# (Debian's chromium + chromium-driver; .ci/run installs them): console errors,
# typeset maths, images, internal links, Binder buttons, no remote requests.
# Screenshots: _build/screenshots/.  Skipped (with the reason) without a browser.
browser-test: book
	$(BIN)/python -m pytest -p no:cacheprovider -rs tests/test_book_browser.py

clean:
	rm -rf _build

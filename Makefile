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
# Venv first on PATH, so any "python"/"jupyter" a tool spawns is the venv's.
export PATH           := $(BIN):$(PATH)
# Silence jupyter_core's platformdirs migration notice (would reach stderr).
export JUPYTER_PLATFORM_DIRS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# Fail the book on any Sphinx warning (-W), also on missing references (-n),
# but report all of them before failing (--keep-going); rebuild every page
# (--all).  Cell errors fail too: _config.yml sets allow_errors: false, which
# turns an exception in a cell into a warning, and -W makes it fatal.
JB_FLAGS := --all -W -n --keep-going

.PHONY: help install book test unit-test nb-test clean

help:
	@echo "make book   - build the Jupyter Book (executes every notebook) into _build/html"
	@echo "make test   - unit tests (tests/) and strict nbval of the stored notebook outputs"
	@echo "make clean  - remove _build"

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

book: install
	$(BIN)/jupyter-book build . $(JB_FLAGS)

test: unit-test nb-test

unit-test: install
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider tests

# Strict nbval (not --nbval-lax): every stored output must be reproduced.
# --nbval-current-env runs the notebooks with this venv's Python regardless of
# the kernelspec recorded in the notebook.
nb-test: install
	$(BIN)/python -m pytest -p no:cacheprovider --nbval --nbval-current-env \
	    --nbval-sanitize-with book/sanitize.cfg book/

clean:
	rm -rf _build

# modforge — the two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv on first use: pip, torch pinned for dev/CI, modforge editable + dev extras.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
TORCH   ?= torch==2.14.1 torchvision==0.29.1
STAMP   := $(VENV)/.installed

.PHONY: demo test hostile docs lint bench clean

# What the install costs, said before it starts (it is most of a first `make demo`), and pip's own
# progress while it runs: a bar per download on a terminal; in a pipe or a CI log pip draws each
# bar once, finished, on one line.
PIP     := $(PY) -m pip install --disable-pip-version-check --progress-bar on

$(STAMP): pyproject.toml Makefile
	@echo "modforge: installing into $(VENV) (once; 'make clean' removes it):"
	@echo "  1. $(TORCH) -- PyPI's Linux build brings NVIDIA's CUDA libraries and Triton:"
	@echo "     about 3 GB to download and 5.5 GB on disk, several minutes on a fast connection"
	@echo "  2. modforge itself (editable) with its test and docs tools: about 1.5 GB more on disk"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --quiet --upgrade pip
	$(PIP) $(TORCH)
	$(PIP) -e ".[dev]" $(TORCH)
	touch $(STAMP)
	@echo "modforge: installed ($$(du -sh $(VENV) 2>/dev/null | cut -f1) in $(VENV))"

demo: $(STAMP)
	$(VENV)/bin/modforge train configs/digits.yaml

# Byte-compiled once, as an installed package is: the suite starts ~200 child interpreters
# (`modforge train` runs, torchrun workers, sweep trials), and under PYTHONDONTWRITEBYTECODE each
# would otherwise compile modforge's modules again (compileall writes what is stale, then is a no-op).
test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks docs
	$(PY) -m compileall -q src
	$(PY) -m pytest -n 2 --dist loadfile

hostile: $(STAMP)
	$(PY) -m compileall -q src
	$(PY) -m pytest -n 2 --dist loadfile -m hostile

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks docs

bench: $(STAMP)
	$(PY) benchmarks/startup.py

clean:
	rm -rf $(VENV) build site src/*.egg-info .pytest_cache .hypothesis

# modforge — the two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both create .venv on first use: pip, torch pinned for dev/CI, modforge editable + dev extras.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
TORCH   ?= torch==2.14.1 torchvision==0.29.1
STAMP   := $(VENV)/.installed

.PHONY: demo test hostile docs lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]" $(TORCH)
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/modforge train configs/digits.yaml

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks docs
	$(PY) -m pytest -n 2 --dist loadfile

hostile: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -m hostile

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks docs

bench: $(STAMP)
	$(PY) benchmarks/startup.py

clean:
	rm -rf $(VENV) build site src/*.egg-info .pytest_cache .hypothesis

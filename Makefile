# Quick start: `make run` (main job on ./data) and `make test` (whole suite).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark,broker,tiered]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/strata demo ./data

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/append.py

clean:
	rm -rf $(VENV) data data-parquet

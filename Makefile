# Quick start: `make run` (the main job on ./data) and `make test` (the whole suite).
# Everything goes into .venv: after `make run`, `. .venv/bin/activate` puts the `strata`
# command (and the Python that Spark's workers need) on PATH for the README's examples.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the suite on 2 workers; Spark tests share one worker and its session (tests/conftest.py)
PYTEST_ARGS ?= -n 2 --dist loadgroup

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing strata and its dependencies into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install --upgrade --progress-bar on pip
	@# the distribution was named "strata" before it became "strata-mq" (the registry's
	@# "strata" is another project): drop an old editable install of this checkout first
	$(BIN)/python -m pip uninstall --quiet --yes strata 2>/dev/null || true
	$(BIN)/python -m pip install --progress-bar on -e '.[test,spark,broker,tiered]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/strata demo ./data
	@echo "next: . $(BIN)/activate   # puts the strata command on PATH (README \"Quick start\")"

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/append.py

clean:
	rm -rf $(VENV) data data-parquet

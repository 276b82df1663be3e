# Quick start: `make run` (main job on ./data) and `make test` (whole suite).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench clean chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark,broker,tiered,console]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/strata demo ./data

# tests/console run Debian's chromium (Playwright drives it; its own download is unreachable)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium for tests/console"; \
	  $(SUDO) apt-get install -y -q chromium; }

test: $(STAMP) chromium
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/append.py

clean:
	rm -rf $(VENV) data data-parquet

# Quick start: `make run` (the main job on ./data) and `make test` (the whole suite).
# Everything goes into .venv: after `make run`, `. .venv/bin/activate` puts the `strata`
# command (and the Python that Spark's workers need) on PATH for the README's examples.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the suite on 2 workers; Spark tests share one worker and its session (tests/conftest.py);
# a test that fails runs once more, and the run names it at the end ("rerun: ...": a bug to fix)
PYTEST_ARGS ?= -n 2 --dist loadgroup --reruns 1 --reruns-delay 1

.PHONY: setup warm run test bench clean system-packages

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing strata and its dependencies into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install --upgrade --progress-bar on pip
	@# the distribution was named "strata" before it became "strata-mq" (the registry's
	@# "strata" is another project): drop an old editable install of this checkout first
	$(BIN)/python -m pip uninstall --quiet --yes strata 2>/dev/null || true
	$(BIN)/python -m pip install --progress-bar on -e '.[test,spark,broker,tiered,console,kafka-test]'
	touch $(STAMP)

setup: $(STAMP) system-packages warm

# compile strata's numba kernels into their cache once (about half a minute of CPU when cold),
# so that the first put, read or tier upload does not; a second or two when already warm
warm: $(STAMP)
	$(BIN)/strata warm

run: $(STAMP) warm
	$(BIN)/strata demo ./data
	@echo "next: . $(BIN)/activate   # puts the strata command on PATH (README \"Quick start\")"

# Debian packages the tests drive as real parts: chromium (tests/console; Playwright drives it,
# its own browser download is unreachable) and kcat (tests/kafka), installed when missing
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SYSTEM_PACKAGES := chromium kcat
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing (Debian packages the tests use)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; fi

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/append.py

clean:
	rm -rf $(VENV) data data-parquet

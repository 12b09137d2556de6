# make demo: set up .venv if needed, run the whole pipeline locally (built-in tiny model + data)
# make test: same setup, run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast compile clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: on these machines 2.13.0 is a local CPU wheel; an unpinned
	# torch (or one pulled in by another package) would download several GB of CUDA libraries.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pipelines.run_local

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not integration"

compile: $(STAMP)
	$(BIN)/python -m pipelines.compile

clean:
	rm -rf .runs

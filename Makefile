# Two entry points: `make demo` (main job on built-in synthetic data) and `make test`.
# Both create .venv and install the package on first use; only python3 (>= 3.11) is needed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	@echo "Installing lsd-dask and its dependencies into $(VENV) (once; a few minutes)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --progress-bar off -e ".[test]"
	@echo "Installed: $$($(BIN)/lsd-dask --version)"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lsd-dask demo

test: $(STAMP)
	$(BIN)/ruff check lsd_dask tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2 --timeout=900 --durations=25

lint: $(STAMP)
	$(BIN)/ruff check lsd_dask tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache

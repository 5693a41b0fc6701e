# agentrt — every target installs what it needs first; `make` alone lists them.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/agentrt-wheels
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.DEFAULT_GOAL := help
.PHONY: help install docker-sandbox demo test test-fast check protos protos-fresh lint typecheck bench up clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Reinstalls only when pyproject.toml changes (or the venv is gone).
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# llama-cpp-python builds from source. A -march=native build crashes on CPUs with AMX
	@# (seen here), so it is built portable, once, into a wheel kept outside the clone.
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $(LLAMA_VERSION) (portable CPU flags; ~6 min, once per machine)"; \
	  mkdir -p $(LLAMA_WHEELS) && \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel --quiet --no-cache-dir --no-deps \
	    -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION); \
	fi
	$(PY) -m pip install --quiet --no-deps $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(PY) -m pip install --quiet -e '.[dev,local]'
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (the local sandbox)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null \
	      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }; \
	  else \
	    echo "warning: bubblewrap (bwrap) is missing; install it for the confined local sandbox"; \
	  fi; \
	fi
	@touch $@

install: $(STAMP) ## Create .venv and install agentrt with the dev and local-model extras (+ bubblewrap)

# The docker sandbox backend: docker.io when missing (as root, like bubblewrap), a running
# dockerd (as root), the image built from local files (no registry). Warns, never fails:
# the docker tests are what fail under CI when the engine is missing.
docker-sandbox: ## Install docker.io, start dockerd and build the sandbox image (each when missing)
	@if ! command -v dockerd >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing docker.io (the docker sandbox backend)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null \
	      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }; \
	  else \
	    echo "warning: docker.io is missing; the docker sandbox backend needs a docker engine"; \
	  fi; \
	fi
	@if [ "$$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1; then scripts/start-dockerd.sh || true; fi
	@if docker info >/dev/null 2>&1; then \
	  scripts/docker-sandbox-image.sh || echo "warning: the docker sandbox image could not be built"; \
	else echo "warning: no docker engine answers; the docker sandbox backend and its tests need one"; fi

demo: install ## Start the mesh, run an agent with the local model on a sample task, stop the mesh
	$(VENV)/bin/agentrt demo

test: install docker-sandbox ## Run the whole test suite (unit, service, e2e; prepares docker first)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: install ## Unit and service tests without the slow end-to-end ones (no docker preparation)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

check: install protos-fresh lint typecheck test ## What CI should run: protos fresh, buf lint, ruff, mypy, tests

protos: install ## Regenerate services/agentrt/v1 from protos/
	$(PY) protos/generate.py

protos-fresh: install ## Fail when the committed generated code differs from protos/
	@tmp=$$(mktemp -d); \
	$(PY) protos/generate.py $$tmp >/dev/null && diff -r -x __pycache__ $$tmp/agentrt/v1 services/agentrt/v1; \
	rc=$$?; rm -rf $$tmp; \
	if [ $$rc -ne 0 ]; then echo "generated code is stale: run make protos"; fi; exit $$rc

lint: install ## buf lint and ruff
	$(VENV)/bin/buf lint
	$(VENV)/bin/ruff check services tests protos

typecheck: install ## mypy
	$(VENV)/bin/mypy

bench: install ## Run tests/bench; figures go to bench-results/
	@mkdir -p bench-results
	AGENTRT_BENCH_DIR=$(CURDIR)/bench-results $(PY) -m pytest -q tests/bench -p no:cacheprovider $(PYTEST_ARGS)
	$(PY) tests/bench/bench_turn.py bench-results/turn.json
	$(PY) tests/bench/bench_long_run.py bench-results/long_run.json
	AGENTRT_BENCH_DIR=$(CURDIR)/bench-results $(PY) tests/bench/bench_sessions.py
	$(PY) tests/bench/bench_tools.py bench-results/tools.json
	$(PY) tests/bench/bench_docker.py bench-results/docker.json
	$(PY) tests/bench/bench_shells.py bench-results/shells.json
	$(PY) tests/bench/bench_gateway.py bench-results/gateway.json
	$(PY) tests/bench/bench_limiter.py bench-results/limiter.json
	@ls -l bench-results

up: install ## Start the five services on 127.0.0.1:50051-50055 (Ctrl-C stops them)
	$(VENV)/bin/agentrt up

clean: ## Remove caches and the local state dir (.agentrt); keeps .venv
	rm -rf .agentrt .pytest_cache .mypy_cache .ruff_cache bench-results
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

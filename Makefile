# agentrt — every target installs what it needs first; `make` alone lists them.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_VENV := .bench-venv
BENCH_STAMP := $(BENCH_VENV)/.installed
TS := clients/typescript
TS_STAMP := $(TS)/node_modules/.installed
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` and `make test-fast` (0: one process, no xdist); how the
# suite is split over them: tests/conftest.py.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/agentrt-wheels
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

.DEFAULT_GOAL := help
.PHONY: help install docker-sandbox image deploy-check demo test test-fast test-scale check protos protos-fresh breaking contracts-land lint typecheck bench bench-peers up clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

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

# The TypeScript client's packages, exactly as package-lock.json pins them (the npm registry is
# reached here only; generation and the tests run offline). Reinstalls when the lock changes.
$(TS_STAMP): $(TS)/package-lock.json $(TS)/package.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: install Node.js 20 (and npm) for clients/typescript"; exit 1; }
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(STAMP) $(TS_STAMP) ## Create .venv (agentrt, dev and local-model extras, bubblewrap) and the TS client's node_modules

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

# agentrt's images, built here with no registry (deploy/Dockerfile over a Debian base made
# with debootstrap, Python packages from a wheelhouse made with pip); skipped when the images'
# recipe label matches, seconds when only the code changed.
image: install ## Build the images agentrt:local and agentrt-tools:local (each when out of date)
	@if ! docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory docker-sandbox; fi
	scripts/docker-image.sh

# Every kustomize overlay rendered with `kubectl kustomize` and validated against the
# Kubernetes schemas that kubernetes-validate bundles (no cluster, no network).
deploy-check: install ## Render deploy/k8s overlays and validate them against the Kubernetes schemas
	scripts/deploy-check.sh

demo: install ## Start the mesh, run an agent with the local model on a sample task, stop the mesh
	$(VENV)/bin/agentrt demo

test: install docker-sandbox ## Run the whole test suite (unit, service, e2e; prepares docker first; 2 workers)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

test-fast: install ## Unit and service tests without the slow end-to-end ones (no docker preparation)
	$(PY) -m pytest -q -m "not slow" $(XDIST) $(PYTEST_ARGS)

test-scale: install ## The scale-out acceptance (replicas, chaos, rolling restart); AGENTRT_SCALE_RUNS=200 for the full size
	$(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_scale_out.py $(PYTEST_ARGS)

check: install protos-fresh lint breaking typecheck test ## What CI runs: generated code fresh, buf lint, buf breaking, ruff, mypy, tests

protos: install ## Regenerate services/agentrt/v1 and clients/typescript/src/gen from protos/
	$(PY) protos/generate.py

protos-fresh: install ## Fail when the committed generated code (Python, TypeScript) differs from protos/
	@tmp=$$(mktemp -d); mkdir -p $$tmp/services; \
	$(PY) protos/generate.py $$tmp/services >/dev/null && diff -r -x __pycache__ $$tmp/services/agentrt/v1 services/agentrt/v1 \
	  && diff -r $$tmp/$(TS)/src/gen $(TS)/src/gen; \
	rc=$$?; rm -rf $$tmp; \
	if [ $$rc -ne 0 ]; then echo "generated code is stale: run make protos"; fi; exit $$rc

# The contracts as last landed on main are recorded in protos/landed.json (a buf image);
# `buf breaking` compares protos/ against it. Only `make contracts-land`, run deliberately
# on main after contracts land, updates it (docs/decisions/0003-clients-and-contracts.md).
breaking: install ## buf breaking: protos/ against the last landed contracts (protos/landed.json)
	$(VENV)/bin/buf breaking --against protos/landed.json

contracts-land: install ## Record protos/ as the landed contracts (on main, after a merge; deliberate)
	$(VENV)/bin/buf build --exclude-source-info -o protos/landed.json
	$(PY) -c "import json,sys; p='protos/landed.json'; d=json.load(open(p)); open(p,'w').write(json.dumps(d, indent=1) + '\n')"

lint: install ## buf lint and ruff
	$(VENV)/bin/buf lint
	$(VENV)/bin/ruff check services tests protos

typecheck: install ## mypy
	$(VENV)/bin/mypy

bench: install ## Run tests/bench; figures go to bench-results/
	@mkdir -p bench-results
	AGENTRT_BENCH_DIR=$(CURDIR)/bench-results $(PY) -m pytest -q tests/bench -p no:cacheprovider $(PYTEST_ARGS)
	$(PY) tests/bench/bench_turn.py bench-results/turn.json
	$(PY) tests/bench/bench_domain_spans.py bench-results/domain_spans.json
	$(PY) tests/bench/bench_long_run.py bench-results/long_run.json
	$(PY) tests/bench/bench_agent_tools.py bench-results/agent_tools.json
	$(PY) tests/bench/bench_journal.py bench-results/journal.json
	$(PY) tests/bench/bench_run_store.py bench-results/run_store.json
	$(PY) tests/bench/bench_guardrails.py bench-results/guardrails.json
	AGENTRT_BENCH_DIR=$(CURDIR)/bench-results $(PY) tests/bench/bench_sessions.py
	$(PY) tests/bench/bench_tools.py bench-results/tools.json
	$(PY) tests/bench/bench_docker.py bench-results/docker.json
	$(PY) tests/bench/bench_run_sandbox.py bench-results/run_sandbox.json
	$(PY) tests/bench/bench_shells.py bench-results/shells.json
	$(PY) tests/bench/bench_gateway.py bench-results/gateway.json
	$(PY) tests/bench/bench_gateway_turns.py bench-results/gateway_turns.json
	$(PY) tests/bench/bench_limiter.py bench-results/limiter.json
	$(PY) tests/bench/bench_rpc_telemetry.py bench-results/rpc_telemetry.json
	$(PY) tests/bench/bench_call_streams.py bench-results/call_streams.json
	$(MAKE) --no-print-directory bench-peers
	@ls -l bench-results

# The peers of the side-by-side bench (LangGraph, openai-agents, the bare SDK) live in their
# own venv, pinned by tests/bench/peers/requirements.txt: PyPI is reached here only (when the
# pins change or the venv is gone), never while the bench runs, and never into .venv.
$(BENCH_STAMP): tests/bench/peers/requirements.txt
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -r tests/bench/peers/requirements.txt
	@touch $@

bench-peers: install $(BENCH_STAMP) ## Side by side: agentrt's mesh (SQLite, PostgreSQL) against LangGraph, openai-agents, the bare SDK
	@mkdir -p bench-results
	PEER_PYTHON=$(CURDIR)/$(BENCH_VENV)/bin/python $(PY) tests/bench/bench_peers.py bench-results/peers.json

up: install ## Start the five services on 127.0.0.1:50051-50055 (Ctrl-C stops them)
	$(VENV)/bin/agentrt up

clean: ## Remove caches and the local state dir (.agentrt); keeps .venv and .bench-venv
	rm -rf .agentrt .pytest_cache .mypy_cache .ruff_cache bench-results $(TS)/dist
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

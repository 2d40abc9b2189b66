#!/usr/bin/env bash
# Entrypoint of the vLLM ROCm image: `vllm serve ARGS...`.
# With VLLM_LOG_FILE set, stdout and stderr are also appended to that file, which the health sidecar follows
# (`vllm-rocm-health serve --log-source file:$VLLM_LOG_FILE`, e.g. over a shared volume in compose).
# vLLM is exec'd, so it replaces this shell and receives SIGTERM from `docker stop` directly; tee runs in a
# process substitution, so vLLM's exit status is the container's (a pipeline would report tee's).
set -euo pipefail

if [[ -n ${VLLM_LOG_FILE:-} ]]; then
	mkdir -p "$(dirname "$VLLM_LOG_FILE")"
	: >>"$VLLM_LOG_FILE" || {
		echo "vllm-serve: cannot write VLLM_LOG_FILE=$VLLM_LOG_FILE" >&2
		exit 1
	}
	exec > >(tee -a "$VLLM_LOG_FILE") 2>&1
fi
exec "${VLLM_BIN:-vllm}" serve "$@"

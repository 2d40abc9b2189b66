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
# The facts vLLM never logs (applied patches and the known issues they fix, ROCm version, VLLM_ROCM_* switches),
# as one line ahead of vLLM's own: the health sidecar judges known-issues/known-issues.json with them.
# Only in the image (its build wrote the versions file); a failure here never keeps vLLM from starting.
versions_file=${VLLM_IMAGE_VERSIONS_FILE:-/opt/vllm-rocm/versions}
if [[ -f $versions_file ]]; then
	"${VLLM_PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/patch_report.py" facts "$versions_file" ||
		echo "vllm-serve: could not write the facts line from $versions_file" >&2
fi
exec "${VLLM_BIN:-vllm}" serve "$@"

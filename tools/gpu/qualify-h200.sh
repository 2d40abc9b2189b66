#!/usr/bin/env bash
# The side-by-side qualify on a lent NVIDIA H200 (issue 33): vLLM 0.26.0, SmolLM2-135M-Instruct, all five modes at
# once on the one GPU, throughput in interleaved rounds. On the device machine, from the repository root, after the
# parts of `tools/gpu/pack-site.sh .gpu/parts 0.26.0` were carried and `bash tools/gpu/device.sh receive` unpacked
# them into /tmp/site/{common,vllm-0.26.0} (as for the corpus):
#
#   RUNS=2 bash tools/gpu/qualify-h200.sh [extra `vllm-rocm qualify run` flags, e.g. --kv-cache-bytes 3000000000]
#
# No network is needed. Everything lands in $OUT/run<N>/: table.txt (stdout), progress.txt (stderr, written as it
# goes), report.json, logs/<mode>.log; $OUT/summary.txt has one line per run (exit, seconds, recommendation).
# Each run is capped at LIMIT seconds (default 270): past it qualify gets SIGINT, stops its servers and keeps a partial
# report. The compile caches stay in $WORKDIR between runs (a second run starts warm, as an operator's rerun would).
set -uo pipefail
OUT=${OUT:?set OUT to the directory that comes back}
SITE=${SITE:-/tmp/site}
VLLM=${VLLM:-0.26.0}
MODEL=${MODEL:-/tmp/models/smollm2-135m-instruct}
WORKDIR=${WORKDIR:-/tmp/qualify-h200}
RUNS=${RUNS:-1}
LIMIT=${LIMIT:-270}
REPO=$(pwd)

for comp in common "vllm-$VLLM"; do # device.sh unpacks in the background: wait for it, a little
  for _ in $(seq 1 60); do [ -e "$SITE/$comp/.ready" ] && break; sleep 2; done
  [ -e "$SITE/$comp/.ready" ] || { echo "$SITE/$comp is not unpacked (tools/gpu/device.sh receive)" >&2; exit 2; }
done
export PYTHONPATH=$SITE/vllm-$VLLM:$SITE/common:$REPO/qualify/src:$REPO/health/src:$REPO/known-issues/src
export PYTHONPATH=$PYTHONPATH:$REPO/patches/src:$REPO/tools/src:$REPO/core/src
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

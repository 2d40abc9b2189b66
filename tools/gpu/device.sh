#!/usr/bin/env bash
# The device machine's side of a corpus recording (see tools/gpu/README.md). Each `run` call of the device tool
# carries a few parts made by pack-site.sh; this script collects them, unpacks each component in the background as
# soon as all its parts are there, and runs the recorder detached (setsid) so that it goes on between calls.
#   device.sh receive            copy the carried parts to /tmp/parts; unpack complete components in the background
#   device.sh start [case...]    once: (background) wait for the common part, build the model, run corpus.py
#   device.sh status [SECONDS]   follow the recorder's progress for up to SECONDS
#   device.sh collect            pack the corpus (logs, facts) into $OUT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
parts=/tmp/parts site=/tmp/site corpus=/tmp/corpus
mkdir -p "$parts" "$site"

unpack_ready() {
  local sums=$parts/SHA256SUMS comp want have
  [ -f "$sums" ] || return 0
  sed -E 's/.*  (.*)\.tar\.xz\.[0-9]+$/\1/' "$sums" | sort -u | while read -r comp; do
    [ -e "$site/$comp/.ready" ] && continue
    want=$(grep -c "  $comp\.tar\.xz\." "$sums")
    have=$(find "$parts" -maxdepth 1 -name "$comp.tar.xz.*" | wc -l)
    [ "$have" = "$want" ] || continue
    mkdir "$site/$comp.lock" 2>/dev/null || continue  # another unpack of it is under way
    if ! (cd "$parts" && grep "  $comp\.tar\.xz\." SHA256SUMS | sha256sum -c --quiet); then
      echo "$comp: checksum FAILED"
      continue
    fi
    mkdir -p "$site/$comp" && cat "$parts/$comp".tar.xz.* | xz -dc -T4 | tar -C "$site/$comp" -xf - &&
      touch "$site/$comp/.ready" && echo "$comp: unpacked $(date +%T)"
  done
}

case "${1:-}" in
  receive)
    for f in .gpu/parts/*; do [ -f "$f" ] && cp -n "$f" "$parts/"; done
    cp .gpu/parts/SHA256SUMS "$parts/SHA256SUMS" 2>/dev/null
    echo "parts here: $(find "$parts" -maxdepth 1 -name '*.tar.xz.*' | wc -l) of $(wc -l < "$parts/SHA256SUMS")"
    setsid nohup bash "$0" unpack >> /tmp/unpack.log 2>&1 < /dev/null &
    ;;
  unpack)
    unpack_ready
    ;;
  start)
    shift
    [ -e /tmp/corpus.pid ] && { echo "already started"; exit 0; }
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > /tmp/machine.txt 2>&1
    python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' >> /tmp/machine.txt 2>&1
    nproc >> /tmp/machine.txt
    # A copy: the repository copy on the machine is replaced by the next call's, the recorder runs on.
    mkdir -p /tmp/gputools && cp "$here"/corpus.py "$here"/../models/convert_smollm2.py /tmp/gputools/
    setsid nohup bash -c "
      until [ -e $site/common/.ready ]; do sleep 2; done
      PYTHONPATH=$site/common HF_HUB_OFFLINE=1 python3 /tmp/gputools/convert_smollm2.py --out /tmp/models/smollm2-135m-instruct
      python3 /tmp/gputools/corpus.py run --site $site --out $corpus $*
    " > /tmp/corpus.progress 2>&1 < /dev/null &
    echo $! > /tmp/corpus.pid
    cat /tmp/machine.txt
    ;;
  status)
    end=$(( $(date +%s) + ${2:-0} ))
    shown=$(cat /tmp/corpus.shown 2>/dev/null || echo 0)
    while :; do
      n=$(wc -l < /tmp/corpus.progress 2>/dev/null || echo 0)
      if [ "$n" -gt "$shown" ]; then sed -n "$((shown + 1)),${n}p" /tmp/corpus.progress | cut -c1-200; shown=$n; echo "$n" > /tmp/corpus.shown; fi
      kill -0 "$(cat /tmp/corpus.pid 2>/dev/null)" 2>/dev/null || { echo "== recorder finished"; break; }
      [ "$(date +%s)" -lt "$end" ] || { echo "== recorder running"; break; }
      sleep 3
    done
    tail -3 /tmp/unpack.log 2>/dev/null
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    ;;
  collect)
    cp /tmp/machine.txt /tmp/corpus.progress "$corpus/" 2>/dev/null
    tar -C /tmp -czf "$OUT/corpus.tgz" corpus
    ls -la "$OUT"
    ;;
  *)
    sed -n '2,9p' "$0"; exit 2
    ;;
esac

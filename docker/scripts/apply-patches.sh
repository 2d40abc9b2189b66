#!/usr/bin/env bash
# Apply the vLLM ROCm patch series to a vLLM installation or source tree, verify it, and record what was done.
#
# The one place the image builds (docker/vllm-rocm/Dockerfile*) patch vLLM; tests/docker runs it the same way
# outside Docker (patch_report.py must sit next to it). It fails (non-zero, reason on stderr) when a patch does
# not apply, a post-condition does not hold, or the tree is not the release / patch level / series the image
# is labelled with; those expectations are checked BEFORE anything is changed.
#
# usage: apply-patches.sh (--python PYEXE | --target DIR) --out-dir DIR [options]
#   --python PYEXE              patch the vLLM that interpreter imports (site-packages found without importing vLLM)
#   --target DIR                patch DIR (site-packages, unpacked wheel, or an sdist/source tree: needs --release)
#   --release X.Y.Z             the release of a source tree (passed to the patch tool)
#   --out-dir DIR               where status-report.json, apply-report.json, patch-report.json (verify) and
#                               versions (key=value lines: release, series, sha256, patch level, ...) go
#   --expect-release X.Y.Z      fail unless the detected release is X.Y.Z (what the image label says)
#   --expect-patch-level N      fail unless the release's series holds N patches (the -pN of the image tag)
#   --expect-series-sha256 HEX  fail unless the series sha256 is HEX (the io.vllm-rocm.patch-series-sha256 label)
#   --tool-src DIR              the patch tool's source root (default: patches/src next to this script)
#   --series-dir DIR            the series directory (default: the parent of --tool-src)
#   --tool-python PY            interpreter that runs the (stdlib-only) tool (default: PYEXE, else python3)
# exit: 0 ok; 1 patch/verify/expectation failure; 2 bad usage or missing inputs.
set -euo pipefail

readonly PROG=apply-patches

die() { # die CODE MESSAGE...
	local code=$1
	shift
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit "$code"
}
info() { printf '%s: %s\n' "$PROG" "$*" >&2; }

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 2
}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python_exe="" target="" release="" out_dir="" tool_src="" series_dir="" tool_python=""
expect_release="" expect_level="" expect_sha=""

need_value() { [[ $# -ge 2 && -n $2 ]] || die 2 "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
	case $1 in
	--python) need_value "$@"; python_exe=$2; shift 2 ;;
	--target) need_value "$@"; target=$2; shift 2 ;;
	--release) need_value "$@"; release=$2; shift 2 ;;
	--out-dir) need_value "$@"; out_dir=$2; shift 2 ;;
	--expect-release) need_value "$@"; expect_release=$2; shift 2 ;;
	--expect-patch-level) need_value "$@"; expect_level=$2; shift 2 ;;
	--expect-series-sha256) need_value "$@"; expect_sha=$2; shift 2 ;;
	--tool-src) need_value "$@"; tool_src=$2; shift 2 ;;
	--series-dir) need_value "$@"; series_dir=$2; shift 2 ;;
	--tool-python) need_value "$@"; tool_python=$2; shift 2 ;;
	-h | --help) usage ;;
	*) die 2 "unknown argument: $1 (see --help)" ;;
	esac
done

[[ -n $out_dir ]] || die 2 "--out-dir is required"
if [[ -n $python_exe && -n $target ]] || [[ -z $python_exe && -z $target ]]; then
	die 2 "give exactly one of --python PYEXE or --target DIR"
fi
[[ -z $expect_level || $expect_level =~ ^[0-9]+$ ]] || die 2 "--expect-patch-level must be a number, not '$expect_level'"
[[ -z $expect_sha || $expect_sha =~ ^[0-9a-f]{64}$ ]] || die 2 "--expect-series-sha256 must be 64 hex digits"

# The repository layout (docker/scripts/ -> patches/src) and the image layout (/opt/vllm-rocm/bin -> ../patches/src).
if [[ -z $tool_src ]]; then
	for candidate in "$script_dir/../../patches/src" "$script_dir/../patches/src"; do
		if [[ -d $candidate/vllm_rocm_patches ]]; then
			tool_src=$candidate
			break
		fi
	done
fi
[[ -n $tool_src && -d $tool_src/vllm_rocm_patches ]] || die 2 "patch tool not found (no vllm_rocm_patches in '${tool_src:-patches/src}'); pass --tool-src"
tool_src=$(cd "$tool_src" && pwd)
series_dir=${series_dir:-$(dirname "$tool_src")}
[[ -f $series_dir/index.json ]] || die 2 "$series_dir is not a patch series directory (no index.json)"
tool_python=${tool_python:-${python_exe:-python3}}
command -v "$tool_python" >/dev/null 2>&1 || die 2 "interpreter '$tool_python' not found"

target_args=()
if [[ -n $python_exe ]]; then
	target_args=(--python "$python_exe")
else
	[[ -d $target ]] || die 2 "--target $target is not a directory"
	target_args=("$target")
fi
[[ -z $release ]] || target_args+=(--release "$release")

mkdir -p "$out_dir"
apply_report=$out_dir/apply-report.json
status_report=$out_dir/status-report.json
verify_report=$out_dir/patch-report.json
versions_file=$out_dir/versions
rm -f "$status_report" "$apply_report" "$verify_report" "$versions_file" # never leave a stale success behind

# The known-issues evaluator the tool imports: known-issues/src beside patches/src, in both layouts.
ki_src=$(cd "$tool_src/../.." && pwd)/known-issues/src
[[ -d $ki_src/vllm_rocm_known_issues ]] || die 2 "known-issues evaluator not found (no vllm_rocm_known_issues in $ki_src)"

tool() { # tool COMMAND [ARGS...]: the patch tool, isolated from the caller's PYTHONPATH
	PYTHONPATH=$tool_src:$ki_src "$tool_python" -m vllm_rocm_patches --series-dir "$series_dir" "$@"
}
report() { "$tool_python" "$script_dir/patch_report.py" "$@"; }

# 1. Before touching anything: is this the release, patch level and series the image is labelled with?
rc=0
tool status "${target_args[@]}" --json >"$status_report" || rc=$?
if [[ $rc -eq 2 ]]; then
	die 2 "the patch tool cannot read the vLLM tree (exit 2; see above)"
fi
expect_args=()
[[ -z $expect_release ]] || expect_args+=(--release "$expect_release")
[[ -z $expect_level ]] || expect_args+=(--level "$expect_level")
[[ -z $expect_sha ]] || expect_args+=(--sha256 "$expect_sha")
report expect "$status_report" "${expect_args[@]}" ||
	die 1 "the vLLM tree is not what the image is labelled with (see above); status: $status_report"

# 2. Apply (exact, atomic, idempotent), 3. verify the post-conditions on disk, 4. record the result.
info "applying the series from $series_dir to ${target:-the vLLM of $python_exe}"
rc=0
tool apply "${target_args[@]}" --report "$apply_report" || rc=$?
[[ $rc -eq 0 ]] || die "$rc" "the patch series did not apply (patch tool exit $rc); report: $apply_report"
rc=0
tool verify "${target_args[@]}" --report "$verify_report" || rc=$?
[[ $rc -eq 0 ]] || die "$rc" "verification failed after apply (patch tool exit $rc): a post-condition does not hold; report: $verify_report"

finish_args=()
[[ -z $python_exe ]] || finish_args+=(--python "$python_exe")
summary=$(report finish "$apply_report" "$verify_report" "${finish_args[@]}") ||
	die 1 "cannot record the result (see above); report: $verify_report"
printf '%s\n' "$summary" >"$versions_file"
info "ok: vllm-rocm $(sed -n 's/^image_tag=//p' "$versions_file"); wrote $verify_report and $versions_file"

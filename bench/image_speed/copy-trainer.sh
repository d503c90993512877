#!/usr/bin/env bash
# Copies /usr/local/bin/tj-trainer out of a CPU trainer image (buildah mount, no container
# started), so the binary users run can be timed beside a host build with the same command.
#   bash bench/image_speed/copy-trainer.sh IMAGE DEST
# Needs root (buildah mounts rootful) and the image in local storage (`make images`).
set -euo pipefail
image=${1:?usage: copy-trainer.sh IMAGE DEST}
dest=${2:?usage: copy-trainer.sh IMAGE DEST}
cache=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}/images
# hack/images.sh's engine settings (runc, cgroupfs), where it wrote them.
[ -f "$cache/containers.conf" ] && export CONTAINERS_CONF=$cache/containers.conf
buildah inspect --type image "$image" >/dev/null 2>&1 ||
  { echo "copy-trainer: no image $image in local storage: make images" >&2; exit 1; }
ctr=$(buildah from --pull-never "$image")
trap 'buildah rm "$ctr" >/dev/null' EXIT
mnt=$(buildah mount "$ctr")
cp "$mnt/usr/local/bin/tj-trainer" "$dest"
buildah umount "$ctr" >/dev/null

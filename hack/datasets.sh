#!/usr/bin/env bash
# Real image datasets beyond Fashion-MNIST (which Debian's dataset-fashion-mnist installs, the
# trainer's default --data-dir), fetched once from a package registry and converted into the
# formats trainer/data/ reads, under ${TJ_CACHE_DIR:-~/.cache/tj-operator}/datasets:
#
#   hack/datasets.sh digits     the UCI handwritten digits (1,797 greyscale 8x8 images, 10
#                               classes) that Debian's python3-sklearn ships as
#                               sklearn/datasets/data/digits.csv.gz; prints its directory:
#       digits.npz              x_train uint8 1437x8x8, y_train, x_test 360x8x8, y_test (the
#                               first 1,437 rows train, the last 360 test, unshuffled), pixels
#                               0..16 scaled to 0..255 (round(v x 255 / 16))
#       train/<digit>/<row>.png, test/<digit>/<row>.png   the same images as class folders
#       SOURCE                  the package and the SHA-256 of the CSV it came from
#
# CIFAR-10 is in neither registry as files: Debian has no package of it, and PyPI's
# cifar10-named packages are loaders that download it at run time (none reachable here). So
# the digits are the real set; the readers' tests use data they generate.
#
# The .deb is only downloaded and unpacked (apt-get download; nothing is installed), or taken
# from an installed python3-sklearn. The conversion needs Debian's python3 with numpy
# (hack/install-deps.sh).
set -euo pipefail

CACHE_ROOT=${TJ_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tj-operator}
PYTHON=/usr/bin/python3
CSV_PATH=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz

log() { echo "datasets: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The CSV from python3-sklearn into $1: the installed package's, else its downloaded .deb's.
fetch_digits_csv() {
  local dest=$1 work
  if [ -f "/$CSV_PATH" ]; then
    cp "/$CSV_PATH" "$dest"
    echo "python3-sklearn $(dpkg-query -W -f='${Version}' python3-sklearn 2>/dev/null) (installed)"
    return 0
  fi
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  (cd "$work" && apt-get download -q python3-sklearn >&2) ||
    die "apt-get download python3-sklearn failed (run apt-get update first; Debian's archive unreachable?)"
  local deb
  deb=$(find "$work" -name 'python3-sklearn_*.deb' | head -n1)
  [ -n "$deb" ] || die "apt-get download left no python3-sklearn .deb"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" "./$CSV_PATH" ||
    die "$deb holds no $CSV_PATH"
  cp "$work/$CSV_PATH" "$dest"
  basename "$deb" .deb
}

cmd_digits() {
  local dir=$CACHE_ROOT/datasets/digits
  if [ -f "$dir/.complete" ]; then echo "$dir"; return 0; fi
  mkdir -p "$CACHE_ROOT/datasets"
  exec 9>"$dir.lock"
  flock 9
  if [ ! -f "$dir/.complete" ]; then
    "$PYTHON" -c 'import numpy' 2>/dev/null ||
      die "$PYTHON has no numpy: run hack/install-deps.sh (python3-numpy)"
    rm -rf "$dir.partial"
    mkdir -p "$dir.partial"
    local source
    source=$(fetch_digits_csv "$dir.partial/digits.csv.gz")
    log "converting the digits of $source into $dir"
    "$PYTHON" - "$dir.partial" <<'EOF'
import gzip, os, struct, sys, zlib
import numpy as np

out = sys.argv[1]
rows = np.loadtxt(gzip.open(os.path.join(out, "digits.csv.gz"), "rt"), delimiter=",",
                  dtype=np.int64)
assert rows.shape == (1797, 65), rows.shape
pixels, labels = rows[:, :64], rows[:, 64]
assert pixels.min() >= 0 and pixels.max() <= 16 and set(labels) == set(range(10))
images = np.floor(pixels * 255 / 16 + 0.5).astype(np.uint8).reshape(-1, 8, 8)
train = 1437
np.savez_compressed(os.path.join(out, "digits.npz"),
                    x_train=images[:train], y_train=labels[:train].astype(np.uint8),
                    x_test=images[train:], y_test=labels[train:].astype(np.uint8))

def png(image):
    # 8-bit greyscale, filter 0 on every row.
    raw = b"".join(b"\0" + row.tobytes() for row in image)
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    header = struct.pack(">IIBBBBB", image.shape[1], image.shape[0], 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))

for split, start, end in (("train", 0, train), ("test", train, len(images))):
    for row in range(start, end):
        folder = os.path.join(out, split, str(labels[row]))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "%04d.png" % row), "wb") as f:
            f.write(png(images[row]))
EOF
    echo "$source; digits.csv.gz sha256 $(sha256sum "$dir.partial/digits.csv.gz" | cut -d' ' -f1)" \
      >"$dir.partial/SOURCE"
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
    touch "$dir/.complete"
  fi
  exec 9>&-
  echo "$dir"
}

case "${1:-}" in
  digits) cmd_digits ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

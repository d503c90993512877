#!/usr/bin/env bash
# Builds what a machine with an NVIDIA GPU needs to validate and benchmark the GPU backend,
# and puts it in .gpu-bundle/ (git-ignored, small enough to copy to another machine):
#   bin/   tj-trainer and the gpu-labelled test binaries (sm_80, sm_90 + PTX; -DTJ_NATIVE=OFF:
#          portable x86-64-v2 host code, so they run on the device's CPU)
#   lib/   every shared library they need that is not glibc, the NVIDIA driver or a CUDA
#          library: the GPU machine's CUDA 13 toolkit (or PyTorch's nvidia-* wheels, or the
#          toolkit hack/cuda-toolkit.sh assembles there) provides libcudart, libcublas(Lt),
#          libcudnn and libnccl (libcublasLt alone is ~500 MB)
#   data/  the Fashion-MNIST files (for a machine without /usr/share/datasets)
# Then hack/gpu-check.sh runs everything there. See docs/trainer.md, "Verifying on a machine
# with an NVIDIA GPU".
#   bash hack/gpu-bundle.sh            # BUILD_DIR=build-gpu-bundle JOBS=2
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu-bundle}
JOBS=${JOBS:-2}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
BUNDLE=.gpu-bundle
LIMIT_MIB=60  # the tool carries 64 MiB with the repository; leave room for it
TARGETS=(tj-trainer gpu_step_test gpu_backend_test nccl_communicator_test)

# The machine's CUDA, or else CUDA 13 from PyPI's wheels (fetched once, hack/cuda-toolkit.sh).
bash hack/cuda-toolkit.sh ensure ||
  { echo "gpu-bundle: no CUDA toolkit to build the GPU backend with (above)" >&2; exit 1; }
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -f "$DATA_DIR/$f.gz" ] || [ -f "$DATA_DIR/$f" ] ||
    { echo "gpu-bundle: $DATA_DIR/$f(.gz) missing: set DATA_DIR to the Fashion-MNIST files" >&2; exit 1; }
done

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTJ_NATIVE=OFF -DTJ_WITH_CUDA=ON |
  grep 'tj: GPU backend ON' ||
  { echo "gpu-bundle: CMake did not configure the GPU backend ($BUILD_DIR)" >&2; exit 1; }
NVCC=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
grep -q '^TJ_NCCL_LIBRARY:.*nccl' "$BUILD_DIR/CMakeCache.txt" ||
  { echo "gpu-bundle: NCCL not found by CMake: the NCCL test would be missing" >&2; exit 1; }
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TARGETS[@]}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/data"
cp "$BUILD_DIR/bin/tj-trainer" "$BUNDLE/bin/"
for t in "${TARGETS[@]:1}"; do cp "$BUILD_DIR/tests/$t" "$BUNDLE/bin/"; done
strip --strip-unneeded "$BUNDLE"/bin/*

# Libraries: not the C library family (the device's glibc is newer), not the driver, not CUDA's
# own (the device's CUDA 13 provides them; see gpu-check.sh).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libnccl|libcudnn)'
for bin in "$BUNDLE"/bin/*; do
  ldd "$bin" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  [ "$path" = "not" ] && { echo "gpu-bundle: $name not found by ldd" >&2; exit 1; }
  cp -L "$path" "$BUNDLE/lib/$name"
done
strip --strip-unneeded "$BUNDLE"/lib/* 2>/dev/null || true
for f in "$DATA_DIR"/*-ubyte*; do cp "$f" "$BUNDLE/data/"; done

# What the bundle needs from the device: CUDA libraries and a glibc at least this new.
{
  echo "built: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- trainer tests/gpu || echo '+local changes')"
  echo "nvcc: $("$NVCC" --version | tail -2 | head -1) ($NVCC)"
  echo "needs glibc: $(objdump -T "$BUNDLE"/bin/* "$BUNDLE"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  echo "needs from the device: $(for b in "$BUNDLE"/bin/*; do ldd "$b" | awk '{print $1}'; done | grep -E "$skip" | grep -v -E '^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.)' | sort -u | tr '\n' ' ')"
} > "$BUNDLE/MANIFEST"

size_mib=$(( $(du -sb "$BUNDLE" | cut -f1) / 1048576 ))
cat "$BUNDLE/MANIFEST"
echo "gpu-bundle: $BUNDLE is $size_mib MiB (limit $LIMIT_MIB)"
[ "$size_mib" -le "$LIMIT_MIB" ] || { echo "gpu-bundle: too big to carry" >&2; exit 1; }

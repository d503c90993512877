#!/usr/bin/env bash
# The one command to run on a machine with an NVIDIA GPU, over the bundle hack/gpu-bundle.sh
# made (.gpu-bundle): the gpu-labelled tests, two tj-trainer processes on two GPUs when
# there are two, and the benchmark (bench/train_gpu/run.sh). Everything it reports goes to
# $OUT: env.txt, tests.log, bench.log, RESULTS.md.
#   bash hack/gpu-check.sh [all|tests|bench]
# The four reports lie in $OUT, every raw log in $OUT/logs.tar.gz. Without a GPU it says so
# and the tests skip (each names why); the bench is not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
WHAT=${1:-all}
BUNDLE=$PWD/.gpu-bundle
# The reports are written straight into $OUT (so a run killed at the time limit still returns
# what it had), the raw logs into a scratch folder packed into $OUT/logs.tar.gz on exit.
REPORTS=${OUT:-$PWD/.gpu-check-out}
mkdir -p "$REPORTS"
OUT=$(mktemp -d /tmp/gpu-check.XXXXXX)
for f in env.txt tests.log bench.log RESULTS.md; do ln -s "$REPORTS/$f" "$OUT/$f"; done
trap 'tar -C "$OUT" -czhf "$REPORTS/logs.tar.gz" . 2>/dev/null' EXIT
[ -x "$BUNDLE/bin/tj-trainer" ] ||
  { echo "gpu-check: no $BUNDLE/bin/tj-trainer: run hack/gpu-bundle.sh first and carry .gpu-bundle" >&2; exit 1; }
PYTHON=${PYTHON:-python3}

# CUDA's libraries for our binaries: the device's toolkit, PyTorch's nvidia-* wheels, and the
# toolkit hack/cuda-toolkit.sh assembled from PyPI's wheels when it ran here (so a machine
# with only the NVIDIA driver runs the bundle after `bash hack/cuda-toolkit.sh fetch`); only
# for our binaries: PyTorch keeps the environment it was installed with.
wheel_libs=$("$PYTHON" - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    dirs = {os.path.dirname(p) for base in nvidia.__path__
            for p in glob.glob(os.path.join(base, "**", "lib*.so*"), recursive=True)}
    print(":".join(sorted(dirs)))
except Exception:
    pass
PY
)
pypi_cuda=$(bash hack/cuda-toolkit.sh path 2>/dev/null || true)
export TJ_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:$wheel_libs${pypi_cuda:+:$pypi_cuda/lib64}"
tj() { env LD_LIBRARY_PATH="$TJ_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }

gpus=0
command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  cat "$BUNDLE/MANIFEST"
  echo "GPUs: $gpus"; nvidia-smi -L 2>&1 || true
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 || true
  echo "glibc here: $(ldd --version 2>&1 | head -1)"
  echo "TJ_LIBRARY_PATH=$TJ_LIBRARY_PATH"
  for b in "$BUNDLE"/bin/*; do echo "== ldd $(basename "$b")"; tj ldd "$b" | grep -E '=> not found|cuda|cublas|nccl' ; done
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if grep -q '=> not found' "$OUT/env.txt"; then
  echo "gpu-check: a library is missing (see 'not found' above): nothing run" >&2
  exit 1
fi

status=0
if [ "$WHAT" = all ] || [ "$WHAT" = tests ]; then
  : >"$OUT/tests.log"
  for t in gpu_step_test gpu_backend_test nccl_communicator_test; do
    echo "== $t" | tee -a "$OUT/tests.log"
    tj timeout 120 "$BUNDLE/bin/$t" --gtest_color=no >"$OUT/$t.log" 2>&1
    rc=$?
    cat "$OUT/$t.log" >>"$OUT/tests.log"
    grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]' "$OUT/$t.log"
    [ "$rc" -eq 0 ] || { echo "== $t: exit $rc" | tee -a "$OUT/tests.log"; status=1; }
  done
  # The trainer itself: a short run on the GPU against the same run on the CPU, and with two
  # GPUs two processes (one per GPU, NCCL) against one.
  if [ "$gpus" -ge 1 ]; then
    short=(--data-dir "$BUNDLE/data" --epochs 1 --steps-per-epoch 200 --batch-size 64)
    tj timeout 120 "$BUNDLE/bin/tj-trainer" --device gpu "${short[@]}" >"$OUT/short_gpu.jsonl" 2>>"$OUT/tests.log" || status=1
    TJ_GPU_CONV=cudnn tj timeout 120 "$BUNDLE/bin/tj-trainer" --device gpu "${short[@]}" >"$OUT/short_gpu_cudnn.jsonl" 2>>"$OUT/tests.log" || status=1
    tj timeout 120 "$BUNDLE/bin/tj-trainer" --device cpu "${short[@]}" >"$OUT/short_cpu.jsonl" 2>>"$OUT/tests.log" || status=1
    echo "== short run: GPU, GPU with cuDNN's convolution, CPU:" | tee -a "$OUT/tests.log"
    grep -h train_end "$OUT/short_gpu.jsonl" "$OUT/short_gpu_cudnn.jsonl" "$OUT/short_cpu.jsonl" | tee -a "$OUT/tests.log"
  fi
  if [ "$gpus" -ge 2 ]; then
    p0=$((20000 + RANDOM % 10000)); p1=$((p0 + 1))
    cluster="{\"worker\":[\"localhost:$p0\",\"localhost:$p1\"]}"
    for r in 0 1; do
      TF_CONFIG="{\"cluster\":$cluster,\"task\":{\"type\":\"worker\",\"index\":$r}}" LOCAL_RANK=$r \
        TJ_RENDEZVOUS_KEY=gpu-check-key \
        tj timeout 120 "$BUNDLE/bin/tj-trainer" --device gpu "${short[@]}" >"$OUT/two_gpus_$r.jsonl" 2>>"$OUT/tests.log" &
    done
    wait || status=1
    echo "== two processes on two GPUs (NCCL):" | tee -a "$OUT/tests.log"
    grep -h train_end "$OUT"/two_gpus_*.jsonl | tee -a "$OUT/tests.log"
  else
    echo "== two processes on two GPUs: skipped, $gpus GPU(s) here" | tee -a "$OUT/tests.log"
  fi
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  if [ "$gpus" -ge 1 ]; then
    mkdir -p "$OUT/bench-logs"
    TRAINER="$BUNDLE/bin/tj-trainer" DATA_DIR="$BUNDLE/data" PYTHON="$PYTHON" RESULTS="$OUT/RESULTS.md" \
      LOGS="$OUT/bench-logs" bash bench/train_gpu/run.sh 2>&1 | tee "$OUT/bench.log" | tail -40
  else
    echo "== bench: skipped, no GPU here" | tee "$OUT/bench.log"
  fi
fi
echo "gpu-check: done (exit $status); reports in $REPORTS"
exit $status

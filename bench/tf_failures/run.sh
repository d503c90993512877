#!/usr/bin/env bash
# What TensorFlow programs do when one replica of the gang fails: examples/tensorflow's
# keras_fit.py (tf-keras, BackupAndRestore every 10 steps) and custom_loop.py (Keras 3,
# PreemptionCheckpointHandler) as chief + 2 workers on 127.0.0.1 with TF_CONFIG, one thread
# each, with TensorFlow from hack/tensorflow.sh venv. Each case (faults.py: SIGKILL, an OOM
# kill in a memory cgroup, SIGSTOP, SIGTERM; to the chief or worker 1) runs ROUNDS times
# (default 2), 3 s into the second epoch. Appends faults.py's JSON lines to RAW and writes the
# table of RESULTS.md from them.
#
#   sudo bash bench/tf_failures/run.sh [CASE...]     CASE: program:fault:victim, e.g.
#                                                    keras_fit:kill:worker:1 (default: all)
# Root for the OOM case (it makes a cgroup v1 memory cgroup); CAP (default 120) is how long
# the survivors are watched after the fault; HEARTBEAT_MS sets the coordination service's
# heartbeat timeout (faults.py --heartbeat-timeout-ms; default TensorFlow's).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
CAP=${CAP:-120}
RAW=${RAW:-bench/tf_failures/raw.jsonl}
OUT=${OUT:-bench/tf_failures/RESULTS.md}
PY=$(bash hack/tensorflow.sh venv)
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  for program in keras_fit custom_loop; do
    for fc in kill:chief:0 kill:worker:1 oom:worker:1 stop:chief:0 stop:worker:1 \
      term:worker:1; do
      cases+=("$program:$fc")
    done
  done
fi
for round in $(seq "$ROUNDS"); do
  for c in "${cases[@]}"; do
    IFS=: read -r program fault vtype vindex <<<"$c"
    echo "round $round: $program $fault $vtype:$vindex" >&2
    python3 bench/tf_failures/faults.py --python "$PY" --program "$program" --fault "$fault" \
      --victim "$vtype:$vindex" --cap "$CAP" --heartbeat-timeout-ms "${HEARTBEAT_MS:-0}" >>"$RAW"
  done
done
python3 bench/tf_failures/summarize.py "$RAW" >"$OUT"
echo "wrote $OUT" >&2

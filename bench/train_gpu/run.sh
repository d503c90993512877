#!/usr/bin/env bash
# GPU training: tj-trainer --device gpu (the fused convolution; also TJ_GPU_CONV=cudnn and
# TJ_GPU_GRAPHS=0 to measure those choices) against PyTorch (eager, and torch.compile where it
# works) with the same model, recipe and batch (64) on the same GPU, 12 epochs each; plus
# tj-trainer --device cpu for the accuracy criterion. Writes RESULTS.md (RESULTS=path to
# change where) with the GPU's name, the commands, times, images/s and test accuracies, and
# the three criteria (training time, speed against PyTorch eager, accuracy against the CPU run) checked.
#   bash bench/train_gpu/run.sh
# Environment: TRAINER (tj-trainer), DATA_DIR, TJ_LIBRARY_PATH (LD_LIBRARY_PATH for
# tj-trainer only, e.g. the carried bundle's; PyTorch keeps its own), PYTHON, EPOCHS.
# On a machine with an NVIDIA GPU, hack/gpu-check.sh sets all of these.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
TRAINER=${TRAINER:-build/bin/tj-trainer}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-python3}
EPOCHS=${EPOCHS:-12}
RESULTS=${RESULTS:-bench/train_gpu/RESULTS.md}
LOGS=${LOGS:-$(mktemp -d)}
[ -x "$TRAINER" ] || { echo "train_gpu: no tj-trainer at $TRAINER (build with CUDA first)" >&2; exit 1; }
command -v nvidia-smi >/dev/null || { echo "train_gpu: no nvidia-smi: this needs a GPU machine" >&2; exit 1; }

tj() { env LD_LIBRARY_PATH="${TJ_LIBRARY_PATH:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
common=(--data-dir "$DATA_DIR" --epochs "$EPOCHS" --batch-size 64)
gpu_cmd=("$TRAINER" --device gpu "${common[@]}")
cpu_cmd=("$TRAINER" --device cpu "${common[@]}")
pytorch=("$PYTHON" bench/train_gpu/pytorch_seeds_gpu.py "${common[@]}")
eager_cmd=("${pytorch[@]}" --mode eager)
compile_cmd=("${pytorch[@]}" --mode compile)

echo "train_gpu: tj-trainer on the GPU (graphs; without graphs; cuDNN conv), on the CPU, PyTorch eager, PyTorch compile" >&2
# Each run is bounded, so that the whole fits one 10-minute device call.
tj timeout 120 "${gpu_cmd[@]}" >"$LOGS/tj_gpu.jsonl" 2>"$LOGS/tj_gpu.err"; tj_gpu_rc=$?
TJ_GPU_GRAPHS=0 tj timeout 120 "${gpu_cmd[@]}" >"$LOGS/tj_gpu_nographs.jsonl" 2>"$LOGS/tj_gpu_nographs.err"; tj_nog_rc=$?
TJ_GPU_CONV=cudnn tj timeout 120 "${gpu_cmd[@]}" >"$LOGS/tj_gpu_cudnn.jsonl" 2>"$LOGS/tj_gpu_cudnn.err"; tj_cudnn_rc=$?
tj timeout 150 "${cpu_cmd[@]}" >"$LOGS/tj_cpu.jsonl" 2>"$LOGS/tj_cpu.err"; tj_cpu_rc=$?
timeout 120 "${eager_cmd[@]}" >"$LOGS/pt_eager.jsonl" 2>"$LOGS/pt_eager.err"; pt_eager_rc=$?
timeout 200 "${compile_cmd[@]}" >"$LOGS/pt_compile.jsonl" 2>"$LOGS/pt_compile.err"; pt_compile_rc=$?

# One table row per run, and the criteria, from the JSON lines (Python: the device has it).
"$PYTHON" - "$LOGS" "$RESULTS" "$EPOCHS" <<PY
import json, os, subprocess, sys, datetime
logs, results, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def events(name):
    out = []
    try:
        for line in open(os.path.join(logs, name + ".jsonl")):
            try: out.append(json.loads(line))
            except ValueError: pass
    except OSError: pass
    return out
def err_tail(name):
    try: return open(os.path.join(logs, name + ".err")).read()[-600:].strip()
    except OSError: return ""
runs = [("tj-trainer --device gpu", "tj_gpu", "${gpu_cmd[*]}", $tj_gpu_rc),
        ("tj-trainer --device gpu, TJ_GPU_GRAPHS=0", "tj_gpu_nographs", "TJ_GPU_GRAPHS=0 ${gpu_cmd[*]}", $tj_nog_rc),
        ("tj-trainer --device gpu, TJ_GPU_CONV=cudnn", "tj_gpu_cudnn", "TJ_GPU_CONV=cudnn ${gpu_cmd[*]}", $tj_cudnn_rc),
        ("tj-trainer --device cpu", "tj_cpu", "${cpu_cmd[*]}", $tj_cpu_rc),
        ("PyTorch eager", "pt_eager", "${eager_cmd[*]}", $pt_eager_rc),
        ("PyTorch torch.compile", "pt_compile", "${compile_cmd[*]}", $pt_compile_rc)]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
rows, got = [], {}
for title, name, cmd, rc in runs:
    ev = events(name)
    end = [e for e in ev if e.get("event") == "train_end"]
    epochs_ev = [e for e in ev if e.get("event") == "epoch_end"]
    if rc != 0 or not end:
        rows.append(f"| {title} | failed (exit {rc}) | | | | |")
        got[name] = None
        continue
    e = end[-1]
    last = epochs_ev[-1]["images_per_sec"] if epochs_ev else 0.0
    got[name] = dict(seconds=e.get("train_seconds", 0.0), ips=e.get("images_per_sec", 0.0), last=last,
                     acc=e.get("test_accuracy", 0.0), device=e.get("device", ""))
    g = got[name]
    rows.append(f"| {title} | {g['seconds']:.2f} | {g['ips']:.0f} | {g['last']:.0f} | {100*g['acc']:.2f} | {g['device']} |")
def verdict(ok): return "PASS" if ok else "FAIL"
crit = []
g, c, pe = got.get("tj_gpu"), got.get("tj_cpu"), got.get("pt_eager")
if g: crit.append(f"- {epochs} epochs at batch 64 in at most 3 s of training time: {g['seconds']:.2f} s: {verdict(g['seconds'] <= 3.0)}")
if g and pe: crit.append(f"- throughput at least 3x PyTorch eager's (last epoch): {g['last']:.0f} / {pe['last']:.0f} = {g['last']/pe['last']:.2f}x: {verdict(g['last'] >= 3*pe['last'])}")
if g and c: crit.append(f"- test accuracy within 0.5 points of the CPU run's: {100*g['acc']:.2f} vs {100*c['acc']:.2f}: {verdict(abs(g['acc']-c['acc']) <= 0.005)}")
pc = got.get("pt_compile")
with open(results, "w") as f:
    f.write("# GPU training: tj-trainer vs PyTorch on the same GPU\n\n")
    f.write(f"- Date: {datetime.datetime.utcnow():%Y-%m-%dT%H:%MZ}\n- GPU: {gpu}\n")
    try:
        import torch; f.write(f"- PyTorch: {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})\n")
    except Exception as ex: f.write(f"- PyTorch: not importable ({ex})\n")
    f.write(f"- Command: \`bash bench/train_gpu/run.sh\` (through \`bash hack/gpu-check.sh\`), EPOCHS={epochs}\n")
    for title, name, cmd, rc in runs: f.write(f"  - {title}: \`{cmd}\`\n")
    f.write("- Model and recipe: the seeds' CNN, batch 64, Keras-Adam, lr 1e-3/1e-4/1e-5 by epoch; full float32 everywhere (no TF32).\n")
    f.write("- Training seconds: the epochs' step loops (tj-trainer's train_end train_seconds; PyTorch: the same span, synchronised); images/s: whole run and last epoch.\n\n")
    f.write("| run | train seconds | images/s (run) | images/s (last epoch) | test accuracy % | device |\n|---|---:|---:|---:|---:|---|\n")
    f.write("\n".join(rows) + "\n\nCriteria:\n\n" + ("\n".join(crit) if crit else "- not evaluated: a run failed") + "\n")
    for title, name, cmd, rc in runs:
        if got.get(name) is None:
            f.write(f"\n{title} failed; stderr tail:\n\n\`\`\`\n{err_tail(name)}\n\`\`\`\n")
    f.write("\nRaw output (train_end lines):\n\n\`\`\`\n")
    for title, name, cmd, rc in runs:
        for e in events(name):
            if e.get("event") == "train_end": f.write(json.dumps(e) + "\n")
    f.write("\`\`\`\n")
print(open(results).read())
PY

#!/usr/bin/env bash
# What BackupAndRestore costs: training throughput with --save-freq 100 against no backups,
# one full epoch (937 steps at batch 64), 2 threads, alternating runs, median of REPEATS.
# Writes bench/backup_overhead/RESULTS.md.   bash bench/backup_overhead/run.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS=${1:-5}
TRAINER=${TRAINER:-build/bin/tj-trainer}
OUT=bench/backup_overhead/RESULTS.md
[ -x "$TRAINER" ] || { echo "build first: make build" >&2; exit 1; }
tmp=$(mktemp -d)
base=("$TRAINER" --epochs 1 --threads 2)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ips() { grep '"epoch_end"' | sed -E 's/.*"images_per_sec":([0-9.]+).*/\1/'; }
# CPU seconds (user + system) of a whole run: on a shared machine, a steadier measure of the
# work backups add than wall-clock throughput.
cpu() { /usr/bin/time -f "%U %S" -o "$tmp/time" "$@"; awk '{print $1 + $2}' "$tmp/time" > "$tmp/cpu"; }
none=(); freq=(); backup_s=(); cpu_none=(); cpu_freq=(); bound=()
# From a run's train_end: the share of the step loop's time that backups can have taken, at
# most: the loop waiting in SaveBackup (snapshot) plus every CPU second of the writer thread
# (as if each one had been taken from a training thread). Unlike throughput, it is not
# blurred by other work on the machine.
bound_of() { grep '"train_end"' | python3 -c "
import json, sys
e = json.loads(sys.stdin.read())
print(100 * (e['backup_stall_seconds'] + e['backup_cpu_seconds']) / e['train_seconds'])"; }
for i in $(seq "$REPEATS"); do
  cpu "${base[@]}" > "$tmp/out"
  none+=("$(ips < "$tmp/out")"); cpu_none+=("$(cat "$tmp/cpu")")
  cpu "${base[@]}" --save-freq 100 --backup-dir "$tmp/b$i" > "$tmp/out"
  out=$(cat "$tmp/out"); cpu_freq+=("$(cat "$tmp/cpu")")
  freq+=("$(echo "$out" | ips)")
  bound+=("$(echo "$out" | bound_of)")
  mapfile -t -O "${#backup_s[@]}" backup_s < <(echo "$out" | grep backup_saved |
    sed -E 's/.*"seconds":([0-9.e-]+).*/\1/')
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_none=$(med "${none[@]}"); m_freq=$(med "${freq[@]}"); m_b=$(med "${backup_s[@]}")
m_bound=$(med "${bound[@]}"); max_bound=$(printf '%s\n' "${bound[@]}" | sort -g | tail -1)
cost=$(python3 -c "print(f'{100 * (1 - $m_freq / $m_none):.1f}')")
# Runs alternate, so each pair saw about the same load: the median of the per-pair costs is
# the figure least disturbed by other work on the machine.
pair_cost=$(python3 -c "
a=[float(x) for x in '${none[*]}'.split()]; b=[float(x) for x in '${freq[*]}'.split()]
c=sorted(100*(1-y/x) for x,y in zip(a,b)); n=len(c)
print(f'{(c[n//2] if n%2 else (c[n//2-1]+c[n//2])/2):.1f}')")
{
  echo "# Backup cost: --save-freq 100 against no backups"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before; backup dir on $(df --output=fstype "$tmp" | tail -1)"
  echo "- Command: \`bash bench/backup_overhead/run.sh $REPEATS\`: \`${base[*]}\` with and without \`--save-freq 100 --backup-dir DIR\`"
  echo
  echo "| run | images/s (median of $REPEATS) |"
  echo "|---|---:|"
  printf "| no backups | %.0f |\n" "$m_none"
  printf "| --save-freq 100 (9 backups per epoch) | %.0f |\n" "$m_freq"
  echo
  echo "Throughput cost of backups every 100 steps: **${pair_cost}%** (median of the per-pair costs;"
  echo "${cost}% from the two medians). One backup (4.2 MB: weights and"
  echo "Adam state; encode, write, fsync, rename, fsync of the directory): median ${m_b} s over ${#backup_s[@]} backups."
  echo
  cpu_cost=$(python3 -c "
a=[float(x) for x in '${cpu_none[*]}'.split()]; b=[float(x) for x in '${cpu_freq[*]}'.split()]
c=sorted(100*(y/x-1) for x,y in zip(a,b)); n=len(c)
print(f'{(c[n//2] if n%2 else (c[n//2-1]+c[n//2])/2):+.1f}')")
  echo "Upper bound of the cost, from each run's own accounting (train_end's"
  echo "backup_stall_seconds + backup_cpu_seconds over train_seconds): median **$(printf %.2f "$m_bound")%**,"
  echo "largest $(printf %.2f "$max_bound")% over $REPEATS runs."
  echo
  echo "CPU time (user + system) of a whole run (data loading, 937 steps, test evaluation) with"
  echo "backups against without: **${cpu_cost}%** (median of the per-pair ratios); CPU seconds without"
  echo "backups ${cpu_none[*]}; with ${cpu_freq[*]}."
  echo
  echo "All runs (images/s): no backups ${none[*]}; with backups ${freq[*]}"
} > "$OUT"
rm -rf "$tmp"
cat "$OUT"

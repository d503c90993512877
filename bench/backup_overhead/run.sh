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
base="$TRAINER --epochs 1 --threads 2"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ips() { grep '"epoch_end"' | sed -E 's/.*"images_per_sec":([0-9.]+).*/\1/'; }
none=(); freq=(); backup_s=()
for i in $(seq "$REPEATS"); do
  none+=("$($base | ips)")
  out=$($base --save-freq 100 --backup-dir "$tmp/b$i")
  freq+=("$(echo "$out" | ips)")
  backup_s+=($(echo "$out" | grep backup_saved | sed -E 's/.*"seconds":([0-9.e-]+).*/\1/'))
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_none=$(med "${none[@]}"); m_freq=$(med "${freq[@]}"); m_b=$(med "${backup_s[@]}")
cost=$(python3 -c "print(f'{100 * (1 - $m_freq / $m_none):.1f}')")
{
  echo "# Backup cost: --save-freq 100 against no backups"
  echo
  echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $load_before; backup dir on $(df --output=fstype "$tmp" | tail -1)"
  echo "- Command: \`bash bench/backup_overhead/run.sh $REPEATS\`: \`$base\` with and without \`--save-freq 100 --backup-dir DIR\`"
  echo
  echo "| run | images/s (median of $REPEATS) |"
  echo "|---|---:|"
  printf "| no backups | %.0f |\n" "$m_none"
  printf "| --save-freq 100 (9 backups per epoch) | %.0f |\n" "$m_freq"
  echo
  echo "Throughput cost of backups every 100 steps: **${cost}%**. One backup (4.2 MB: weights and"
  echo "Adam state; encode, write, fsync, rename, fsync of the directory): median ${m_b} s over ${#backup_s[@]} backups."
  echo
  echo "All runs (images/s): no backups ${none[*]}; with backups ${freq[*]}"
} > "$OUT"
rm -rf "$tmp"
cat "$OUT"

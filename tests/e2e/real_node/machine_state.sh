# shellcheck shell=bash
# What a real node may change on the machine, as text to compare before `up` and after `down`
# (sourced by real_node_e2e.sh): processes of the node's programs, mounts, network links and
# namespaces, iptables rules (without counters), ipsets, kernel settings and the kubelet's
# cgroups.
#   machine_state            prints the state
#   compare_machine_state    compares two of them (below)
#   volatile_sysctls         prints the sysctl keys that change by themselves (two reads a
#                            second apart differ), to leave out of the comparison
machine_state() (
  # A section with nothing in it is an empty section, not an error.
  set +e +o pipefail
  echo "## processes"
  # shellcheck disable=SC2009  # the processes' names, not their ids (pgrep's answer)
  ps -eo comm= | grep -xE 'kubelet|kube-proxy|kube-router|containerd|containerd-shim.*|coredns|runc|catatonit' | sort
  echo "## mounts"
  findmnt -rn -o TARGET,FSTYPE | sort
  echo "## links"
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
  echo "## netns"
  ip netns list 2>/dev/null | sort
  local cmd
  for cmd in iptables ip6tables; do
    echo "## $cmd"
    "$cmd-save" 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' | sort
  done
  echo "## ipsets"
  ipset list -n 2>/dev/null | sort
  echo "## sysctl"
  sysctl -a 2>/dev/null | grep -vF -f <(volatile_sysctls_cached) | sort
  echo "## cgroups"
  find /sys/fs/cgroup -maxdepth 3 -type d -name 'kubepods*' 2>/dev/null | sort
)

VOLATILE_FILE=${VOLATILE_FILE:-$(mktemp)}
volatile_sysctls() {
  local a b
  a=$(sysctl -a 2>/dev/null | sort)
  sleep 1
  b=$(sysctl -a 2>/dev/null | sort)
  # Keys whose values changed, plus counters and random values known to move.
  { { diff <(echo "$a") <(echo "$b") || true; } | sed -n 's/^[<>] \([^ ]*\) = .*/\1 =/p'
    printf '%s\n' 'kernel.random.' 'fs.dentry-state' 'fs.file-nr' 'fs.inode-' \
      'kernel.ns_last_pid' 'net.netfilter.nf_conntrack_count' 'kernel.pty.nr' 'fs.quota.' \
      'fs.aio-nr' 'kernel.sched_domain' 'net.ipv4.tcp_mem' 'net.ipv4.udp_mem'; } | sort -u >"$VOLATILE_FILE"
}
volatile_sysctls_cached() { cat "$VOLATILE_FILE"; }

# compare_machine_state BEFORE AFTER: fails (naming the lines) when AFTER has anything BEFORE
# did not, or lacks anything but the node's own leftovers of an earlier cluster that did not
# come down (CNI-/KUBE- iptables rules, the cni0 bridge, veth links, cni- namespaces, kubepods
# cgroups), which `down` rightly removes.
compare_machine_state() (
  set +e +o pipefail
  sectioned() { awk '/^## /{s=$0; next} {print s " | " $0}' "$1" | sort; }
  local added removed foreign
  added=$(comm -13 <(sectioned "$1") <(sectioned "$2"))
  removed=$(comm -23 <(sectioned "$1") <(sectioned "$2"))
  foreign=$(grep -vE '^## (ip6?tables \| .*(CNI-|KUBE-)|links \| (cni0|veth.*)$|netns \| cni-|cgroups \| .*kubepods)' \
    <<<"$removed")
  [ -z "$added" ] || printf 'left behind:\n%s\n' "$added"
  [ -z "$removed" ] || [ -n "$foreign" ] ||
    printf 'note: down removed leftovers of an earlier cluster:\n%s\n' "$removed"
  [ -z "$foreign" ] || printf 'removed, though not the node'"'"'s own:\n%s\n' "$foreign"
  [ -z "$added" ] && [ -z "$foreign" ]
)

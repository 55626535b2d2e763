#!/usr/bin/env bash
# The 1,008-host subnet (docs/performance.md "Scale: the sandbox", issue 33):
# `scripts/fattree.sh 36 28 8 36 8` (36 leaves of 28 hosts, 8 up-links each
# to 8 spines, 44 switches of 36 ports) through scripts/sandbox.sh with
# OpenSM on Hca1, one /22 of sandbox addresses. It takes minutes and loads
# the machine: not part of the CI run.
#
#   bench/fattree_1008.sh [--build DIR] [--keep]
#
# Prints the time from `sandbox.sh up` to OpenSM's SUBNET UP and to fully up
# (every host's ibd has seen its port Active with a LID), the memory of a
# host (ibd + its simhca, PSS and RSS), of ibfabric and of OpenSM, then
# checks, and fails on any miss: every port Active with a LID (ibd's log of
# each host; `ibstat` on the first, a middle and the last host), every CA
# seen by `ibnetdiscover` from those three, `saquery -p` between the first
# and the last host answered, and where packets went (ibfabric's counters:
# socket drops, the kernel's backlog drops). Runs as root; its sandbox
# (prefix sbk, 198.19.4.0/22) coexists with a user's, a test's and
# bench/sandbox-scale.sh's; it is taken down at the end (--keep: left up,
# `OPENIB_SANDBOX=... scripts/sandbox.sh down` takes it down), also on failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build
keep=0
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: fattree_1008.sh [--build DIR] [--keep]" >&2; exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
[[ $(id -u) == 0 ]] || { echo "fattree_1008: must run as root" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fattree-1008-XXXXXX")
export OPENIB_BUILD=$build OPENIB_SANDBOX_PREFIX=sbk OPENIB_SANDBOX_NET=198.19.4.0/22
export OPENIB_SANDBOX=$tmp/sandbox OPENIB_SANDBOX_SM_WAIT=${OPENIB_SANDBOX_SM_WAIT:-300}
sb() { bash "$here/../scripts/sandbox.sh" "$@"; }
cleanup() {
  if ((keep)) && [[ -e $OPENIB_SANDBOX/hosts ]]; then
    echo "fattree_1008: left up: OPENIB_SANDBOX=$OPENIB_SANDBOX OPENIB_SANDBOX_PREFIX=sbk scripts/sandbox.sh ..." >&2
    return
  fi
  [[ -e $OPENIB_SANDBOX/hosts ]] && sb down
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }
now() { echo "$EPOCHREALTIME"; }
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
t() { awk -v k="$1" '$1 == k {print $2}' "$OPENIB_SANDBOX/timing"; }
mem() {  # PID... -> "PSS RSS" in kB, summed
  local p pss=0 rss=0 a b
  for p in "$@"; do
    read -r a b < <(awk '/^Pss:/ {p = $2} /^Rss:/ {r = $2} END {print p + 0, r + 0}' "/proc/$p/smaps_rollup" 2>/dev/null) || continue
    pss=$((pss + a)) rss=$((rss + b))
  done
  echo "$pss $rss"
}
# Packets the kernel dropped at a full CPU backlog (netdev_max_backlog),
# machine-wide: the second column of /proc/net/softnet_stat, hex.
softnet_drops() { python3 -c "print(sum(int(l.split()[1], 16) for l in open('/proc/net/softnet_stat')))"; }
# Hosts whose ibd has not logged port 1 Active (state -> 4) with a LID, as
# their last word on it: "NAME state LID" per line.
not_up() {
  local h
  while read -r h; do
    awk -v h="$h" '/port 1: state/ {s = $NF} /port 1: LID/ {l = $NF}
      END {if (s != 4 || l + 0 == 0) print h, (s == "" ? "-" : s), l + 0}' "$OPENIB_SANDBOX/$h/ibd.log"
  done <"$OPENIB_SANDBOX/hosts"
}

topo=$tmp/fattree-1008.net
bash "$here/../scripts/fattree.sh" 36 28 8 36 8 >"$topo"
n=1008 first=Hca1 middle=Hca504 last=Hca1008
echo "--- load average $(cut -d' ' -f1-3 /proc/loadavg) before 'up'; softnet drops $(softnet_drops)" >&2
sb up "$topo" --sm Hca1 2>"$tmp/up.log" || { cat "$tmp/up.log" >&2; exit 1; }
grep -E "up:|SUBNET UP" "$tmp/up.log" >&2
t0=$(t up_start)
# Fully up: every host's ibd has its port Active with a LID (its own log:
# the device's port events), polled.
full=''
for _ in $(seq 600); do
  left=$(not_up | wc -l)
  ((left == 0)) && { full=$(now); break; }
  sleep 0.5
done
[[ -n $full ]] || { fail "not every port came up: $(not_up | head -5 | tr '\n' ';') ($left left)"; full=$(now); }
up_s=$(diff_s "$t0" "$(t subnet_up)")
hosts_s=$(diff_s "$t0" "$(t hosts_ready)")
full_s=$(diff_s "$t0" "$full")
sm_full_s=$(diff_s "$(t sm_start)" "$full")

tot_pss=0 tot_rss=0 counted=0
for ((i = 1; i < n; i++)); do  # Hca1 also runs OpenSM: left out
  mapfile -t pids < <(ip netns pids "sbk-$i")
  read -r a b < <(mem "${pids[@]}")
  tot_pss=$((tot_pss + a)) tot_rss=$((tot_rss + b)) counted=$((counted + 1))
done
read -r fab _ < <(mem "$(cat "$OPENIB_SANDBOX/ibfabric.pid")")
read -r osm _ < <(mem "$(cat "$OPENIB_SANDBOX/opensm.pid")")

# The checks, from the first, a middle and the last host.
for h in $first $middle $last; do
  st=$(sb run "$h" ibstat 2>&1 || true)
  if ! grep -q "State: Active" <<<"$st" || ! grep -Eq "Base lid: [1-9]" <<<"$st"; then
    fail "$h: ibstat: $(grep -E "State|Base lid" <<<"$st" | tr -s ' \n' ' ')"
  fi
  cas=$(sb run "$h" ibnetdiscover 2>/dev/null | grep -c '^Ca' || true)
  ((cas == n)) || fail "$h: ibnetdiscover sees $cas CAs, not $n"
  echo "$h: ibnetdiscover sees $cas CAs" >&2
done
last_lid=$(sb run $last ibstat 2>/dev/null | awk '/Base lid:/ {print $3; exit}')
first_lid=$(sb run $first ibstat 2>/dev/null | awk '/Base lid:/ {print $3; exit}')
t_sa=$(now)
pr=$(sb run $first saquery -t 10000 -p --slid "$first_lid" --dlid "$last_lid" 2>&1 || true)
sa_s=$(diff_s "$t_sa" "$(now)")
# saquery prints the LIDs in decimal (dlid....393).
if ! grep -q "PathRecord dump" <<<"$pr" || ! grep -Eq "dlid\.+${last_lid:-x}\$" <<<"$pr"; then
  fail "saquery -p $first_lid $last_lid ($first -> $last): $(head -3 <<<"$pr" | tr '\n' ' ')"
fi
echo "saquery -p $first_lid $last_lid ($first -> $last): $(grep -c "PathRecord dump" <<<"$pr") record(s) in ${sa_s} s" >&2

counters=$(sb fabric counters)
fab_line=$(grep '^fabric' <<<"$counters")
sock_drops=$(awk '{for (i = 1; i < NF; i++) if ($i == "socket_drops") print $(i + 1)}' <<<"$fab_line")
echo "--- ibfabric: $fab_line" >&2
echo "--- load average $(cut -d' ' -f1-3 /proc/loadavg) after; softnet drops $(softnet_drops)" >&2

printf '%-6s %-9s %-8s %-10s %-9s %-12s %-12s %-12s %-13s %-11s %s\n' hosts switches up_s hosts_s full_s \
  sm_to_full_s host_pss_kB host_rss_kB fabric_pss_kB opensm_pss_kB fabric_socket_drops
printf '%-6s %-9s %-8s %-10s %-9s %-12s %-12s %-12s %-13s %-11s %s\n' $n 44 "$up_s" "$hosts_s" "$full_s" \
  "$sm_full_s" $((tot_pss / counted)) $((tot_rss / counted)) "$fab" "$osm" "${sock_drops:-?}"
((failed == 0)) || { echo "fattree_1008: FAILED" >&2; exit 1; }
echo "fattree_1008: every port Active with a LID, every CA discovered from $first, $middle, $last; saquery -p answered" >&2

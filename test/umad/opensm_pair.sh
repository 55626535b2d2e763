#!/usr/bin/env bash
# Debian's unmodified OpenSM and infiniband-diags through the project's
# libibumad.so.3, on two ibd daemons (each with its embedded simhca) whose
# ports are cabled back to back over UDP on 127.0.0.1, with no static LIDs:
# OpenSM on A must bring both ports to Active with LIDs, and the diagnostics
# must then answer from either host.
# With `recovery`: once the subnet is up, A's simhca (the SM's own device)
# is SIGKILLed; ibd brings a new one up (docs/operations.md §5) and OpenSM,
# not restarted, keeps its MAD socket and agents (docs/umad.md "Device
# loss"): its next sweeps find A's port Initializing with no LID and bring
# it to Active again, with IsSM on it again.
#   opensm_pair.sh BUILD_DIR [recovery]
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IBD=$build/src/ibd/ibd
work=$(mktemp -d "${TMPDIR:-/tmp}/opensm-pair-XXXXXX")
# shellcheck source=../../scripts/ibd_pair.sh
source "$here/../../scripts/ibd_pair.sh"
sm_pid=''
cleanup() {
  if [[ -n $sm_pid ]]; then  # OpenSM first, then the daemons; bounded
    kill "$sm_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$sm_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$sm_pid" 2>/dev/null || true
    wait "$sm_pid" 2>/dev/null || true
  fi
  stop_daemons
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/opensm.log "$work"/a.log "$work"/b.log; do
    [[ -f $f ]] && { echo "--- $f (tail)"; tail -25 "$f"; }
  done
  exit 1
}
export LD_LIBRARY_PATH=$build/src/umad
on() { OPENIB_SOCKET=$work/$1.sock "${@:2}"; }

[[ ${2:-} == recovery ]] && export IBD_LOG=info  # A's "is back after" line
pa=$(free_port); pb=$pa
while ((pb == pa)); do pb=$(free_port); done
PID_A='' PID_B=''
node_guid_a=0x0002c90300a10000 node_guid_b=0x0002c90300b20000
start_ibd a 0 "$pa" "$pb" PID_A --simhca-arg=--guid --simhca-arg=$node_guid_a --simhca-arg=--node-desc \
  --simhca-arg="host A" || fail "ibd a"
start_ibd b 0 "$pb" "$pa" PID_B --simhca-arg=--guid --simhca-arg=$node_guid_b --simhca-arg=--node-desc \
  --simhca-arg="host B" || fail "ibd b"

state() { on "$1" ibstat simhca0 1 | awk -F': ' '/^[[:space:]]*State:/ {print $2}'; }
field() { on "$1" ibstat simhca0 1 | awk -F': ' -v k="$2" '$1 ~ k {print $2}'; }
[[ $(state a) == Initializing ]] || fail "port A before the SM: '$(state a)', expected Initializing"

guid_a=$(on a ibstat -p | head -1)
guid_b=$(on b ibstat -p | head -1)
[[ $guid_a != "$guid_b" ]] || fail "both ports have GUID $guid_a"
mkdir -p "$work/cache"
(export OPENIB_SOCKET=$work/a.sock OSM_CACHE_DIR=$work/cache
 exec opensm -g "$guid_a" -f "$work/opensm.log" -d2 -s 2) >"$work/opensm.out" 2>&1 &
sm_pid=$!
for _ in $(seq 300); do
  grep -q "SUBNET UP" "$work/opensm.log" 2>/dev/null && break
  kill -0 "$sm_pid" 2>/dev/null || fail "opensm exited"
  sleep 0.2
done
grep -q "SUBNET UP" "$work/opensm.log" || fail "no SUBNET UP within 60 s"
echo "opensm: SUBNET UP"

for h in a b; do
  for _ in $(seq 50); do [[ $(state $h) == Active ]] && break; sleep 0.1; done
  [[ $(state $h) == Active ]] || fail "port $h is '$(state $h)' after SUBNET UP"
done
lid_a=$(field a "Base lid"); lid_b=$(field b "Base lid")
sm_a=$(field a "SM lid"); sm_b=$(field b "SM lid")
((lid_a > 0 && lid_b > 0 && lid_a != lid_b)) || fail "LIDs $lid_a and $lid_b"
[[ $sm_a == "$lid_a" && $sm_b == "$lid_a" ]] || fail "SM LID $sm_a / $sm_b, the SM is LID $lid_a"
echo "ports Active: A LID $lid_a, B LID $lid_b, SM LID $lid_a on both"
cap=$(field a "Capability mask")
(((cap & 0x2) != 0)) || fail "A's CapabilityMask $cap lacks IsSM while OpenSM runs"

if [[ ${2:-} == recovery ]]; then
  sim=$(ps -o pid= --ppid "$PID_A" | tr -d ' ')
  [[ $sim =~ ^[0-9]+$ ]] || fail "no simhca child of ibd A ($PID_A): '$sim'"
  kill -9 "$sim"
  for _ in $(seq 300); do grep -q "is back after" "$work/a.log" && break; sleep 0.1; done
  grep -q "is back after" "$work/a.log" || fail "ibd A did not bring its device back within 30 s"
  echo "device A lost and back (simhca $sim SIGKILLed)"
  # OpenSM sweeps every 2 s (-s 2): A's port is Active again within 60 s.
  for _ in $(seq 300); do [[ $(state a) == Active ]] && break; sleep 0.2; done
  kill -0 "$sm_pid" 2>/dev/null || fail "opensm exited"
  [[ $(state a) == Active ]] || fail "port A is '$(state a)' 60 s after the device came back"
  for _ in $(seq 50); do [[ $(state b) == Active ]] && break; sleep 0.1; done
  [[ $(state b) == Active ]] || fail "port B is '$(state b)' after A came back"
  lid=$(field a "Base lid")
  ((lid > 0)) || fail "port A is Active with LID $lid"
  cap=$(field a "Capability mask")
  (((cap & 0x2) != 0)) || fail "A's CapabilityMask $cap lacks IsSM after the device came back"
  out=$(on b smpquery nodeinfo "$lid") || fail "smpquery nodeinfo $lid from B after the recovery: $out"
  echo "PASS: after the device loss, the same OpenSM brought port A to Active again (LID $lid, IsSM)"
  exit 0
fi

# SMPs by LID and by directed route, from both hosts.
out=$(on a smpquery nodeinfo "$lid_b") || fail "smpquery nodeinfo $lid_b: $out"
# B's node answers by LID: the NodeGUID it was given (--guid; smpquery's
# label is "Guid"), and the PortGuid ibstat -p showed on B.
grep -qi "^Guid:\.*$node_guid_b\$" <<<"$out" || fail "nodeinfo of B: NodeGUID is not $node_guid_b: $out"
grep -qi "^PortGuid:\.*$guid_b\$" <<<"$out" || fail "nodeinfo of B: PortGuid is not $guid_b: $out"
grep -q "^NumPorts:\.*1" <<<"$out" || fail "nodeinfo of B: $out"
out=$(on b smpquery -D portinfo 0,1) || fail "smpquery -D portinfo 0,1 from B: $out"
grep -q "^Lid:\.*$lid_a" <<<"$out" || fail "DR portinfo of A from B: $out"
out=$(on a smpquery nodedesc "$lid_b") || fail "smpquery nodedesc: $out"
# The PMA: B's counters grow with the SMPs and GMPs of the sweep.
out=$(on a perfquery "$lid_b" 1) || fail "perfquery $lid_b 1: $out"
grep -q "^PortXmitPkts:" <<<"$out" || fail "perfquery: $out"
# The SA (OpenSM) answers with RMPP when the answer needs more than one MAD.
out=$(on b saquery -N) || fail "saquery -N from B: $out"
(($(grep -c "NodeRecord dump" <<<"$out") == 2)) || fail "saquery -N: $out"
out=$(on b saquery -p "$lid_a") || fail "saquery -p: $out"
grep -q "PathRecord dump" <<<"$out" || fail "saquery -p $lid_a: $out"
out=$(on b ibnetdiscover) || fail "ibnetdiscover: $out"
(($(grep -c '^Ca' <<<"$out") == 2)) || fail "ibnetdiscover: $out"
echo "PASS: OpenSM brought both ports up; smpquery, perfquery, saquery, ibnetdiscover answer"
exit 0

#!/usr/bin/env bash
# A sandbox left behind (its test killed, the machine copied mid-test) does
# not block the next one with its prefix: `up` takes down namespaces and
# links of which nothing runs, and refuses, leaving it alone, a sandbox of
# which something still runs.
#   stale.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
# shellcheck source=lib.sh
source "$here/lib.sh"
sandbox_test sbz 198.18.16 stale-test
sleeper=''
cleanup_all() {
  [[ -n $sleeper ]] && kill "$sleeper" 2>/dev/null
  sandbox_cleanup
  # What this test made by hand, if a check failed before `up` took it.
  { for i in 0 1 7; do echo "netns del sbz-$i"; echo "link del sbzh$i"; done
    echo "link del sbz-br"; } | ip -force -batch - 2>/dev/null || true
}
trap cleanup_all EXIT

# fake_sandbox: what a killed sandbox leaves: its bridge, namespaces and
# veths, with nothing running (one namespace beyond the new sandbox's 4).
fake_sandbox() {
  { echo "link add sbz-br type bridge"
    echo "link set sbz-br alias openib-sandbox:up=999999999"
    for i in 0 1 7; do
      echo "netns add sbz-$i"
      echo "link add sbzh$i type veth peer name eth0 netns sbz-$i"
      echo "link set sbzh$i master sbz-br up"
    done; } | ip -batch -
}

# --- stale: taken down, and the new sandbox comes up ------------------------
fake_sandbox
out=$(sb up "$topo" 2>&1) || fail "sandbox up over a stale one: $out"
grep -q "taking the stale one down" <<<"$out" || fail "up did not say it took the stale sandbox down: $out"
ip netns list | grep -qw "sbz-7" && fail "the stale namespace sbz-7 is still there"
ip link show sbzh7 >/dev/null 2>&1 && fail "the stale veth sbzh7 is still there"
[[ $(sb hosts | wc -l) == 4 ]] || fail "sandbox hosts: $(sb hosts)"
out=$(sb run Hca2 ibstat simhca0 1) || fail "ibstat on Hca2: $out"
grep -q "Physical state: LinkUp" <<<"$out" || fail "Hca2's port is not LinkUp: $out"
ok "a stale sandbox of the prefix is taken down; the new one comes up"
sb down
ip link show sbz-br >/dev/null 2>&1 && fail "sandbox down left sbz-br"

# --- alive: something runs in one of its namespaces: refused, left alone ----
fake_sandbox
ip netns exec sbz-1 sleep 60 &
sleeper=$!
for _ in $(seq 50); do [[ -n $(ip netns pids sbz-1) ]] && break; sleep 0.1; done
if out=$(sb up "$topo" 2>&1); then fail "up took over a sandbox with a running process"; fi
grep -q "another sandbox uses the prefix 'sbz'" <<<"$out" || fail "up's refusal: $out"
kill -0 "$sleeper" 2>/dev/null || fail "up ended a process it did not start"
ip netns list | grep -qw "sbz-7" || fail "up took down namespaces of a live sandbox"
ok "a sandbox with a process running is refused and left alone"

# --- alive: the ibfabric its bridge names runs ------------------------------
kill "$sleeper"; wait "$sleeper" 2>/dev/null || true; sleeper=''
"$build/src/sim/fabric/ibfabric" --addr 127.0.0.1 "$topo" >/dev/null 2>&1 &
sleeper=$!
ip link set sbz-br alias "openib-sandbox:up=999999999:ibfabric=$sleeper"
if out=$(sb up "$topo" 2>&1); then fail "up took over a sandbox whose ibfabric runs"; fi
grep -q "another sandbox uses the prefix 'sbz'" <<<"$out" || fail "up's refusal: $out"
kill -0 "$sleeper" 2>/dev/null || fail "up ended an ibfabric it did not start"
ok "a sandbox whose ibfabric runs is refused and left alone"

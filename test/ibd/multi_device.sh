#!/usr/bin/env bash
# One ibd serving two devices (docs/operations.md "Several devices"): two
# embedded simhcas with two ports each, port 1 of one cabled to port 1 of
# the other (a shared-memory cable), no static LIDs. Debian's unmodified
# OpenSM and infiniband-diags through the project's libibumad.so.3 see two
# CAs and sweep both; an RC ping-pong and an IB CM ping-pong (an SA path
# query first) run from one device to the other; IPoIB runs on each device
# (a ping between the two interfaces' link-local addresses crosses the
# cable); killing one device's simhca brings that device back while the
# other keeps its clients and objects. Runs in a network namespace of its
# own (the TAP interfaces), removed at the end.
#   multi_device.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
IBD=$build/src/ibd/ibd
EX=$build/examples
work=$(mktemp -d "${TMPDIR:-/tmp}/multi-device-XXXXXX")
ns=openib-md-$$
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/opensm.log "$work"/ibd.log "$work"/*.out; do
    [[ -f $f ]] && { echo "--- $f (tail)"; tail -25 "$f"; }
  done
  exit 1
}
inns() { ip netns exec "$ns" "$@"; }
export LD_LIBRARY_PATH=$build/src/umad
export OPENIB_SOCKET=$work/ibd.sock

ip netns add "$ns"
inns ip link set lo up
cat >"$work/ibd.toml" <<TOML
socket = "$work/ibd.sock"
state-dir = "none"
restart-limit = 5
[[device]]
name = "hca_a"
cable = "SHM=$work/cable,END=A"
simhca-arg = ["--ports", "2", "--node-desc", "device A"]
lid = 0
ipoib = "mda0"
[[device]]
name = "hca_b"
cable = "SHM=$work/cable,END=B"
simhca-arg = ["--ports", "2", "--node-desc", "device B"]
lid = 0
ipoib = "mdb0"
TOML
# Not `inns ... &`: that backgrounds the function in a subshell, $! is the
# subshell, and cleanup's signal would leave ibd running (ip netns exec
# execs: started directly, $! is ibd itself).
ip netns exec "$ns" "$IBD" --config "$work/ibd.toml" --log info >"$work/ibd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "ibd: ready" "$work/ibd.log" && break; sleep 0.1; done
grep -q "ibd: ready" "$work/ibd.log" || fail "ibd not ready within 10 s"

# Names a client or the config can give: a name with a path in it, an
# unknown device, two devices with one name, cable options on a device that
# is not embedded: refused with the reason, nothing served.
out=$(OPENIB_DEVICE=../ibd timeout 10 "$EX/openib-rc-pingpong" -p 18610 2>&1) && fail "OPENIB_DEVICE=../ibd opened: $out"
grep -q "not a device name" <<<"$out" || fail "OPENIB_DEVICE=../ibd: $out"
out=$(OPENIB_DEVICE=nope timeout 10 "$EX/openib-rc-pingpong" -p 18610 2>&1) && fail "OPENIB_DEVICE=nope opened: $out"
grep -q "no device 'nope'" <<<"$out" || fail "OPENIB_DEVICE=nope: $out"
bad() {
  local want=$1 rc=0
  shift
  out=$(timeout 10 "$IBD" --socket "$work/bad.sock" --state-dir none "$@" 2>&1) || rc=$?
  ((rc == 2)) && grep -q -- "$want" <<<"$out" || fail "ibd $*: exit $rc, '$out' (expected 2, '$want')"
  [[ ! -e $work/bad.sock ]] || fail "ibd $* left a socket"
}
bad "device name 'a/b'" --device a/b=embedded
bad "two devices named 'x'" --device x=embedded --device x=embedded
bad "apply to an embedded simhca only" --device vfio-user:/nonexistent --cable SHM=/dev/null,END=A
# The first device's name link cannot be made (a directory in its way):
# ibd does not start, rather than leave the name to whatever is there.
mkdir -p "$work/squat/ibd-simhca0.sock/x"
rc=0
out=$(timeout 20 "$IBD" --socket "$work/squat/ibd.sock" --state-dir none 2>&1) || rc=$?
((rc == 1)) && grep -q "the device's name" <<<"$out" || fail "ibd with its name link blocked: exit $rc, $out"
[[ ! -e $work/squat/ibd.sock ]] || fail "ibd with its name link blocked left its socket"
echo "bad device names and configurations refused"

# Two CAs, by name, each with its own node GUID and two ports.
cas=$(ibstat -l | tr '\n' ' ')
[[ $cas == "hca_a hca_b " ]] || fail "ibstat -l: '$cas', expected hca_a hca_b"
mapfile -t guids_a < <(ibstat -p hca_a)
mapfile -t guids_b < <(ibstat -p hca_b)
((${#guids_a[@]} == 2 && ${#guids_b[@]} == 2)) || fail "port GUIDs: ${guids_a[*]} / ${guids_b[*]}"
[[ ${guids_a[0]} != "${guids_b[0]}" ]] || fail "both devices have port GUID ${guids_a[0]}"
echo "two CAs: hca_a (${guids_a[*]}), hca_b (${guids_b[*]})"
# libopenib lists them (openib::list_devices) and opens each by name.
out=$("$EX/openib-devices" -v) || fail "openib-devices: $out"
grep -qE '^ +hca_a\s+123400fffe000001$' <<<"$out" && grep -qE '^ +hca_b\s+123400fffe000011$' <<<"$out" ||
  fail "openib-devices: $out"
(($(grep -c 'port [12]: .*InfiniBand' <<<"$out") == 4)) || fail "openib-devices -v: $out"

# OpenSM on hca_a's port 1 sweeps the subnet: both devices' port 1 Active.
mkdir -p "$work/cache"
(export OSM_CACHE_DIR=$work/cache
 exec opensm -g "${guids_a[0]}" -f "$work/opensm.log" -d2 -s 2) >"$work/opensm.out" 2>&1 &
pids+=($!)
sm_pid=$!
for _ in $(seq 300); do
  grep -q "SUBNET UP" "$work/opensm.log" 2>/dev/null && break
  kill -0 "$sm_pid" 2>/dev/null || fail "opensm exited"
  sleep 0.2
done
grep -q "SUBNET UP" "$work/opensm.log" || fail "no SUBNET UP within 60 s"
field() { ibstat "$1" 1 | awk -F': ' -v k="$2" '$1 ~ k {print $2}'; }
for d in hca_a hca_b; do
  for _ in $(seq 50); do [[ $(field $d "State") == Active ]] && break; sleep 0.1; done
  [[ $(field $d "State") == Active ]] || fail "$d port 1 is '$(field $d State)' after SUBNET UP"
done
lid_a=$(field hca_a "Base lid"); lid_b=$(field hca_b "Base lid")
((lid_a > 0 && lid_b > 0 && lid_a != lid_b)) || fail "LIDs $lid_a and $lid_b"
echo "opensm: SUBNET UP; hca_a LID $lid_a, hca_b LID $lid_b"
out=$(ibnetdiscover -C hca_b) || fail "ibnetdiscover -C hca_b: $out"
(($(grep -c '^Ca' <<<"$out") == 2)) || fail "ibnetdiscover from hca_b: $out"
grep -q '"device A"' <<<"$out" && grep -q '"device B"' <<<"$out" || fail "ibnetdiscover: $out"
for d in hca_a hca_b; do  # each device's SA client, through its own QP1
  out=$(saquery -C $d -N) || fail "saquery -C $d -N: $out"
  (($(grep -c "NodeRecord dump" <<<"$out") == 2)) || fail "saquery -C $d -N: $out"
done
echo "ibnetdiscover from hca_b: 2 CAs; saquery from each device: 2 NodeRecords"

# RC ping-pong from hca_a to hca_b.
OPENIB_DEVICE=hca_b timeout 30 "$EX/openib-rc-pingpong" -p 18611 -n 500 >"$work/rc-server.out" 2>&1 &
pids+=($!)
srv=$!
sleep 0.5
timeout 30 "$EX/openib-rc-pingpong" -d hca_a -p 18611 -n 500 127.0.0.1 >"$work/rc-client.out" 2>&1 ||
  fail "RC ping-pong hca_a -> hca_b"
wait "$srv" || fail "RC ping-pong server on hca_b"
grep -q "LID 0x$(printf %04x "$lid_a")" "$work/rc-client.out" || fail "the client did not run on hca_a"
grep -q "500 iters" "$work/rc-client.out" || fail "RC ping-pong: $(cat "$work/rc-client.out")"
echo "RC ping-pong hca_a -> hca_b: $(grep iters "$work/rc-client.out")"

# IB CM ping-pong: the path from hca_a's SA client, the CM on both devices.
gid_b=$(ibstat hca_b 1 | awk '/Port GUID/ {print $3}')
dgid=$(printf 'fe80::%s:%s:%s:%s' "${gid_b:2:4}" "${gid_b:6:4}" "${gid_b:10:4}" "${gid_b:14:4}")
OPENIB_DEVICE=hca_b timeout 30 "$EX/openib-cm-pingpong" -n 200 >"$work/cm-server.out" 2>&1 &
pids+=($!)
srv=$!
sleep 0.5
OPENIB_DEVICE=hca_a timeout 30 "$EX/openib-cm-pingpong" --dgid "$dgid" -n 200 >"$work/cm-client.out" 2>&1 ||
  fail "CM ping-pong hca_a -> hca_b ($dgid)"
wait "$srv" || fail "CM ping-pong server on hca_b"
echo "CM ping-pong hca_a -> $dgid (hca_b): $(tail -1 "$work/cm-client.out")"

# IPoIB on each device: both interfaces join their broadcast group through
# their own device's SA; a ping from mda0 to mdb0's link-local address goes
# out on mda0 (link-local routes are per interface) through hca_a, the
# cable and hca_b.
inns ip link set mda0 up
inns ip link set mdb0 up
ll_b=''
for _ in $(seq 100); do
  ll_b=$(inns ip -6 addr show dev mdb0 scope link -tentative | awk '/inet6/ {print $2}' | cut -d/ -f1)
  ll_a=$(inns ip -6 addr show dev mda0 scope link -tentative | awk '/inet6/ {print $2}' | cut -d/ -f1)
  [[ -n $ll_b && -n $ll_a ]] && break
  sleep 0.1
done
[[ -n $ll_b ]] || fail "mdb0 has no link-local address past DAD"
rx0=$(inns cat /sys/class/net/mdb0/statistics/rx_packets)
inns ping -6 -c 3 -i 0.2 -W 2 "$ll_b%mda0" >"$work/ping.out" 2>&1 || fail "ping $ll_b%mda0: $(cat "$work/ping.out")"
rx1=$(inns cat /sys/class/net/mdb0/statistics/rx_packets)
((rx1 >= rx0 + 3)) || fail "mdb0 received $((rx1 - rx0)) packets for 3 pings: they did not cross the cable"
echo "IPoIB: mda0 -> $ll_b%mdb0 ping, $((rx1 - rx0)) packets into mdb0 through hca_b"

# The RDMA CM on each device: rping from hca_a to hca_b's link-local
# address (the route and the neighbour through mda0, the path from hca_a's
# SA client; the server's RDMA CM on hca_b).
ip netns exec "$ns" env OPENIB_DEVICE=hca_b timeout 30 "$EX/openib-rping" -s -a "$ll_b%mdb0" -p 7190 -V >"$work/rping-server.out" 2>&1 &
pids+=($!)
srv=$!
sleep 0.5
inns env OPENIB_DEVICE=hca_a timeout 30 "$EX/openib-rping" -c -a "$ll_b%mda0" -p 7190 -C 50 -V >"$work/rping-client.out" 2>&1 ||
  fail "rping hca_a -> $ll_b%mda0"
wait "$srv" || fail "rping server on hca_b"
grep -q "50 iterations, verified" "$work/rping-server.out" || fail "rping server: $(cat "$work/rping-server.out")"
echo "RDMA CM: rping hca_a -> $ll_b (hca_b), 50 iterations verified"

# hca_b's simhca killed: hca_b comes back (OpenSM brings its port Active
# again) while hca_a keeps its clients: a ping-pong server on hca_a, made
# before the loss, serves a client on hca_b after it.
OPENIB_DEVICE=hca_a timeout 60 "$EX/openib-rc-pingpong" -p 18612 -n 300 >"$work/rc2-server.out" 2>&1 &
pids+=($!)
srv=$!
sleep 0.5
sim_b=$(pgrep -f -- "--socket $work/simhca-hca_b.sock" | head -1)
[[ $sim_b =~ ^[0-9]+$ ]] || fail "no simhca for hca_b"
kill -9 "$sim_b"
for _ in $(seq 300); do grep -q "device hca_b is back after" "$work/ibd.log" && break; sleep 0.1; done
grep -q "device hca_b is back after" "$work/ibd.log" || fail "hca_b did not come back within 30 s"
grep -q "device hca_a.*is gone" "$work/ibd.log" && fail "hca_a was lost with hca_b"
for _ in $(seq 300); do [[ $(field hca_b "State") == Active ]] && break; sleep 0.2; done
[[ $(field hca_b "State") == Active ]] || fail "hca_b port 1 is '$(field hca_b State)' 60 s after it came back"
lid_a=$(field hca_a "Base lid")
timeout 30 "$EX/openib-rc-pingpong" -d hca_b -p 18612 -n 300 127.0.0.1 >"$work/rc2-client.out" 2>&1 ||
  fail "RC ping-pong hca_b -> hca_a after hca_b's recovery"
wait "$srv" || fail "the server on hca_a made before hca_b's loss"
info_a=$("$build/src/tools/ibdctl" -d hca_a --json devices)
grep -q '"device_losses":0' <<<"$info_a" || fail "hca_a counts a device loss: $info_a"
info_b=$("$build/src/tools/ibdctl" -d hca_b --json devices)
grep -q '"device_generation":2' <<<"$info_b" || fail "hca_b is not at generation 2: $info_b"
echo "PASS: hca_b lost and back (generation 2), hca_a untouched (no loss); RC ping-pong hca_b -> hca_a again"

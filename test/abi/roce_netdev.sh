#!/usr/bin/env bash
# The netdev of a RoCE port (docs/operations.md "RoCE ports"): two ibds,
# each in a network namespace of its own with its embedded simhca given an
# Ethernet port (--link-layer ethernet, distinct GUIDs so distinct MACs)
# and --netdev roce0, the two ports cabled by an Ethernet UDP cable over a
# veth pair between the namespaces (test roce-netdev, suites abi and
# debian-tools; root):
#  - --netdev on an InfiniBand port: ibd refuses to start, saying why;
#  - roce0 has the port's MAC, MTU 1500, carrier (LOWER_UP);
#  - ping both ways over IPv4 and IPv6; 4 MiB over TCP, the SHA-256 the
#    same on both ends;
#  - ibv_devinfo -v through our libibverbs.so.1: the IPv4-mapped and the
#    IPv6 address as RoCE v2 GIDs at indexes >= 1 (GID 0 the link-local
#    one); after `ip addr del` the GID is gone, after `ip addr add` back;
#  - hostile frames: a 3,000-byte and an 8,190-byte frame (the sender's
#    MTU raised) are dropped by the receiving ibd (netdev.drop_rx_too_big;
#    its raw QP takes them without error), a 9,000-byte one by the sending ibd (netdev.drop_tx_too_big: longer than the cable
#    carries), 20,000 ARP requests as fast as AF_PACKET sends them reach
#    the other side; ping works after each;
#  - the device lost (ibd B's simhca killed) and back: the GIDs are in the
#    new device's table again and ping works;
#  - ibd stopped: roce0 is gone.
# The TAP is made by ibd inside its namespace (ibd runs there): a TAP moved
# into another namespace after ibd made it keeps passing frames, but ibd
# no longer sees its addresses (rtnetlink is per namespace), so its GIDs
# would not follow (docs/operations.md "RoCE ports").
#   roce_netdev.sh IBD IBDCTL ABI_DIR
set -euo pipefail
IBD=$1 IBDCTL=$2 ABI=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/roce-netdev-XXXXXX")
nsa=sbrna$$ nsb=sbrnb$$ veth=sbrn$$
PY=/usr/bin/python3
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/a.log "$work"/b.log; do
    [[ -f $f ]] && { echo "--- $f (tail)"; tail -25 "$f"; }
  done
  exit 1
}
for t in ibv_devinfo ping ip "$PY"; do command -v "$t" >/dev/null || fail "$t not found"; done
ina() { ip netns exec "$nsa" "$@"; }
inb() { ip netns exec "$nsb" "$@"; }
counter() {  # counter SOCK NAME: the value of one of ibdctl's counters
  "$IBDCTL" --socket "$1" counters | awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print -1 }'
}
devinfo() { LD_LIBRARY_PATH=$ABI:$ABI/../lib OPENIB_SOCKET=$1 timeout 30 ibv_devinfo -v; }
# until_ok TRIES CMD...: CMD every 0.1 s until it succeeds (false after TRIES).
until_ok() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
eth=(--simhca-arg=--link-layer --simhca-arg=ethernet)

# ---- an InfiniBand port has no netdev -----------------------------------------------
rc=0
out=$(timeout 30 "$IBD" --socket "$work/ib.sock" --run-dir "$work/ib.run" --state-dir none --log warn \
  --netdev sbrnib$$ 2>&1) || rc=$?
((rc != 0)) || fail "ibd with --netdev on an InfiniBand port started"
grep -q "not Ethernet" <<<"$out" || fail "ibd with --netdev on an InfiniBand port: no reason given: $out"
ip link show "sbrnib$$" >/dev/null 2>&1 && fail "ibd left a TAP sbrnib$$ behind"
echo "ok: --netdev on an InfiniBand port refused: $(grep -o 'port 1 is.*' <<<"$out" | head -1)"

# ---- two namespaces, a veth pair for the cable ---------------------------------------
ip netns add "$nsa"
ip netns add "$nsb"
ip link add "${veth}a" type veth peer name "${veth}b"
ip link set "${veth}a" netns "$nsa"
ip link set "${veth}b" netns "$nsb"
ip -n "$nsa" link set lo up
ip -n "$nsb" link set lo up
# MTU 9000: a frame up to 8,190 bytes is one datagram. The cable's /30 is
# more specific than the TAPs' /24.
ip -n "$nsa" link set "${veth}a" mtu 9000 up
ip -n "$nsb" link set "${veth}b" mtu 9000 up
ip -n "$nsa" addr add 198.18.92.249/30 dev "${veth}a"
ip -n "$nsb" addr add 198.18.92.250/30 dev "${veth}b"

start() {  # start NAME NS LID LOCAL PEER GUID
  mkdir -p "$work/$1.run"
  # Started directly (ip netns exec execs): $! is ibd itself.
  ip netns exec "$2" "$IBD" --socket "$work/$1.sock" --lid "$3" --log info --run-dir "$work/$1.run" \
    --state-dir none --cable "LOCAL=$4:30092,PEER=$5:30092" "${eth[@]}" --simhca-arg=--guid --simhca-arg="$6" \
    --netdev roce0 >"$work/$1.log" 2>&1 </dev/null &
  pids+=($!)
  until_ok 300 grep -qs "ibd: ready" "$work/$1.log" || fail "ibd $1 not ready"
}
start a "$nsa" 1 198.18.92.249 198.18.92.250 0x0002c90300000a00
PID_A=${pids[-1]}
start b "$nsb" 2 198.18.92.250 198.18.92.249 0x0002c90300000b00
PID_B=${pids[-1]}
SA=$work/a.sock SB=$work/b.sock
has_tap() { ip -n "$1" link show roce0 >/dev/null 2>&1; }
until_ok 100 has_tap "$nsa" || fail "no roce0 in namespace A"
until_ok 100 has_tap "$nsb" || fail "no roce0 in namespace B"
ip -n "$nsa" addr add 198.18.92.1/24 dev roce0
ip -n "$nsa" addr add fd00:92::1/64 dev roce0 nodad
ip -n "$nsa" link set roce0 up
ip -n "$nsb" addr add 198.18.92.2/24 dev roce0
ip -n "$nsb" addr add fd00:92::2/64 dev roce0 nodad
ip -n "$nsb" link set roce0 up
lower_up() { ip -n "$1" link show roce0 | grep -q LOWER_UP; }
until_ok 100 lower_up "$nsa" || fail "roce0 in A has no carrier: $(ip -n "$nsa" link show roce0)"
until_ok 100 lower_up "$nsb" || fail "roce0 in B has no carrier: $(ip -n "$nsb" link show roce0)"
link=$(ip -n "$nsa" link show roce0)
# GUID 0x0002c90300000a00 + port 1 -> MAC 02:03:00:00:0a:01 (docs/simhca.md §16.1)
grep -q "link/ether 02:03:00:00:0a:01" <<<"$link" || fail "roce0 in A has not the port's MAC: $link"
grep -q "mtu 1500" <<<"$link" || fail "roce0 in A has not MTU 1500: $link"
echo "ok: roce0 in each namespace: MAC 02:03:00:00:0a:01 (A), MTU 1500, LOWER_UP"

# ---- ping, TCP --------------------------------------------------------------------------
pings() {
  ina ping -c 3 -W 2 -q 198.18.92.2 >/dev/null || fail "$1: ping A -> B (IPv4)"
  inb ping -c 3 -W 2 -q 198.18.92.1 >/dev/null || fail "$1: ping B -> A (IPv4)"
  ina ping -6 -c 3 -W 2 -q fd00:92::2 >/dev/null || fail "$1: ping A -> B (IPv6)"
  inb ping -6 -c 3 -W 2 -q fd00:92::1 >/dev/null || fail "$1: ping B -> A (IPv6)"
}
pings "first"
echo "ok: ping both ways, IPv4 and IPv6"
inb "$PY" - >"$work/tcp-server.out" 2>&1 <<'PY' &
import hashlib, socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.92.2", 5092))
s.listen(1)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(30)
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(65536)
    if not b:
        break
    h.update(b)
    n += len(b)
print(n, h.hexdigest())
PY
server=$!
pids+=("$server")
listening() { inb ss -ltn | grep -q "198.18.92.2:5092"; }
until_ok 100 listening || fail "the TCP server did not listen"
sent=$(ina "$PY" - <<'PY'
import hashlib, os, socket
data = os.urandom(4 << 20)
s = socket.create_connection(("198.18.92.2", 5092), timeout=30)
s.sendall(data)
s.close()
print(len(data), hashlib.sha256(data).hexdigest())
PY
) || fail "TCP client: $sent"
wait "$server" || fail "TCP server: $(cat "$work/tcp-server.out")"
got=$(cat "$work/tcp-server.out")
[[ $sent == "$got" ]] || fail "TCP: sent '$sent', received '$got'"
echo "ok: TCP A -> B: $sent (bytes, SHA-256) received the same"

# ---- addresses as RoCEv2 GIDs -------------------------------------------------------------
gid_line() {  # gid_line SOCK TEXT: ibv_devinfo -v lists TEXT as a RoCE v2 GID at an index >= 1
  devinfo "$1" | grep -Eq "GID\[ *([1-9]|[1-9][0-9]+)\]:[[:space:]]+$2, RoCE v2"
}
no_gid() { ! devinfo "$1" | grep -q "$2,"; }
until_ok 50 gid_line "$SA" "::ffff:198.18.92.1" || fail "A's GIDs: $(devinfo "$SA" | grep 'GID\[')"
until_ok 50 gid_line "$SA" "fd00:92::1" || fail "A's GIDs: $(devinfo "$SA" | grep 'GID\[')"
until_ok 50 gid_line "$SB" "::ffff:198.18.92.2" || fail "B's GIDs: $(devinfo "$SB" | grep 'GID\[')"
until_ok 50 gid_line "$SB" "fd00:92::2" || fail "B's GIDs: $(devinfo "$SB" | grep 'GID\[')"
devinfo "$SA" | grep -Eq 'GID\[ *0\]:[[:space:]]+fe80::3:ff:fe00:a01, RoCE v2' || fail "A's GID 0 changed"
echo "ok: ibv_devinfo -v: $(devinfo "$SA" | grep -E 'GID\[' | tr -s '\t ' ' ' | paste -sd ';')"
ip -n "$nsa" addr del 198.18.92.1/24 dev roce0
until_ok 50 no_gid "$SA" "::ffff:198.18.92.1" || fail "::ffff:198.18.92.1 still a GID after ip addr del"
ip -n "$nsa" addr del fd00:92::1/64 dev roce0
until_ok 50 no_gid "$SA" "fd00:92::1" || fail "fd00:92::1 still a GID after ip addr del"
echo "ok: ip addr del: the GIDs are gone ($(devinfo "$SA" | grep -c 'GID\[') left)"
ip -n "$nsa" addr add 198.18.92.1/24 dev roce0
ip -n "$nsa" addr add fd00:92::1/64 dev roce0 nodad
until_ok 50 gid_line "$SA" "::ffff:198.18.92.1" || fail "::ffff:198.18.92.1 not back after ip addr add"
until_ok 50 gid_line "$SA" "fd00:92::1" || fail "fd00:92::1 not back after ip addr add"
echo "ok: ip addr add: the GIDs are back"

# ---- hostile frames ---------------------------------------------------------------------------
send_frames() {  # send_frames NS LEN COUNT KIND: AF_PACKET frames from roce0 to B's MAC (KIND raw) or ARP
  ip netns exec "$1" "$PY" - "$2" "$3" "$4" <<'PY'
import socket, sys, time
length, count, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("roce0", 0))
src = bytes.fromhex("02030000" "0a01")
if kind == "raw":
    # IEEE 802 local experimental EtherType 0x88b5, to B's MAC.
    frame = bytes.fromhex("020300000b01") + src + b"\x88\xb5" + bytes(length - 14)
else:
    # ARP request (RFC 826), broadcast: who has 198.18.92.2, tell 198.18.92.1.
    frame = (b"\xff" * 6 + src + b"\x08\x06" + bytes.fromhex("0001080006040001") + src +
             socket.inet_aton("198.18.92.1") + bytes(6) + socket.inet_aton("198.18.92.2"))
sent = 0
deadline = time.monotonic() + 30
while sent < count and time.monotonic() < deadline:
    try:
        s.send(frame)
        sent += 1
    except OSError:  # ENOBUFS: the TAP's queue is full (ibd applies back-pressure)
        time.sleep(0.001)
print(sent)
PY
}
rx_big=$(counter "$SB" netdev.drop_rx_too_big)
ip -n "$nsa" link set roce0 mtu 4000
n=$(send_frames "$nsa" 3000 1 raw) || fail "sending a 3,000-byte frame"
until_ok 50 test "$(counter "$SB" netdev.drop_rx_too_big)" -gt "$rx_big" ||
  fail "B did not drop the 3,000-byte frame (drop_rx_too_big $(counter "$SB" netdev.drop_rx_too_big))"
tx_big=$(counter "$SA" netdev.drop_tx_too_big)
ip -n "$nsa" link set roce0 mtu 9000
# The longest frame the cable carries: B's raw QP takes it whole (its
# buffers hold it: no QP in error), B drops it by its MTU.
rx_big2=$(counter "$SB" netdev.drop_rx_too_big)
n=$(send_frames "$nsa" 8190 1 raw) || fail "sending an 8,190-byte frame"
until_ok 50 test "$(counter "$SB" netdev.drop_rx_too_big)" -gt "$rx_big2" ||
  fail "B did not drop the 8,190-byte frame (drop_rx_too_big $(counter "$SB" netdev.drop_rx_too_big))"
[[ $(counter "$SB" netdev.qp_recv_errors) == 0 ]] || fail "B's raw QP had receive errors"
n=$(send_frames "$nsa" 9000 1 raw) || fail "sending a 9,000-byte frame"
until_ok 50 test "$(counter "$SA" netdev.drop_tx_too_big)" -gt "$tx_big" ||
  fail "A did not drop the 9,000-byte frame (drop_tx_too_big $(counter "$SA" netdev.drop_tx_too_big))"
ip -n "$nsa" link set roce0 mtu 1500
pings "after the giants"
echo "ok: 3,000- and 8,190-byte frames dropped by B (drop_rx_too_big $rx_big -> $(counter "$SB" netdev.drop_rx_too_big)), a 9,000-byte one by A (drop_tx_too_big $tx_big -> $(counter "$SA" netdev.drop_tx_too_big)); ping works"
in_b=$(counter "$SB" netdev.frames_in)
n=$(send_frames "$nsa" 0 20000 arp) || fail "the ARP storm"
((n >= 1000)) || fail "the ARP storm: only $n frames sent"
in_b2=$(counter "$SB" netdev.frames_in)
((in_b2 - in_b >= 1000)) || fail "the ARP storm: B took only $((in_b2 - in_b)) frames of $n"
pings "after the ARP storm"
echo "ok: ARP storm: $n requests sent, B wrote $((in_b2 - in_b)) frames to its roce0; ping works"

# ---- the device lost and back -----------------------------------------------------------------
sim_b=$(pgrep -P "$PID_B" simhca | head -1)
[[ -n $sim_b ]] || fail "no simhca child of ibd B"
kill -KILL "$sim_b"
back() { grep -q "device simhca0 is back" "$work/b.log"; }
until_ok 300 back || fail "ibd B's device did not come back"
until_ok 100 gid_line "$SB" "::ffff:198.18.92.2" || fail "B's GIDs after the device came back: $(devinfo "$SB" | grep 'GID\[')"
until_ok 50 gid_line "$SB" "fd00:92::2" || fail "B's IPv6 GID after the device came back"
until_ok 100 lower_up "$nsb" || fail "roce0 in B has no carrier after the device came back"
pings "after the device came back"
echo "ok: device lost and back: B's GIDs written again, carrier on, ping works"

# ---- ibd stops --------------------------------------------------------------------------------
kill -TERM "$PID_A"
wait "$PID_A" || fail "ibd A exited $?"
has_tap "$nsa" && fail "roce0 still in namespace A after ibd A stopped"
echo "ok: ibd A stopped: roce0 gone"
echo "roce-netdev: all checks passed"

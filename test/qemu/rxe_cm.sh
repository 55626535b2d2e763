#!/usr/bin/env bash
# Soft-RoCE through the RDMA CM (docs/qemu-test.md "qemu-rxe-cm"): Linux's
# rdma_rxe, rdma_cm and ib_cm in a QEMU guest (Debian's kernel under TCG,
# Debian's rdma-core and rdmacm-utils in the initramfs) against ibd, by IP
# address, with Debian's unmodified rping on both ends (on the host
# through our librdmacm.so.1 and libibverbs.so.1).
#
# Everything on the host side runs in a network namespace of its own
# (sbg-rxe-PID): ibd with its embedded simhca, whose port 1 is an Ethernet
# (RoCEv2) port with its netdev (--netdev roce0, a TAP holding
# 198.18.80.1/24), QEMU, whose first NIC is cabled by `-netdev dgram` (one
# frame per UDP datagram on the namespace's 127.0.0.1) to that port, and
# the host's rping. No address is configured by hand on either side
# beyond the interfaces' own: the guest finds 198.18.80.1 by ARP, which
# the host's kernel answers through the TAP and the raw QP; ibd finds the
# guest's MAC in the kernel's neighbour table.
#
#  1. the host's `rping -s` listens before the guest boots; the guest's
#     `rping -c -v -C N` connects to it (guest -> host);
#  2. then the guest runs `rping -s`, and the host's `rping -c -v -C N`
#     connects to it (host -> guest);
#  3./4. udaddy both ways;
#  4b./4c. without the CM: ibv_rc_pingpong -g (each side's GID index of
#     its IPv4 address's RoCE v2 entry; its own TCP exchange over the
#     RoCE link) -c -n 500 -s 4096, the guest's server with the host's
#     client, then the other way; 4d./4e. ibv_ud_pingpong -g the same
#     (-n 200 -s 1024); every end exits 0 with its "N iters in" line;
#  5./6. ib_write_bw -R (host client) and ib_send_lat -R (host server);
#     a client REJECTED (perftest's second connection before the server
#     listens again) has the server started again, then tries again;
#  6b./6c. mckey on the IPv4 group 239.80.0.1 (RoCE: no SA, the group's
#     IP as the MGID, its MAC 01:00:5e:50:00:01): a receiver in the guest
#     and one on the host, the host's sender, then the guest's; both
#     receivers get the 10 datagrams each time;
#  7. the host's rping client SIGKILLed mid-transfer: the guest's server
#     sees the DISCONNECT (ibd's DREQ), ibd frees everything of the dead
#     process;
#  8. the guest powers off under a stream of the host's ib_write_bw -R:
#     that ends by itself, ibd frees it.
# rping -v prints each ping's data; every side's lines must be rping's N
# lines exactly. simhca's capture must decode as RoCEv2 with nothing
# malformed, and contain the CM's MADs (UD SENDs to QP1). The guest prints
# a marker before each step (a server's once rdma_cm lists it listening);
# the host side waits for it. docs/qemu-test.md "qemu-rxe-cm".
#
#   test/qemu/rxe_cm.sh <build directory>
#
# Environment: as run.sh (OPENIB_CACHE, OPENIB_QEMU_KERNEL,
# OPENIB_QEMU_TIMEOUT, OPENIB_QEMU_ACCEL, OPENIB_QEMU_KEEP_LOG), and
#   OPENIB_RXE_CM_ITERS   rping's count (-C) each way (default 100)
#   OPENIB_RXE_CM_PERF_ITERS  ib_write_bw's and ib_send_lat's -n (default 200)
#   OPENIB_RXE_CM_PP_ITERS    ibv_rc_pingpong's -n (default 500)
#   OPENIB_RXE_KEEP_PCAP  if set, copy simhca's capture to this path
set -euo pipefail

build=$(cd "${1:?usage: $0 <build directory>}" && pwd)
# meson's LD_LIBRARY_PATH names our libraries: the guest's (copied by what
# ldd says) must be Debian's. The host's rping gets ours below.
unset LD_LIBRARY_PATH
qemu_test_tag=qemu-rxe-cm

# --- 0. a network namespace of our own; the rest runs inside it ---------------
# (named by this run's PID, so that runs side by side do not meet)
if [[ -z ${OPENIB_RXE_CM_NS:-} ]]; then
  ns=sbg-rxe-$$
  ip netns add "$ns"
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  ip -n "$ns" link set lo up
  rc=0
  OPENIB_RXE_CM_NS=$ns ip netns exec "$ns" "$0" "$@" || rc=$?
  exit "$rc"
fi

cache=${OPENIB_CACHE:-/var/cache/openib}/qemu
vm_timeout=${OPENIB_QEMU_TIMEOUT:-300}
accel=${OPENIB_QEMU_ACCEL:-tcg}
iters=${OPENIB_RXE_CM_ITERS:-100}
perf_iters=${OPENIB_RXE_CM_PERF_ITERS:-200}  # ib_write_bw's and ib_send_lat's -n
pp_iters=${OPENIB_RXE_CM_PP_ITERS:-500}  # ibv_rc_pingpong's -n (-s 4096)
ud_pp_iters=200  # ibv_ud_pingpong's -n (-s 1024: the active MTU)
# The host's ib_write_bw outlives the guest's power-off by its transport's
# retries (8 tries of the path's ACK timeout) and the CM's DREQ retries.
peer_grace_after_vm=90
size=64  # (rxe_init_setup's SIZE; rping's default -S)
# rdma_ucm: the RDMA CM's character device for librdmacm (it brings rdma_cm
# and ib_cm); the rest as rxe.sh.
modules=(crc32_generic crc32-pclmul virtio_pci virtio_net rdma_rxe ib_uverbs rdma_ucm)
guest_bins=(/usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong /usr/bin/rping /usr/bin/udaddy /usr/bin/mckey /usr/bin/ib_write_bw /usr/bin/ib_send_lat
            /usr/sbin/ip /usr/bin/rdma /usr/bin/stdbuf)
guest_pkgs=(libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils perftest iproute2)
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
guest_mac=52:54:00:12:34:56
oob_mac=52:54:00:12:34:57
peer_mac=""  # no permanent neighbour: the guest ARPs for 198.18.80.1
# simhca's port MAC: 02 and the low 40 bits of node GUID + 1 (docs/simhca.md
# §16.1).
host_guid=0x0002c90300000c00
host_mac=02:03:00:00:0c:01

# shellcheck source=test/qemu/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
IBD=$build/src/ibd/ibd
abi=$build/src/abi

work=$(mktemp -d /tmp/openib-rxe-cm.XXXXXX)
vm_pid=""
peer_pid=""
ibd_pid=""
trap cleanup_vm_peer_ibd EXIT
trap 'exit 130' INT TERM

require_tools qemu-system-x86_64 dpkg-deb depmod cpio gzip ldd tshark python3 dpkg-query rping ibv_devinfo
[[ -x $IBD ]] || die "$IBD is not an executable"
require_packages "${guest_pkgs[@]}"

read -r port_qemu port_hca < <(free_ports udp udp)

# --- 1. the kernel package (lib.sh) ---------------------------------------
setup_kernel

# --- 2. the initramfs --------------------------------------------------------
root=$work/root
initramfs_skeleton "$root"
initramfs_modules "$root" "${modules[@]}"
initramfs_rxe "$root" "$provider" "${guest_bins[@]}"
initramfs_libgcc "$root"  # (rping's threads)
# (stdbuf -oL: mckey's lines as it prints them, not at its exit)
initramfs_binary "$root" /usr/libexec/coreutils/libstdbuf.so
rxe_init_setup "$root/init"
echo "PERF_ITERS=$perf_iters" >>"$root/init"
# the pingpongs' out-of-band TCP ports (free in this namespace) and counts
read -r rc_pp_port ud_pp_port < <(free_ports tcp tcp)
printf 'RC_PP_PORT=%s\nUD_PP_PORT=%s\nPP_ITERS=%s\nUD_PP_ITERS=%s\n' \
  "$rc_pp_port" "$ud_pp_port" "$pp_iters" "$ud_pp_iters" >>"$root/init"
rxe_init_gid "$root/init"
cat >>"$root/init" <<'EOF'
echo "OPENIB: RoCE v2 GID index ${gidx:-none}"
# rping's output between markers (the verdict compares its data lines).
step() { echo "OPENIB-STEP $1"; }  # the host side waits for these
uptime_s() { cut -d' ' -f1 /proc/uptime; }
# snmp <Ip|Icmp|Udp...> <field>: a counter of /proc/net/snmp (the host's
# signals during mckey's steps: pings and UDP datagrams to a closed port).
snmp() {
  awk -v t="$1:" -v f="$2" '$1 == t { if (!c) { for (i = 2; i <= NF; i++) if ($i == f) c = i } else print $c }' /proc/net/snmp
}
GROUP=239.80.0.1
# mckey_rcv <name>: a receiver of $GROUP in the background (pid mpid,
# output /tmp/mckey-<name>.log), once it receives (30 s at most): it has
# joined, and its QP is attached.
mckey_rcv() {
  timeout 60 stdbuf -oL mckey -m $GROUP -b 198.18.80.2 >/tmp/mckey-$1.log 2>&1 &
  mpid=$!
  for i in $(seq 1 300); do
    grep -q "receiving data transfers" /tmp/mckey-$1.log && break
    kill -0 "$mpid" 2>/dev/null || break
    sleep 0.1
  done
}
# mckey_end <name>: waits for mpid; its output and exit status between
# markers (OPENIB-MCKEY-RECV-<name>-...).
mckey_end() {
  wait "$mpid"
  rc=$?
  echo "OPENIB-MCKEY-RECV-$1-BEGIN"; cat /tmp/mckey-$1.log; echo "OPENIB-MCKEY-RECV-$1-END"
  echo "OPENIB-MCKEY-RECV-$1-EXIT=$rc"
}
# serving <marker> <pid>: once rdma_cm lists a listening id (10 s at most),
# the marker: the host side's client, which waits for it, then finds the
# server listening.
serving() {
  for i in $(seq 1 100); do
    rdma res show cm_id 2>/dev/null | grep -q LISTEN && break
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  rdma res show cm_id 2>/dev/null | grep -q LISTEN || echo "OPENIB: no listening rdma_cm id"
  echo "$1"
}
# serving_tcp <marker> <pid> <port>: the same for a TCP socket listening on
# <port> (/proc/net/tcp and tcp6, state 0A: the pingpongs' out-of-band
# exchange).
serving_tcp() {
  hex=$(printf '%04X' "$3")
  for i in $(seq 1 100); do
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A"' | grep -q . && break
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "$1"
}
# run_tool <name> <timeout> [--serve <marker> | --serve-tcp <marker> <port>]
# <command>...: its output and exit status between markers; with --serve
# in the background until it listens (serving, serving_tcp), then waited
# for.
run_tool() {
  name=$1 secs=$2; shift 2
  marker="" tport=""
  if [ "$1" = --serve ]; then marker=$2; shift 2; fi
  if [ "$1" = --serve-tcp ]; then marker=$2 tport=$3; shift 3; fi
  echo "OPENIB: at $(uptime_s)s: $*"
  # (stderr apart: its messages would cut into rping's data lines)
  timeout "$secs" "$@" >/tmp/tool.log 2>/tmp/tool.err &
  tpid=$!
  if [ -n "$tport" ]; then
    serving_tcp "$marker" "$tpid" "$tport"
  elif [ -n "$marker" ]; then
    serving "$marker" "$tpid"
  fi
  wait "$tpid"
  rc=$?
  echo "OPENIB-$name-BEGIN"; cat /tmp/tool.log; echo "OPENIB-$name-END"
  cat /tmp/tool.err
  echo "OPENIB-$name-EXIT=$rc"
}
# perftest's -R makes two RDMA CM connections in turn, the first for its
# parameter exchange, the second for the test, and its server listens
# anew for the second: the host's client can send that REQ before this
# slow server listens again (REJ 8 from this ib_cm, no listener). The
# server then waits for a second connection that never comes (and would
# take the host's next client's first for it), so the host asks for a new
# server: a ping (ICMP echo requests counted in /proc/net/snmp, from the
# server's start on) while it waits for its client, answered by killing
# it and starting it again, with the marker " again-N" (5 times at most).
# perf_start <marker> <command>...: the server in the background (pid
# tpid, output /tmp/tool.log and .err), its marker once it listens
# (serving), and " again-N" after it unless N (again) is 0.
perf_start() {
  pmarker=$1; shift
  echo "OPENIB: at $(uptime_s)s: $*"
  echos0=$(snmp Icmp InEchos)
  timeout 120 "$@" >/tmp/tool.log 2>/tmp/tool.err &
  tpid=$!
  if [ "$again" = 0 ]; then serving "$pmarker" "$tpid"; else serving "$pmarker again-$again" "$tpid"; fi
}
# perf_asked <marker> <command>...: if the host has pinged since the
# server started (and it has not been started again 5 times), the server
# killed and started again; true then.
perf_asked() {
  [ "$again" -lt 5 ] && [ "$(snmp Icmp InEchos)" -gt "$echos0" ] || return 1
  kill -KILL "$tpid" 2>/dev/null; wait "$tpid"
  again=$((again + 1))
  echo "OPENIB: the host's client was rejected: $2's server again ($again) [$(tr '\n' ' ' </tmp/tool.err)]"
  perf_start "$@"
}
# perf_serve <NAME> <marker> <command>...: run_tool's --serve for such a
# server (120 s), started again whenever the host asks (also 15 s after it
# failed: the host's rejected client may have ended it).
perf_serve() {
  name=$1; shift
  again=0
  perf_start "$@"
  while :; do
    while kill -0 "$tpid" 2>/dev/null; do  # (timeout 120 ends it)
      perf_asked "$@" || sleep 0.1
    done
    wait "$tpid"
    rc=$?
    [ "$rc" = 0 ] && break
    asked=""
    for i in $(seq 1 150); do
      perf_asked "$@" && { asked=1; break; }
      sleep 0.1
    done
    [ -n "$asked" ] || break
  done
  echo "OPENIB-$name-BEGIN"; cat /tmp/tool.log; echo "OPENIB-$name-END"
  cat /tmp/tool.err
  echo "OPENIB-$name-EXIT=$rc (started again $again time(s))"
}
if [ -n "$gidx" ]; then
  # 1. rping: the host's server listens already.
  run_tool RPING-CLIENT 120 rping -c -a 198.18.80.1 -v -C "$ITERS"
  # 2. rping: the host's client connects once this server listens.
  run_tool RPING-SERVER 120 --serve OPENIB-RPING-SERVER-START rping -s -a 198.18.80.2 -v -C "$ITERS"
  # 3. udaddy (UD, SIDR): the host's server starts on the marker.
  step udaddy-host-server; sleep 3
  run_tool UDADDY-CLIENT 60 udaddy -s 198.18.80.1
  # 4. udaddy: the guest's server, the host's client.
  run_tool UDADDY-SERVER 60 --serve "OPENIB-STEP udaddy-guest-server" udaddy
  # 4b./4c. ibv_rc_pingpong by GID (-g: the RoCE v2 entry of 198.18.80.2),
  #   its out-of-band exchange by TCP over the RoCE NIC: this server (the
  #   marker once its port listens) with the host's client, then the
  #   host's server (started on the marker) with this client, tried again
  #   while its connect is refused (20 tries 0.5 s apart). 4d./4e. The
  #   same with ibv_ud_pingpong.
  pp_pair() {  # pp_pair <NAME> <tool> <port> <args>...
    pname=$1 tool=$2 pport=$3; shift 3
    run_tool "$pname-SERVER" 60 --serve-tcp "OPENIB-STEP $tool-guest-server" "$pport" \
      $tool -d rxe0 -g "$gidx" -e -c -p "$pport" "$@"
    step "$tool-host-server"
    for try in $(seq 1 20); do
      run_tool "$pname-CLIENT" 60 $tool -d rxe0 -g "$gidx" -e -c -p "$pport" "$@" 198.18.80.1
      grep -q "Couldn't connect" /tmp/tool.err || break
      echo "OPENIB: (refused: again in 0.5 s)"
      sleep 0.5
    done
  }
  pp_pair RC-PP ibv_rc_pingpong "$RC_PP_PORT" -n "$PP_ITERS" -s 4096
  pp_pair UD-PP ibv_ud_pingpong "$UD_PP_PORT" -n "$UD_PP_ITERS" -s 1024
  # 5. perftest by the RDMA CM (-R): ib_write_bw with the guest's server
  #    (started again while the host is rejected, perf_serve), ib_send_lat
  #    with the host's.
  perf_serve WRITE-BW "OPENIB-STEP write-bw-guest-server" ib_write_bw -R -d rxe0 -s 65536 -n "$PERF_ITERS"
  step send-lat-host-server; sleep 3
  # (a host under load may listen later, for either of perftest's two
  # connections: REJ 8, no such service; then the host's server again on
  # the marker " again-N", this client 3 s later, 5 tries)
  for try in 1 2 3 4 5; do
    run_tool SEND-LAT 120 ib_send_lat -R -d rxe0 -s 8 -n "$PERF_ITERS" 198.18.80.1
    # (perftest names the event, or gives its number: 8 is REJECTED)
    grep -q -e RDMA_CM_EVENT_REJECTED -e "CM event bl blka 8\$" /tmp/tool.log /tmp/tool.err || break
    [ "$try" = 5 ] && break
    step "send-lat-host-server again-$try"; sleep 3
  done
  # 6b. mckey, a receiver on each side of the group $GROUP: the host's
  #     sender first (the host runs it again, 3 times at most, until both
  #     receivers have their 10 datagrams: UD multicast is unreliable).
  echo "OPENIB: at $(uptime_s)s: mckey"
  step mckey-receivers  # (the host's receiver starts alongside)
  mckey_rcv A
  step mckey-host-sender
  mckey_end A
  # 6c. The guest's sender: the host's second receiver starts on the
  #     marker; the host says by a ping when it receives (and by another
  #     while a receiver waits: once more, 3 runs at most), by a UDP
  #     datagram to port 9 when it is done.
  mckey_rcv B
  step mckey-guest-sender
  echos0=$(snmp Icmp InEchos)
  noports0=$(snmp Udp NoPorts)
  runs=0
  rcv_done=""
  for i in $(seq 1 600); do  # (60 s at most)
    [ "$(snmp Udp NoPorts)" -gt "$noports0" ] && break
    if [ "$(snmp Icmp InEchos)" -gt "$echos0" ] && [ "$runs" -lt 3 ]; then
      echos0=$(snmp Icmp InEchos)
      runs=$((runs + 1))
      timeout 30 mckey -m $GROUP -b 198.18.80.2 -s >/tmp/mckey-send.log 2>&1
      echo "OPENIB-MCKEY-SEND-$runs-EXIT=$? ($(tr '\n' ' ' </tmp/mckey-send.log))"
    fi
    if [ -z "$rcv_done" ] && ! kill -0 "$mpid" 2>/dev/null; then
      rcv_done=1
      echo "OPENIB-MCKEY-RECV-B-DONE"
    fi
    sleep 0.1
  done
  mckey_end B
  echo "OPENIB: at $(uptime_s)s: mckey done"
  # 6. The host's rping client is killed (SIGKILL) mid-transfer: this
  #    server must see the disconnect (ibd's DREQ for the dead client:
  #    rping says "server DISCONNECT EVENT") and end by itself. Linux
  #    6.1's rping over rxe sometimes hangs after that event, in its own
  #    teardown (docs/qemu-test.md): it is stopped 5 s after the event.
  #    (busybox's timeout execs rping: kpid is rping's own PID.)
  t0=$(uptime_s)
  timeout 60 rping -s -a 198.18.80.2 -C 1000000 >/dev/null 2>/tmp/kill.err &
  kpid=$!
  serving "OPENIB-STEP kill-host-client" "$kpid"
  disc=none hung="" n=0
  for i in $(seq 1 600); do
    kill -0 "$kpid" 2>/dev/null || break
    if [ "$disc" = none ] && grep -q "DISCONNECT EVENT" /tmp/kill.err; then
      disc=$(awk "BEGIN { printf \"%d\", $(uptime_s) - $t0 }")s
    fi
    [ "$disc" != none ] && n=$((n + 1))
    if [ "$n" -ge 50 ]; then
      hung=" hung-after-disconnect: $(for t in /proc/$kpid/task/*; do printf '%s ' "$(cat $t/wchan)"; done)"
      kill "$kpid"
      break
    fi
    sleep 0.1
  done
  wait "$kpid"
  rc=$?
  # (ended between two looks)
  [ "$disc" = none ] && grep -q "DISCONNECT EVENT" /tmp/kill.err && disc=$(awk "BEGIN { printf \"%d\", $(uptime_s) - $t0 }")s
  echo "OPENIB-KILL-SURVIVOR exit=$rc after=$(awk "BEGIN { printf \"%d\", $(uptime_s) - $t0 }")s disconnect=$disc$hung: $(tr '\n' ' ' </tmp/kill.err)"
  # 7. The guest powers off in the middle of a stream of RDMA WRITEs from
  #    the host's ib_write_bw, which must notice by itself (a ping-pong
  #    could be caught with nothing in flight: an idle RC connection never
  #    learns that its peer died, on Linux as here).
  #    Off once the stream runs: both of ib_write_bw's QPs in RTS (its
  #    exchange's and the test's; 30 s at most from its last start), then 2 s
  #    of it. Started again while the host is rejected (perf_serve).
  again=0
  set -- "OPENIB-STEP poweroff-host-client" ib_write_bw -R -d rxe0 -s 65536 -D 60
  perf_start "$@"
  n=0
  while [ "$n" -lt 300 ]; do
    [ "$(rdma res show qp 2>/dev/null | grep 'state RTS' | grep -c 'comm ib_write_bw')" -ge 2 ] && break
    if perf_asked "$@"; then n=0; else n=$((n + 1)); sleep 0.1; fi
  done
  echo "OPENIB: ib_write_bw's QPs (started again $again time(s)): $(rdma res show qp 2>/dev/null | grep 'comm ib_write_bw' | tr -s ' ' | tr '\n' ';')"
  sleep 2
  echo "OPENIB: rxe0 counters: $(cd $port/hw_counters 2>/dev/null && for c in *; do [ $c = lifespan ] && continue; v=$(cat $c); [ "$v" != 0 ] && printf '%s=%s ' $c $v; done)"
  echo "OPENIB-POWEROFF at $(uptime_s)s, mid-transfer"
  poweroff -f
else
  echo "OPENIB-RPING-CLIENT-EXIT=98"
  echo "OPENIB-RPING-SERVER-EXIT=98"
fi
echo "OPENIB: done at $(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
EOF
chmod +x "$root/init"
initramfs_pack "$root" "$work/initramfs.gz"

# --- 3. ibd, its netdev, the host's rping server -----------------------------
start_roce_ibd
# The pingpongs' device and GID index: the port's RoCE v2 entry of
# 198.18.80.1, as ibv_devinfo -v lists it.
host_dev=$(ibv_devinfo -l 2>/dev/null | awk 'NR == 2 { print $1 }')
host_gidx=$(ibv_devinfo -v -d "$host_dev" 2>/dev/null |
  sed -nE 's/.*GID\[ *([0-9]+)\]:[[:space:]]+::ffff:198\.18\.80\.1, RoCE v2.*/\1/p' | head -1)
[[ -n $host_dev && -n $host_gidx ]] || die "no device '$host_dev' or no RoCE v2 GID of 198.18.80.1 in its table"
say "$host_dev port 1: GID[$host_gidx] ::ffff:198.18.80.1, RoCE v2"

# The host's side of each step, in order (one background job, so that
# wait_vm_and_peer can wait for it): the first rping server at once, the
# rest when the guest's console says it is at that step.
wait_for() {  # wait_for <text>: until the guest's console has it (240 s at most)
  for _ in $(seq 2400); do
    grep -qs -- "$1" "$serial" && return 0
    sleep 0.1
  done
  echo "the guest never printed '$1'"
  return 1
}
# await_line <file> <text> <pid> <tenths>: until <file> has <text>, while
# <pid> lives (<tenths> x 0.1 s at most).
await_line() {
  for _ in $(seq "$4"); do
    grep -qs -- "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# ended_and_said <pid> <marker>: within 5 s <pid> has exited and the
# guest's console has <marker>.
ended_and_said() {
  for _ in $(seq 50); do
    ! kill -0 "$1" 2>/dev/null && grep -qs -- "$2" "$serial" && return 0
    sleep 0.1
  done
  return 1
}
# objs PID: "CQS QPS" of that process's connection to ibd (none: "- -").
objs() {
  "$build/src/tools/ibdctl" --socket "$work/ibd.sock" clients |
    awk -v p="$1" '$2 == p {c = $6; q = $7} END {print (c == "" ? "-" : c), (q == "" ? "-" : q)}'
}
# all_qps: the QPs of all of ibd's clients.
all_qps() { "$build/src/tools/ibdctl" --socket "$work/ibd.sock" clients | awk '$2 ~ /^[0-9]+$/ {n += $7} END {print n + 0}'; }
# freed PID: within 10 s ibd holds no CQ or QP of PID (the process is gone).
freed() {
  for _ in $(seq 100); do
    case $(objs "$1") in "- -" | "0 0") return 0 ;; esac
    sleep 0.1
  done
  return 1
}
# perftest -R's client, ours, against the guest's server: its second REQ
# (the test's connection, ~5 ms after the parameter exchange's) can reach
# a slowed guest before its server listens again, REJ 8; Debian's client
# then crashes, and the guest's server is left waiting for a second
# connection. So a client REJECTED asks the guest for a new server (a
# ping, the guest's perf_serve) and tries again on its marker
# "<marker> again-N" (5 times at most).
# rejected <out>: perftest's output says REJECTED (by the event's name, or
# its number, 8, "Unexpected CM event bl blka 8").
rejected() { grep -qs -e RDMA_CM_EVENT_REJECTED -e "CM event bl blka 8\$" "$1"; }
# ask_again: the ping (once more if unanswered).
ask_again() {
  ping -c 1 -W 5 198.18.80.2 >/dev/null || ping -c 1 -W 5 198.18.80.2 >/dev/null ||
    { echo "the guest does not answer the ping"; return 1; }
}
# perf_client <marker> <out> <command>...: on the guest server's marker the
# command, its output to <out>, again (on the next marker) while it fails
# with RDMA_CM_EVENT_REJECTED.
perf_client() {
  local marker=$1 out=$2 rc=1 again
  shift 2
  for again in 0 1 2 3 4 5; do
    if ((again == 0)); then wait_for "$marker" || return 1; else wait_for "$marker again-$again" || return 1; fi
    sleep 0.5
    rc=0
    "$@" >"$out" 2>&1 || rc=$?
    ((rc != 0)) && rejected "$out" && ((again < 5)) || return "$rc"
    echo "(rejected: the guest's server again) $*: $(grep -m2 -i "event\|error" "$out" | tr '\n' ' ')"
    ask_again || return 1
  done
  return "$rc"
}
# perf_server <marker> <out> <command>...: our perftest -R server (the
# command, its output to <out>) for the guest's client, started again
# whenever the guest's console says "<marker> again-N": the guest's client
# was REJECTED (the same race the other way: a loaded host's server
# listening late for either connection); it tries again 3 s later. (Also
# within 15 s after the server failed: the guest's rejected client may
# have ended it.)
perf_server() {
  local marker=$1 out=$2 again=0 spid rc asked
  shift 2
  while :; do
    "$@" >"$out" 2>&1 &
    spid=$!
    asked=""
    while kill -0 "$spid" 2>/dev/null; do  # (its own timeout ends it)
      grep -qs -- "$marker again-$((again + 1))" "$serial" && { asked=1; break; }
      sleep 0.1
    done
    rc=0
    if [[ -n $asked ]]; then
      kill "$spid" 2>/dev/null || true
      wait "$spid" 2>/dev/null || true
    else
      wait "$spid" || rc=$?
      ((rc != 0 && again < 5)) && await_line "$serial" "$marker again-$((again + 1))" $$ 150 && asked=1
    fi
    [[ -n $asked ]] || return "$rc"
    again=$((again + 1))
    echo "(the guest's client was rejected: our server again, $again) $*"
  done
}
# stream_to_guest: ib_write_bw -R -D 60 to the guest's server in the
# background (pid), once it has connected (30 s per try; tried again as
# perf_client does).
stream_to_guest() {
  local again
  for again in 0 1 2 3 4 5; do
    if ((again == 0)); then wait_for "OPENIB-STEP poweroff-host-client" || return 1; else wait_for "OPENIB-STEP poweroff-host-client again-$again" || return 1; fi
    sleep 0.5
    # (line-buffered: its "remote address" line says it has connected)
    timeout 150 stdbuf -oL ib_write_bw -R -s 65536 -D 60 198.18.80.2 >"$work/poweroff-client.out" 2>&1 &
    pid=$!
    await_line "$work/poweroff-client.out" "remote address" "$pid" 300 && return 0
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rejected "$work/poweroff-client.out" && ((again < 5)) || return 1
    echo "(rejected: the guest's server again) ib_write_bw -R -D 60"
    ask_again || return 1
  done
  return 1
}
# mckey_receiver <name>: our receiver of $group in the background (pid
# mpid, output $work/mckey-<name>.out), once it receives (30 s at most).
group=239.80.0.1
mckey_receiver() {
  timeout 60 stdbuf -oL mckey -m "$group" -b 198.18.80.1 >"$work/mckey-$1.out" 2>&1 &
  mpid=$!
  await_line "$work/mckey-$1.out" "receiving data transfers" "$mpid" 300 && return 0
  echo "host mckey receiver $1 does not receive: $(cat "$work/mckey-$1.out")"
  return 1
}
# mckey_receiver_end <name>: waits for it (its 60 s at most); says how it ended.
mckey_receiver_end() {
  local rc=0
  wait "$mpid" || rc=$?
  echo "host mckey receiver $1 exit $rc: $(tr '\n' ' ' <"$work/mckey-$1.out")"
  ((rc == 0))
}
# pp_pair_host <tool> <port> <args>...: our side of the guest's pp_pair
# (ibv_rc_pingpong or ibv_ud_pingpong by GID, -g $host_gidx, --chk, CQ
# events): on its marker our client to its server (again while the connect
# is refused: 5 tries 0.5 s apart), on the next our server for its client.
# Output in $work/<tool>-client.out and -server.out.
pp_pair_host() {
  local tool=$1 port=$2 rc
  shift 2
  wait_for "OPENIB-STEP $tool-guest-server" || return 1
  for _ in 1 2 3 4 5; do
    rc=0
    timeout 60 "$tool" -d "$host_dev" -g "$host_gidx" -e -c -p "$port" "$@" 198.18.80.2 \
      >"$work/$tool-client.out" 2>&1 || rc=$?
    grep -q "Couldn't connect" "$work/$tool-client.out" || break
    echo "(refused: again in 0.5 s) $tool"
    sleep 0.5
  done
  echo "host $tool client exit $rc: $(grep "iters in" "$work/$tool-client.out")"
  ((rc == 0)) || { cat "$work/$tool-client.out"; return 1; }
  wait_for "OPENIB-STEP $tool-host-server" || return 1
  rc=0
  timeout 60 "$tool" -d "$host_dev" -g "$host_gidx" -e -c -p "$port" "$@" >"$work/$tool-server.out" 2>&1 || rc=$?
  echo "host $tool server exit $rc: $(grep "iters in" "$work/$tool-server.out")"
  ((rc == 0)) || { cat "$work/$tool-server.out"; return 1; }
}
host_side() {
  local rc=0 pid t0
  timeout 200 rping -s -a 198.18.80.1 -v -C "$iters" >"$work/host-server.out" 2>"$work/host-server.err" || rc=$?
  echo "host rping server exit $rc"
  [[ $rc == 0 ]] || return 1
  wait_for OPENIB-RPING-SERVER-START || return 1
  sleep 0.5  # (the guest prints the marker once its server listens)
  rc=0
  timeout 120 rping -c -a 198.18.80.2 -v -C "$iters" >"$work/host-client.out" 2>"$work/host-client.err" || rc=$?
  echo "host rping client exit $rc"
  ((rc == 0)) || return 1
  # udaddy: our server, then our client.
  wait_for "OPENIB-STEP udaddy-host-server" || return 1
  rc=0
  timeout 60 udaddy >"$work/udaddy-server.out" 2>&1 || rc=$?
  echo "host udaddy server exit $rc: $(tr '\n' ' ' <"$work/udaddy-server.out")"
  ((rc == 0)) || return 1
  wait_for "OPENIB-STEP udaddy-guest-server" || return 1
  sleep 0.5
  rc=0
  timeout 60 udaddy -s 198.18.80.2 >"$work/udaddy-client.out" 2>&1 || rc=$?
  echo "host udaddy client exit $rc: $(tr '\n' ' ' <"$work/udaddy-client.out")"
  ((rc == 0)) || return 1
  # The pingpongs by GID: the guest's server, our client; our server, its client.
  pp_pair_host ibv_rc_pingpong "$rc_pp_port" -n "$pp_iters" -s 4096 || return 1
  pp_pair_host ibv_ud_pingpong "$ud_pp_port" -n "$ud_pp_iters" -s 1024 || return 1
  # perftest by the RDMA CM: our ib_write_bw client, our ib_send_lat server.
  rc=0
  perf_client "OPENIB-STEP write-bw-guest-server" "$work/write-bw.out" \
    timeout 120 ib_write_bw -R -s 65536 -n "$perf_iters" 198.18.80.2 || rc=$?
  echo "host ib_write_bw -R client exit $rc"
  ((rc == 0)) || { cat "$work/write-bw.out"; return 1; }
  wait_for "OPENIB-STEP send-lat-host-server" || return 1
  rc=0
  perf_server "OPENIB-STEP send-lat-host-server" "$work/send-lat.out" \
    timeout 120 ib_send_lat -R -s 8 -n "$perf_iters" || rc=$?
  echo "host ib_send_lat -R server exit $rc"
  ((rc == 0)) || { cat "$work/send-lat.out"; return 1; }
  # mckey: our receiver alongside the guest's; our sender, then the guest's.
  wait_for "OPENIB-STEP mckey-receivers" || return 1
  mckey_receiver A || return 1
  wait_for "OPENIB-STEP mckey-host-sender" || return 1
  for try in 1 2 3; do
    rc=0
    timeout 30 mckey -m "$group" -b 198.18.80.1 -s >"$work/mckey-send.out" 2>&1 || rc=$?
    echo "host mckey sender (run $try) exit $rc: $(tr '\n' ' ' <"$work/mckey-send.out")"
    ((rc == 0)) || return 1
    # (both receivers done: ours exited, the guest's printed its status)
    ended_and_said "$mpid" OPENIB-MCKEY-RECV-A-EXIT && break
  done
  mckey_receiver_end A || return 1
  wait_for "OPENIB-STEP mckey-guest-sender" || return 1
  mckey_receiver B || return 1
  for try in 1 2 3; do
    # a ping: "send (again)" (the guest counts echo requests)
    ping -c 1 -W 2 198.18.80.2 >/dev/null || ping -c 1 -W 2 198.18.80.2 >/dev/null || return 1
    wait_for "OPENIB-MCKEY-SEND-$try-EXIT" || return 1
    ended_and_said "$mpid" OPENIB-MCKEY-RECV-B-DONE && break
  done
  # "done": a UDP datagram to the guest's port 9, where nothing listens
  # (three: a lost one would keep the guest waiting for 60 s).
  for _ in 1 2 3; do echo finished >/dev/udp/198.18.80.2/9; done
  echo "host mckey: the guest's sender ran $(grep -c "^OPENIB-MCKEY-SEND-[0-9]-EXIT" "$serial") time(s)"
  mckey_receiver_end B || return 1
  # Our rping client killed mid-transfer: ibd frees its objects (and tells
  # the guest: its server must end by itself, checked from the console).
  wait_for "OPENIB-STEP kill-host-client" || return 1
  sleep 0.5
  rping -c -a 198.18.80.2 -C 1000000 >/dev/null 2>&1 &
  pid=$!
  sleep 3
  kill -0 "$pid" 2>/dev/null || { echo "the rping client to be killed had ended already"; return 1; }
  echo "host rping client (pid $pid) before the kill: $(objs "$pid") (CQs QPs)"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  freed "$pid" || { echo "ibd still holds $(objs "$pid") (CQs QPs) of the killed rping"; return 1; }
  echo "host rping client killed mid-transfer: ibd freed its objects"
  # The guest powers off while our ib_write_bw streams to it: the WRITEs
  # in flight time out (transport retries exceeded) and it ends by itself.
  stream_to_guest || { echo "ib_write_bw -R -D 60 did not connect: $(cat "$work/poweroff-client.out")"; return 1; }
  wait_for "OPENIB-POWEROFF" || return 1
  t0=$SECONDS
  rc=0
  wait "$pid" || rc=$?
  echo "host ib_write_bw after the guest's power-off: exit $rc after $((SECONDS - t0)) s: $(grep -i -m3 "error\|failed" "$work/poweroff-client.out" | tr '\n' ' ')"
  ((rc < 124 || rc > 192)) || { echo "the host's ib_write_bw did not end by itself"; return 1; }
  freed "$pid" || { echo "ibd still holds $(objs "$pid") (CQs QPs) of ib_write_bw"; return 1; }
  echo "ibd's clients hold $(all_qps) QPs at the end"
  echo "HOST-SIDE-COMPLETE"
}
host_side >"$work/peer.log" 2>&1 &
peer_pid=$!
sleep 0.5

# --- 4. the VM ------------------------------------------------------------------
start_rxe_vm "$serial" "$port_qemu" "$port_hca" ""
wait_vm_and_peer  # each side gets a grace period after the other (lib.sh)

stop_roce_ibd  # (its capture is complete once it exits)

# --- 5. verdict --------------------------------------------------------------
{
  echo "host rping server (stdout, stderr):"; cat "$work/host-server.out" "$work/host-server.err" 2>/dev/null || true
  echo "host rping client (stdout, stderr):"; cat "$work/host-client.out" "$work/host-client.err" 2>/dev/null || true
  echo "----- ibd (tail) -----"; tail -30 "$work/ibd.log"
} >>"$work/peer.log"
show_logs "$serial" "$pcap" "host side"

failures=0
((peer_rc == 0)) || fail "host side exit status $peer_rc"
# rping -v's data: "rdma-ping-N: " and then, to 63 bytes, 'A'..'z' in turn
# from 'A' + N % 58; the client prints "ping data: " and the data the server
# wrote back, the server "server ping data: " and what it read.
expected=$(awk -v n="$iters" 'BEGIN { for (i = 0; i < n; i++) { s = "rdma-ping-" i ": "; m = 63 - length(s)
  for (k = 0; k < m; k++) s = s sprintf("%c", 65 + (i + k) % 58); print s } }')
data_of() { sed -n "s/^$1//p"; }  # data_of <prefix>: rping's data lines without it
check_data() {  # check_data <what> <prefix> <text>
  local got
  got=$(data_of "$2" <<<"$3")
  [[ $got == "$expected" ]] && return 0
  fail "$1: $(grep -c . <<<"$got") data lines, not rping's $iters (first difference: $(diff <(echo "$expected") <(echo "$got") | sed -n 2p))"
}
guest_part() { sed -n "/^OPENIB-RPING-$1-BEGIN\$/,/^OPENIB-RPING-$1-END\$/p" "$work/console.log"; }
guest_part_of() { sed -n "/^OPENIB-$1-BEGIN\$/,/^OPENIB-$1-END\$/p" "$work/console.log"; }
for role in CLIENT SERVER; do
  grep -q "OPENIB-RPING-$role-EXIT=0" "$work/console.log" || fail "guest: rping as the $role did not exit 0"
done
check_data "guest rping client (guest -> host)" "ping data: " "$(guest_part CLIENT)"
check_data "host rping server (guest -> host)" "server ping data: " "$(cat "$work/host-server.out" 2>/dev/null)"
check_data "guest rping server (host -> guest)" "server ping data: " "$(guest_part SERVER)"
check_data "host rping client (host -> guest)" "ping data: " "$(cat "$work/host-client.out" 2>/dev/null)"

# udaddy both ways: each side's test complete.
grep -q "OPENIB-UDADDY-CLIENT-EXIT=0" "$work/console.log" || fail "guest: udaddy client did not exit 0"
grep -q "OPENIB-UDADDY-SERVER-EXIT=0" "$work/console.log" || fail "guest: udaddy server did not exit 0"
for f in udaddy-server udaddy-client; do
  grep -q "test complete" "$work/$f.out" 2>/dev/null || fail "host $f: no 'test complete': $(cat "$work/$f.out" 2>/dev/null)"
done
[[ $(guest_part_of UDADDY-CLIENT | grep -c "test complete") == 1 ]] || fail "guest udaddy client: no 'test complete'"
[[ $(guest_part_of UDADDY-SERVER | grep -c "test complete") == 1 ]] || fail "guest udaddy server: no 'test complete'"
# The pingpongs by GID, both ways: every end exits 0 with its "N iters in"
# line and nothing "invalid" (--chk), the host's ends from its GID
# ::ffff:198.18.80.1 to the guest's ::ffff:198.18.80.2. (The guest's
# client's last try counts: tried again while refused.)
last_exit() { grep "^OPENIB-$1-EXIT=" "$work/console.log" | tail -1 | cut -d= -f2; }
check_pp() {  # check_pp <NAME> <tool> <iterations>
  local name=$1 tool=$2 n=$3 role out part
  for role in SERVER CLIENT; do
    [[ $(last_exit "$name-$role") == 0 ]] || fail "guest: $tool as the ${role,,} did not exit 0 ($(last_exit "$name-$role"))"
    part=$(guest_part_of "$name-$role" | awk '/-BEGIN$/ { b = "" } { b = b $0 "\n" } END { printf "%s", b }')
    grep -q "^$n iters in" <<<"$part" || fail "guest $tool ${role,,}: no '$n iters in' line"
    say "guest $tool ${role,,}: $(grep "iters in" <<<"$part" | tail -1)"
  done
  for role in server client; do
    out=$work/$tool-$role.out
    grep -q "^$n iters in" "$out" 2>/dev/null || fail "host $tool $role: no '$n iters in' line: $(cat "$out" 2>/dev/null)"
    grep -q "local address: .*GID ::ffff:198.18.80.1\$" "$out" 2>/dev/null || fail "host $tool $role: not from GID ::ffff:198.18.80.1"
    grep -q "remote address: .*GID ::ffff:198.18.80.2\$" "$out" 2>/dev/null || fail "host $tool $role: not to GID ::ffff:198.18.80.2"
    say "host $tool $role: $(grep "iters in" "$out" 2>/dev/null)"
  done
  grep -q "invalid data" "$work/console.log" "$work/$tool-server.out" "$work/$tool-client.out" 2>/dev/null &&
    fail "$tool --chk: $(grep -h "invalid data" "$work/console.log" "$work/$tool-server.out" "$work/$tool-client.out" | head -3)"
  return 0
}
check_pp RC-PP ibv_rc_pingpong "$pp_iters"
check_pp UD-PP ibv_ud_pingpong "$ud_pp_iters"
# mckey: each run's two receivers (the guest's, ours) got the sender's 10
# datagrams: "test complete" (it polls until it has them) and exit 0.
for r in A B; do
  grep -q "OPENIB-MCKEY-RECV-$r-EXIT=0" "$work/console.log" || fail "guest: mckey receiver $r did not exit 0"
  [[ $(guest_part_of "MCKEY-RECV-$r" | grep -c "test complete") == 1 ]] || fail "guest mckey receiver $r: no 'test complete'"
  grep -q "test complete" "$work/mckey-$r.out" 2>/dev/null || fail "host mckey receiver $r: no 'test complete': $(cat "$work/mckey-$r.out" 2>/dev/null)"
done
grep -q "OPENIB-MCKEY-SEND-[0-9]-EXIT=0" "$work/console.log" || fail "guest: mckey sender did not exit 0"
say "mckey: the host's sender ran $(grep -c "host mckey sender (run" "$work/peer.log") time(s), the guest's $(grep -c "^OPENIB-MCKEY-SEND-" "$work/console.log")"
# perftest -R: both ends exit 0 and print their result line (bytes, iterations, figures).
grep -q "OPENIB-WRITE-BW-EXIT=0" "$work/console.log" || fail "guest: ib_write_bw -R server did not exit 0"
grep -q "OPENIB-SEND-LAT-EXIT=0" "$work/console.log" || fail "guest: ib_send_lat -R client did not exit 0"
bw=$(awk -v n="$perf_iters" '$1 == 65536 && $2 == n' "$work/write-bw.out" 2>/dev/null || true)
lat=$(awk -v n="$perf_iters" '$1 == 8 && $2 == n' "$work/send-lat.out" 2>/dev/null || true)
[[ -n $bw ]] || fail "host ib_write_bw -R: no result line: $(cat "$work/write-bw.out" 2>/dev/null)"
[[ -n $lat ]] || fail "host ib_send_lat -R: no result line: $(cat "$work/send-lat.out" 2>/dev/null)"
say "ib_write_bw -R host -> guest (bytes, iterations, MB/s peak, average, Mpps): $bw"
say "ib_send_lat -R guest -> host (bytes, iterations, usec min, max, typical, avg, ...): $lat"
# The kill: the guest's rping server noticed within 20 s: it saw the
# DISCONNECT (ibd's DREQ) or ended by itself (its own status, 0 or its -1
# (255) when its CM thread meets the closing channel; not timeout's 124
# nor a signal's 128 + N); and the host side saw ibd free the killed
# client's objects. (rping stopped 5 s after the DISCONNECT: Linux 6.1's
# rxe gave its CQ thread no flush completion, docs/qemu-test.md.)
kill_line=$(grep -o "OPENIB-KILL-SURVIVOR exit=[0-9]* after=[0-9]*s.*" "$work/console.log" || true)
say "guest: ${kill_line:-no KILL-SURVIVOR line}"
if [[ $kill_line =~ exit=([0-9]+)\ after=([0-9]+)s\ disconnect=([0-9]+s|none) ]]; then
  k_rc=${BASH_REMATCH[1]} k_after=${BASH_REMATCH[2]} k_disc=${BASH_REMATCH[3]%s}
  if [[ $k_disc != none ]]; then
    ((k_disc <= 20)) || fail "guest: rping server saw the DISCONNECT only after $k_disc s"
  else
    ((k_rc < 124 || k_rc > 192)) || fail "guest: rping server saw no DISCONNECT and did not end by itself after the host's client was killed"
    ((k_after <= 20)) || fail "guest: rping server took $k_after s to notice the killed client"
  fi
else
  fail "guest: no line on the killed host client"
fi
grep -q "ibd freed its objects" "$work/peer.log" || fail "host: ibd did not free the killed rping's objects"
grep -q "HOST-SIDE-COMPLETE" "$work/peer.log" || fail "host side incomplete (the power-off step)"

# The capture: every RoCEv2 frame decodes as InfiniBand, none malformed;
# the CM's MADs (UD SENDs to QP1: REQ, REP, RTU, DREQ, DREP each way)
# among them, and at least the pings' SENDs.
check_capture "$pcap" "$((4 * iters))" 8 'infiniband.bth.destqp == 1' 'to QP1 (the CM)'
cm=$(tshark -n -r "$pcap" -Y 'infiniband.bth.destqp == 1' -T fields -e frame.number 2>/dev/null | wc -l)
((cm >= 10)) || fail "tshark: only $cm frames to QP1 (the CM's REQ, REP, RTU, DREQ, DREP both ways)"
# The pingpongs' messages on the wire, from each side (one tshark pass):
# its RC SENDs of 4096 bytes as First, Middle, Middle, Last at MTU 1024
# (the BTH's OpCodes, IBA 9.2: RC 0, 1, 2), as server and as client, and
# its UD SEND Only (100) of 1024 bytes (IPv4 length 20 + 8 + BTH 12 + DETH 8 +
# 1024 + ICRC 4 = 1076).
pp_frames=$(tshark_roce -n -r "$pcap" -Y 'infiniband.bth.opcode == 0 || infiniband.bth.opcode == 2 || infiniband.bth.opcode == 100' \
  -T fields -e ip.src -e infiniband.bth.opcode -e ip.len 2>/dev/null |
  awk '$2 != 100 || $3 == 1076 { n[$1 " " $2]++ } END { for (k in n) print k, n[k] }')
for src in 198.18.80.1 198.18.80.2; do
  first=$(awk -v s="$src" '$1 == s && $2 == 0 { print $3 }' <<<"$pp_frames")
  last=$(awk -v s="$src" '$1 == s && $2 == 2 { print $3 }' <<<"$pp_frames")
  ud=$(awk -v s="$src" '$1 == s && $2 == 100 { print $3 }' <<<"$pp_frames")
  say "tshark: from $src ${first:-0} RC SEND First, ${last:-0} RC SEND Last, ${ud:-0} UD SENDs of 1024 bytes"
  ((${first:-0} >= 2 * pp_iters && ${last:-0} >= 2 * pp_iters)) ||
    fail "tshark: from $src only ${first:-0} RC SEND First and ${last:-0} Last (ibv_rc_pingpong: $((2 * pp_iters)) each)"
  ((${ud:-0} >= 2 * ud_pp_iters)) || fail "tshark: from $src only ${ud:-0} UD SENDs of 1024 bytes (ibv_ud_pingpong: $((2 * ud_pp_iters)))"
done
# mckey's datagrams, each way: to the group's IP and MAC (01:00:5e and its
# low 23 bits) and QPN 0xFFFFFF; the IGMP reports of both kernels for the
# group (the guest's rdma_cm, ibd's arp::join_group on roce0).
frames() { tshark_roce -n -r "$pcap" -Y "$1" -T fields -e frame.number 2>/dev/null | wc -l; }
for src in 198.18.80.1 198.18.80.2; do
  mc=$(frames "ip.src == $src && ip.dst == $group && eth.dst == 01:00:5e:50:00:01 && infiniband.bth.destqp == 0xffffff")
  igmp=$(frames "igmp && ip.src == $src && igmp.maddr == $group")
  say "tshark: from $src $mc mckey datagrams to $group, $igmp IGMP reports for it"
  ((mc >= 10)) || fail "tshark: only $mc mckey datagrams from $src to $group at its MAC"
  ((igmp >= 1)) || fail "tshark: no IGMP report for $group from $src"
done
end_checks
say "PASS: Linux's rxe and ibd by the RDMA CM both ways: rping ($iters pings of data verified on each side), udaddy, mckey (a receiver on each side, a sender on each), ib_write_bw -R and ib_send_lat -R; by GID without the CM both ways: ibv_rc_pingpong ($pp_iters x 4096 B) and ibv_ud_pingpong ($ud_pp_iters x 1024 B); a killed host client and a powered-off guest noticed by the survivor, nothing left in ibd; capture clean (total $((SECONDS - start))s)"

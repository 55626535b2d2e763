#!/usr/bin/env bash
# The main demo: installs what is missing (Debian 12, as root), builds, and
# shows device access at work through both transports, with the same
# driver program (openib-educheck) driving QEMU's "edu" device:
#   1. over vfio-user, against the project's edu emulation (a separate process);
#   2. over the Linux kernel's VFIO, inside a QEMU guest running Debian's own
#      kernel with an emulated IOMMU (skip with --no-qemu);
# and, between the two, two emulated HCAs (simhca) cabled back to back,
# driven by the HCA driver (openib-simhca-demo), and then the product at
# work: two ibd daemons (each with its embedded simhca), and client
# processes linked with libopenib exchanging data through them:
# openib-rc-pingpong (one side unprivileged) and openib-perf; ibdctl shows
# the clients while they run; then a whole subnet (scripts/sandbox.sh):
# ibsim's net.2sw2path4hca with its switches in ibfabric and each host in a
# network namespace, brought up by Debian's OpenSM and examined with
# infiniband-diags, all unmodified, through the project's libibumad.so.3,
# and IPoIB: two of its namespaces pinging each other over ib0 (docs/ipoib.md),
# the IB CM: openib-cm-pingpong connecting by GID and service ID, RC
# and SIDR/UD (docs/cm.md), and the RDMA CM: openib-rping connecting by IP
# address (docs/cma.md, docs/arp.md).
set -euo pipefail
cd "$(dirname "$0")/.."

qemu=1
for a in "$@"; do
  case $a in
    --no-qemu) qemu=0 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
echo "== building"
bash scripts/build.sh build

tmp=$(mktemp -d /tmp/openib-demo.XXXXXX)
chmod 755 "$tmp"
server_pid=
IBD=build/src/ibd/ibd work=$tmp
source scripts/ibd_pair.sh
source scripts/unprivileged.sh
export OPENIB_BUILD=$PWD/build OPENIB_SANDBOX=$tmp/sandbox OPENIB_SANDBOX_PREFIX=sbd OPENIB_SANDBOX_NET=198.18.9.0/24
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  stop_daemons
  [[ -d $tmp/sandbox ]] && bash scripts/sandbox.sh down || true
  rm -rf "$tmp"
}
trap cleanup EXIT

echo
echo "== 1. vfio-user: openib-educheck -> UNIX socket -> edu emulation (pid below)"
build/test/devices/openib-edu-vfio-user --socket "$tmp/edu.sock" &
server_pid=$!
echo "edu vfio-user server pid $server_pid"
for _ in $(seq 100); do [[ -S $tmp/edu.sock ]] && break; sleep 0.05; done
build/src/tools/openib-educheck --device "vfio-user:$tmp/edu.sock"
kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=

echo
echo "== 2. simhca: two emulated HCAs cabled back to back, RC and UD traffic through the driver"
build/src/tools/openib-simhca-demo --simhca build/src/sim/simhca/simhca

echo
echo "== 3. ibd: two daemons, each owning a simhca; client processes exchange data through them"
pa=$(free_port)
pb=$pa
while ((pb == pa)); do pb=$(free_port); done
start_ibd a 1 "$pa" "$pb" PID_A --socket-mode 0666
start_ibd b 2 "$pb" "$pa" PID_B --socket-mode 0666
echo "ibd A (pid $PID_A, LID 1) on $tmp/a.sock and ibd B (pid $PID_B, LID 2) on $tmp/b.sock, cabled 127.0.0.1:$pa <-> :$pb"
tcp=$(free_port)
echo "-- openib-rc-pingpong: server (root) on ibd A, client as user nobody on ibd B, 4 KiB x 1000, data checked"
OPENIB_SOCKET=$tmp/a.sock timeout 60 build/examples/openib-rc-pingpong -p "$tcp" -s 4096 -n 1000 &
pp_server=$!
wait_listen "$tcp"
# nobody runs a copy: the build tree may be out of its reach (a clone under /root).
reachable_copy "$tmp/bin" build/examples/openib-rc-pingpong
"${AS_NOBODY[@]}" env OPENIB_SOCKET="$tmp/b.sock" LD_LIBRARY_PATH="$tmp/bin/lib" \
  timeout 60 "$tmp/bin/openib-rc-pingpong" -p "$tcp" -s 4096 -n 1000 127.0.0.1 &
pp_client=$!
sleep 0.3
clients_seen=$(build/src/tools/ibdctl --socket "$tmp/b.sock" clients || true)
wait "$pp_client"
wait "$pp_server"
echo "-- ibdctl clients on ibd B while the client ran:"
echo "$clients_seen"
echo "-- openib-perf: RC WRITE bandwidth, 64 KiB, server on ibd A, client on ibd B"
tcp=$(free_port)
OPENIB_SOCKET=$tmp/a.sock timeout 60 build/examples/openib-perf -t write -m bw -s 65536 -n 500 -p "$tcp" >/dev/null &
perf_server=$!
wait_listen "$tcp"
OPENIB_SOCKET=$tmp/b.sock timeout 60 build/examples/openib-perf -t write -m bw -s 65536 -n 500 -p "$tcp" 127.0.0.1
wait "$perf_server"
echo "-- ibdctl counters on ibd A:"
build/src/tools/ibdctl --socket "$tmp/a.sock" counters
stop_daemons

echo
echo "== 4. a subnet: ibfabric switches, a host per network namespace, Debian's OpenSM and infiniband-diags"
topo=/usr/share/doc/ibsim-utils/net-examples/net.2sw2path4hca
sb() { bash scripts/sandbox.sh "$@"; }
# Every host's ibd also runs IPoIB on a TAP interface ib0 (docs/ipoib.md).
OPENIB_SANDBOX_IBD_ARGS="--ipoib ib0" sb up "$topo" --sm Hca1
echo "-- ibstat on Hca3 (LID and SM LID given by OpenSM):"
sb run Hca3 ibstat simhca0 1 | grep -E "State|lid"
echo "-- ibnetdiscover from Hca2:"
sb run Hca2 ibnetdiscover | grep -E '^(Switch|Ca|\[)'
lid4=$(sb run Hca4 ibstat simhca0 1 | awk -F': ' '/Base lid/ {print $2}')
echo "-- ibtracert Hca1 -> Hca4 (LID $lid4):"
sb run Hca1 ibtracert 1 "$lid4"
echo "-- saquery -N from Hca4 (NodeRecords, a multi-MAD RMPP answer from OpenSM's SA):"
sb run Hca4 saquery -N | grep -E "NodeDescription|lid\b" | head -12
echo "-- perfquery of Hca4 port 1 from Hca2:"
sb run Hca2 perfquery "$lid4" 1 | grep -E "^Port(Xmit|Rcv)(Data|Pkts)"
guid4=$(sb run Hca4 ibstat simhca0 1 | awk -F': 0x' '/Port GUID/ {print $2}')
gid4=$(printf 'fe80::%x:%x:%x:%x' $((16#${guid4:0:4})) $((16#${guid4:4:4})) $((16#${guid4:8:4})) $((16#${guid4:12:4})))
echo "-- a path Hca2 -> Hca4 ($gid4) through ibd's SA client and path cache (ibdctl path):"
sb run Hca2 build/src/tools/ibdctl path "$gid4" | grep -E "^(dlid|slid|sl|mtu|rate|source) "
echo "-- the same through libopenib's PathResolver (openib-path): read from ibd's shared table, no message to ibd:"
sb run Hca2 build/examples/openib-path "$gid4" --count 2
echo "-- IPoIB: ib0 in Hca2's and Hca4's namespaces, 198.19.9.2 and .4, ping across the fabric (ping, ip neigh: the kernel's own)"
for h in 2 4; do
  for _ in $(seq 150); do sb run Hca$h ip link show ib0 >/dev/null 2>&1 && break; sleep 0.2; done
  sb run Hca$h ip addr add 198.19.9.$h/24 dev ib0
  sb run Hca$h ip link set ib0 up
  for _ in $(seq 150); do [[ $(sb run Hca$h cat /sys/class/net/ib0/carrier 2>/dev/null) == 1 ]] && break; sleep 0.2; done
done
sb run Hca2 ip -br link show ib0
sb run Hca2 ping -c 3 -W 2 198.19.9.4
sb run Hca2 ip neigh show dev ib0
echo "-- ibdctl ipoib on Hca2 (the neighbour's 20-byte address behind its MAC, the groups joined):"
sb run Hca2 build/src/tools/ibdctl ipoib | sed -n '/^neighbours/,/^counters/p' | grep -v '^counters'
echo "-- the IB CM (docs/cm.md): openib-cm-pingpong, server on Hca4, client on Hca1 naming it by GID and service ID;"
echo "   REQ/REP/RTU with private data, ibd moves both QPs to RTS, 1000 x 4 KiB each way checked, DREQ/DREP, timewait"
sb run Hca4 build/examples/openib-cm-pingpong -n 1000 >"$tmp/cm-server.log" 2>&1 &
cm_pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/cm-server.log" && break; sleep 0.1; done
sb run Hca1 build/examples/openib-cm-pingpong --dgid "$gid4" -n 1000 --private "hello from Hca1"
wait "$cm_pid"
sed 's/^/   server: /' "$tmp/cm-server.log"
echo "-- SIDR: the client finds the server's UD QP and Q_Key by service ID, then 100 UD messages each way"
sb run Hca4 build/examples/openib-cm-pingpong --ud -n 100 >"$tmp/cm-server.log" 2>&1 &
cm_pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/cm-server.log" && break; sleep 0.1; done
sb run Hca1 build/examples/openib-cm-pingpong --ud --dgid "$gid4" -n 100
wait "$cm_pid"
echo "-- a REQ nobody listens for: REJ reason 8 (invalid service ID)"
sb run Hca1 build/examples/openib-cm-pingpong --dgid "$gid4" -S 0x4242 || true
echo "-- the RDMA CM (docs/cma.md): openib-rping by IP address, Hca2 -> 198.19.9.4 (Hca4's ib0): ibd resolves the"
echo "   address through the kernel's ARP on ib0 (docs/arp.md), the route through the path cache, then connects with"
echo "   service ID (0x0106 << 16) + 7174 and the CMA header; rping's protocol (RDMA READ, then WRITE back), verified"
sb run Hca4 build/examples/openib-rping -s -a 198.19.9.4 -V >"$tmp/rping-server.log" 2>&1 &
rping_pid=$!
for _ in $(seq 50); do grep -q listening "$tmp/rping-server.log" && break; sleep 0.1; done
sb run Hca2 build/examples/openib-rping -c -a 198.19.9.4 -C 5 -S 64 -V -v
wait "$rping_pid"
sed 's/^/   server: /' "$tmp/rping-server.log"
echo "-- ibdctl counters on Hca2: the ARP module and the RDMA CM"
sb run Hca2 build/src/tools/ibdctl counters | grep -E '^(arp|cma)\.' | grep -v ' 0$'
port=$(sb run Hca1 ibtracert 1 "$lid4" | awk '/"Switch2"/ {gsub(/[][]/, "", $1); print $1; exit}')
echo "-- pulling the cable the route takes, Switch1[$port]: trap 128, OpenSM resweeps, the route moves"
sb fabric link down Switch1 "$port"
sleep 3
sb run Hca1 ibtracert 1 "$lid4"
sb down

if ((qemu)); then
  echo
  echo "== 5. kernel VFIO: Debian's kernel in QEMU (TCG), intel-iommu, edu bound to vfio-pci"
  bash test/qemu/run.sh build/src/tools/openib-educheck
fi
echo
echo "demo: done"

#!/usr/bin/env bash
# A whole InfiniBand subnet on this machine (docs/operations.md "Sandbox"):
# every host (CA) of a topology file in its own network namespace with its
# ibd and embedded simhca, ibfabric running the switches, Debian's OpenSM on
# one host through the project's libibumad.so.3.
#
#   sandbox.sh up TOPOLOGY [--sm HOST] [--build DIR] [--dir DIR]
#   sandbox.sh run HOST COMMAND...      e.g. run Hca2 ibnetdiscover
#   sandbox.sh sm HOST start|stop       (re)start or stop OpenSM on HOST
#   sandbox.sh restart HOST             SIGTERM to HOST's ibd, then start it again
#                                       ($OPENIB_SANDBOX_WHILE_DOWN, if set, runs
#                                       in between: e.g. to edit its state dir)
#   sandbox.sh fabric COMMAND...        ibfabric's control: link down Switch1 3, show, counters
#   sandbox.sh hosts                    the hosts, their namespaces and sockets
#   sandbox.sh plan TOPOLOGY            the hosts, namespaces and addresses `up` would give (no root)
#   sandbox.sh down                     stops everything, removes namespaces and links
#
# Addresses: the sandbox's network NET/LEN (default 198.18.0.0/22): a
# bridge sbx-br with NET+1 in the root namespace (where ibfabric runs); host
# i gets NET+10+i on eth0 of netns sbx-i (a /22 holds 1013 hosts).
# State (PIDs, logs, sockets) lives in --dir (default /run/openib-sandbox).
# OPENIB_SANDBOX_PREFIX (sbx) and OPENIB_SANDBOX_NET change the names and
# the network, so that a test's sandbox and yours can coexist:
# OPENIB_SANDBOX_NET is A.B.C.D/LEN (LEN 16..28) or A.B.C (= A.B.C.0/24),
# inside 198.18.0.0/15.
# OPENIB_SANDBOX_FAULTS (e.g. drop=0.05,seed=7) is passed to ibfabric as
# --faults: packets lost, duplicated, reordered or corrupted on every cable.
# OPENIB_SANDBOX_PCAP_DIR: ibfabric's --pcap-dir (a capture per cable).
# OPENIB_SANDBOX_IBD_ARGS: more arguments for every host's ibd, split on
# blanks (e.g. "--ipoib ib0": each host gets an IPoIB interface ib0).
# Must run as root. Everything started here is stopped by `down`, also
# after a failed `up`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${OPENIB_BUILD:-$here/../build}
dir=${OPENIB_SANDBOX:-/run/openib-sandbox}
prefix=${OPENIB_SANDBOX_PREFIX:-sbx}
bridge=$prefix-br
net_spec=${OPENIB_SANDBOX_NET:-198.18.0.0/22}

die() { echo "sandbox: $*" >&2; exit 1; }
log() { echo "sandbox: $*" >&2; }

# The sandbox's network: sets net_base (an integer), net_len, net_hosts
# (how many host addresses it holds). Refuses what is not inside
# 198.18.0.0/15 (RFC 2544's benchmarking block) or not aligned.
parse_net() {
  local spec=$1 a b c d len
  if [[ $spec =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
    spec="$spec.0/24"
  fi
  [[ $spec =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)\.([0-9]+)/([0-9]+)$ ]] ||
    die "OPENIB_SANDBOX_NET '$1' is neither A.B.C.D/LEN nor A.B.C"
  a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]} c=${BASH_REMATCH[3]} d=${BASH_REMATCH[4]} len=${BASH_REMATCH[5]}
  ((a < 256 && b < 256 && c < 256 && d < 256)) || die "OPENIB_SANDBOX_NET '$1': not an IPv4 address"
  ((len >= 16 && len <= 28)) || die "OPENIB_SANDBOX_NET '$1': length $len not in 16..28"
  net_base=$(((a << 24) | (b << 16) | (c << 8) | d))
  net_len=$len
  (((net_base & ((1 << (32 - len)) - 1)) == 0)) || die "OPENIB_SANDBOX_NET '$1': host bits set (not a network address)"
  ((net_base >> 17 == (198 << 24 | 18 << 16) >> 17)) || die "OPENIB_SANDBOX_NET '$1' is not inside 198.18.0.0/15"
  net_hosts=$(((1 << (32 - len)) - 11))  # .0 network, .1 bridge, up to .9 spare, the last broadcast
}

ip_of() {  # INTEGER -> dotted quad
  echo "$(($1 >> 24 & 255)).$(($1 >> 16 & 255)).$(($1 >> 8 & 255)).$(($1 & 255))"
}

parse_common() {
  while (($#)); do
    case $1 in
      --build) build=$2; shift 2 ;;
      --dir) dir=$2; shift 2 ;;
      --sm) sm_host=$2; shift 2 ;;
      *) rest+=("$1"); shift ;;
    esac
  done
}

host_ns() {  # NAME -> its namespace
  local ns
  ns=$(awk -v n="$1" '$1 == n {print $2; exit}' "$dir/addrs" 2>/dev/null)
  [[ -n $ns ]] || die "no host '$1' (hosts: $(awk '{printf "%s ", $1}' "$dir/addrs" 2>/dev/null))"
  echo "$ns"
}

# Runs COMMAND in namespace NS as host NAME, with its ibd and our libibumad.
# It execs (ip netns exec -> env -> COMMAND): started with `&`, $! is the
# command's own PID.
in_ns() {  # NS NAME COMMAND...
  local ns=$1 name=$2
  shift 2
  exec ip netns exec "$ns" env LD_LIBRARY_PATH="$build/src/umad${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    OPENIB_SOCKET="$dir/$name/ibd.sock" OSM_CACHE_DIR="$dir/$name/opensm-cache" "$@"
}

in_host() {  # NAME COMMAND...
  local name=$1 ns
  shift
  ns=$(host_ns "$name")
  in_ns "$ns" "$name" "$@"
}

# The hosts of TOPOLOGY (every CA ibfabric will cable), one line each:
# NAME NAMESPACE ADDRESS. Needs parse_net first; nothing is brought up.
plan() {  # TOPOLOGY
  local -a hosts=()
  local i n b
  b=$("$build/src/sim/fabric/ibfabric" --print-bindings "$1") || die "ibfabric cannot read $1"
  mapfile -t hosts < <(awk '!seen[$1]++ {print $1}' <<<"$b")
  n=${#hosts[@]}
  ((n <= net_hosts)) || die "$n hosts do not fit in $net_spec ($net_hosts host addresses; set OPENIB_SANDBOX_NET)"
  for ((i = 0; i < n; i++)); do
    echo "${hosts[i]} $prefix-$i $(ip_of $((net_base + 10 + i)))"
  done
}

# Sets VAR to the MAC of host I's eth0 (I = 0..), or of the bridge (I =
# -1): locally administered, fixed, so that neighbour and FDB entries can be
# written before anything is sent (up()).
mac_of() {  # VAR I
  if (($2 < 0)); then printf -v "$1" '02:5b:00:01:00:01'; return; fi
  printf -v "$1" '02:5b:00:00:%02x:%02x' $(($2 >> 8 & 255)) $(($2 & 255))
}

secs() {  # EPOCHREALTIME EPOCHREALTIME -> seconds between them, 0.1 s
  awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'
}

# SIGTERM to PIDs, then up to SECONDS for them to go, then SIGKILL.
stop_pids() {  # SECONDS PID...
  local secs=$1 p alive
  shift
  (($#)) || return 0
  kill "$@" 2>/dev/null || true
  for _ in $(seq $((secs * 10))); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  kill -9 "$@" 2>/dev/null || true
}

wait_for() {  # FILE PATTERN SECONDS PID
  local f=$1 pat=$2 secs=$3 pid=$4
  for _ in $(seq $((secs * 10))); do
    grep -q "$pat" "$f" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

sm_start() {
  local name=$1 guid
  [[ -f $dir/opensm.pid ]] && sm_stop
  guid=$( (in_host "$name" ibstat -p) | head -1)
  [[ -n $guid ]] || die "no port GUID on $name (is its ibd up?)"
  mkdir -p "$dir/$name/opensm-cache"
  : >"$dir/opensm.log"
  local t0=$EPOCHREALTIME wait=${OPENIB_SANDBOX_SM_WAIT:-120} up_t0=${2:-}
  (in_host "$name" opensm -g "$guid" -f "$dir/opensm.log" -d2 -s 5) >"$dir/opensm.out" 2>&1 &
  echo $! >"$dir/opensm.pid"
  echo "$name" >"$dir/opensm.host"
  if ! wait_for "$dir/opensm.log" "SUBNET UP" "$wait" "$(cat "$dir/opensm.pid")"; then
    tail -20 "$dir/opensm.log" >&2 || true
    die "OpenSM on $name: no SUBNET UP within $wait s (OPENIB_SANDBOX_SM_WAIT)"
  fi
  local t1=$EPOCHREALTIME since_up=''
  echo "sm_start $t0" >>"$dir/timing"
  echo "subnet_up $t1" >>"$dir/timing"
  [[ -n $up_t0 ]] && since_up=", $(secs "$up_t0" "$t1") s after 'up' began"
  log "OpenSM on $name (port GUID $guid): SUBNET UP $(secs "$t0" "$t1") s after it started$since_up"
}

sm_stop() {
  [[ -f $dir/opensm.pid ]] || return 0
  stop_pids 10 "$(cat "$dir/opensm.pid")"
  rm -f "$dir/opensm.pid" "$dir/opensm.host"
}

# The namespaces ($prefix-N) and links (${prefix}hN) of our prefix, whoever
# made them.
prefix_netns() { ip netns list | awk -v re="^$prefix-[0-9]+\$" '$1 ~ re {print $1}'; }
prefix_links() { ip -o link show | awk -F': ' -v re="^${prefix}h[0-9]+(@|\$)" '$2 ~ re {sub(/@.*/, "", $2); print $2}'; }

# Whether the sandbox whose bridge carries our prefix still has anything
# running: a process in one of its namespaces, or the `up` shell or ibfabric
# its bridge's alias names (checked by command name: a PID is reused).
sandbox_alive() {
  local ns alias kv pid want
  for ns in $(prefix_netns); do
    [[ -n $(ip netns pids "$ns" 2>/dev/null) ]] && return 0
  done
  alias=$(ip -o link show "$bridge" 2>/dev/null | sed -n 's/.* alias \(openib-sandbox:[^ ]*\).*/\1/p')
  IFS=: read -ra kv <<<"${alias#openib-sandbox:}"
  for pid in "${kv[@]}"; do
    case $pid in up=*) want=bash ;; ibfabric=*) want=ibfabric ;; *) continue ;; esac
    pid=${pid#*=}
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$want" ]] && return 0
  done
  return 1
}

# Takes down a stale sandbox of our prefix (nothing of it runs: see
# sandbox_alive), by names: it may have no state directory left.
stale_down() {
  {
    prefix_netns | sed 's/^/netns del /'
    prefix_links | sed 's/^/link del /'
    echo "link del $bridge"
  } | ip -force -batch - 2>/dev/null || true
}

# ibd of host NAME, in its namespace, with the arguments `up` gave it
# ($dir/NAME/ibd.args); its state (the path cache) in $dir/NAME.
# NS, when the caller knows it, saves looking it up (up() starts a thousand).
# Sets ibd_pid.
start_ibd() {  # NAME [NS]
  local name=$1 ns=${2:-}
  local -a extra=()
  [[ -n $ns ]] || ns=$(host_ns "$name")
  mapfile -d '' -t extra <"$dir/$name/ibd.args"
  (in_ns "$ns" "$name" "$build/src/ibd/ibd" --socket "$dir/$name/ibd.sock" --run-dir "$dir/$name" \
    --state-dir "$dir/$name" --lid 0 --log info "${extra[@]}") >>"$dir/$name/ibd.log" 2>&1 </dev/null &
  ibd_pid=$!
  echo "$ibd_pid" >"$dir/$name/ibd.pid"
}

# The switch ends of host NAME's cables, from the topology: "SWITCH PORT"
# lines (ibsim format: `[1] "Switch2"[1]` inside the host's block).
host_links() {
  awk -v n="\"$1\"" '
    /^[A-Za-z]/ { inside = ($1 == "Hca" || $1 == "Ca") && $3 == n; next }
    inside && /^\[/ { if (match($0, /"[^"]*"\[[0-9]+\]/)) {
        m = substr($0, RSTART, RLENGTH); sw = m; sub(/\[.*/, "", sw); gsub(/"/, "", sw)
        p = m; sub(/.*\[/, "", p); sub(/\]/, "", p); print sw, p } }' "$dir/topology"
}

# restart HOST: SIGTERM to its ibd (which saves its path cache), then the
# same ibd again; waits until it is ready. The host's cables are pulled
# while it is down and plugged back after, as a host's power cycle
# retrains its links on real hardware (ibfabric does not see a host stop:
# docs/ibfabric.md), so the SM notices (trap 128) and brings it up.
restart_ibd() {
  local name=$1 sw port
  [[ -f $dir/$name/ibd.pid ]] || die "no host $name in $dir"
  local -a links=()
  mapfile -t links < <(host_links "$name")
  stop_pids 10 "$(cat "$dir/$name/ibd.pid")"
  for l in "${links[@]}"; do
    read -r sw port <<<"$l"
    "$build/src/sim/fabric/ibfabric" ctl "$dir/fabric.ctl" link down "$sw" "$port" >/dev/null
  done
  if [[ -n ${OPENIB_SANDBOX_WHILE_DOWN:-} ]]; then
    bash -c "$OPENIB_SANDBOX_WHILE_DOWN" || die "OPENIB_SANDBOX_WHILE_DOWN failed while $name was down"
  fi
  local lines
  lines=$(wc -l <"$dir/$name/ibd.log")
  start_ibd "$name"
  for _ in $(seq 600); do
    if tail -n +"$((lines + 1))" "$dir/$name/ibd.log" | grep -q "ibd: ready"; then
      for l in "${links[@]}"; do
        read -r sw port <<<"$l"
        "$build/src/sim/fabric/ibfabric" ctl "$dir/fabric.ctl" link up "$sw" "$port" >/dev/null
      done
      return 0
    fi
    kill -0 "$(cat "$dir/$name/ibd.pid")" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$dir/$name/ibd.log" >&2
  die "ibd on $name did not start again"
}

# up()'s hosts still starting: drops from `waiting` (indices into `hosts`)
# those whose ibd said "ibd: ready" (one grep over their logs, not one per
# host); dies if the ibd of one still starting is gone.
prune_ready() {
  local -a still=()
  local name i
  mapfile -t still < <(cd "$dir" && for i in "${waiting[@]}"; do echo "${hosts[i]}/ibd.log"; done |
    xargs -r grep -L "ibd: ready" 2>/dev/null | sed 's,/ibd.log$,,')
  waiting=()
  for name in "${still[@]}"; do
    i=${idx_of[$name]}
    kill -0 "${pid_of[i]}" 2>/dev/null || { tail -20 "$dir/$name/ibd.log" >&2; die "ibd on $name did not start"; }
    waiting+=("$i")
  done
}

down() {
  sm_stop  # first: an SM whose ibd went away first would only log errors
  local f i n
  local -a pids=()
  for f in "$dir"/*/ibd.pid; do [[ -f $f ]] && pids+=("$(cat "$f")"); done
  # Whatever else still runs in the hosts' namespaces was started there by
  # this sandbox (`run ... &`): it goes too.
  n=$( [[ -f $dir/hosts ]] && wc -l <"$dir/hosts" || echo 0)
  for ((i = 0; i < n; i++)); do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$prefix-$i" 2>/dev/null)
  done
  stop_pids 10 "${pids[@]}"
  [[ -f $dir/ibfabric.pid ]] && stop_pids 10 "$(cat "$dir/ibfabric.pid")"
  # A namespace takes its end of the veth pair, and with it ours.
  {
    for ((i = 0; i < n; i++)); do echo "netns del $prefix-$i"; done
    for ((i = 0; i < n; i++)); do echo "link del ${prefix}h$i"; done
    echo "link del $bridge"
  } | ip -force -batch - 2>/dev/null || true
  rm -rf "$dir"
}

up() {
  local topo=${rest[0]:-}
  [[ -n $topo && -r $topo ]] || die "usage: sandbox.sh up TOPOLOGY [--sm HOST]"
  [[ $(id -u) == 0 ]] || die "must run as root (network namespaces)"
  for b in "$build/src/ibd/ibd" "$build/src/sim/fabric/ibfabric" "$build/src/umad/libibumad.so.3"; do
    [[ -e $b ]] || die "$b is not built (ninja -C $build)"
  done
  [[ -e $dir/hosts ]] && die "a sandbox is already up in $dir (sandbox.sh down)"
  parse_net "$net_spec"
  # Another sandbox with our names: its namespaces are not ours to take
  # down while anything of it runs. One nothing of which runs any more (its
  # `up` or test was killed, the machine was copied mid-test) is stale: its
  # namespaces and links go, so that the names can be used again.
  if ip link show "$bridge" >/dev/null 2>&1; then
    sandbox_alive &&
      die "a link $bridge exists: another sandbox uses the prefix '$prefix' (OPENIB_SANDBOX_PREFIX)"
    log "a link $bridge exists but nothing of its sandbox runs: taking the stale one down"
    stale_down
  fi
  local t0=$EPOCHREALTIME
  mkdir -p "$dir"
  # shellcheck disable=SC2034  # read by the EXIT trap
  up_done=0  # global: the EXIT trap runs after up() has returned
  # Whatever fails from here on (a command, a die) takes down what came up.
  trap '((up_done)) || { log "bringing up failed; taking it down"; down; }' EXIT
  local ibfabric=$build/src/sim/fabric/ibfabric

  plan "$topo" >"$dir/addrs"
  cp "$topo" "$dir/topology"
  local -a hosts=() node_addr=()
  local n i name addr ns bridge_addr
  while read -r name ns addr; do
    hosts+=("$name")
    node_addr+=(--node-addr "$name=$addr")
  done <"$dir/addrs"
  n=${#hosts[@]}
  printf '%s\n' "${hosts[@]}" >"$dir/hosts"
  bridge_addr=$(ip_of $((net_base + 1)))
  "$ibfabric" --print-bindings --addr "$bridge_addr" "${node_addr[@]}" "$topo" >"$dir/bindings"

  # The namespaces and their cables to the bridge: one `ip -batch` in the
  # root namespace and one per host (a few thousand `ip` runs otherwise).
  #
  # Nothing on the bridge is broadcast or flooded (docs/performance.md
  # "Scale: the sandbox", 1,008 hosts): a frame flooded to N ports is N
  # packets queued at once on the CPU's backlog (net.core.netdev_max_backlog,
  # 1000 by default), and whatever comes next is dropped, e.g. the bridge's
  # ARP reply right after the flood of the request. So every MAC is fixed
  # (mac_of), every neighbour entry is permanent on both sides (no ARP), the
  # bridge knows every host's port from the start (static FDB entries: no
  # unknown-unicast flooding) and the veths have no IPv6 link-local address
  # (no DAD, router solicitation or MLD multicast).
  local br_mac mac
  mac_of br_mac -1
  {
    echo "link add $bridge address $br_mac type bridge"
    echo "link set $bridge alias openib-sandbox:up=$$"
    echo "link set $bridge addrgenmode none"
    echo "addr add $bridge_addr/$net_len dev $bridge"
    echo "link set $bridge up"
    for ((i = 0; i < n; i++)); do
      echo "netns add $prefix-$i"
      # MTU 9000: an IBA packet (up to 4 KiB payload and its headers) is
      # one UDP datagram, never IP fragments (a UDP GSO batch of them
      # would be refused: EMSGSIZE).
      mac_of mac "$i"
      echo "link add ${prefix}h$i mtu 9000 type veth peer name eth0 address $mac mtu 9000 netns $prefix-$i"
      echo "link set ${prefix}h$i addrgenmode none"
      echo "link set ${prefix}h$i master $bridge up"
      echo "neigh add $(ip_of $((net_base + 10 + i))) lladdr $mac dev $bridge nud permanent"
    done
  } >"$dir/ip.batch"
  ip -batch "$dir/ip.batch"
  for ((i = 0; i < n; i++)); do mac_of mac "$i"; echo "fdb add $mac dev ${prefix}h$i master static"; done |
    bridge -batch -
  for ((i = 0; i < n; i++)); do
    printf 'addr add %s/%s dev eth0\nlink set eth0 addrgenmode none\nlink set eth0 up\nlink set lo up\nneigh add %s lladdr %s dev eth0 nud permanent\n' \
      "$(ip_of $((net_base + 10 + i)))" "$net_len" "$bridge_addr" "$br_mac" | ip -n "$prefix-$i" -batch -
  done
  local t_net=$EPOCHREALTIME

  # OPENIB_SANDBOX_FAULTS: ibfabric's --faults on every cable end it
  # sends from (docs/cables.md "Fault injection"), e.g. drop=0.05.
  "$ibfabric" --addr "$bridge_addr" "${node_addr[@]}" --control "$dir/fabric.ctl" --log info \
    ${OPENIB_SANDBOX_FAULTS:+--faults "$OPENIB_SANDBOX_FAULTS"} \
    ${OPENIB_SANDBOX_PCAP_DIR:+--pcap-dir "$OPENIB_SANDBOX_PCAP_DIR"} "$topo" >"$dir/ibfabric.log" 2>&1 &
  echo $! >"$dir/ibfabric.pid"
  ip link set "$bridge" alias "openib-sandbox:up=$$:ibfabric=$!"
  for _ in $(seq 100); do [[ -S $dir/fabric.ctl ]] && break; sleep 0.1; done
  [[ -S $dir/fabric.ctl ]] || { tail -20 "$dir/ibfabric.log" >&2; die "ibfabric did not start"; }

  # One ibd per host, its simhca cabled as --print-bindings says; no static
  # LID: the subnet manager gives them. All start at once, then we wait for
  # each to be ready. As many ports as the topology gives the CA (simhca
  # has 1 or 2).
  local -A args=() ports=()
  local port rest_args a
  while read -r name port rest_args; do
    for a in $rest_args; do
      case $a in --port1) args[$name]+=" --cable" ;; *) args[$name]+=" $a" ;; esac
    done
  done <"$dir/bindings"
  while read -r name port; do ports[$name]=$port; done < <(
    awk '($1 == "Hca" || $1 == "Ca") && $3 ~ /^"/ {n = $3; gsub(/"/, "", n); print n, $2}' "$topo")
  (cd "$dir" && mkdir -p -- "${hosts[@]}")
  local -a pid_of=() waiting=()
  local -A idx_of=()
  # At most OPENIB_SANDBOX_START_WINDOW hosts starting at once (default
  # 32): with a thousand, all at once on two CPUs, some simhca took more
  # than the 10 s its ibd waits for it.
  local window=${OPENIB_SANDBOX_START_WINDOW:-32} t_wait
  [[ $window =~ ^[1-9][0-9]*$ ]] || die "OPENIB_SANDBOX_START_WINDOW '$window' is not a positive number"
  for ((i = 0; i < n; i++)); do
    name=${hosts[i]}
    local -a extra=()
    # shellcheck disable=SC2086
    set -- ${args[$name]}
    while (($#)); do
      case $1 in
        --cable) extra+=(--cable "$2"); shift 2 ;;
        *) extra+=("--simhca-arg=$1"); shift ;;
      esac
    done
    extra+=("--simhca-arg=--node-desc" "--simhca-arg=$name")
    [[ ${ports[$name]:-1} -ge 2 ]] && extra+=("--simhca-arg=--ports" "--simhca-arg=2")
    # shellcheck disable=SC2206
    extra+=(${OPENIB_SANDBOX_IBD_ARGS:-})
    printf '%s\0' "${extra[@]}" >"$dir/$name/ibd.args"
    start_ibd "$name" "$prefix-$i"
    pid_of[i]=$ibd_pid idx_of[$name]=$i
    waiting+=("$i")
    t_wait=$SECONDS
    while ((${#waiting[@]} >= window)); do
      prune_ready
      ((${#waiting[@]} >= window)) || break
      ((SECONDS - t_wait < 60)) || die "ibd on ${hosts[${waiting[0]}]}: not ready within 60 s"
      sleep 0.02
    done
  done
  # Every ibd ready, none taking more than 60 s.
  t_wait=$SECONDS
  while ((${#waiting[@]})); do
    prune_ready
    ((${#waiting[@]})) || break
    ((SECONDS - t_wait < 60)) || break
    sleep 0.1
  done
  if ((${#waiting[@]})); then
    name=${hosts[${waiting[0]}]}
    tail -20 "$dir/$name/ibd.log" >&2
    die "ibd on $name (and $((${#waiting[@]} - 1)) more) did not start within 60 s"
  fi
  if ((n <= 16)); then
    for ((i = 0; i < n; i++)); do log "host ${hosts[i]}: netns $prefix-$i, ibd ${pid_of[i]}"; done
  fi
  local t_ibd=$EPOCHREALTIME
  up_done=1
  trap - EXIT
  log "up: $n hosts in $(secs "$t0" "$t_ibd") s (namespaces $(secs "$t0" "$t_net") s);" \
    "'sandbox.sh run HOST CMD' runs a command there"
  echo "up_start $t0" >"$dir/timing"
  echo "hosts_ready $t_ibd" >>"$dir/timing"
  [[ -n ${sm_host:-} ]] && sm_start "$sm_host" "$t0"
  return 0
}

cmd=${1:-}
[[ -n $cmd ]] || { awk 'NR > 1 && !/^#/ {exit} NR > 1' "${BASH_SOURCE[0]}"; exit 2; }
shift
rest=()
sm_host=''
case $cmd in
  up) parse_common "$@"; up ;;
  down) parse_common "$@"; down ;;
  plan)
    parse_common "$@"
    [[ -n ${rest[0]:-} && -r ${rest[0]} ]] || die "usage: sandbox.sh plan TOPOLOGY"
    parse_net "$net_spec"
    plan "${rest[0]}" ;;
  run)
    (($# >= 2)) || die "usage: sandbox.sh run HOST COMMAND..."
    host=$1; shift
    in_host "$host" "$@" ;;  # execs: this process becomes COMMAND
  restart)
    (($# == 1)) || die "usage: sandbox.sh restart HOST"
    restart_ibd "$1" ;;
  sm)
    (($# == 2)) || die "usage: sandbox.sh sm HOST start|stop"
    case $2 in start) sm_start "$1" ;; stop) sm_stop ;; *) die "sm HOST start|stop" ;; esac ;;
  fabric) "$build/src/sim/fabric/ibfabric" ctl "$dir/fabric.ctl" "$@" ;;
  hosts)
    [[ -f $dir/addrs ]] || die "no sandbox is up in $dir"
    while read -r name ns addr; do
      echo "$name netns=$ns addr=$addr socket=$dir/$name/ibd.sock"
    done <"$dir/addrs" ;;
  *) die "unknown command '$cmd'" ;;
esac

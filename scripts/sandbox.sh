#!/usr/bin/env bash
# A whole InfiniBand subnet on this machine (docs/operations.md "Sandbox"):
# every host (CA) of a topology file in its own network namespace with its
# ibd and embedded simhca, ibfabric running the switches, Debian's OpenSM on
# one host through the project's libibumad.so.3.
#
#   sandbox.sh up TOPOLOGY [--sm HOST] [--build DIR] [--dir DIR]
#   sandbox.sh run HOST COMMAND...      e.g. run Hca2 ibnetdiscover
#   sandbox.sh sm HOST start|stop       (re)start or stop OpenSM on HOST
#   sandbox.sh fabric COMMAND...        ibfabric's control: link down Switch1 3, show, counters
#   sandbox.sh hosts                    the hosts, their namespaces and sockets
#   sandbox.sh down                     stops everything, removes namespaces and links
#
# Addresses: a bridge sbx-br with 198.18.0.1/24 in the root namespace (where
# ibfabric runs); host i gets 198.18.0.(10+i)/24 on eth0 of netns sbx-i.
# State (PIDs, logs, sockets) lives in --dir (default /run/openib-sandbox).
# OPENIB_SANDBOX_PREFIX (sbx) and OPENIB_SANDBOX_NET (198.18.0) change the
# names and the /24, so that a test's sandbox and yours can coexist.
# Must run as root. Everything started here is stopped by `down`, also
# after a failed `up`.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${OPENIB_BUILD:-$here/../build}
dir=${OPENIB_SANDBOX:-/run/openib-sandbox}
prefix=${OPENIB_SANDBOX_PREFIX:-sbx}
bridge=$prefix-br
net=${OPENIB_SANDBOX_NET:-198.18.0}

die() { echo "sandbox: $*" >&2; exit 1; }
log() { echo "sandbox: $*" >&2; }

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

host_index() {  # NAME -> i
  local i=0 name
  while read -r name; do
    [[ $name == "$1" ]] && { echo "$i"; return 0; }
    i=$((i + 1))
  done <"$dir/hosts"
  die "no host '$1' (hosts: $(tr '\n' ' ' <"$dir/hosts"))"
}

# Runs COMMAND in host NAME's namespace, with its ibd and our libibumad. It
# execs (ip netns exec -> env -> COMMAND): started with `&`, $! is the
# command's own PID.
in_host() {  # NAME COMMAND...
  local name=$1 i
  shift
  i=$(host_index "$name")
  exec ip netns exec "$prefix-$i" env LD_LIBRARY_PATH="$build/src/umad${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    OPENIB_SOCKET="$dir/$name/ibd.sock" OSM_CACHE_DIR="$dir/$name/opensm-cache" "$@"
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
  (in_host "$name" opensm -g "$guid" -f "$dir/opensm.log" -d2 -s 5) >"$dir/opensm.out" 2>&1 &
  echo $! >"$dir/opensm.pid"
  echo "$name" >"$dir/opensm.host"
  if ! wait_for "$dir/opensm.log" "SUBNET UP" 60 "$(cat "$dir/opensm.pid")"; then
    tail -20 "$dir/opensm.log" >&2 || true
    die "OpenSM on $name: no SUBNET UP within 60 s"
  fi
  log "OpenSM on $name (port GUID $guid): SUBNET UP"
}

sm_stop() {
  [[ -f $dir/opensm.pid ]] || return 0
  stop_pids 10 "$(cat "$dir/opensm.pid")"
  rm -f "$dir/opensm.pid" "$dir/opensm.host"
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
  for ((i = 0; i < n; i++)); do
    ip netns del "$prefix-$i" 2>/dev/null || true
    ip link del "${prefix}h$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
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
  mkdir -p "$dir"
  trap 'log "bringing up failed; taking it down"; down' ERR
  local ibfabric=$build/src/sim/fabric/ibfabric

  # The hosts: every CA port ibfabric will cable (one line per port).
  local -a node_addr=()
  "$ibfabric" --print-bindings "$topo" >"$dir/bindings.0" || die "ibfabric cannot read $topo"
  awk '{print $1}' "$dir/bindings.0" | awk '!seen[$0]++' >"$dir/hosts"
  local i=0 name
  while read -r name; do
    node_addr+=(--node-addr "$name=$net.$((10 + i))")
    i=$((i + 1))
  done <"$dir/hosts"
  "$ibfabric" --print-bindings --addr "$net.1" "${node_addr[@]}" "$topo" >"$dir/bindings"

  ip link add "$bridge" type bridge
  ip addr add "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  i=0
  while read -r name; do
    ip netns add "$prefix-$i"
    ip link add "${prefix}h$i" type veth peer name eth0 netns "$prefix-$i"
    ip link set "${prefix}h$i" master "$bridge" up
    ip -n "$prefix-$i" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$prefix-$i" link set eth0 up
    ip -n "$prefix-$i" link set lo up
    i=$((i + 1))
  done <"$dir/hosts"

  "$ibfabric" --addr "$net.1" "${node_addr[@]}" --control "$dir/fabric.ctl" --log info "$topo" \
    >"$dir/ibfabric.log" 2>&1 &
  echo $! >"$dir/ibfabric.pid"
  for _ in $(seq 100); do [[ -S $dir/fabric.ctl ]] && break; sleep 0.1; done
  [[ -S $dir/fabric.ctl ]] || { tail -20 "$dir/ibfabric.log" >&2; die "ibfabric did not start"; }

  # One ibd per host, its simhca cabled as --print-bindings says; no static
  # LID: the subnet manager gives them.
  while read -r name; do
    local -a extra=() cable=()
    local nports
    nports=$(awk -v n="$name" '$1 == n' "$dir/bindings" | wc -l)
    while read -r _ port rest_args; do
      # shellcheck disable=SC2086
      set -- $rest_args
      while (($#)); do
        case $1 in
          --port1) cable=(--cable "$2"); shift 2 ;;
          *) extra+=("--simhca-arg=$1"); shift ;;
        esac
      done
    done < <(awk -v n="$name" '$1 == n' "$dir/bindings")
    extra+=("--simhca-arg=--node-desc" "--simhca-arg=$name")
    # As many ports as the topology gives the CA (simhca has 1 or 2).
    local topo_ports
    topo_ports=$(awk -v n="\"$name\"" '($1 == "Hca" || $1 == "Ca") && $3 == n {print $2; exit}' "$topo")
    [[ ${topo_ports:-1} -ge 2 ]] && extra+=("--simhca-arg=--ports" "--simhca-arg=2")
    mkdir -p "$dir/$name"
    (in_host "$name" "$build/src/ibd/ibd" --socket "$dir/$name/ibd.sock" --run-dir "$dir/$name" --lid 0 \
      --log info "${cable[@]}" "${extra[@]}") >"$dir/$name/ibd.log" 2>&1 </dev/null &
    echo $! >"$dir/$name/ibd.pid"
    wait_for "$dir/$name/ibd.log" "ibd: ready" 30 "$(cat "$dir/$name/ibd.pid")" ||
      { tail -20 "$dir/$name/ibd.log" >&2; die "ibd on $name did not start"; }
    log "host $name: netns $prefix-$(host_index "$name"), ibd $(cat "$dir/$name/ibd.pid"), $nports cabled port(s)"
  done <"$dir/hosts"
  trap - ERR
  [[ -n ${sm_host:-} ]] && sm_start "$sm_host"
  log "up: $(wc -l <"$dir/hosts") hosts; 'sandbox.sh run HOST CMD' runs a command there"
}

cmd=${1:-}
[[ -n $cmd ]] || { sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 2; }
shift
rest=()
sm_host=''
case $cmd in
  up) parse_common "$@"; up ;;
  down) parse_common "$@"; down ;;
  run)
    (($# >= 2)) || die "usage: sandbox.sh run HOST COMMAND..."
    host=$1; shift
    in_host "$host" "$@" ;;  # execs: this process becomes COMMAND
  sm)
    (($# == 2)) || die "usage: sandbox.sh sm HOST start|stop"
    case $2 in start) sm_start "$1" ;; stop) sm_stop ;; *) die "sm HOST start|stop" ;; esac ;;
  fabric) "$build/src/sim/fabric/ibfabric" ctl "$dir/fabric.ctl" "$@" ;;
  hosts)
    i=0
    while read -r name; do
      echo "$name netns=$prefix-$i addr=$net.$((10 + i)) socket=$dir/$name/ibd.sock"
      i=$((i + 1))
    done <"$dir/hosts" ;;
  *) die "unknown command '$cmd'" ;;
esac

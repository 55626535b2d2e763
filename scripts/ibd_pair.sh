# Sourced by scripts and tests that need ibd daemons on this host
# (scripts/demo.sh, bench/run.sh, test/ibd/examples.sh). Needs IBD (the ibd
# binary; SIMHCA, the simhca binary, for start_simhca) and work (a scratch
# directory) set by the caller; the caller's EXIT
# trap calls stop_daemons.
#   free_port                      a UDP/TCP port not bound on this host now
#   start_ibd NAME LID LP PP VAR [ibd args...]
#                                  ibd with its embedded simhca, socket
#                                  $work/NAME.sock, port 1 cabled from
#                                  127.0.0.1:LP to 127.0.0.1:PP; waits for
#                                  "ibd: ready", sets VAR to its PID. With
#                                  OPENIB_CABLE=shm in the environment the
#                                  pair LP/PP names a shared-memory cable
#                                  instead (one file per pair, the lower
#                                  port's end A), removed by stop_daemons
#   start_ibd_cable NAME LID CABLE VAR [ibd args...]
#                                  the same with any --cable value, e.g. a
#                                  shared-memory cable SHM=FILE,END=A (the
#                                  other daemon END=B; docs/cables.md)
#   start_ibd_device NAME LID DEVICE VAR [ibd args...]
#                                  the same on --device DEVICE (e.g.
#                                  vfio-user:SOCKET of a simhca started
#                                  separately, see start_simhca)
#   start_simhca VAR SIMHCA-ARGS...
#                                  a simhca of its own (one or more
#                                  devices, each --socket PATH ...
#                                  separated by --device), log
#                                  $work/simhca.log; waits until every
#                                  --socket exists; stopped by stop_daemons
#   shm_cable_file                 a fresh path for a shared-memory cable
#                                  file (under /dev/shm when it exists);
#                                  the caller removes it
#   cable_pair shm|udp VAR_A VAR_B the two --cable values of one cable:
#                                  a fresh shared-memory file (removed by
#                                  stop_daemons), or two distinct free UDP
#                                  ports on 127.0.0.1
#   stop_daemons                   SIGTERM to each, SIGKILL after 10 s, reaped;
#                                  the shared-memory cable files removed

declare -a daemons=()

used_ports() {
  local f _sl local_addr _rest
  for f in /proc/net/udp /proc/net/tcp /proc/net/udp6 /proc/net/tcp6; do
    [[ -r $f ]] || continue
    while read -r _sl local_addr _rest; do
      [[ $local_addr == *:* ]] && echo $((16#${local_addr##*:}))
    done < <(tail -n +2 "$f")
  done
}

free_port() {
  local used p
  used=" $(used_ports | tr '\n' ' ') "
  for _ in $(seq 200); do
    p=$((30000 + RANDOM % 30000))
    [[ $used == *" $p "* ]] && continue
    echo "$p"
    return
  done
  echo "no free port" >&2
  return 1
}

# Not in a subshell: the daemon must be the caller's child, so that it can
# be waited for.
declare -a shm_cables=()

start_ibd() {
  local name=$1 lid=$2 lp=$3 pp=$4 var=$5
  shift 5
  if [[ ${OPENIB_CABLE:-udp} == shm ]]; then
    local lo=$((lp < pp ? lp : pp)) hi=$((lp < pp ? pp : lp)) end=B dir=/dev/shm
    ((lp < pp)) && end=A
    [[ -d $dir && -w $dir ]] || dir=$work
    local file=$dir/openib-cable-$$-$lo-$hi
    shm_cables+=("$file")
    start_ibd_cable "$name" "$lid" "SHM=$file,END=$end" "$var" "$@"
  else
    start_ibd_cable "$name" "$lid" "LOCAL=127.0.0.1:$lp,PEER=127.0.0.1:$pp" "$var" "$@"
  fi
}

start_ibd_cable() {
  local name=$1 lid=$2 cable=$3 var=$4
  shift 4
  start_ibd_with "$name" "$lid" "$var" --cable "$cable" "$@"
}

# start_ibd_device NAME LID DEVICE VAR [ibd args...]: ibd on a device of its
# own choosing (--device vfio-user:SOCKET, a simhca started separately).
start_ibd_device() {
  local name=$1 lid=$2 device=$3 var=$4
  shift 4
  start_ibd_with "$name" "$lid" "$var" --device "$device" "$@"
}

start_ibd_with() {
  local name=$1 lid=$2 var=$3
  shift 3
  mkdir -p "$work/$name.run"
  "$IBD" --socket "$work/$name.sock" --lid "$lid" --log "${IBD_LOG:-warn}" --run-dir "$work/$name.run" \
    "$@" >"$work/$name.log" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  await_ready "$pid" "$var" "ibd $name" "$work/$name.log" grep -qs "ibd: ready on $work/$name.sock" "$work/$name.log"
}

# await_ready PID VAR WHAT LOG CHECK...: runs CHECK every 0.1 s (30 s at
# most) until it succeeds, then sets VAR to PID; if PID dies first or time
# runs out, prints WHAT and the tail of LOG and fails.
await_ready() {
  local pid=$1 var=$2 what=$3 log=$4
  shift 4
  for _ in $(seq 300); do
    if "$@"; then
      printf -v "$var" '%s' "$pid"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$what did not get ready:" >&2
  tail -20 "$log" >&2
  return 1
}

# sockets_exist PATH...: every PATH is a socket.
sockets_exist() {
  local s
  for s in "$@"; do [[ -S $s ]] || return 1; done
}

start_simhca() {
  local var=$1 a prev=''
  shift
  local -a socks=()
  for a in "$@"; do
    [[ $prev == --socket ]] && socks+=("$a")
    prev=$a
  done
  "$SIMHCA" "$@" >"$work/simhca.log" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  await_ready "$pid" "$var" simhca "$work/simhca.log" sockets_exist "${socks[@]}"
}

shm_cable_file() {
  local dir=/dev/shm
  [[ -d $dir && -w $dir ]] || dir=$work
  mktemp -u "$dir/openib-cable-XXXXXX"
}

cable_pair() {  # shm|udp VAR_A VAR_B
  local -n cp_end_a=$2 cp_end_b=$3
  if [[ $1 == shm ]]; then
    local f
    f=$(shm_cable_file) || return 1
    shm_cables+=("$f")
    cp_end_a="SHM=$f,END=A" cp_end_b="SHM=$f,END=B"
  else
    local pa pb
    pa=$(free_port) || return 1
    pb=$pa
    while ((pb == pa)); do pb=$(free_port) || return 1; done
    cp_end_a="LOCAL=127.0.0.1:$pa,PEER=127.0.0.1:$pb" cp_end_b="LOCAL=127.0.0.1:$pb,PEER=127.0.0.1:$pa"
  fi
}

stop_daemons() {
  local p
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${daemons[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  daemons=()
  for p in "${shm_cables[@]}"; do rm -f "$p"; done
  shm_cables=()
}

# wait_listen PORT: waits (at most 10 s) until a TCP socket listens on PORT.
wait_listen() {
  local hex _sl local_addr _rem st _rest
  hex=$(printf '%04X' "$1")
  for _ in $(seq 100); do
    for f in /proc/net/tcp /proc/net/tcp6; do
      while read -r _sl local_addr _rem st _rest; do
        [[ ${local_addr##*:} == "$hex" && $st == 0A ]] && return 0
      done < <(tail -n +2 "$f")
    done
    sleep 0.1
  done
  echo "nothing listens on TCP port $1" >&2
  return 1
}

# start_ibfabric VAR CONTROL LOG IBFABRIC-ARGS...: ibfabric ($IBFABRIC) with
# --control CONTROL, log in LOG; waits until CONTROL exists, sets VAR to its
# PID; stopped by stop_daemons.
start_ibfabric() {
  local var=$1 ctl=$2 log=$3
  shift 3
  "$IBFABRIC" --control "$ctl" "$@" >"$log" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  await_ready "$pid" "$var" ibfabric "$log" sockets_exist "$ctl"
}

# start_opensm VAR SOCKET LOG: Debian's OpenSM through the ibd on SOCKET
# (the project's libibumad.so.3 from $UMAD_DIR), bound to that ibd's port
# 1 (-d2: the log flushed as written); waits (30 s at most) for SUBNET UP
# in LOG, sets VAR to its PID;
# stopped by stop_daemons.
start_opensm() {
  local var=$1 sock=$2 log=$3 guid
  local env=(env LD_LIBRARY_PATH="$UMAD_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OPENIB_SOCKET="$sock")
  guid=$("${env[@]}" ibstat -p | head -1)
  [[ -n $guid ]] || { echo "no port GUID from the ibd on $sock" >&2; return 1; }
  mkdir -p "$work/opensm-cache"
  : >"$log"
  "${env[@]}" OSM_CACHE_DIR="$work/opensm-cache" opensm -g "$guid" -f "$log" -d2 -s 5 >"$log.out" 2>&1 </dev/null &
  local pid=$!
  daemons+=("$pid")
  await_ready "$pid" "$var" "OpenSM on $sock (no SUBNET UP)" "$log" grep -qs "SUBNET UP" "$log"
}

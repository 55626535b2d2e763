# Sourced by the verbs-ABI tests (verbs_utils.sh, roce_verbs.sh): one
# client/server pair of a Debian tool between two ibds. Needs SA and SB
# (the two ibds' sockets), work, free_port (scripts/ibd_pair.sh), fail,
# and for --nobody AS_NOBODY (scripts/unprivileged.sh).
# run_pair SECONDS [--nobody] PROG ARGS...: the server (PROG ARGS -p PORT) on
# ibd A, once it listens the client (... 127.0.0.1) on ibd B, as user
# nobody if asked; both must exit 0. Logs in $work/srv.log, $work/cli.log.
run_pair() {
  local secs=$1 as=() port s c=0 sr=0 i
  shift
  [[ $1 == --nobody ]] && { as=("${AS_NOBODY[@]}" env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"); shift; }
  port=$(free_port)
  OPENIB_SOCKET=$SA timeout "$secs" "$@" -p "$port" >"$work/srv.log" 2>&1 &
  s=$!
  for ((i = 0; i < 50; i++)); do
    ss -ltn "sport = :$port" | grep -q LISTEN && break
    sleep 0.1
  done
  OPENIB_SOCKET=$SB timeout "$secs" "${as[@]}" "$@" -p "$port" 127.0.0.1 >"$work/cli.log" 2>&1 || c=$?
  wait "$s" || sr=$?
  ((c == 0 && sr == 0)) || fail "$* (client $c, server $sr): $(cat "$work/srv.log" "$work/cli.log")"
}

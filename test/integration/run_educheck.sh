#!/bin/sh
# Runs openib-educheck against the vfio-user edu test device.
# usage: run_educheck.sh <openib-edu-vfio-user> <openib-educheck>
set -u
server=$1
check=$2
dir=$(mktemp -d /tmp/openib-educheck-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
"$server" --socket "$dir/edu.sock" &
pid=$!
i=0
while [ ! -S "$dir/edu.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
timeout 60 "$check" --device "vfio-user:$dir/edu.sock"

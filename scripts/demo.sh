#!/usr/bin/env bash
# The main demo: installs what is missing (Debian 12, as root), builds, and
# shows device access at work through both transports, with the same
# driver program (openib-educheck) driving QEMU's "edu" device:
#   1. over vfio-user, against the project's edu emulation (a separate process);
#   2. over the Linux kernel's VFIO, inside a QEMU guest running Debian's own
#      kernel with an emulated IOMMU (skip with --no-qemu);
# and, between the two, two emulated HCAs (simhca) cabled back to back,
# driven by the HCA driver (openib-simhca-demo).
# Later capabilities (ibd, the fabric) join this demo as they land.
set -euo pipefail
cd "$(dirname "$0")/.."

qemu=1
for a in "$@"; do
  case $a in
    --no-qemu) qemu=0 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
echo "== building"
bash scripts/build.sh build

tmp=$(mktemp -d /tmp/openib-demo.XXXXXX)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
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

if ((qemu)); then
  echo
  echo "== 3. kernel VFIO: Debian's kernel in QEMU (TCG), intel-iommu, edu bound to vfio-pci"
  bash test/qemu/run.sh build/src/tools/openib-educheck
fi
echo
echo "demo: done"

#!/usr/bin/env bash
# Our librdmacm.so.1 (src/abi/rdmacm, docs/library.md "Verbs ABI") has the
# soname, version nodes (with their parents) and versioned symbols of
# Debian's rdma-core 44 one, exports nothing else, and Debian's binaries
# that use librdmacm (rdmacm-utils, perftest, qperf) resolve every rdma_
# and rsocket import from it (and libibverbs' from ours) through
# LD_LIBRARY_PATH.
#   rdmacm_abi.sh OUR_LIBRDMACM_SO_1
set -euo pipefail
ours=$1
dir=$(dirname "$ours")
theirs=$(readlink -f /usr/lib/x86_64-linux-gnu/librdmacm.so.1)
syms() { objdump -T "$1" | awk '/RDMACM_/ && !/\*UND\*/ {print $2, $3, $(NF-1), $NF}' | sort; }
vdefs() { readelf -V "$1" | sed -n '/^Version definition/,/^Version needs/p' | grep -o 'Name: .*\|Parent 1: .*'; }
soname() { objdump -p "$1" | awk '$1 == "SONAME" {print $2}'; }
[[ $(soname "$ours") == librdmacm.so.1 && $(soname "$theirs") == librdmacm.so.1 ]] || {
  echo "FAIL: soname $(soname "$ours"), Debian's $(soname "$theirs")"; exit 1; }
if ! diff <(vdefs "$theirs") <(vdefs "$ours"); then
  echo "FAIL: version definitions differ (< Debian's, > ours)"; exit 1
fi
if ! diff <(syms "$theirs") <(syms "$ours"); then
  echo "FAIL: versioned symbols differ (< Debian's, > ours)"; exit 1
fi
extra=$(objdump -T "$ours" | awk '!/\*UND\*/ && /DF|DO/ && !/RDMACM_/ {print $NF}')
[[ -z $extra ]] || { echo "FAIL: unversioned exports: $extra"; exit 1; }
bins=0
for pkg in rdmacm-utils perftest qperf; do
  for bin in $(dpkg -L "$pkg" | grep '^/usr/bin/'); do
    # (grep without -q: it reads all, objdump never gets SIGPIPE under pipefail)
    objdump -p "$bin" 2>/dev/null | grep 'NEEDED *librdmacm\.so\.1' >/dev/null || continue
    out=$(LD_LIBRARY_PATH=$dir LD_BIND_NOW=1 ldd -r "$bin" 2>&1) || true
    if grep -E "undefined symbol: (rdma_|r[a-z]+[ ,])|RDMACM_[0-9.]+' not found|IBVERBS_[0-9A-Z_.]+' not found" <<<"$out"; then
      echo "FAIL: $bin: $out"; exit 1
    fi
    for lib in librdmacm libibverbs; do
      grep -q "$lib.so.1 => $dir/$lib.so.1 " <<<"$out" || {
        echo "FAIL: $bin does not load our $lib.so.1: $out"; exit 1; }
    done
    bins=$((bins + 1))
  done
done
((bins >= 10)) || { echo "FAIL: only $bins Debian binaries linked against librdmacm"; exit 1; }
echo "PASS: $(syms "$ours" | wc -l) versioned symbols in $(vdefs "$ours" | grep -c 'Name: RDMACM_') versions, as Debian's; $bins Debian binaries bind to $dir"

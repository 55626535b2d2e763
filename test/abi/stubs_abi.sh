#!/usr/bin/env bash
# The stub vendor providers (src/abi/stubs, docs/library.md "Verbs ABI"):
# our libmlx5.so.1 and libefa.so.1 have the sonames, version nodes (with
# their parents) and versioned symbols of Debian's rdma-core 44 ones, export
# nothing else, and perftest's binaries bind to them through LD_LIBRARY_PATH
# with every mlx5dv_/efadv_ import resolved.
#   stubs_abi.sh OUR_LIBMLX5_SO_1 OUR_LIBEFA_SO_1
set -euo pipefail
debian=/usr/lib/x86_64-linux-gnu
dir=$(dirname "$1")
[[ $(dirname "$2") == "$dir" ]] || { echo "FAIL: $1 and $2 not in one directory"; exit 1; }
# Binding, type, version and name of each defined symbol of version PREFIX_.
syms() { objdump -T "$1" | awk -v p="$2_" '$0 ~ p && !/\*UND\*/ {print $2, $3, $(NF-1), $NF}' | sort; }
# The version definitions, each with its parent.
vdefs() { readelf -V "$1" | sed -n '/^Version definition/,/^Version needs/p' | grep -o 'Name: .*\|Parent 1: .*'; }
soname() { objdump -p "$1" | awk '$1 == "SONAME" {print $2}'; }
summary=()
for lib in "$1:libmlx5.so.1:MLX5" "$2:libefa.so.1:EFA"; do
  IFS=: read -r ours name prefix <<<"$lib"
  theirs=$(readlink -f "$debian/$name")
  [[ $(soname "$ours") == "$name" && $(soname "$theirs") == "$name" ]] || {
    echo "FAIL: $ours: soname $(soname "$ours"), Debian's $(soname "$theirs")"; exit 1; }
  if ! diff <(vdefs "$theirs") <(vdefs "$ours"); then
    echo "FAIL: $name: version definitions differ (< Debian's, > ours)"; exit 1
  fi
  if ! diff <(syms "$theirs" "$prefix") <(syms "$ours" "$prefix"); then
    echo "FAIL: $name: versioned symbols differ (< Debian's, > ours)"; exit 1
  fi
  extra=$(objdump -T "$ours" | awk -v p="$prefix"_ '!/\*UND\*/ && /DF|DO/ && $0 !~ p {print $NF}')
  [[ -z $extra ]] || { echo "FAIL: $name: unversioned exports: $extra"; exit 1; }
  summary+=("$name $(syms "$ours" "$prefix" | grep -c " DF ") functions in $(vdefs "$ours" | grep -c "Name: $prefix") versions")
done
# perftest's binaries load ours and find every mlx5dv_/efadv_ symbol at its
# version (libibverbs' and librdmacm's may be missing until ours exist).
bins=0
for bin in $(dpkg -L perftest | grep '^/usr/bin/'); do
  # (grep without -q: it reads all, objdump never gets SIGPIPE under pipefail)
  objdump -p "$bin" 2>/dev/null | grep 'NEEDED *lib\(mlx5\|efa\)\.so\.1' >/dev/null || continue
  out=$(LD_LIBRARY_PATH=$dir LD_BIND_NOW=1 ldd -r "$bin" 2>&1) || true
  if grep -E "undefined symbol: (mlx5dv_|_mlx5dv_|efadv_)|(MLX5|EFA)_[0-9.]+' not found" <<<"$out"; then
    echo "FAIL: $bin: $out"; exit 1
  fi
  for name in libmlx5.so.1 libefa.so.1; do
    grep -q "$name => $dir/$name " <<<"$out" || { echo "FAIL: $bin does not load our $name: $out"; exit 1; }
  done
  bins=$((bins + 1))
done
((bins > 0)) || { echo "FAIL: no perftest binary linked against libmlx5/libefa"; exit 1; }
echo "PASS: ${summary[0]}, ${summary[1]}, as Debian's; $bins perftest binaries bind to $dir"

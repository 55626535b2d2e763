# shellcheck shell=bash disable=SC2154  # qemu_test_tag, cache, work: set by the caller
# Shared by the QEMU tests (run.sh, rxe.sh; docs/qemu-test.md): Debian's
# kernel package fetched into a cache, and a busybox initramfs built from
# its modules and host binaries with their shared libraries. Sourced, not
# run. The caller sets:
#   qemu_test_tag  prefix of say/die messages
#   cache          the cache directory ($OPENIB_CACHE/qemu)
#   work           its private temporary directory (removed on exit)

say() { echo "$qemu_test_tag: $*"; }
die() { echo "$qemu_test_tag: FAILED: $*" >&2; exit 1; }

# require_tools <tool>...: dies naming the first one missing; checks busybox.
require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found (run scripts/setup.sh)"
  done
  if ! /bin/busybox --list >"$work/applets" 2>/dev/null || ! grep -qx insmod "$work/applets"; then
    die "no usable /bin/busybox (apt-get install busybox-static)"
  fi
}

# --- the kernel package -------------------------------------------------------
kernel_package() {
  if [[ -n ${OPENIB_QEMU_KERNEL:-} ]]; then echo "$OPENIB_QEMU_KERNEL"; return; fi
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }') || true
  if [[ -z $pkg ]]; then  # no apt metadata: fall back to what is cached
    pkg=$(find "$cache" -maxdepth 1 -name 'linux-image-*.deb' -printf '%f\n' 2>/dev/null |
          sort -V | tail -1 | cut -d_ -f1) || true
  fi
  [[ -n $pkg ]] || die "cannot tell which kernel linux-image-amd64 depends on (apt-get update?)"
  echo "$pkg"
}

fetch_kernel() {  # prints the unpacked tree's path
  local pkg=$1 deb tree
  mkdir -p "$cache"
  deb=$(find "$cache" -maxdepth 1 -name "${pkg}_*.deb" | sort -V | tail -1)
  if [[ -z $deb ]]; then
    say "downloading $pkg into $cache" >&2
    local dl
    dl=$(mktemp -d "$cache/.dl.XXXXXX")
    if ! (cd "$dl" && apt-get download -q "$pkg") >"$work/apt.log" 2>&1; then
      cat "$work/apt.log" >&2
      rm -rf "$dl"
      die "apt-get download $pkg"
    fi
    mv "$dl"/*.deb "$cache/" && rm -rf "$dl"
    deb=$(find "$cache" -maxdepth 1 -name "${pkg}_*.deb" | sort -V | tail -1)
  fi
  tree=$cache/$(basename "$deb" .deb)
  if [[ ! -f $tree/.complete ]]; then
    say "unpacking $(basename "$deb")" >&2
    local tmp
    tmp=$(mktemp -d "$cache/.unpack.XXXXXX")
    dpkg-deb -x "$deb" "$tmp"
    local kver
    kver=$(ls "$tmp/lib/modules")
    # The .deb ships no modules.dep (postinst runs depmod); make one.
    [[ -f $tmp/lib/modules/$kver/modules.dep ]] || depmod -b "$tmp" "$kver"
    touch "$tmp/.complete"
    rm -rf "$tree" && mv "$tmp" "$tree"
  fi
  echo "$tree"
}

# setup_kernel: sets pkg, tree, kver, vmlinuz.
setup_kernel() {
  pkg=$(kernel_package)
  tree=$(fetch_kernel "$pkg")
  kver=$(ls "$tree/lib/modules")
  vmlinuz=$tree/boot/vmlinuz-$kver
  [[ -f $vmlinuz ]] || die "no $vmlinuz in $pkg"
  say "kernel $pkg ($kver)"
}

# --- the initramfs ------------------------------------------------------------

# initramfs_skeleton <root>: directories and static busybox.
initramfs_skeleton() {
  local root=$1
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,lib/modules}
  cp /bin/busybox "$root/bin/busybox"
}

# initramfs_modules <root> <module>...: the modules with their dependencies
# from modules.dep (the full transitive set), deps first, into
# <root>/lib/modules with their load order in lib/modules/load-order.
# Compressed modules are unpacked here, so busybox insmod only ever sees
# plain .ko files. Needs tree and kver (setup_kernel).
initramfs_modules() {
  local root=$1; shift
  local moddir=$tree/lib/modules/$kver m pattern rel name
  local -A seen=()
  local -a order=()
  add_module() {  # add_module <path relative to moddir>
    local rel=$1 dep
    [[ -n ${seen[$rel]:-} ]] && return
    seen[$rel]=1
    local -a deps
    read -r -a deps <<<"$(grep -m1 "^$rel:" "$moddir/modules.dep" | cut -d: -f2)"
    for dep in "${deps[@]}"; do add_module "$dep"; done
    order+=("$rel")
  }
  for m in "$@"; do
    pattern=${m//[-_]/[-_]}
    rel=$(grep -m1 -E "(^|/)${pattern}\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" | cut -d: -f1) ||
      die "module $m not in $pkg"
    add_module "$rel"
  done
  : >"$root/lib/modules/load-order"
  for rel in "${order[@]}"; do
    name=$(basename "$rel")
    case $name in
      *.ko.xz) xz -dc "$moddir/$rel" >"$root/lib/modules/${name%.xz}"; name=${name%.xz} ;;
      *.ko.zst) zstd -qdc "$moddir/$rel" >"$root/lib/modules/${name%.zst}"; name=${name%.zst} ;;
      *.ko.gz) gzip -dc "$moddir/$rel" >"$root/lib/modules/${name%.gz}"; name=${name%.gz} ;;
      *) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
    esac
    echo "$name" >>"$root/lib/modules/load-order"
  done
  say "modules: $(tr '\n' ' ' <"$root/lib/modules/load-order")"
}

# initramfs_libs <root> <elf>...: every library ldd lists for the files and
# the dynamic loader, at the same paths.
initramfs_libs() {
  local root=$1; shift
  local f lib
  for f in "$@"; do
    for lib in $(ldd "$f" |
                 awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }'); do
      [[ -e $root$lib ]] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

# initramfs_binary <root> <file> [<path in root>]: a host executable or
# library (debug info stripped to keep the initramfs small) with its
# libraries; by default at the same path.
initramfs_binary() {
  local root=$1 src=$2 dst=${3:-$2}
  mkdir -p "$root$(dirname "$dst")"
  if command -v strip >/dev/null; then
    strip --strip-debug -o "$root$dst" "$src"
  else
    cp -L "$src" "$root$dst"
  fi
  initramfs_libs "$root" "$src"
}

# initramfs_pack <root> <out.gz>
initramfs_pack() {
  (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2"
  say "initramfs $(du -h "$2" | cut -f1)"
}

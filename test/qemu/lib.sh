# shellcheck shell=bash disable=SC2154  # qemu_test_tag, cache, work: set by the caller
# Shared by the QEMU tests (run.sh, rxe.sh, rxe_rc.sh; docs/qemu-test.md):
# Debian's kernel package fetched into a cache, and a busybox initramfs built
# from its modules and host binaries with their shared libraries; for the
# two Soft-RoCE tests also the guest's rxe setup, the VM run side by side
# with a host peer, and the common checks of the verdict. Sourced, not run.
# The caller sets:
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

# free_ports udp|tcp...: one free port on 127.0.0.1 per argument, of that
# kind, on one line (the kernel's choice; all bound at once, so distinct).
free_ports() {
  python3 - "$@" <<'PY'
import socket, sys
kind = {"udp": socket.SOCK_DGRAM, "tcp": socket.SOCK_STREAM}
s = [socket.socket(socket.AF_INET, kind[k]) for k in sys.argv[1:]]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
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

# initramfs_libgcc <root>: libgcc_s.so.1, which glibc dlopens for
# pthread_cancel/pthread_exit (rping's threads end so; ldd does not list it).
# (awk reads all of ldconfig's output: an early exit would SIGPIPE it.)
initramfs_libgcc() {
  local libgcc
  libgcc=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ { p = $NF } END { print p }')
  [[ -n $libgcc ]] || die "no libgcc_s.so.1 on the host"
  initramfs_binary "$1" "$libgcc"
}

# initramfs_pack <root> <out.gz>
initramfs_pack() {
  (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2"
  say "initramfs $(du -h "$2" | cut -f1)"
}

# --- the Soft-RoCE guest (rxe.sh, rxe_rc.sh) ------------------------------------

# require_packages <package>...: dies naming the first Debian package that
# is not installed.
require_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
      die "package $p not installed (run scripts/setup.sh)"
  done
}

# initramfs_rxe <root> <provider> <executable>...: the host executables
# (each must exist) and rdma-core's rxe provider library, which libibverbs
# dlopens by the path that /etc/libibverbs.d/rxe.driver names (copied too).
initramfs_rxe() {
  local root=$1 provider=$2 b
  shift 2
  for b in "$@"; do
    [[ -x $b ]] || die "$b missing"
    initramfs_binary "$root" "$b"
  done
  initramfs_binary "$root" "$provider"
  mkdir -p "$root/etc/libibverbs.d"
  cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
}

# rxe_init_setup <file>: writes the start of the guest's /init: it sets
# ROCE_MAC, OOB_MAC, PEER_MAC, SIZE and ITERS (from guest_mac, oob_mac,
# peer_mac, size and iters), mounts proc, sysfs and devtmpfs, loads the
# modules, finds the two NICs by MAC (roce, oob), gives them 198.18.80.2/24
# (with a permanent neighbour 198.18.80.1 at PEER_MAC; none when peer_mac is
# empty: the guest's ARP finds it) and 10.0.2.15/24 (when there is an oob
# NIC), and adds rxe0 on the RoCE NIC.
rxe_init_setup() {
  cat >"$1" <<EOF
#!/bin/busybox sh
ROCE_MAC=$guest_mac
OOB_MAC=$oob_mac
PEER_MAC=$peer_mac
SIZE=$size
ITERS=$iters
EOF
  cat >>"$1" <<'EOF'
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/bin
# Debian's busybox runs its own applets before PATH: iproute2's ip by path.
ip() { /usr/sbin/ip "$@"; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "OPENIB: init at $(cut -d' ' -f1 /proc/uptime)s"
for m in $(cat /lib/modules/load-order); do
  insmod /lib/modules/$m || echo "OPENIB: insmod $m failed"
done
ifname() {  # the interface with MAC $1
  for d in /sys/class/net/*; do
    [ "$(cat $d/address)" = "$1" ] && { echo ${d##*/}; return; }
  done
}
roce=$(ifname $ROCE_MAC)
oob=$(ifname $OOB_MAC)
echo "OPENIB: RoCE NIC ${roce:-none}, exchange NIC ${oob:-none}"
ip link set lo up
if [ -n "$oob" ]; then
  ip link set "$oob" up
  ip addr add 10.0.2.15/24 dev "$oob"
fi
ip link set "$roce" up
ip addr add 198.18.80.2/24 dev "$roce"
[ -n "$PEER_MAC" ] && ip neigh add 198.18.80.1 lladdr $PEER_MAC dev "$roce" nud permanent
rdma link add rxe0 type rxe netdev "$roce" || echo "OPENIB: rdma link add failed"
EOF
}

# rxe_init_gid <file>: appends to the guest's /init the wait (up to 5 s)
# for rxe0's RoCE v2 GID of 198.18.80.2; sets port (rxe0's port 1 in sysfs)
# and gidx (its index, "" if it never came).
rxe_init_gid() {
  cat >>"$1" <<'EOF'
# The RoCE v2 GID of 198.18.80.2: ::ffff:198.18.80.2.
port=/sys/class/infiniband/rxe0/ports/1
gidx=""
for i in $(seq 1 50); do
  for g in $port/gids/*; do
    n=${g##*/}
    if [ "$(cat $g 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:c612:5002 ] &&
       [ "$(cat $port/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ]; then
      gidx=$n; break 2
    fi
  done
  sleep 0.1
done
EOF
}

# --- ibd as the guest's peer (rxe_cm.sh, rxe_hostile.sh) --------------------------

# start_roce_ibd [ibd args...]: ibd (socket $work/ibd.sock, log
# $work/ibd.log, capture $pcap = $work/simhca.pcap) whose embedded simhca's
# port 1 is an Ethernet port with GUID $host_guid (so MAC $host_mac, checked)
# cabled from 127.0.0.1:$port_hca to QEMU's 127.0.0.1:$port_qemu, with its
# netdev roce0 given 198.18.80.1/24; waits until that address is the port's
# RoCE v2 GID. Sets ibd_pid, pcap and serial ($work/serial.log); exports
# OPENIB_SOCKET and LD_LIBRARY_PATH (our libraries in $abi and $build/src/lib)
# for the host's tools.
start_roce_ibd() {
  local gid_re='GID\[ *[0-9]+\]:[[:space:]]+::ffff:198\.18\.80\.1, RoCE v2'
  pcap=$work/simhca.pcap
  serial=$work/serial.log
  mkdir -p "$work/ibd.run"
  "$IBD" --socket "$work/ibd.sock" --log info --run-dir "$work/ibd.run" \
    --cable "LOCAL=127.0.0.1:$port_hca,PEER=127.0.0.1:$port_qemu" --pcap "$pcap" \
    --simhca-arg=--link-layer --simhca-arg=ethernet --simhca-arg=--guid --simhca-arg="$host_guid" \
    --netdev roce0 "$@" >"$work/ibd.log" 2>&1 </dev/null &
  ibd_pid=$!
  for _ in $(seq 300); do
    grep -qs "ibd: ready on" "$work/ibd.log" && break
    kill -0 "$ibd_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -qs "ibd: ready on" "$work/ibd.log" || { cat "$work/ibd.log"; die "ibd did not get ready"; }
  [[ $(cat /sys/class/net/roce0/address 2>/dev/null) == "$host_mac" ]] ||
    die "roce0's MAC is '$(cat /sys/class/net/roce0/address 2>/dev/null)', not the port's $host_mac"
  ip link set roce0 up
  ip addr add 198.18.80.1/24 dev roce0
  export OPENIB_SOCKET=$work/ibd.sock LD_LIBRARY_PATH=$abi:$build/src/lib
  for _ in $(seq 50); do
    ibv_devinfo -v 2>/dev/null | grep -Eq "$gid_re" && break
    sleep 0.1
  done
  ibv_devinfo -v 2>/dev/null | grep -Eq "$gid_re" || die "198.18.80.1 did not become a RoCE v2 GID of the port"
  say "roce0 $host_mac 198.18.80.1/24; GID ::ffff:198.18.80.1 in the port's table"
}

# stop_roce_ibd: SIGTERM to ibd_pid, SIGKILL after 10 s; reaped, its exit
# status in ibd_rc; ibd_pid cleared.
stop_roce_ibd() {
  [[ -n ${ibd_pid:-} ]] || return 0
  kill "$ibd_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$ibd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$ibd_pid" 2>/dev/null || true
  ibd_rc=0
  wait "$ibd_pid" 2>/dev/null || ibd_rc=$?
  ibd_pid=""
}

# cleanup_vm_peer_ibd: for `trap cleanup_vm_peer_ibd EXIT`: the peer and the
# VM killed and reaped, ibd stopped, $work removed.
cleanup_vm_peer_ibd() {
  local pid
  for pid in "${peer_pid:-}" "${vm_pid:-}"; do
    [[ -n $pid ]] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  stop_roce_ibd
  rm -rf "$work"
}

# --- the VM and a host peer side by side (rxe.sh, rxe_rc.sh) --------------------
# These share the caller's vm_pid and peer_pid: the PIDs of the VM and of
# the peer in the background, "" once reaped (or before they start).

# cleanup_vm_and_peer: for `trap cleanup_vm_and_peer EXIT`: kills and reaps
# whichever of vm_pid and peer_pid is still set, and removes $work.
cleanup_vm_and_peer() {
  local pid
  for pid in "${vm_pid:-}" "${peer_pid:-}"; do
    [[ -n $pid ]] || continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}

# start_rxe_vm <serial log> <QEMU's port> <peer's port> <user netdev options>:
# boots $vmlinuz (setup_kernel) with $work/initramfs.gz in the background,
# under `timeout $vm_timeout`, accel $accel. Its first NIC ($guest_mac) is
# cabled by -netdev dgram from 127.0.0.1:<QEMU's port> to 127.0.0.1:<peer's
# port>; its second ($oob_mac) is user networking with restrict=on and the
# options given (hostfwd=..., guestfwd=...). The serial console goes to
# <serial log>, QEMU's own output to $work/qemu.log. Sets vm_pid, and start
# to $SECONDS at boot.
start_rxe_vm() {
  local serial=$1 port_qemu=$2 port_peer=$3 oob_opts=$4
  say "booting (accel $accel, limit ${vm_timeout}s)"
  start=$SECONDS
  timeout -k 5 "$vm_timeout" qemu-system-x86_64 \
    -accel "$accel" -M q35 -cpu max -smp 1 -m 512M \
    -display none -nodefaults -no-user-config -no-reboot \
    -netdev "dgram,id=roce,local.type=inet,local.host=127.0.0.1,local.port=$port_qemu,remote.type=inet,remote.host=127.0.0.1,remote.port=$port_peer" \
    -device "virtio-net-pci,netdev=roce,mac=$guest_mac,romfile=" \
    -netdev "user,id=oob,restrict=on${oob_opts:+,$oob_opts}" \
    -device "virtio-net-pci,netdev=oob,mac=$oob_mac,romfile=" \
    -serial "file:$serial" \
    -kernel "$vmlinuz" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 quiet" \
    </dev/null >"$work/qemu.log" 2>&1 &
  vm_pid=$!
}

# wait_vm_and_peer: waits until both the VM and the peer have ended.
# Whichever ends first, the other gets a grace period: the guest powers off
# once its test returns, but if the peer failed the guest's server may wait
# forever; the peer waits for replies that a dead guest never sends. After
# the peer the VM gets 60 s if the peer exited 0, else 10 s; after the VM
# the peer gets 10 s (or $peer_grace_after_vm); then each is killed by its
# PID. Says when each ended
# (seconds since start); sets vm_rc and peer_rc (124 or 137: timeout's) and
# clears vm_pid and peer_pid.
wait_vm_and_peer() {
  local grace
  while kill -0 "$peer_pid" 2>/dev/null && kill -0 "$vm_pid" 2>/dev/null; do sleep 0.5; done
  if kill -0 "$vm_pid" 2>/dev/null; then
    reap_peer
    grace=$((SECONDS + (peer_rc == 0 ? 60 : 10)))
    while kill -0 "$vm_pid" 2>/dev/null && ((SECONDS < grace)); do sleep 0.5; done
    kill "$vm_pid" 2>/dev/null || true
  fi
  vm_rc=0
  wait "$vm_pid" || vm_rc=$?
  vm_pid=""
  say "VM ran $((SECONDS - start))s, exit status $vm_rc"
  if [[ -n $peer_pid ]]; then
    grace=$((SECONDS + ${peer_grace_after_vm:-10}))
    while kill -0 "$peer_pid" 2>/dev/null && ((SECONDS < grace)); do sleep 0.5; done
    kill "$peer_pid" 2>/dev/null || true
    reap_peer
  fi
}

# reap_peer: (for wait_vm_and_peer) waits for peer_pid, sets peer_rc to its
# exit status, clears peer_pid and says so.
reap_peer() {
  peer_rc=0
  wait "$peer_pid" || peer_rc=$?
  peer_pid=""
  say "peer finished after $((SECONDS - start))s, exit status $peer_rc"
}

# show_logs <serial log> <pcap> <peer name>: writes $work/console.log (the
# serial log without CRs), copies it to $OPENIB_QEMU_KEEP_LOG and the
# capture to $OPENIB_RXE_KEEP_PCAP where these are set, and prints the
# console, QEMU's output ($work/qemu.log) and the peer's ($work/peer.log).
show_logs() {
  local serial=$1 pcap=$2 peer_name=$3
  tr -d '\r' <"$serial" >"$work/console.log"
  [[ -n ${OPENIB_QEMU_KEEP_LOG:-} ]] && cp "$work/console.log" "$OPENIB_QEMU_KEEP_LOG"
  [[ -n ${OPENIB_RXE_KEEP_PCAP:-} && -f $pcap ]] && cp "$pcap" "$OPENIB_RXE_KEEP_PCAP"
  echo "----- serial console -----"
  cat "$work/console.log"
  echo "----- QEMU -----"
  cat "$work/qemu.log"
  echo "----- $peer_name -----"
  cat "$work/peer.log"
  echo "-----"
}

# fail <message>: a failed check of the verdict: says why (on stderr) and
# counts it in failures, which end_checks reads.
fail() { echo "$qemu_test_tag: $*" >&2; failures=$((${failures:-0} + 1)); }

# check_capture <pcap> <min RoCEv2 frames> <frames to list> [<display filter> <what>]:
# says how many frames tshark reads in the capture, how many go to or from
# UDP 4791 (RoCEv2), how many decode as InfiniBand (and, given a filter,
# "(N <what>)" for the frames it matches) and how many are malformed or
# carry an expert error; lists the first frames; and fails unless every
# RoCEv2 frame decodes as InfiniBand, none is malformed or in error, and
# there are at least <min>. Fails too if there is no capture.
# (RPC-over-RDMA's dissector, which tshark tries on every InfiniBand
# payload, is off: perftest's small SENDs read as broken RPC-over-RDMA.)
tshark_roce() { tshark --disable-protocol rpcordma "$@"; }
check_capture() {
  local pcap=$1 min=$2 show=$3 total roce ib bad extra=""
  if [[ ! -s $pcap ]]; then
    fail "no capture written"
    return 0
  fi
  total=$(tshark_roce -n -r "$pcap" -T fields -e frame.number 2>/dev/null | wc -l)
  roce=$(tshark_roce -n -r "$pcap" -Y 'udp.port == 4791' -T fields -e frame.number 2>/dev/null | wc -l)
  ib=$(tshark_roce -n -r "$pcap" -Y infiniband -T fields -e frame.number 2>/dev/null | wc -l)
  bad=$(tshark_roce -n -r "$pcap" -Y '_ws.malformed || _ws.expert.severity >= error' -T fields -e frame.number 2>/dev/null | wc -l)
  if (($# >= 5)); then
    extra=" ($(tshark_roce -n -r "$pcap" -Y "$4" -T fields -e frame.number 2>/dev/null | wc -l) $5)"
  fi
  say "tshark: $total frames, $roce to/from UDP 4791, $ib decoded as InfiniBand$extra, $bad malformed or in error"
  tshark_roce -n -r "$pcap" 2>/dev/null | sed -n "1,${show}p"
  ((roce > 0 && ib == roce)) || fail "tshark: $ib of $roce RoCEv2 frames decoded as InfiniBand"
  ((bad == 0)) || fail "tshark: $bad frames malformed or in error"
  ((roce >= min)) || fail "tshark: only $roce RoCEv2 frames (expected at least $min)"
}

# end_checks: fails too if the VM hit its time limit (vm_rc 124 or 137),
# then dies if any check failed.
end_checks() {
  ((vm_rc != 124 && vm_rc != 137)) || fail "VM did not power off within ${vm_timeout}s"
  ((${failures:-0} == 0)) || die "$failures check(s) failed"
}

#!/usr/bin/env bash
# Installs what building and testing need on Debian 12 (run as root).
# Idempotent: apt-get update runs once, and only when a package is missing.
set -euo pipefail

PKGS=(
  build-essential meson ninja-build pkg-config
  libboost-dev libfmt-dev libspdlog-dev catch2
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libsystemd-dev zlib1g-dev
  clang libclang-rt-14-dev
  qemu-system-x86 busybox-static cpio kmod
  tshark iputils-ping
  opensm ibsim-utils infiniband-diags libibumad-dev libibmad-dev
  libmnl-dev iperf3 netcat-traditional
  libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest qperf ibverbs-providers libpci3
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

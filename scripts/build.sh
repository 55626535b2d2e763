#!/usr/bin/env bash
# Configures (once) and builds a build directory.
#   scripts/build.sh [DIR] [extra meson setup args...]
# DIR defaults to build/. Warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [[ ! -f $dir/build.ninja ]]; then
  meson setup "$dir" --werror "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null

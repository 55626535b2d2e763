#!/usr/bin/env bash
# Configures (once) and builds a build directory.
#   scripts/build.sh [DIR] [extra meson setup args...]
# DIR defaults to build/. Warnings are errors. BUILD_TARGETS (ninja target
# names, space-separated) limits the build to those; default: everything.
# The build's progress is kept quiet; when it fails, the failing commands
# and their compiler messages are printed (ninja's output without its
# progress lines).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [[ ! -f $dir/build.ninja ]]; then
  meson setup "$dir" --werror "$@" >/dev/null
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086 # BUILD_TARGETS is a list
if ! ninja -C "$dir" ${BUILD_TARGETS:-} >"$log" 2>&1; then
  grep -v '^\[[0-9]*/[0-9]*\] ' "$log" | tail -200 >&2
  exit 1
fi

# Sourced by scripts and tests that run a program as an unprivileged user
# (test/ibd/examples.sh, scripts/demo.sh). The build tree may be out of that
# user's reach (a clone under /root is mode 0700), so what it runs is copied
# first into a directory it can enter.
#   AS_NOBODY                  the command prefix (an array) that runs a
#                              command as user nobody, group nogroup, no
#                              supplementary groups
#   reachable_copy DIR PROG... copies each PROG into DIR (created, mode
#                              0755; DIR's parents must be reachable: put it
#                              under a mktemp -d made 0755 in /tmp) and the
#                              shared libraries it loads from outside the
#                              system's directories (the build's
#                              libopenib.so) into DIR/lib; run the copies
#                              as "${AS_NOBODY[@]}" env LD_LIBRARY_PATH=DIR/lib
#                              DIR/PROG. The caller removes DIR.

AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)

reachable_copy() {
  local dir=$1 prog lib
  shift
  mkdir -p "$dir/lib"
  chmod 755 "$dir" "$dir/lib"
  for prog in "$@"; do
    install -m 755 "$prog" "$dir/"
    # "libopenib.so.0 => /path/to/build/src/lib/libopenib.so.0 (0x...)"
    while read -r lib; do
      install -m 644 "$lib" "$dir/lib/"
    done < <(ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
               grep -Ev '^/(usr/)?lib(32|64|x32)?/' || true)
  done
}

#!/usr/bin/env bash
# A two-level fat tree in ibsim's net format (docs/ibfabric.md "Topology
# format"), for scripts/sandbox.sh and ibfabric (docs/operations.md
# "Sandbox", docs/performance.md "Scale: the sandbox").
#
#   fattree.sh LEAVES HOSTS_PER_LEAF SPINES [PORTS [UPLINKS]] > FILE
#
# Every switch has PORTS ports (default 36). Leaf l (1..LEAVES) has its
# hosts on ports 1..HOSTS_PER_LEAF and UPLINKS up-links on the ports after
# them (default HOSTS_PER_LEAF: full bisection; fewer: oversubscribed); its
# up-link j goes to spine (j mod SPINES), so each leaf has UPLINKS/SPINES
# parallel cables to every spine.
# Hosts are Hca1..HcaN, leaf by leaf; switches Leaf1.., Spine1...
#   fattree.sh 2 16 2     32 hosts,  4 switches
#   fattree.sh 8 16 4    128 hosts, 12 switches
#   fattree.sh 18 18 9   324 hosts, 27 switches (36-port switches, full)
#   fattree.sh 36 28 8 36 8   1,008 hosts, 44 switches (3.5:1 oversubscribed)
# Both ends of every cable are written (ibsim insists on it).
set -euo pipefail

die() { echo "fattree: $*" >&2; exit 2; }
(($# >= 3 && $# <= 5)) || die "usage: fattree.sh LEAVES HOSTS_PER_LEAF SPINES [PORTS [UPLINKS]]"
for a in "$@"; do [[ $a =~ ^[1-9][0-9]*$ ]] || die "'$a' is not a positive number"; done
leaves=$1 hpl=$2 spines=$3 ports=${4:-36} up=${5:-$2}
((ports <= 254)) || die "a switch has at most 254 ports, not $ports"
((hpl + up <= ports)) || die "a leaf needs $hpl host ports + $up up-links: more than its $ports ports"
((up % spines == 0)) || die "UPLINKS ($up) must be a multiple of SPINES ($spines)"
per=$((up / spines))  # cables from one leaf to one spine
((leaves * per <= ports)) || die "a spine needs $((leaves * per)) ports for $leaves leaves, it has $ports"

awk -v L="$leaves" -v H="$hpl" -v S="$spines" -v P="$ports" -v U="$up" -v per="$per" 'BEGIN {
  printf "# Two-level fat tree: %d leaves x %d hosts (%d up-links), %d spines, %d-port switches\n", L, H, U, S, P
  printf "# (scripts/fattree.sh %d %d %d %d %d)\n\n", L, H, S, P, U
  for (l = 1; l <= L; l++) {
    printf "Switch %d \"Leaf%d\"\n", P, l
    for (h = 1; h <= H; h++) printf "[%d] \"Hca%d\"[1]\n", h, (l - 1) * H + h
    for (j = 0; j < U; j++) {
      s = j % S; k = int(j / S)
      printf "[%d] \"Spine%d\"[%d]\n", H + 1 + j, s + 1, (l - 1) * per + k + 1
    }
    printf "\n"
  }
  for (s = 1; s <= S; s++) {
    printf "Switch %d \"Spine%d\"\n", P, s
    for (l = 1; l <= L; l++)
      for (k = 0; k < per; k++)
        printf "[%d] \"Leaf%d\"[%d]\n", (l - 1) * per + k + 1, l, H + 1 + k * S + (s - 1)
    printf "\n"
  }
  for (n = 1; n <= L * H; n++)
    printf "Ca 1 \"Hca%d\"\n[1] \"Leaf%d\"[%d]\n\n", n, int((n - 1) / H) + 1, (n - 1) % H + 1
}'

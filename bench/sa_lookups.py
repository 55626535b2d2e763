#!/usr/bin/env python3
"""PATH_QUERY against ibd's socket (docs/client-protocol.md §11), for
bench/sa.sh: one process, one connection, lookups timed with
time.perf_counter_ns.

  sa_lookups.py SOCKET time N [--fresh] GID...   mean ns per lookup, round robin over the GIDs
  sa_lookups.py SOCKET burst N GID...            N lookups round robin, prints the count answered
"""
import socket
import struct
import sys
import time

MAGIC, VERSION = 0x4442494F, 1
OP_HELLO, OP_PATH_QUERY = 1, 27
HELLO_NO_UAR = 2
PATH_FRESH = 1


class Ibd:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(path)
        self.seq = 0
        status, _ = self.call(OP_HELLO, struct.pack("<III", 1, 2, HELLO_NO_UAR))
        if status:
            raise SystemExit(f"HELLO: status {status}")

    def call(self, op, body):
        self.seq += 1
        self.s.send(struct.pack("<IHHIB3x", MAGIC, VERSION, op, self.seq, 0) + body)
        m = self.s.recv(65536)
        magic, _, rop, rseq, _ = struct.unpack_from("<IHHIB", m)
        if magic != MAGIC or rop != op | 0x8000 or rseq != self.seq:
            raise SystemExit("a reply that does not match its request")
        (status,) = struct.unpack_from("<i", m, 16)
        return status, m[20:]

    def path(self, gid, fresh=False):
        body = struct.pack("<BHI", 1, 0, PATH_FRESH if fresh else 0) + socket.inet_pton(socket.AF_INET6, gid)
        return self.call(OP_PATH_QUERY, body)[0]


def main():
    ibd = Ibd(sys.argv[1])
    what, n = sys.argv[2], int(sys.argv[3])
    args = sys.argv[4:]
    fresh = "--fresh" in args
    gids = [a for a in args if a != "--fresh"]
    if what == "time":
        for g in gids:  # warm: the cache holds them (or the SA knows them)
            ibd.path(g, fresh)
        t0 = time.perf_counter_ns()
        for i in range(n):
            st = ibd.path(gids[i % len(gids)], fresh)
            if st:
                raise SystemExit(f"PATH_QUERY {gids[i % len(gids)]}: status {st}")
        print((time.perf_counter_ns() - t0) // n)
    else:
        answered = 0
        for i in range(n):
            st = ibd.path(gids[i % len(gids)])
            answered += st in (0, 113)  # a path, or EHOSTUNREACH ("no path")
        print(answered)


main()

// openib-perf: perftest's ib_{send,write,read}_{bw,lat} on libopenib.
//   server: openib-perf -t send -m lat [-s SIZE | -a] [-n ITERS] [-I INLINE]
//   client: openib-perf -t send -m lat [-s SIZE | -a] [-n ITERS] SERVERHOST
// The client is the initiator and prints the table; the server serves.
// The measurement loops live in perf_core.cpp (also used by bench/).
#include <CLI/CLI.hpp>
#include <cinttypes>

#include "common.hpp"
#include "perf_core.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

bool sync(int sock) {
  char c = 's';
  return write_all(sock, &c, 1) && read_all(sock, &c, 1);
}

bool exchange(int sock, const perf::Side::Dest& my, perf::Side::Dest& peer) {
  char out[64] = {}, in[64] = {};
  std::snprintf(out, sizeof out, "%04x:%06x:%06x:%08x:%016" PRIx64, my.lid, my.qpn, my.psn, my.rkey, my.addr);
  if (!write_all(sock, out, sizeof out) || !read_all(sock, in, sizeof in)) return false;
  in[63] = 0;
  unsigned lid, qpn, psn, rkey;
  uint64_t addr;
  if (std::sscanf(in, "%x:%x:%x:%x:%" SCNx64, &lid, &qpn, &psn, &rkey, &addr) != 5) return false;
  peer = {uint16_t(lid), qpn, psn, rkey, addr};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string test = "send", mode = "bw", socket, host, ib_dev;
  size_t size = 0;
  uint64_t iters = 0;
  bool all = false;
  int port = 18515, ib_port = 1, mtu = 1024;
  uint32_t window = 64, max_inline = 64;
  CLI::App app{"openib-perf: perftest-style bandwidth and latency through ibd (RC)"};
  app.add_option("-t,--test", test, "send, write or read")->check(CLI::IsMember({"send", "write", "read"}));
  app.add_option("-m,--mode", mode, "bw or lat")->check(CLI::IsMember({"bw", "lat"}));
  app.add_option("-s,--size", size, "message size (default 65536 for bw, 2 for lat)");
  app.add_option("-n,--iters", iters, "iterations (default 5000 for bw, 1000 for lat)");
  app.add_flag("-a,--all", all, "all sizes 2..8M (powers of two)");
  app.add_option("-p,--port", port, "TCP port of the side channel (default 18515)");
  app.add_option("-i,--ib-port", ib_port, "port of the IB device (default 1)");
  app.add_option("-d,--ib-dev", ib_dev, "IB device, by name (default $OPENIB_DEVICE, else ibd's first)");
  app.add_option("--mtu", mtu, "path MTU (default 1024)");
  app.add_option("-w,--window", window, "bw: WRs outstanding (default 64)");
  app.add_option("-I,--inline-size", max_inline, "SENDs and WRITEs up to this size go inline (default 64; 0: none)");
  app.add_option("--socket", socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  app.add_option("SERVERHOST", host, "the server to connect to (none: be the server)");
  CLI11_PARSE(app, argc, argv);
  const bool lat = mode == "lat", client = !host.empty();
  const perf::Test t = test == "send" ? perf::Test::kSend : test == "write" ? perf::Test::kWrite : perf::Test::kRead;
  if (!iters) iters = lat ? 1000 : 5000;
  std::vector<size_t> sizes;
  if (all)
    for (size_t s = 2; s <= (8u << 20); s *= 2) sizes.push_back(s);
  else
    sizes.push_back(size ? size : lat ? 2 : 65536);

  ContextOptions copts;
  copts.socket = socket;
  copts.device = ib_dev;
  auto ctx = check(Context::open(copts), "Couldn't open ibd's device");
  const uint32_t depth = std::max<uint32_t>(128, window);
  auto side = check(
      perf::make_side(*ctx, *std::max_element(sizes.begin(), sizes.end()), depth, uint8_t(ib_port), max_inline),
      "Couldn't create the QP and its resources");
  int sock = tcp_connect(host, port);
  if (sock < 0) die("Couldn't connect to the peer over TCP");
  perf::Side::Dest peer;
  if (!exchange(sock, side->dest(), peer)) die("Couldn't exchange addresses with the peer (connect)");
  check(perf::connect(*side, peer, uint8_t(ib_port), mtu_from_bytes(mtu)), "Couldn't connect the QP");
  if (!sync(sock)) die("Peer left before the test (connect)");

  std::printf("---------------------------------------------------------------------------------------\n");
  std::printf("                    %s %s Test (openib-perf, RC)\n", perf::test_name(t),
              lat ? "Latency" : "BW");
  std::printf(" local: LID 0x%04x QPN 0x%06x PSN 0x%06x   remote: LID 0x%04x QPN 0x%06x PSN 0x%06x\n", side->lid,
              side->qp->qp_num(), side->psn, peer.lid, peer.qpn, peer.psn);
  if (lat)
    perf::print_lat_header();
  else
    perf::print_bw_header();
  for (size_t s : sizes) {
    perf::Params p{t, s, iters, window};
    check(perf::prepare(p, *side), "prepare");
    if (!sync(sock)) die("Peer left during the test");
    if (lat) {
      auto r = check(perf::run_lat(p, *side, client), "Latency test failed");
      if (client || t != perf::Test::kRead) perf::print_lat(r);
    } else {
      auto r = check(perf::run_bw(p, *side, client), "Bandwidth test failed");
      if (client) perf::print_bw(r);
    }
    if (!sync(sock)) die("Peer left during the test");
  }
  std::printf("---------------------------------------------------------------------------------------\n");
  ::close(sock);
  return 0;
}

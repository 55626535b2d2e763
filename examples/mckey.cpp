// openib-mckey: rdmacm-utils' mckey over libopenib's RDMA CM (docs/cma.md
// "Examples"): a multicast group named by its IP address. Each side
// resolves the group's address (from -b's interface), brings a UD QP up
// and joins; kMulticastJoin gives the group's address vector, QPN 0xFFFFFF
// and Q_Key. The sender (-s) then sends -C numbered messages; a receiver
// counts and checks what arrives and prints "received N of COUNT".
//   receiver: openib-mckey -m GROUP [-b ADDR] [-C COUNT]
//   sender:   openib-mckey -m GROUP [-b ADDR] -s [-C COUNT] [-S SIZE]
//             [--start-delay MS] [--wait-file FILE]
// Every wait is bounded (--timeout seconds per event or message). Exit 0
// when everything was sent / received intact, 2 when a receiver missed
// messages, 1 on any failure.
#include <CLI/CLI.hpp>
#include <set>

#include "cma_common.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

constexpr uint64_t kSendWrid = 1u << 20;
constexpr int kSide = 0;

struct Opts {
  std::string group, bind, socket, wait_file;
  bool sender = false;
  int count = 10, size = 100, start_delay_ms = 1000, delay_us = 1000;
  double timeout_s = 10;
};

int run(CmaEnv& e, const Opts& o) {
  const IpEndpoint group = endpoint(o.group, 0);
  const std::optional<IpEndpoint> src = optional_endpoint(o.bind, 0);
  const uint32_t id = check(e.ch->create_id(RdmaPortSpace::kUdp), "Couldn't create an id");
  check(e.ch->resolve_addr(id, src ? &*src : nullptr, group, std::min(e.timeout_ms, 2000)), "resolve_addr");
  expect_event(e, id, RdmaCmEventType::kAddrResolved, "resolving " + group.str());
  const RdmaIdInfo info = check(e.ch->query(id), "Couldn't query the id");
  const size_t mtu = port_mtu(e, info.port);
  if (size_t(o.size) > mtu) die("mckey: -S " + std::to_string(o.size) + " is above the MTU " + std::to_string(mtu));
  const uint32_t slots = o.sender ? 1 : uint32_t(std::min(o.count, 256));
  auto cq = check(e.ctx->create_cq(slots + 8), "Couldn't create CQ");
  auto qp = make_qp(e, QpType::kUd, *cq, 4, slots);
  UdSlots recv(e, slots, size_t(o.size));
  auto send = check(e.ctx->alloc_mr(*e.pd, size_t(o.size), kAccessLocalWrite), "Couldn't register the send buffer");
  check(e.ch->init_qp(id, *qp), "Couldn't bring the UD QP up");
  if (!o.sender) recv.post_all(*qp);
  check(e.ch->join_multicast(id, group, *qp), "Couldn't join");
  RdmaCmEvent j = expect_event(e, id, RdmaCmEventType::kMulticastJoin, "joining " + group.str());
  std::printf("mckey: joined %s: MLID 0x%04x, QPN 0x%06x, Q_Key 0x%08x\n", o.group.c_str(), j.ah.dlid, j.qp_num,
              j.qkey);
  std::fflush(stdout);
  int rc = 0;
  if (o.sender) {
    auto ah = check(e.ctx->create_ah(*e.pd, j.ah), "Couldn't create the group's AH");
    if (!o.wait_file.empty()) wait_file_gone(o.wait_file);
    ::usleep(useconds_t(o.start_delay_ms) * 1000);  // receivers join meanwhile
    auto* p = static_cast<uint8_t*>(send->addr());
    for (int n = 0; n < o.count; ++n) {
      fill_msg(p, size_t(o.size), uint32_t(n), kSide);
      Sge sg{reinterpret_cast<uint64_t>(p), uint32_t(o.size), send->lkey()};
      SendWr wr;
      wr.wr_id = kSendWrid;
      wr.sg = std::span(&sg, 1);
      wr.ah = ah.get();
      wr.remote_qpn = j.qp_num;
      wr.remote_qkey = j.qkey;
      if (int err = qp->post_send(wr)) die(std::string("Couldn't post send: ") + std::strerror(err));
      wait_wc(e, *cq, "sending message " + std::to_string(n));
      if (o.delay_us > 0) ::usleep(useconds_t(o.delay_us));
    }
    std::printf("mckey: sent %d messages of %d bytes to %s\n", o.count, o.size, o.group.c_str());
  } else {
    std::set<uint32_t> got;
    int duplicates = 0;
    while (int(got.size()) < o.count) {
      auto wc = poll_wc(e, *cq, [] { return true; });
      if (!wc) break;  // no more within the bound
      if (wc->status != kWcSuccess) die(std::string("mckey: receive failed: ") + wc_status_str(wc->status));
      if (wc->byte_len != kGrhBytes + size_t(o.size))
        die("mckey: a message of " + std::to_string(int(wc->byte_len) - int(kGrhBytes)) + " bytes, not " +
            std::to_string(o.size) + " (-S)");
      auto n = check_msg(recv.data(wc->wr_id), size_t(o.size), kSide);
      if (!n) die("mckey: " + n.error().message);
      if (*n >= uint32_t(o.count)) die("mckey: message " + std::to_string(*n) + " of " + std::to_string(o.count));
      if (!got.insert(*n).second) ++duplicates;
      recv.post(*qp, wc->wr_id);
    }
    std::printf("mckey: received %zu of %d%s\n", got.size(), o.count,
                duplicates ? (", " + std::to_string(duplicates) + " duplicates").c_str() : "");
    if (int(got.size()) < o.count) rc = 2;
  }
  check(e.ch->leave_multicast(id, group), "Couldn't leave");
  check(e.ch->destroy_id(id), "Couldn't destroy the id");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"openib-mckey: multicast through the RDMA CM (a group named by its IP address)"};
  app.add_option("-m,--mcast", o.group, "the group's address (e.g. 239.1.2.3)")->required();
  app.add_option("-b,--bind", o.bind, "the local address (its interface's port joins)");
  app.add_flag("-s,--sender", o.sender, "send (default: receive)");
  app.add_option("-C,--count", o.count, "messages (default 10)");
  app.add_option("-S,--size", o.size, "message size (default 100)");
  app.add_option("--start-delay", o.start_delay_ms, "sender: ms to wait after joining, for receivers (default 1000)");
  app.add_option("--delay-us", o.delay_us, "sender: us between messages (default 1000)");
  app.add_option("--wait-file", o.wait_file, "sender: after joining, wait until FILE is gone (at most 120 s)");
  app.add_option("--timeout", o.timeout_s, "seconds to wait for any one event or message (default 10)");
  app.add_option("--socket", o.socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  CLI11_PARSE(app, argc, argv);
  if (o.count <= 0) die("openib-mckey: -C must be positive");
  if (o.size < int(kMinMsg)) die("openib-mckey: -S must be at least " + std::to_string(kMinMsg));
  if (o.start_delay_ms < 0 || o.delay_us < 0) die("openib-mckey: delays must not be negative");
  CmaEnv e = cma_open(o.socket, o.timeout_s);
  return run(e, o);
}

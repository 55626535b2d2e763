// The device seam (src/hca/device.hpp, docs/device-access.md "Device
// drivers"): ibd built with a driver of the test's own in its table
// (ibd_counting.cpp: CountingDevice around simhca's driver, for simhca's
// PCI ID). Clients' RC traffic, the user-MAD service's QP0/QP1, the port
// events and a device recovery all pass through it; INFO names it.
// OPENIB_IBD is that ibd (test/ibd/meson.build).
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "clientproto/socket.hpp"
#include "harness.hpp"
#include "openib/verbs.hpp"
#include "rc_link.hpp"

using namespace openib::testing;
using namespace std::chrono_literals;

namespace {

// The counts of the log's "counting driver:" line (CountingDevice's end).
std::map<std::string, long> counts_in(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (line.rfind("counting driver:", 0) == 0) last = line;
  std::map<std::string, long> out;
  std::istringstream words(last.substr(last.find(':') + 1));
  for (std::string w; words >> w;) {
    auto eq = w.rfind('=');
    if (eq != std::string::npos) out[w.substr(0, eq)] = std::stol(w.substr(eq + 1));
  }
  return out;
}

// One request on a raw client-protocol connection (docs/client-protocol.md
// §1): its reply's status, or -1; the fds that came with it are kept in
// `kept` (a MAD socket's session lasts while its fd is open).
std::vector<openib::UniqueFd> kept;
int call(int fd, openib::proto::Op op, const openib::proto::Bytes& body, uint32_t seq) {
  namespace proto = openib::proto;
  proto::Header h;
  h.op = static_cast<uint16_t>(op);
  h.seq = seq;
  if (!proto::send_message(fd, h, body, {})) return -1;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) return -1;
  auto m = proto::recv_message(fd, true);
  if (!m) return -1;
  for (auto& f : m->fds) kept.push_back(std::move(f));
  auto v = proto::decode_reply(m->body);
  return v ? int(v->status) : -1;
}

}  // namespace

TEST_CASE("ibd over a port that says it is Ethernet: no QP0, no SA query, the link layer told to clients",
          "[driver-seam]") {
  namespace proto = openib::proto;
  TempDir dir;
  IbdOptions o;
  o.log = "info";
  ::setenv("OPENIB_COUNTING_ETHERNET_PORTS", "1", 1);  // the forked ibd inherits it
  auto ibd = std::make_unique<Ibd>(dir.path(), "eth", o);
  ::unsetenv("OPENIB_COUNTING_ETHERNET_PORTS");

  // Libopenib hears the port's link layer from ibd, which asked the seam.
  openib::ContextOptions co;
  co.socket = ibd->socket();
  auto ctx = openib::Context::open(co);
  REQUIRE(ctx.ok());
  auto g = (*ctx)->query_gid_entry(1, 0);
  REQUIRE(g.ok());
  CHECK(g->link_layer == openib::LinkLayer::kEthernet);

  auto s = proto::connect_socket(ibd->socket());
  REQUIRE(s.ok());
  const int fd = s->get();
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  REQUIRE(call(fd, proto::Op::kHello, proto::encode(hello), 1) == 0);
  // No SA on the port: a path query is refused, not sent.
  proto::PathQueryReq q;
  q.port = 1;
  q.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
  CHECK(call(fd, proto::Op::kPathQuery, proto::encode(q), 2) == EOPNOTSUPP);
  if (::geteuid() == 0) {  // the user-MAD service is root's
    // QP1 serves GMPs; an SMP class (QP0) is refused on a port without an SMI.
    REQUIRE(call(fd, proto::Op::kUmadOpen, proto::encode(proto::PortReq{1}), 3) == 0);
    proto::UmadRegReq smp;
    smp.mgmt_class = 0x81;  // directed-route SMPs
    smp.class_version = 1;
    CHECK(call(fd, proto::Op::kUmadRegister, proto::encode(smp), 4) == EOPNOTSUPP);
    proto::UmadRegReq gmp;
    gmp.mgmt_class = 0x04;  // performance management, a GMP class
    gmp.class_version = 1;
    CHECK(call(fd, proto::Op::kUmadRegister, proto::encode(gmp), 5) == 0);
  }
  kept.clear();
  s->reset();
  ctx->reset();

  const std::string log = ibd->log_path();
  auto st = ibd->stop();
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  auto n = counts_in(log);
  REQUIRE_FALSE(n.empty());
  CHECK(n["create_qp.smi"] == 0);  // no QP0 anywhere
  if (::geteuid() == 0) CHECK(n["create_qp.gsi"] >= 1);
  CHECK(n["post_send"] == 0);  // no MAD left: no SA query, no subscription
  CHECK(n["query_port"] >= 1);
}

TEST_CASE("ibd with a driver of the test's own serves clients through the device seam alone", "[driver-seam]") {
  TempDir dir;
  IbdOptions o;
  o.log = "info";
  auto ibd = std::make_unique<Ibd>(dir.path(), "seam", o);
  auto info = ibdctl(ibd->socket(), "devices");
  REQUIRE(info.exited_ok());
  CHECK(info.out.find("\"driver\":\"counting(simhca)\"") != std::string::npos);
  CHECK(info.out.find("\"provider\":\"simhca\"") != std::string::npos);

  rc_pingpong(ibd->socket());
  // A device lost and brought up again, through the seam's life cycle.
  const pid_t sim = ibd->simhca_pid();
  REQUIRE(sim > 0);
  REQUIRE(::kill(sim, SIGKILL) == 0);
  REQUIRE(wait_until([&] { return ibdctl(ibd->socket(), "devices").out.find("\"device_generation\":2") != std::string::npos; }, 30s));
  rc_pingpong(ibd->socket());

  const std::string log = ibd->log_path();
  auto st = ibd->stop();
  REQUIRE(st.has_value());
  CHECK(WIFEXITED(*st));
  CHECK(WEXITSTATUS(*st) == 0);
  auto n = counts_in(log);
  INFO("counts: " << [&] {
    std::string s;
    for (auto& [k, v] : n) s += k + "=" + std::to_string(v) + " ";
    return s;
  }());
  REQUIRE_FALSE(n.empty());
  // Clients' objects (two ping-pongs: each 2 QPs, their CQs, MRs, PDs, UARs).
  CHECK(n["alloc_uar"] >= 4);
  CHECK(n["alloc_pd"] >= 4);
  CHECK(n["create_mkey"] >= 4);
  CHECK(n["create_cq_at"] >= 4);
  CHECK(n["create_qp_at"] >= 4);
  CHECK(n["modify_qp"] >= 12);
  CHECK(n["destroy"] >= 16);
  CHECK(n["uar_page_fd"] >= 4);
  // ibd's own QP0/QP1 (the user-MAD service) in both generations.
  CHECK(n["create_cq"] >= 2);
  CHECK(n["create_qp"] >= 4);
  CHECK(n["post_recv"] > 0);
  CHECK(n["arm_cq"] > 0);
  // The static port setup, the health check, the recovery.
  CHECK(n["set_port"] >= 2);
  CHECK(n["reopen_async"] == 1);
  CHECK(n["close_dead"] >= 1);
  CHECK(n["close"] >= 1);
  CHECK(n["event.port_state_change"] >= 1);
}

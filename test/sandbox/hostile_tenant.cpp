// openib-hostile-tenant: one local user trying to take more of ibd than its
// share and to speak for root's services (issue 29; the sandbox's
// hostile_soak.sh runs many of these as user nobody next to a root rping,
// an IPoIB ping and an mckey). Over the raw client protocol
// (docs/client-protocol.md), on each of --conns connections:
//  - CM: a listener with mask 0 (every service ID), one on the RDMA CM's
//    service ID of --victim-port ((0x0106 << 16) + port), then exact
//    listeners on fresh service IDs until ibd refuses; CM events never read;
//  - RDMA CM: ids until ibd refuses;
//  - SA: multicast joins on fresh MGIDs until ibd refuses, one on the
//    IPoIB broadcast group with bogus parameters, a ServiceRecord with
//    ServiceGID 0 and the ATS ServiceID (the host's own record), fresh
//    services until refused;
// then, for --seconds, PATH_QUERYs for DGIDs no one has (each one a fresh
// SA query unless refused). Every request is bounded (--max-per-kind per
// connection), so the program ends on any ibd, limited or not.
//
// The last line counts each kind by outcome:
//   KIND ok N refused N (errno E: N ...) ...
// and "spoofed" counts the requests that must be refused (the mask-0 and
// RDMA CM listens, the broadcast group join, the ATS record): any success
// among them is printed as "SPOOF ..." and the exit status is 2.
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"

using namespace openib;
namespace proto = openib::proto;
using proto::Op;

namespace {

struct Outcome {
  uint64_t ok = 0;
  std::map<int, uint64_t> refused;  // errno -> count
};

class Conn {
 public:
  explicit Conn(const std::string& socket) {
    auto s = proto::connect_socket(socket);
    if (!s) throw std::runtime_error("connect " + socket + ": " + s.error().message);
    fd_ = std::move(*s);
  }
  // The reply's status (0 or errno), its payload in `payload`; -1: no
  // reply within 20 s or the connection closed.
  int call(Op op, const proto::Bytes& body, std::vector<UniqueFd>* fds = nullptr,
           std::vector<std::byte>* payload = nullptr) {
    proto::Header h;
    h.op = static_cast<uint16_t>(op);
    h.seq = ++seq_;
    if (!proto::send_message(fd_.get(), h, body)) return -1;
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) return -1;
    auto m = proto::recv_message(fd_.get());
    if (!m) return -1;
    auto v = proto::decode_reply(m->body);
    if (!v) return -1;
    if (payload) payload->assign(v->payload.begin(), v->payload.end());
    if (fds) *fds = std::move(m->fds);
    return v->status;
  }
  std::vector<UniqueFd> kept;  // event sockets, held and never read

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"openib-hostile-tenant: take what ibd gives one user, and try to speak for root's services"};
  std::string socket = "/run/ibd/ibd.sock";
  unsigned conns = 4, seconds = 10, max_per_kind = 200000;
  uint16_t victim_port = 7174, pkey = 0xffff;
  uint64_t seed = 1;
  app.add_option("--socket", socket, "ibd's socket")->capture_default_str();
  app.add_option("--conns", conns, "connections")->capture_default_str();
  app.add_option("--seconds", seconds, "how long to query paths and hold everything")->capture_default_str();
  app.add_option("--max-per-kind", max_per_kind, "at most this many requests of a kind per connection")
      ->capture_default_str();
  app.add_option("--victim-port", victim_port, "the TCP port space port of root's RDMA CM server")
      ->capture_default_str();
  app.add_option("--pkey", pkey, "the IPoIB P_Key")->capture_default_str();
  app.add_option("--seed", seed, "makes the fresh IDs of this tenant its own")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(seed);
  std::map<std::string, Outcome> out;
  std::map<std::string, uint64_t> spoofed;
  auto count = [&](const std::string& kind, int status) {
    if (status == 0) {
      ++out[kind].ok;
    } else {
      ++out[kind].refused[status];
    }
    return status;
  };
  // A request that must be refused: one that succeeds is a spoof.
  auto must_refuse = [&](const std::string& kind, int status) {
    count(kind, status);
    if (status == 0) {
      ++spoofed[kind];
      std::printf("SPOOF %s succeeded\n", kind.c_str());
    }
  };

  std::vector<std::unique_ptr<Conn>> cs;
  for (unsigned i = 0; i < conns; ++i) {
    auto c = std::make_unique<Conn>(socket);
    proto::HelloReq h;
    h.flags = proto::kHelloNoUar;
    std::vector<UniqueFd> fds;
    if (count("hello", c->call(Op::kHello, proto::encode(h), &fds)) != 0) continue;
    // The CM: a session whose events are never read.
    if (count("cm_open", c->call(Op::kCmOpen, {}, &fds)) == 0)
      for (auto& f : fds) c->kept.push_back(std::move(f));
    proto::CmListenReq any;
    any.service_id = 0;
    any.service_mask = 0;
    must_refuse("cm_listen_mask0", c->call(Op::kCmListen, proto::encode(any)));
    proto::CmListenReq rdma;
    rdma.service_id = (uint64_t{proto::kRdmaPsTcp} << 16) + victim_port;
    must_refuse("cm_listen_rdma_cm_port", c->call(Op::kCmListen, proto::encode(rdma)));
    for (unsigned n = 0; n < max_per_kind; ++n) {
      proto::CmListenReq l;
      l.service_id = 0x0200000000000000ull | (seed << 32) | (uint64_t{i} << 20) | n;
      if (count("cm_listen", c->call(Op::kCmListen, proto::encode(l))) != 0) break;
    }
    // The RDMA CM: ids.
    if (count("cma_open", c->call(Op::kCmaOpen, {}, &fds)) == 0)
      for (auto& f : fds) c->kept.push_back(std::move(f));
    for (unsigned n = 0; n < max_per_kind; ++n) {
      proto::CmaCreateIdReq r;
      if (count("cma_create_id", c->call(Op::kCmaCreateId, proto::encode(r))) != 0) break;
    }
    // Multicast: fresh groups (a create join with sane parameters), then
    // the IPoIB broadcast group with bogus ones.
    for (unsigned n = 0; n < max_per_kind; ++n) {
      proto::McastJoinReq j;
      j.pkey = pkey;
      j.mgid = {0xff, 0x15, 0xa0, 0x1b};  // not an IPoIB signature
      uint64_t r = rng();
      std::memcpy(j.mgid.data() + 8, &r, 8);
      j.flags = proto::kMcastCreate;
      j.qkey = 0x12345;
      j.mtu = 4;
      j.rate = 3;
      if (count("mcast_join", c->call(Op::kMcastJoin, proto::encode(j))) != 0) break;
    }
    proto::McastJoinReq b;
    b.pkey = pkey;
    b.mgid = {0xff, 0x12, 0x40, 0x1b, uint8_t(pkey >> 8), uint8_t(pkey), 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    b.flags = proto::kMcastCreate;
    b.qkey = 0x66;
    b.mtu = 1;
    b.sl = 9;
    must_refuse("mcast_join_ipoib_broadcast", c->call(Op::kMcastJoin, proto::encode(b)));
    // Services: the host's ATS record with ServiceGID 0, then fresh ones.
    auto service = [&](uint64_t id) {
      proto::ServiceReq s;
      for (int k = 0; k < 8; ++k) s.record[k] = uint8_t(id >> (56 - 8 * k));
      s.record[24] = uint8_t(pkey >> 8);
      s.record[25] = uint8_t(pkey);
      std::memset(s.record.data() + 28, 0xff, 4);  // lease: infinite
      std::memcpy(s.record.data() + 48, "hostile tenant", 14);
      return c->call(Op::kServiceSet, proto::encode(s));
    };
    must_refuse("service_set_ats", service(0x10000CE100415453ull));
    for (unsigned n = 0; n < max_per_kind; ++n)
      if (count("service_set", service(0x0300000000000000ull | (seed << 32) | (uint64_t{i} << 20) | n)) != 0) break;
    cs.push_back(std::move(c));
  }
  std::printf("holding %zu connections\n", cs.size());
  std::fflush(stdout);
  // Fresh path queries for the rest of the time, round robin over the
  // connections (each waits for its answer: the SA's or ibd's refusal).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (uint64_t n = 0; !cs.empty() && std::chrono::steady_clock::now() < end; ++n) {
    proto::PathQueryReq q;
    q.pkey = pkey;
    q.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
    uint64_t r = rng() | 1;
    std::memcpy(q.dgid.data() + 8, &r, 8);
    if (count("path_query", cs[n % cs.size()]->call(Op::kPathQuery, proto::encode(q))) < 0) break;
  }
  std::string line;
  for (const auto& [kind, o] : out) {
    line += kind + " ok " + std::to_string(o.ok);
    uint64_t refused = 0;
    std::string why;
    for (auto [e, n] : o.refused) {
      refused += n;
      why += " " + (e < 0 ? std::string("no-reply") : std::string(std::strerror(e))) + ": " + std::to_string(n);
    }
    line += " refused " + std::to_string(refused) + (why.empty() ? "" : " (" + why.substr(1) + ")") + "; ";
  }
  std::printf("%s\n", line.c_str());
  return spoofed.empty() ? 0 : 2;
}

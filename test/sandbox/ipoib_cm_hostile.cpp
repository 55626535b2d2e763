// openib-ipoib-cm-hostile: a hostile host against another host's IPoIB
// connected-mode listener (RFC 4755; docs/ipoib.md "Connected mode";
// ipoib_cm.sh). As root on the attacking host (the IPoIB-CM service IDs
// are root's to listen on, anyone's to connect to), through libopenib's IB
// CM, to the service ID of the victim's UD QPN:
//
//  - short:    a REQ whose private data is 3 bytes (RFC 4755 §6 wants 8);
//  - stranger: a REQ whose private data names UD QPN 0x777, which is no
//              neighbour the victim knows;
//  - no-rtu:   a well-formed REQ naming --claim-qpn (this host's own IPoIB
//              UD QPN: a neighbour), its QP left to us (manual), the REP
//              never answered with an RTU;
//  - too-long: a well-formed connection, then one SEND of 65537 bytes
//              (64 KiB + 1, above the 65524 a receive takes).
// (A REQ claiming another host's GID is openib-cm-forge's: through ibd a
// REQ carries its own port's.)
//
// One line per case: "CASE: EVENT [reason R] [status S]" for what came
// back, the last "done". The script checks the victim's counters.
//   openib-ipoib-cm-hostile --dgid GID --victim-qpn Q --claim-qpn Q [--case C]...
#include <arpa/inet.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "openib/cm.hpp"
#include "openib/path.hpp"
#include "openib/verbs.hpp"

using namespace openib;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "openib-ipoib-cm-hostile: %s\n", what.c_str());
  std::exit(1);
}
template <class T>
T check(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().str());
  return std::move(*r);
}

struct Env {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<CmChannel> cm;
  PathRecord path;
  uint64_t sid = 0;
  uint32_t claim_qpn = 0;
};

std::vector<uint8_t> private_data(uint32_t qpn, uint32_t mtu) {
  return {uint8_t(qpn >> 24), uint8_t(qpn >> 16), uint8_t(qpn >> 8), uint8_t(qpn),
          uint8_t(mtu >> 24), uint8_t(mtu >> 16), uint8_t(mtu >> 8), uint8_t(mtu)};
}

struct Conn {
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
};

Conn make_conn(Env& e) {
  Conn c;
  c.cq = check(e.ctx->create_cq(8), "create_cq");
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = init.recv_cq = c.cq.get();
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  c.qp = check(e.ctx->create_qp(*e.pd, init), "create_qp");
  return c;
}

std::string describe(const CmEvent& ev) {
  std::string s = cm_event_str(ev.type);
  if (ev.type == CmEventType::kRejected) s += " reason " + std::to_string(ev.reason);
  if (ev.status) s += " status " + std::to_string(ev.status);
  return s;
}

// Waits for the id's next event other than an MRA.
CmEvent next(Env& e, uint32_t id, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    auto ev = e.cm->get_event(100);
    if (!ev) {
      if (ev.error().code == ETIMEDOUT) continue;
      die("CM event: " + ev.error().str());
    }
    if (ev->id == id && ev->type != CmEventType::kMraReceived) return std::move(*ev);
  }
  CmEvent none;
  none.type = CmEventType::kTimeout;
  none.status = ETIMEDOUT;
  return none;
}

void refused_case(Env& e, const char* name, std::vector<uint8_t> pd) {
  Conn c = make_conn(e);
  CmConnParams p;
  p.private_data = std::move(pd);
  const uint32_t id = check(e.cm->connect(*c.qp, e.path, e.sid, p), "connect");
  std::printf("%s: %s\n", name, describe(next(e, id, 20000)).c_str());
  (void)e.cm->destroy(id);
}

// The REP comes; no RTU ever goes. The victim gives up by itself (its REP
// retries, then its passive timeout): a REJ (timeout) reaches us.
void no_rtu(Env& e) {
  Conn c = make_conn(e);
  CmConnParams p;
  p.private_data = private_data(e.claim_qpn, 65524);
  p.manual_qp = true;
  p.cm_response_timeout = 14;  // 4.096 us * 2^14 = 67 ms: what the victim waits for our RTU, each try
  p.max_cm_retries = 2;
  const uint32_t id = check(e.cm->connect(*c.qp, e.path, e.sid, p), "connect");
  CmEvent rep = next(e, id, 20000);
  std::printf("no-rtu: %s\n", describe(rep).c_str());
  if (rep.type != CmEventType::kReply) return;
  CmEvent after = next(e, id, 30000);  // nothing from us meanwhile
  std::printf("no-rtu: then %s\n", describe(after).c_str());
  (void)e.cm->destroy(id);
}

void too_long(Env& e) {
  Conn c = make_conn(e);
  CmConnParams p;
  p.private_data = private_data(e.claim_qpn, 65524);
  const uint32_t id = check(e.cm->connect(*c.qp, e.path, e.sid, p), "connect");
  CmEvent ev = next(e, id, 20000);
  if (ev.type == CmEventType::kReply) ev = next(e, id, 20000);
  std::printf("too-long: %s\n", describe(ev).c_str());
  if (ev.type != CmEventType::kEstablished) return;
  const size_t bytes = 65537;
  auto mr = check(e.ctx->alloc_mr(*e.pd, bytes, kAccessLocalWrite), "alloc_mr");
  std::memset(mr->addr(), 0x5a, bytes);
  Sge sg{reinterpret_cast<uint64_t>(mr->addr()), uint32_t(bytes), mr->lkey()};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg = std::span(&sg, 1);
  if (int err = c.qp->post_send(wr)) die(std::string("post_send: ") + std::strerror(err));
  Wc wc{};
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int n = 0;
  while (n == 0 && std::chrono::steady_clock::now() < end) {
    n = c.cq->poll(std::span(&wc, 1));
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (n <= 0) return void(std::printf("too-long: no completion\n"));
  std::printf("too-long: send of %zu bytes completed with status %d (%s)\n", bytes, int(wc.status),
              wc.status == kWcSuccess ? "success" : "error");
  (void)e.cm->destroy(id);
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket, dgid;
  uint32_t victim_qpn = 0, claim_qpn = 0;
  std::vector<std::string> cases;

  CLI::App app{"openib-ipoib-cm-hostile: hostile REQs and messages against an IPoIB-CM listener"};
  app.add_option("--socket", socket, "ibd's socket");
  app.add_option("--dgid", dgid, "the victim's port GID")->required();
  app.add_option("--victim-qpn", victim_qpn, "the victim's IPoIB UD QPN (its service ID's)")->required();
  app.add_option("--claim-qpn", claim_qpn, "this host's own IPoIB UD QPN (a neighbour of the victim)")->required();
  app.add_option("--case", cases, "short, stranger, no-rtu, too-long (default: all)");
  CLI11_PARSE(app, argc, argv);
  if (cases.empty()) cases = {"short", "stranger", "no-rtu", "too-long"};
  Env e;
  ContextOptions copts;
  copts.socket = socket;
  e.ctx = check(Context::open(copts), "open ibd's device");
  e.pd = check(e.ctx->alloc_pd(), "alloc_pd");
  e.cm = check(CmChannel::open(*e.ctx), "CM channel");
  PathQuery q;
  if (::inet_pton(AF_INET6, dgid.c_str(), q.dgid.raw.data()) != 1) die("not a GID: " + dgid);
  auto r = check(PathResolver::open(*e.ctx), "path resolver");
  e.path = check(r->resolve(q), "no path to the victim");
  e.sid = 0x1000000000000000ull | (victim_qpn & 0xFFFFFF);  // RFC 4755 §3.5
  e.claim_qpn = claim_qpn;
  for (const auto& c : cases) {
    if (c == "short") refused_case(e, "short", {1, 2, 3});
    else if (c == "stranger") refused_case(e, "stranger", private_data(0x777, 65524));
    else if (c == "no-rtu") no_rtu(e);
    else if (c == "too-long") too_long(e);
    else die("unknown case " + c);
  }
  std::printf("done\n");
  return 0;
}

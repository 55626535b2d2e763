// openib-ud-garbage: hostile UD SENDs to an IPoIB QP (issue 16; the
// sandbox's ipoib.sh). Each packet is built to reach one of the IPoIB
// receive path's parsers (src/ipoib_tap/bridge.cpp from_ib, arp.cpp,
// nd.cpp) with something wrong in it: shorter than the 4-byte IPoIB
// header (RFC 4391 §6), unknown EtherTypes, truncated or inconsistent ARP
// (RFC 4391 §8), IPv4 with a bad header or total length (RFC 791 §3.1),
// IPv6 whose payload length runs past the packet (RFC 8200 §3), ICMPv6
// neighbour discovery with a correct checksum but link-layer address
// options of length 0, past the end or in Ethernet form (RFC 4861 §4.6,
// RFC 4391 §9.1.1), the same with a wrong checksum; non-zero reserved
// bytes on top of some; and plain random bytes of random lengths.
//
// Every packet but the random ones is malformed by construction; the
// random ones are counted by what a receiver must do with them (shorter
// than 4 bytes or an unknown EtherType), or as "other" (a random payload
// under a known EtherType, which might even parse). The last line says
// how many of each went:
//   sent N malformed M ethertype E other O qpn OWN_QPN
//   openib-ud-garbage --lid L --qpn Q --qkey K [--count N] [--seed S]
//
// --forge-arp IP (issue 29, finding 11; ipoib.sh): instead, N well-formed
// IB ARP replies (RFC 4391 §8) saying that IP is at the 20-byte address
// --claim-qpn/--claim-gid (RFC 4391 §9.1.1), to --target-ip at the
// receiver, one every --interval-ms (past the kernel's neighbour locktime),
// as an attacker poisoning the receiver's neighbour table would send them.
// The WQEs carry --qkey as given (bit 31 set: the device uses the QP's own,
// IBA 10.2.4 C10-15); the QP's own Q_Key is --qp-qkey (default --qkey when
// that is not controlled, else 0: an unprivileged user may set no other).
//   forged N qpn OWN_QPN
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "../../examples/common.hpp"

using namespace openib;
using namespace openib::examples;

namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint16_t kArp = 0x0806, kIpv4 = 0x0800, kIpv6 = 0x86DD;
constexpr size_t kMaxPacket = 2048;  // the sandbox's IB MTU: one UD message
constexpr uint32_t kBatch = 16;      // sends in flight at once

enum class Expect { malformed, ethertype, other };

void put16(Bytes& b, size_t off, uint16_t v) {
  b[off] = uint8_t(v >> 8);
  b[off + 1] = uint8_t(v);
}

Bytes& operator+=(Bytes& a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
Bytes operator+(Bytes a, const Bytes& b) { return a += b; }

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  // One packet (IPoIB header and payload) and what a receiver must do.
  Expect next(Bytes& p) {
    const unsigned kind = pick(0, 13);
    Expect e = Expect::malformed;
    switch (kind) {
      case 0: p = random_bytes(pick(0, 3)); break;  // shorter than the IPoIB header
      case 1: e = random_packet(p); break;
      case 2: p = header(unknown_ethertype()) + random_bytes(pick(0, 200)), e = Expect::ethertype; break;
      case 3: p = header(kArp) + bad_arp(); break;
      case 4: p = header(kIpv4) + bad_ipv4(); break;
      case 5: p = header(kIpv6) + ipv6_too_long(); break;
      case 6:
      case 7: p = header(kIpv6) + bad_nd(); break;
      case 8: p = header(kIpv6) + nd_bad_checksum(); break;
      case 9: p = header(kIpv6) + short_ipv6(); break;
      default: {  // non-zero reserved bytes on a malformed packet of each kind
        const uint16_t t = kind == 10 ? kArp : kind == 11 ? kIpv4 : kind == 12 ? kIpv6 : unknown_ethertype();
        p = header(t, uint16_t(pick(1, 0xFFFF)));
        p += t == kArp ? bad_arp() : t == kIpv4 ? bad_ipv4() : t == kIpv6 ? bad_nd() : random_bytes(pick(0, 64));
        if (kind == 13) e = Expect::ethertype;
      }
    }
    if (p.size() > kMaxPacket) p.resize(kMaxPacket);
    return e;
  }

 private:
  unsigned pick(unsigned lo, unsigned hi) { return std::uniform_int_distribution<unsigned>(lo, hi)(rng_); }
  uint8_t byte() { return uint8_t(pick(0, 255)); }
  Bytes random_bytes(size_t n) {
    Bytes b(n);
    for (auto& x : b) x = byte();
    return b;
  }
  static Bytes header(uint16_t type, uint16_t reserved = 0) {
    return {uint8_t(type >> 8), uint8_t(type), uint8_t(reserved >> 8), uint8_t(reserved)};
  }
  uint16_t unknown_ethertype() {
    static constexpr uint16_t kSome[] = {0x0000, 0x8100, 0x88B5, 0x8035, 0x86DC, 0x0801, 0x0805, 0xFFFF};
    for (;;) {
      const uint16_t t = pick(0, 1) ? kSome[pick(0, 7)] : uint16_t(pick(0, 0xFFFF));
      if (t != kArp && t != kIpv4 && t != kIpv6) return t;
    }
  }

  // Random bytes of a random length: what a receiver must do follows
  // from the length and the EtherType they happen to start with.
  Expect random_packet(Bytes& p) {
    p = random_bytes(pick(0, kMaxPacket));
    if (p.size() < 4) return Expect::malformed;
    const uint16_t t = uint16_t(p[0] << 8 | p[1]);
    return t == kArp || t == kIpv4 || t == kIpv6 ? Expect::other : Expect::ethertype;
  }

  // IB ARP (RFC 4391 §8: htype 32, ptype 0x0800, hlen 20, plen 4, 56
  // bytes) with one thing wrong.
  Bytes bad_arp() {
    Bytes a(56);
    for (auto& x : a) x = byte();
    put16(a, 0, 32);
    put16(a, 2, kIpv4);
    a[4] = 20;
    a[5] = 4;
    put16(a, 6, uint16_t(pick(1, 2)));
    switch (pick(0, 5)) {
      case 0: put16(a, 0, pick(0, 1) ? 1 : uint16_t(pick(33, 0xFFFF))); break;  // htype
      case 1: a[4] = pick(0, 1) ? 6 : uint8_t(pick(21, 255)); break;             // hlen
      case 2: a[5] = pick(0, 1) ? 16 : uint8_t(pick(5, 255)); break;             // plen
      case 3: put16(a, 2, kIpv6); break;                                         // ptype
      default: a.resize(pick(0, 55)); break;                                     // short
    }
    return a;
  }

  // IPv4 whose header says what the packet is not (RFC 791 §3.1).
  Bytes bad_ipv4() {
    Bytes ip = random_bytes(pick(20, 600));
    ip[0] = 0x45;
    put16(ip, 2, uint16_t(ip.size()));
    switch (pick(0, 4)) {
      case 0: ip[0] = uint8_t(0x40 | pick(0, 4)); break;                      // IHL below 5
      case 1: put16(ip, 2, uint16_t(pick(unsigned(ip.size()) + 1, 0xFFFF))); break;  // beyond the packet
      case 2: ip[0] = 0x4F, put16(ip, 2, uint16_t(pick(20, 59))); break;      // total below the header
      case 3: ip[0] = uint8_t((pick(0, 1) ? 6 : pick(0, 3)) << 4 | 5); break;  // version
      default: ip.resize(pick(0, 19)); break;                                 // shorter than a header
    }
    return ip;
  }

  // An IPv6 header (RFC 8200 §3) from fe80::<random> to `dst`, next header
  // `nh`, payload length the payload's.
  Bytes ipv6(uint8_t nh, const Bytes& payload, bool to_all_nodes) {
    Bytes ip(40);
    ip[0] = 0x60;
    put16(ip, 4, uint16_t(payload.size()));
    ip[6] = nh;
    ip[7] = 255;
    ip[8] = 0xFE, ip[9] = 0x80;
    for (size_t i = 16; i < 24; ++i) ip[i] = byte();
    if (to_all_nodes) {
      ip[24] = 0xFF, ip[25] = 0x02, ip[39] = 1;
    } else {
      ip[24] = 0xFE, ip[25] = 0x80;
      for (size_t i = 32; i < 40; ++i) ip[i] = byte();
    }
    ip += payload;
    return ip;
  }

  Bytes ipv6_too_long() {
    Bytes ip = ipv6(uint8_t(pick(0, 1) ? 17 : 58), random_bytes(pick(0, 400)), pick(0, 1));
    put16(ip, 4, uint16_t(pick(unsigned(ip.size()) - 40 + 1, 0xFFFF)));
    return ip;
  }

  Bytes short_ipv6() {
    Bytes ip = ipv6(58, {}, true);
    ip.resize(pick(0, 39));
    return ip;
  }

  // The ICMPv6 checksum (RFC 4443 §2.3) of an IPv6 packet carrying
  // ICMPv6, written into it.
  static void checksum(Bytes& ip) {
    const size_t len = ip.size() - 40;
    ip[42] = ip[43] = 0;
    uint32_t s = uint32_t(len >> 16) + uint32_t(len & 0xFFFF) + 58;
    for (size_t i = 8; i + 1 < ip.size(); i += 2) s += uint32_t(ip[i] << 8 | ip[i + 1]);
    if (ip.size() % 2) s += uint32_t(ip.back()) << 8;
    while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
    put16(ip, 42, uint16_t(~s));
  }

  // An ND message (RS, RA, NS, NA or Redirect: RFC 4861 §4) with a correct
  // checksum whose options end in a bad one: length 0, running past the
  // end, a lone byte, or a link-layer address option of Ethernet's length
  // 1 where IPoIB's is 3 (RFC 4391 §9.1.1).
  Bytes bad_nd() {
    static constexpr uint8_t kType[] = {133, 134, 135, 136, 137};
    static constexpr size_t kFixed[] = {8, 16, 24, 24, 40};  // bytes before the options
    const unsigned t = pick(0, 4);
    Bytes icmp = random_bytes(kFixed[t]);
    icmp[0] = kType[t];
    icmp[1] = 0;
    if (pick(0, 1)) {  // a good IPoIB source link-layer address option first
      Bytes opt = random_bytes(24);
      opt[0] = 1, opt[1] = 3, opt[2] = opt[3] = 0;
      icmp += opt;
    }
    Bytes bad = random_bytes(pick(8, 40));
    bad[0] = uint8_t(pick(1, 2));
    switch (pick(0, 3)) {
      case 0: bad[1] = 0; break;
      case 1: bad[1] = uint8_t(pick(unsigned(bad.size()) / 8 + 1, 255)); break;
      case 2: bad.resize(1); break;
      default: bad[1] = 1, bad.resize(8); break;
    }
    icmp += bad;
    Bytes ip = ipv6(58, icmp, pick(0, 1));
    checksum(ip);
    return ip;
  }

  Bytes nd_bad_checksum() {
    Bytes icmp = random_bytes(24);
    icmp[0] = uint8_t(pick(135, 136));
    icmp[1] = 0;
    Bytes opt = random_bytes(24);
    opt[0] = 1, opt[1] = 3;
    icmp += opt;
    Bytes ip = ipv6(58, icmp, true);
    checksum(ip);
    ip[42] ^= uint8_t(pick(1, 255));
    return ip;
  }

  std::mt19937_64 rng_;
};

// "fe80:0000:...:0001" or 32 hex digits; false if it is neither.
bool parse_gid(const std::string& text, std::array<uint8_t, 16>& gid) {
  std::string hex;
  for (char c : text)
    if (c != ':') hex.push_back(c);
  if (hex.size() != 32 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return false;
  for (size_t i = 0; i < 16; ++i) gid[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

bool parse_ipv4(const std::string& text, Bytes& out) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(text.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 || c > 255 ||
      d > 255)
    return false;
  out = {uint8_t(a), uint8_t(b), uint8_t(c), uint8_t(d)};
  return true;
}

// An IB ARP reply (RFC 4391 §8: htype 32, ptype IPv4, hlen 20, plen 4,
// oper 2) behind the IPoIB header: sender (sha, spa), target (0, tpa).
Bytes forged_arp_reply(uint32_t sha_qpn, const std::array<uint8_t, 16>& sha_gid, const Bytes& spa, const Bytes& tpa) {
  Bytes p = {0x08, 0x06, 0, 0, 0, 32, 0x08, 0x00, 20, 4, 0, 2};
  p += Bytes{0, uint8_t(sha_qpn >> 16), uint8_t(sha_qpn >> 8), uint8_t(sha_qpn)};
  p += Bytes(sha_gid.begin(), sha_gid.end());
  p += spa;
  p += Bytes(20, 0);
  p += tpa;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t lid = 0, qpn = 0, qkey = 0, count = 1000;
  uint64_t seed = 1;
  std::string socket, forge_ip, claim_gid_text, target_ip_text;
  uint32_t claim_qpn = 0, interval_ms = 100;
  int64_t qp_qkey_in = -1;  // not given
  CLI::App app{"openib-ud-garbage: malformed IPoIB packets as UD SENDs to one QP"};
  app.add_option("--lid", lid, "the receiver's LID")->required()->check(CLI::Range(1, 0xBFFF));
  app.add_option("--qpn", qpn, "the receiver's QPN")->required()->check(CLI::Range(1, 0xFFFFFE));
  app.add_option("--qkey", qkey, "the receiver's Q_Key")->required();
  app.add_option("--count", count, "packets to send (default 1000)");
  app.add_option("--seed", seed, "the generator's seed (default 1)");
  app.add_option("--socket", socket, "ibd's socket (default $OPENIB_SOCKET, else /run/ibd/ibd.sock)");
  auto* forge = app.add_option("--forge-arp", forge_ip, "send forged ARP replies for this IPv4 address instead");
  app.add_option("--claim-qpn", claim_qpn, "the QPN the forged replies name")->needs(forge)->check(CLI::Range(1, 0xFFFFFF));
  app.add_option("--claim-gid", claim_gid_text, "the GID the forged replies name")->needs(forge);
  app.add_option("--target-ip", target_ip_text, "the receiver's IPv4 address (the replies' target)")->needs(forge);
  app.add_option("--interval-ms", interval_ms, "between forged replies (default 100)")->needs(forge);
  app.add_option("--qp-qkey", qp_qkey_in, "the QP's own Q_Key (default: --qkey unless bit 31 is set, else 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{0xFFFFFFFF}));
  CLI11_PARSE(app, argc, argv);
  std::array<uint8_t, 16> claim_gid{};
  Bytes spa, tpa;
  if (!forge_ip.empty() && (!parse_ipv4(forge_ip, spa) || !parse_ipv4(target_ip_text, tpa) ||
                            !parse_gid(claim_gid_text, claim_gid) || claim_qpn == 0))
    die("--forge-arp needs an IPv4 address, --target-ip, --claim-qpn and --claim-gid (32 hex digits)");
  const uint32_t qp_qkey = qp_qkey_in >= 0 ? uint32_t(qp_qkey_in) : (qkey & 0x80000000u) ? 0 : qkey;

  ContextOptions copts;
  copts.socket = socket;
  auto ctx = check(Context::open(copts), "opening ibd's device");
  auto pd = check(ctx->alloc_pd(), "allocating a PD");
  auto mr = check(ctx->alloc_mr(*pd, kBatch * kMaxPacket, 0), "allocating the send buffer");
  auto cq = check(ctx->create_cq(kBatch * 2), "creating the CQ");
  QpInit init;
  init.type = QpType::kUd;
  init.send_cq = init.recv_cq = cq.get();
  init.cap.max_send_wr = kBatch;
  init.cap.max_recv_wr = 1;
  auto qp = check(ctx->create_qp(*pd, init), "creating the UD QP");
  QpAttr a;
  a.state = QpState::kInit;
  a.port = 1;
  a.qkey = qp_qkey;
  check(qp->modify(a, qp_attr::kState | qp_attr::kPkeyIndex | qp_attr::kPort | qp_attr::kQkey), "QP to INIT");
  a = {};
  a.state = QpState::kRtr;
  check(qp->modify(a, qp_attr::kState), "QP to RTR");
  a.state = QpState::kRts;
  check(qp->modify(a, qp_attr::kState | qp_attr::kSqPsn), "QP to RTS");
  AddressVector av;
  av.dlid = uint16_t(lid);
  auto ah = check(ctx->create_ah(*pd, av), "creating the AH");

  // One signaled SEND of `p` from slot 0, waited for.
  auto send_one = [&](const Bytes& p) {
    auto* slot = static_cast<uint8_t*>(mr->addr());
    std::copy(p.begin(), p.end(), slot);
    Sge sg{reinterpret_cast<uint64_t>(slot), uint32_t(p.size()), mr->lkey()};
    SendWr wr;
    wr.flags = kSendSignaled;
    wr.sg = std::span(&sg, 1);
    wr.ah = ah.get();
    wr.remote_qpn = qpn;
    wr.remote_qkey = qkey;
    if (int err = qp->post_send(wr)) die(std::string("posting a send: ") + std::strerror(err));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      Wc wc[1];
      const int k = cq->poll(wc);
      if (k < 0) die("polling the CQ failed");
      if (k == 1 && wc[0].status != kWcSuccess) die(std::string("send completion: ") + wc_status_str(wc[0].status));
      if (k == 1) return;
      if (std::chrono::steady_clock::now() > deadline) die("no send completion for 10 s");
      ::usleep(100);
    }
  };
  if (!forge_ip.empty()) {
    const Bytes p = forged_arp_reply(claim_qpn, claim_gid, spa, tpa);
    for (uint32_t i = 0; i < count; ++i) {
      send_one(p);
      ::usleep(interval_ms * 1000);
    }
    std::printf("forged %u qpn %u\n", count, qp->qp_num());
    return 0;
  }

  Generator gen(seed);
  auto* buf = static_cast<uint8_t*>(mr->addr());
  uint32_t sent = 0, n_malformed = 0, n_ethertype = 0, n_other = 0;
  Bytes p;
  while (sent < count) {
    // A batch in flight, then its completions, then a short pause: the
    // receiver reposts its receive slots as it goes, and a UD packet that
    // finds no receive posted is dropped silently.
    const uint32_t n = std::min(kBatch, count - sent);
    for (uint32_t i = 0; i < n; ++i) {
      const Expect e = gen.next(p);
      n_malformed += e == Expect::malformed, n_ethertype += e == Expect::ethertype, n_other += e == Expect::other;
      uint8_t* slot = buf + size_t(i) * kMaxPacket;
      std::copy(p.begin(), p.end(), slot);
      Sge sg{reinterpret_cast<uint64_t>(slot), uint32_t(p.size()), mr->lkey()};
      SendWr wr;
      wr.wr_id = i;
      wr.flags = kSendSignaled;
      wr.sg = std::span(&sg, p.empty() ? 0 : 1);
      wr.ah = ah.get();
      wr.remote_qpn = qpn;
      wr.remote_qkey = qkey;
      if (int err = qp->post_send(wr)) die(std::string("posting a send: ") + std::strerror(err));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (uint32_t done = 0; done < n;) {
      Wc wc[kBatch];
      const int k = cq->poll(wc);
      if (k < 0) die("polling the CQ failed");
      for (int j = 0; j < k; ++j)
        if (wc[j].status != kWcSuccess)
          die(std::string("send completion: ") + wc_status_str(wc[j].status) + " after " + std::to_string(sent) +
              " sent");
      done += uint32_t(k);
      if (k == 0 && std::chrono::steady_clock::now() > deadline) die("no send completion for 10 s");
      if (k == 0) ::usleep(100);
    }
    sent += n;
    ::usleep(2000);
  }
  std::printf("sent %u malformed %u ethertype %u other %u qpn %u\n", sent, n_malformed, n_ethertype, n_other,
              qp->qp_num());
  return 0;
}

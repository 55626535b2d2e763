// roce_ud_peer: the host side of the qemu-rxe test (docs/qemu-test.md
// "Soft-RoCE peer"). A QEMU guest runs Linux's rdma_rxe with
// `ibv_ud_pingpong` as the server; its NIC is cabled by QEMU's
// `-netdev dgram` to a UDP socket of ours, one Ethernet frame per datagram.
// We play ud_pingpong's client:
//
//  1. the out-of-band exchange over TCP (through QEMU's hostfwd): we send
//     "LLLL:QQQQQQ:PPPPPP:<32 hex digits of GID>\0" (52 bytes), read the
//     server's message of the same form, then send "done\0";
//  2. `--iters` times: one UD SEND Only of `--size` bytes to the server's QPN
//     (Q_Key 0x11111111, P_Key 0xFFFF), then wait for its reply, a UD SEND
//     Only of the same size to our QPN.
//
// Every frame is built by build_roce_frame() and every received frame is
// parsed by parse_roce_frame() (src/sim/wire/roce.hpp); the BTH and DETH are
// encoded and decoded with headers.hpp. What is not RoCEv2 (ARP, IPv6
// neighbour discovery, MLD, ...) is counted by kind. Optionally every frame
// sent and received goes to a pcap file (LINKTYPE_ETHERNET, PcapEthWriter).
//
// Exit status 0 only if the ping-pong completed; the summary on stdout has
// the counts and what rxe's frames looked like.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "sim/wire/headers.hpp"
#include "sim/wire/pcap_erf.hpp"
#include "sim/wire/roce.hpp"

namespace wire = openib::sim::wire;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kUdPingpongQkey = 0x11111111;  // ud_pingpong.c's Q_Key
const std::uint8_t kUdSendOnly = wire::opcode(wire::Transport::kUd, wire::Op::kSendOnly);  // 0x64

struct Options {
  int tcp_port = 0;     // hostfwd to the guest's 18515
  int local_port = 0;   // our end of -netdev dgram (its remote.port)
  int remote_port = 0;  // QEMU's end (its local.port)
  unsigned size = 512;
  unsigned iters = 100;
  std::uint32_t qpn = 0x123;
  std::uint32_t psn = 0x1000;
  wire::Mac mac{0x02, 0, 0, 0, 0, 0x01};
  wire::Mac guest_mac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  in_addr ip{}, guest_ip{};
  std::string pcap;
  int connect_timeout = 180;  // seconds to wait for the guest's server
  int reply_timeout = 20;     // seconds to wait for one reply
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --tcp-port P --local-port H --remote-port G [--size N] [--iters N]\n"
               "          [--qpn N] [--ip A] [--guest-ip A] [--mac M] [--guest-mac M] [--pcap FILE]\n"
               "          [--connect-timeout S] [--reply-timeout S]\n",
               argv0);
  std::exit(2);
}

bool parse_mac(const char* s, wire::Mac& m) {
  unsigned v[6];
  if (std::sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return false;
  for (int i = 0; i < 6; ++i) m[i] = static_cast<std::uint8_t>(v[i]);
  return true;
}

Options parse_args(int argc, char** argv) {
  Options o;
  inet_pton(AF_INET, "198.18.80.1", &o.ip);
  inet_pton(AF_INET, "198.18.80.2", &o.guest_ip);
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const char* v = argv[++i];
    bool ok = true;
    if (a == "--tcp-port") o.tcp_port = std::atoi(v);
    else if (a == "--local-port") o.local_port = std::atoi(v);
    else if (a == "--remote-port") o.remote_port = std::atoi(v);
    else if (a == "--size") o.size = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (a == "--iters") o.iters = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (a == "--qpn") o.qpn = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 0)) & 0xFFFFFF;
    else if (a == "--ip") ok = inet_pton(AF_INET, v, &o.ip) == 1;
    else if (a == "--guest-ip") ok = inet_pton(AF_INET, v, &o.guest_ip) == 1;
    else if (a == "--mac") ok = parse_mac(v, o.mac);
    else if (a == "--guest-mac") ok = parse_mac(v, o.guest_mac);
    else if (a == "--pcap") o.pcap = v;
    else if (a == "--connect-timeout") o.connect_timeout = std::atoi(v);
    else if (a == "--reply-timeout") o.reply_timeout = std::atoi(v);
    else usage(argv[0]);
    if (!ok) {
      std::fprintf(stderr, "bad value for %s: %s\n", argv[i - 1], v);
      std::exit(2);
    }
  }
  if (o.tcp_port <= 0 || o.local_port <= 0 || o.remote_port <= 0 || o.size == 0 || o.iters == 0) usage(argv[0]);
  return o;
}

wire::Gid ipv4_gid(in_addr a) {  // ::ffff:a.b.c.d
  wire::Gid g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(&g[12], &a.s_addr, 4);
  return g;
}

std::string gid_str(const wire::Gid& g) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  return buf;
}

std::string mac_str(const wire::Mac& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}

void log(std::string_view s) {
  std::fprintf(stdout, "roce-ud-peer: %.*s\n", static_cast<int>(s.size()), s.data());
  std::fflush(stdout);
}

// ---- the peer --------------------------------------------------------------

struct Dest {  // ud_pingpong's pingpong_dest
  unsigned lid = 0, qpn = 0, psn = 0;
  wire::Gid gid{};
};

class Peer {
 public:
  explicit Peer(Options o) : o_(std::move(o)) {}
  int run();

 private:
  bool open_udp();
  std::optional<Dest> exchange();
  std::optional<Dest> try_exchange();
  bool send_ping(unsigned i);
  // Receives and classifies frames until `until` or until a reply arrives
  // (when want_reply). Returns true if a reply arrived.
  bool pump(Clock::time_point until, bool want_reply);
  void classify(std::span<const std::byte> frame, bool& got_reply);
  void note_other(std::span<const std::byte> frame);
  void note_rxe_frame(std::span<const std::byte> frame, const wire::RoceFrame& f);
  void summary(bool completed);

  Options o_;
  int udp_ = -1;
  std::unique_ptr<wire::PcapEthWriter> pcap_;
  void capture(std::span<const std::byte> frame) {
    if (pcap_) (void)pcap_->write(frame);
  }
  Dest guest_;
  bool have_guest_ = false;
  std::vector<std::byte> payload_;

  std::uint64_t rx_frames_ = 0, tx_frames_ = 0;
  std::uint64_t roce_good_ = 0, roce_bad_icrc_ = 0, roce_malformed_ = 0, roce_too_big_ = 0;
  std::uint64_t replies_ = 0, replies_bad_ = 0, roce_unexpected_ = 0;
  std::map<std::string, std::uint64_t> other_;
  std::string first_frame_;
  std::set<std::string> rxe_traits_;
  std::set<std::uint16_t> rxe_sports_;
  std::vector<std::uint16_t> ip_ids_;  // of rxe's RoCEv2 frames, in arrival order
};

bool Peer::open_udp() {
  udp_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (udp_ < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(o_.local_port));
  if (bind(udp_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
  a.sin_port = htons(static_cast<std::uint16_t>(o_.remote_port));
  // connect(): only QEMU's end is heard, and send() needs no address.
  return connect(udp_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

// One attempt: QEMU's hostfwd accepts our connection even before the guest
// listens, then closes it when the guest refuses; so a short read means
// "not yet".
std::optional<Dest> Peer::try_exchange() {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return std::nullopt;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(o_.tcp_port));
  timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::optional<Dest> out;
  char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"] = {};
  std::string gid_hex;
  for (auto b : ipv4_gid(o_.ip)) gid_hex += fmt::format("{:02x}", b);
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", 0u, o_.qpn, o_.psn, gid_hex.c_str());
  std::size_t got = 0;
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::write(s, msg, sizeof msg) == static_cast<ssize_t>(sizeof msg)) {
    char in[sizeof msg];
    while (got < sizeof in) {
      ssize_t n = ::read(s, in + got, sizeof in - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    if (got == sizeof in) {
      in[sizeof in - 1] = '\0';
      Dest d;
      char g[33] = {};
      if (std::sscanf(in, "%x:%x:%x:%32s", &d.lid, &d.qpn, &d.psn, g) == 4 && std::strlen(g) == 32) {
        for (int i = 0; i < 16; ++i) {
          unsigned b;
          std::sscanf(g + 2 * i, "%2x", &b);
          d.gid[i] = static_cast<std::uint8_t>(b);
        }
        if (::write(s, "done", sizeof "done") == static_cast<ssize_t>(sizeof "done")) out = d;
      } else {
        log(fmt::format("unparsable server message '{}'", in));
      }
    }
  }
  ::close(s);
  return out;
}

std::optional<Dest> Peer::exchange() {
  auto deadline = Clock::now() + std::chrono::seconds(o_.connect_timeout);
  unsigned attempts = 0;
  while (Clock::now() < deadline) {
    ++attempts;
    if (auto d = try_exchange()) {
      log(fmt::format("exchange done after {} attempt(s): server LID 0x{:04x} QPN 0x{:06x} PSN 0x{:06x} GID {}",
                      attempts, d->lid, d->qpn, d->psn, gid_str(d->gid)));
      return d;
    }
    pump(Clock::now() + 500ms, false);  // meanwhile, count what the guest sends
  }
  log(fmt::format("no ud_pingpong server answered on 127.0.0.1:{} within {}s ({} attempts)", o_.tcp_port,
                  o_.connect_timeout, attempts));
  return std::nullopt;
}

bool Peer::send_ping(unsigned i) {
  // BTH | DETH | payload | pad (to 4 bytes): ud_pingpong sends `size` bytes.
  const unsigned pad = (4 - o_.size % 4) % 4;
  std::vector<std::byte> transport(wire::kBthBytes + wire::kDethBytes + o_.size + pad);
  wire::Bth bth;
  bth.opcode = kUdSendOnly;
  bth.pkey = 0xFFFF;
  bth.pad_cnt = static_cast<std::uint8_t>(pad);
  bth.dest_qp = guest_.qpn;
  bth.psn = (o_.psn + i) & 0xFFFFFF;
  std::byte* p = wire::write_bth(transport.data(), bth);
  p = wire::write_deth(p, wire::Deth{kUdPingpongQkey, o_.qpn});
  std::memcpy(p, payload_.data(), o_.size);
  p[0] = static_cast<std::byte>(i & 0xFF);  // the iteration, for the capture's reader

  wire::RoceAddress a;
  a.dmac = o_.guest_mac;
  a.smac = o_.mac;
  a.ipv4 = true;
  a.sgid = ipv4_gid(o_.ip);
  a.dgid = guest_.gid;
  a.hop_limit = 64;
  a.udp_sport = wire::roce_udp_sport(0, o_.qpn, guest_.qpn);
  std::vector<std::byte> frame(wire::roce_frame_bytes(a, transport.size()));
  auto n = wire::build_roce_frame(a, transport, frame);
  if (!n) {
    log(fmt::format("build_roce_frame: {}", n.error().str()));
    return false;
  }
  if (::send(udp_, frame.data(), *n, 0) != static_cast<ssize_t>(*n)) {
    log(fmt::format("send: {}", std::strerror(errno)));
    return false;
  }
  ++tx_frames_;
  capture(std::span<const std::byte>(frame.data(), *n));
  return true;
}

bool Peer::pump(Clock::time_point until, bool want_reply) {
  std::vector<std::byte> buf(65536);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{udp_, POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left));
    if (r <= 0) continue;
    ssize_t n = ::recv(udp_, buf.data(), buf.size(), 0);
    if (n < 0) continue;  // ECONNREFUSED before QEMU's socket exists, EINTR
    std::span<const std::byte> frame(buf.data(), static_cast<std::size_t>(n));
    bool got = false;
    classify(frame, got);
    if (got && want_reply) return true;
  }
}

void Peer::classify(std::span<const std::byte> frame, bool& got_reply) {
  ++rx_frames_;
  capture(frame);
  auto f = wire::parse_roce_frame(frame);
  if (!f) {
    switch (f.error().code) {
      case ENOENT: note_other(frame); return;
      case EBADMSG: ++roce_bad_icrc_; break;
      case EMSGSIZE: ++roce_too_big_; break;
      default: ++roce_malformed_; break;
    }
    log(fmt::format("RoCEv2 frame #{} ({} bytes) rejected: {}", rx_frames_, frame.size(), f.error().str()));
    if (first_frame_.empty()) first_frame_ = fmt::format("rejected RoCEv2 frame ({})", f.error().message);
    return;
  }
  ++roce_good_;
  note_rxe_frame(frame, *f);
  auto bth = wire::decode_bth(f->transport);
  std::optional<wire::Deth> deth;
  if (bth && f->transport.size() >= wire::kBthBytes + wire::kDethBytes) {
    auto d = wire::decode_deth(f->transport.subspan(wire::kBthBytes));
    if (d) deth = *d;
  }
  std::string what = fmt::format("RoCEv2 opcode 0x{:02x} to QP 0x{:06x}{}, {} bytes", bth ? bth->opcode : 0,
                                 bth ? bth->dest_qp : 0,
                                 deth ? fmt::format(" from QP 0x{:06x} Q_Key 0x{:08x}", deth->src_qp, deth->qkey) : "",
                                 frame.size());
  if (first_frame_.empty()) first_frame_ = what;
  bool is_reply = bth && deth && bth->opcode == kUdSendOnly && bth->dest_qp == o_.qpn;
  if (!is_reply) {
    ++roce_unexpected_;
    log(fmt::format("unexpected RoCEv2 packet: {}", what));
    return;
  }
  std::size_t payload = f->transport.size() - wire::kBthBytes - wire::kDethBytes - bth->pad_cnt;
  if (!have_guest_ || deth->qkey != kUdPingpongQkey || deth->src_qp != guest_.qpn || payload != o_.size ||
      bth->pkey != 0xFFFF) {
    ++replies_bad_;
    log(fmt::format("bad reply: Q_Key 0x{:08x} SrcQP 0x{:06x} P_Key 0x{:04x} payload {} bytes", deth->qkey,
                    deth->src_qp, bth->pkey, payload));
    return;
  }
  ++replies_;
  got_reply = true;
}

// Not RoCEv2 (parse_roce_frame said ENOENT): name the kind. These reads are
// only for the report; nothing is built or accepted from them.
void Peer::note_other(std::span<const std::byte> frame) {
  auto u8 = [&](std::size_t i) { return i < frame.size() ? std::to_integer<unsigned>(frame[i]) : 0u; };
  unsigned et = u8(12) << 8 | u8(13);
  std::string kind;
  if (et == wire::kEtherTypeArp) {
    unsigned op = u8(20) << 8 | u8(21);
    kind = op == 1 ? "ARP request" : op == 2 ? "ARP reply" : "ARP";
  } else if (et == wire::kEtherTypeIpv6) {
    unsigned nh = u8(14 + 6);
    if (nh == 58) {
      unsigned t = u8(14 + 40);
      const char* name = t == 133 ? "router solicitation" : t == 135 ? "neighbour solicitation"
                       : t == 136 ? "neighbour advertisement" : t == 143 ? "MLDv2 report" : "other";
      kind = fmt::format("IPv6 ICMPv6 type {} ({})", t, name);
    } else if (nh == 0) {
      // Hop-by-hop options first (MLD reports carry Router Alert).
      unsigned t = u8(14 + 40 + 8);
      kind = fmt::format("IPv6 hop-by-hop, ICMPv6 type {}{}", t, t == 143 ? " (MLDv2 report)" : "");
    } else {
      kind = fmt::format("IPv6 next header {}", nh);
    }
  } else if (et == wire::kEtherTypeIpv4) {
    unsigned proto = u8(14 + 9);
    if (proto == 17) kind = fmt::format("IPv4 UDP to port {}", u8(14 + 22) << 8 | u8(14 + 23));
    else kind = fmt::format("IPv4 protocol {}", proto);
  } else {
    kind = fmt::format("EtherType 0x{:04x}", et);
  }
  if (first_frame_.empty()) first_frame_ = kind;
  ++other_[kind];
}

// What rxe's IPv4/UDP headers look like (only for the report).
void Peer::note_rxe_frame(std::span<const std::byte> frame, const wire::RoceFrame& f) {
  rxe_sports_.insert(f.addr.udp_sport);
  if (!f.addr.ipv4 || f.addr.vlan_tci) {
    rxe_traits_.insert(f.addr.ipv4 ? "VLAN-tagged" : "IPv6");
    return;
  }
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(frame[i]); };
  const std::size_t ip = wire::kEthHeaderBytes, udp = ip + wire::kIpv4HeaderBytes;
  unsigned id = u8(ip + 4) << 8 | u8(ip + 5);
  unsigned frag = u8(ip + 6) << 8 | u8(ip + 7);
  unsigned csum = u8(udp + 6) << 8 | u8(udp + 7);
  rxe_traits_.insert(fmt::format("TTL {}", f.addr.hop_limit));
  rxe_traits_.insert(fmt::format("TOS 0x{:02x}", f.addr.tclass));
  rxe_traits_.insert(fmt::format("IP flags {}{}", frag & 0x4000 ? "DF" : "-", frag & 0x2000 ? "+MF" : ""));
  ip_ids_.push_back(static_cast<std::uint16_t>(id));
  rxe_traits_.insert(csum == 0 ? "UDP checksum 0" : "UDP checksum set");
  rxe_traits_.insert(fmt::format("src MAC {}", mac_str(f.addr.smac)));
}

void Peer::summary(bool completed) {
  log(fmt::format("frames sent {}, received {}", tx_frames_, rx_frames_));
  log(fmt::format("received RoCEv2: {} parsed with a good ICRC, {} bad ICRC, {} malformed, {} oversized", roce_good_,
                  roce_bad_icrc_, roce_malformed_, roce_too_big_));
  log(fmt::format("replies: {} good, {} bad, {} other RoCEv2 packets", replies_, replies_bad_, roce_unexpected_));
  for (auto& [k, n] : other_) log(fmt::format("other: {} x {}", n, k));
  log(fmt::format("first frame from the guest: {}", first_frame_.empty() ? "none" : first_frame_));
  std::string traits;
  for (auto& t : rxe_traits_) traits += (traits.empty() ? "" : ", ") + t;
  log(fmt::format("rxe's frames: {}", traits.empty() ? "none" : traits));
  std::string sports;
  for (auto s : rxe_sports_) sports += fmt::format("{}0x{:04x}", sports.empty() ? "" : " ", s);
  log(fmt::format("rxe's UDP source ports: {} (ours: 0x{:04x})", sports.empty() ? "none" : sports,
                  wire::roce_udp_sport(0, o_.qpn, guest_.qpn)));
  if (!ip_ids_.empty()) {
    std::size_t steps = 0;
    for (std::size_t i = 1; i < ip_ids_.size(); ++i)
      if (static_cast<std::uint16_t>(ip_ids_[i - 1] + 1) == ip_ids_[i]) ++steps;
    log(fmt::format("rxe's IPv4 IDs: first 0x{:04x}, last 0x{:04x}, {} of {} steps +1", ip_ids_.front(),
                    ip_ids_.back(), steps, ip_ids_.size() - 1));
  }
  if (pcap_) {
    (void)pcap_->flush();
    log(fmt::format("pcap {}: {} frames", o_.pcap, pcap_->records()));
  }
  log(completed ? fmt::format("PINGPONG-COMPLETE iters={} size={}", o_.iters, o_.size) : "PINGPONG-INCOMPLETE");
}

int Peer::run() {
  if (!open_udp()) {
    log(fmt::format("cannot bind/connect UDP 127.0.0.1:{} -> :{}: {}", o_.local_port, o_.remote_port,
                    std::strerror(errno)));
    return 1;
  }
  if (!o_.pcap.empty()) {
    auto w = wire::PcapEthWriter::open(o_.pcap);
    if (!w) {
      log(fmt::format("pcap: {}", w.error().str()));
      return 1;
    }
    pcap_ = std::move(*w);
  }
  payload_.resize(o_.size);
  for (unsigned i = 0; i < o_.size; ++i) payload_[i] = static_cast<std::byte>(0x30 + i % 64);
  log(fmt::format("UDP 127.0.0.1:{} <-> 127.0.0.1:{}, us {} {} QPN 0x{:06x}, guest {}", o_.local_port,
                  o_.remote_port, mac_str(o_.mac), gid_str(ipv4_gid(o_.ip)), o_.qpn, mac_str(o_.guest_mac)));
  auto d = exchange();
  if (!d) {
    summary(false);
    return 1;
  }
  guest_ = *d;
  have_guest_ = true;
  if (guest_.gid != ipv4_gid(o_.guest_ip))
    log(fmt::format("note: server GID {} is not {}", gid_str(guest_.gid), gid_str(ipv4_gid(o_.guest_ip))));
  auto start = Clock::now();
  unsigned done = 0;
  for (; done < o_.iters; ++done) {
    if (!send_ping(done)) break;
    if (!pump(Clock::now() + std::chrono::seconds(o_.reply_timeout), true)) {
      log(fmt::format("no reply to ping {} within {}s", done, o_.reply_timeout));
      break;
    }
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  bool completed = done == o_.iters;
  if (completed) {
    log(fmt::format("{} iters of {} bytes in {:.2f} s = {:.0f} usec/iter", done, o_.size, secs,
                    secs * 1e6 / done));
    pump(Clock::now() + 300ms, false);  // stragglers (nothing expected)
  }
  summary(completed);
  return completed && replies_bad_ == 0 && roce_bad_icrc_ == 0 && roce_malformed_ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Peer peer(parse_args(argc, argv));
  return peer.run();
}

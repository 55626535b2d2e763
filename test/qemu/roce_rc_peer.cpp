// roce_rc_peer: the host side of the qemu-rxe-rc test (docs/qemu-test.md
// "Soft-RoCE RC test"). It starts a simhca whose port 1 is an Ethernet
// (RoCEv2) port cabled to QEMU's `-netdev dgram` (one Ethernet frame per UDP
// datagram), drives it with the HCA driver (src/hca) over vfio-user, and
// plays both roles of rdma-core 44's `ibv_rc_pingpong` against the guest's
// Linux rxe:
//
//  client  the guest runs the server (`ibv_rc_pingpong -g N -s S -n I --chk`);
//          we reach its TCP exchange through QEMU's hostfwd (--tcp-port),
//          send "LLLL:QQQQQQ:PPPPPP:<GID>\0", read its message, send "done\0",
//          bring our RC QP to RTS and ping-pong I SENDs of S bytes. Each
//          message has a pattern of its own (zero at every 4 KiB page start,
//          which the guest's --chk checks) and the guest's reply, which
//          rc_pingpong sends from the buffer it received into, must be that
//          message byte for byte.
//  server  the guest runs the client (`ibv_rc_pingpong ... 10.0.2.100`);
//          QEMU's guestfwd connects 10.0.2.100:18515 in the guest to our
//          listening socket (--listen-port, opened before QEMU starts). We
//          read its message, bring our QP to RTS, answer, expect "done\0",
//          then answer each SEND. The first SEND must be --chk's client
//          buffer (0x7b, zero at page starts); each later one our previous
//          reply, which the guest received into its buffer and sent back.
//
// Every completion is checked (status, opcode, length) and every byte of
// every received message compared. Exit status 0 only if every role asked
// for completed with everything verified. simhca's counters (logged when
// the driver leaves) are printed at the end.
//
//   roce_rc_peer --simhca PATH --local-port H --remote-port G
//                [--tcp-port P] [--listen-port L] [--size N] [--iters N]
//                [--pcap FILE] [--timeout S] [--guest-mac M] [--console FILE]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hca/hca.hpp"
#include "hca/prm.hpp"
#include "vfio/device.hpp"

namespace fs = std::filesystem;
using namespace openib;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kPage = 4096;        // the guest's page size (x86-64): --chk's unit
constexpr uint8_t kChkFill = 0x7b;     // rc_pingpong's memset of its buffer
constexpr unsigned kRxDepth = 16;      // receives we keep posted
constexpr size_t kMsgLen = 52;         // sizeof "0000:000000:000000:" + 32 hex digits
constexpr uint8_t kRoceSgidIndex = 1;  // our ::ffff:198.18.80.1 entry
constexpr const char* kServerStartMarker = "OPENIB-RC-SERVER-START";

volatile sig_atomic_t g_stop = 0;
pid_t g_child = -1;

void on_signal(int) {
  g_stop = 1;
  if (g_child > 0) ::kill(g_child, SIGTERM);
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }
void must(Result<void> r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().str());
}
template <typename T>
T must(Result<T> r, const char* what) {
  if (!r) fail(std::string(what) + ": " + r.error().str());
  return std::move(r).value();
}

void log(const std::string& s) { std::printf("roce-rc-peer: %s\n", s.c_str()); }

struct Options {
  std::string simhca, pcap;
  int local_port = 0, remote_port = 0;  // our end of -netdev dgram, QEMU's
  int tcp_port = 0;                     // client role: hostfwd to the guest's 18515
  int listen_port = 0;                  // server role: guestfwd's target
  size_t size = 4096;
  unsigned iters = 200;
  int timeout = 240;  // seconds for the whole run
  // Client role: before the first connection, wait until this file (the
  // guest's serial console) contains kServerStartMarker. Connecting earlier,
  // while the guest's exchange NIC is still down, leaves slirp retrying its
  // SYN to the guest with backoff (seen: 12 s).
  std::string console;
  std::array<uint8_t, 6> guest_mac{0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  uint64_t guid = 0x1234000000000000ull;  // MAC 02:00:00:00:00:01 (ethernet_port.cpp)
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --simhca PATH --local-port H --remote-port G [--tcp-port P] [--listen-port L]\n"
               "          [--size N] [--iters N] [--pcap FILE] [--timeout S] [--guest-mac M] [--guid HEX]\n"
               "          [--console FILE]\n",
               argv0);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const char* v = argv[++i];
    if (a == "--simhca") o.simhca = v;
    else if (a == "--pcap") o.pcap = v;
    else if (a == "--local-port") o.local_port = std::atoi(v);
    else if (a == "--remote-port") o.remote_port = std::atoi(v);
    else if (a == "--tcp-port") o.tcp_port = std::atoi(v);
    else if (a == "--listen-port") o.listen_port = std::atoi(v);
    else if (a == "--size") o.size = std::strtoul(v, nullptr, 0);
    else if (a == "--iters") o.iters = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (a == "--timeout") o.timeout = std::atoi(v);
    else if (a == "--console") o.console = v;
    else if (a == "--guid") o.guid = std::strtoull(v, nullptr, 16);
    else if (a == "--guest-mac") {
      unsigned m[6];
      if (std::sscanf(v, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) usage(argv[0]);
      for (int k = 0; k < 6; ++k) o.guest_mac[size_t(k)] = static_cast<uint8_t>(m[k]);
    } else usage(argv[0]);
  }
  if (o.simhca.empty() || o.local_port <= 0 || o.remote_port <= 0 || (o.tcp_port <= 0 && o.listen_port <= 0) ||
      o.size == 0 || o.iters == 0)
    usage(argv[0]);
  return o;
}

Clock::time_point g_deadline;
void check_deadline(const char* what) {
  if (g_stop) fail(std::string(what) + ": interrupted");
  if (Clock::now() > g_deadline) fail(std::string(what) + ": overall timeout");
}

// ---- the TCP exchange (rc_pingpong's pp_*_exch_dest) -------------------------

struct Dest {
  unsigned lid = 0, qpn = 0, psn = 0;
  std::array<uint8_t, 16> gid{};
};

std::string gid_text(const std::array<uint8_t, 16>& g) {
  char b[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, g.data(), b, sizeof b);
  return b;
}

// "%04x:%06x:%06x:%s" with the GID as 32 hex digits of its bytes in order
// (pingpong.c's gid_to_wire_gid), and the terminating NUL: 52 bytes.
std::string encode_dest(const Dest& d) {
  char m[kMsgLen + 8];
  int n = std::snprintf(m, sizeof m, "%04x:%06x:%06x:", d.lid, d.qpn, d.psn);
  for (uint8_t b : d.gid) n += std::snprintf(m + n, sizeof m - size_t(n), "%02x", b);
  return std::string(m, kMsgLen);  // includes the NUL
}

Dest decode_dest(const char* m) {
  Dest d;
  char gid[33] = {};
  if (std::sscanf(m, "%x:%x:%x:%32s", &d.lid, &d.qpn, &d.psn, gid) != 4 || std::strlen(gid) != 32)
    fail(std::string("bad address message from the guest: ") + std::string(m, strnlen(m, kMsgLen)));
  for (size_t i = 0; i < 16; ++i) {
    unsigned v = 0;
    std::sscanf(gid + 2 * i, "%2x", &v);
    d.gid[i] = static_cast<uint8_t>(v);
  }
  return d;
}

// Reads exactly n bytes, or fewer if the peer closes; fails on timeout.
size_t read_full(int fd, char* p, size_t n, int timeout_s, const char* what) {
  size_t got = 0;
  const auto end = Clock::now() + std::chrono::seconds(timeout_s);
  while (got < n) {
    check_deadline(what);
    if (Clock::now() > end) fail(std::string(what) + ": timed out");
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 200) <= 0) continue;
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  return got;
}

void write_full(int fd, const void* p, size_t n, const char* what) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != ssize_t(n)) fail(std::string(what) + ": write failed");
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// ---- the simhca child --------------------------------------------------------

struct Child {
  std::string dir;
  ~Child() {
    stop();
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  void start(const Options& o) {
    std::vector<std::string> args{o.simhca, "--log", "info", "--socket", dir + "/hca.sock",
                                  "--guid", fmt_hex(o.guid), "--link-layer", "ethernet", "--port1",
                                  "LOCAL=127.0.0.1:" + std::to_string(o.local_port) +
                                      ",PEER=127.0.0.1:" + std::to_string(o.remote_port)};
    if (!o.pcap.empty()) args.insert(args.end(), {"--pcap", o.pcap});
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      std::freopen((dir + "/simhca.log").c_str(), "w", stderr);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    g_child = pid;
  }
  // SIGTERM, 5 s, then SIGKILL: by PID only.
  void stop() {
    if (g_child <= 0) return;
    ::kill(g_child, SIGTERM);
    int st = 0;
    for (int i = 0; i < 500 && ::waitpid(g_child, &st, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(g_child, &st, WNOHANG) == 0) {
      ::kill(g_child, SIGKILL);
      ::waitpid(g_child, &st, 0);
    }
    g_child = -1;
  }
  static std::string fmt_hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
  }
};

// ---- the HCA -----------------------------------------------------------------

struct Side {
  // Message slots: [0, kRxDepth) receives, kRxDepth the send buffer.
  Side(const std::string& sock, const Options& o) : size(o.size), slot(round_up(o.size)) {
    auto d = vfio::open_device("vfio-user:" + sock);
    for (int i = 0; i < 500 && !d && !g_stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      d = vfio::open_device("vfio-user:" + sock);
    }
    dev = must(std::move(d), "connect to simhca");
    hca = must(hca::Hca::open(*dev, io), "bring-up");
    // An Ethernet port is Active once cabled (no SM); wait for it briefly.
    hca::PortAttr pa{};
    for (int i = 0; i < 200; ++i) {
      pa = must(hca->query_port(1), "QUERY_PORT");
      if (pa.state == hca::kPortActive) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (pa.link_layer != hca::LinkLayer::kEthernet) fail("port 1 is not an Ethernet port");
    if (pa.state != hca::kPortActive) fail("port 1 not Active");
    // GID entry 1: the RoCEv2 GID of our IP, ::ffff:198.18.80.1.
    hca::GidEntry ge;
    ge.type = hca::GidType::kRoceV2;
    ge.gid[10] = ge.gid[11] = 0xff;
    ge.gid[12] = 198, ge.gid[13] = 18, ge.gid[14] = 80, ge.gid[15] = 1;
    must(hca->command(hca::prm::kOpSetGid, hca::encode_set_gid(1, kRoceSgidIndex, ge), 0), "SET_GID");
    gid = ge.gid;
    char mac[24];
    const uint64_t g = pa.port_guid;
    std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", unsigned((g >> 56) & 0xff) ^ 2,
                  unsigned((g >> 48) & 0xff), unsigned((g >> 40) & 0xff), unsigned((g >> 16) & 0xff),
                  unsigned((g >> 8) & 0xff), unsigned(g & 0xff));
    log(std::string("port 1 Ethernet, Active, active MTU ") + std::to_string(128 << pa.active_mtu) + ", MAC " +
        mac + ", GID[1] " + gid_text(gid) + " (RoCE v2)");
    pd = must(hca->alloc_pd(), "ALLOC_PD");
    cq = must(hca->create_cq(8), "CREATE_CQ");
    const size_t len = slot * (kRxDepth + 1);
    buf = must(hca->pool().alloc(len, 4096), "DMA buffer");
    hca::MkeyParams mp;
    mp.pdn = pd;
    mp.access = hca::kAccessLocalWrite;
    mp.start_va = va(0);
    mp.length = len;
    for (uint64_t i = 0; i < len / 4096; ++i) mp.pages.push_back(buf.iova() + i * 4096);
    key = must(hca->create_mkey(mp), "CREATE_MKEY").lkey;
  }
  static size_t round_up(size_t n) { return (n + 4095) / 4096 * 4096; }
  uint8_t* p(size_t s) { return static_cast<uint8_t*>(buf.data()) + s * slot; }
  uint64_t va(size_t s) { return reinterpret_cast<uint64_t>(p(s)); }

  hca::Qp rc_qp() {
    hca::QpInit in;
    in.type = hca::QpType::kRc;
    in.pdn = pd;
    in.send_cqn = in.recv_cqn = cq.cqn;
    in.log_rq_size = 4;
    return must(hca->create_qp(in), "CREATE_QP");
  }
  // rc_pingpong's pp_connect_ctx, with the RoCE address vector.
  void connect(const hca::Qp& q, const Dest& remote, uint32_t my_psn, const Options& o) {
    using namespace hca::qp_attr;
    hca::QpAttr a;
    a.port = 1;
    a.pkey_index = 0;
    a.access = 0;
    a.state = hca::QpState::kInit;
    must(hca->modify_qp(q.qpn, kState | kPkeyIndex | kPort | kAccessFlags, a), "modify to INIT");
    a.state = hca::QpState::kRtr;
    a.path_mtu = 3;  // 1024, rc_pingpong's default -m
    a.dest_qpn = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.av.port = 1;
    a.av.dlid = 0;  // RoCE: no LIDs
    a.av.grh = true;
    a.av.sgid_index = kRoceSgidIndex;
    a.av.hop_limit = 64;
    a.av.dgid = remote.gid;
    a.av.dmac = o.guest_mac;
    auto r = hca->modify_qp(q.qpn, kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer, a);
    if (!r) {
      // The device may still insist on a non-zero DLID for a connected path
      // (docs/simhca.md §7.6); it is not used on an Ethernet port.
      log("RTR with DLID 0 refused (" + r.error().str() + "); retrying with DLID 1");
      a.av.dlid = 1;
      must(hca->modify_qp(q.qpn, kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer, a),
           "modify to RTR");
    }
    a.state = hca::QpState::kRts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    must(hca->modify_qp(q.qpn, kState | kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic, a),
         "modify to RTS");
  }
  void post_recv(hca::Qp& q, size_t s) {
    must(hca->post_recv(q, {s, {{va(s), uint32_t(size), key}}}), "post_recv");
  }
  void post_send(hca::Qp& q) {
    hca::SendWr w;
    w.wr_id = kRxDepth;
    w.sg = {{va(kRxDepth), uint32_t(size), key}};
    must(hca->post_send(q, w), "post_send");
  }
  // Polls until one send and one receive completed (rc_pingpong's pending
  // bits); returns the receive's completion.
  hca::WorkCompletion wait_pair(bool want_send, const char* what) {
    bool got_recv = false, got_send = !want_send;
    hca::WorkCompletion rx{};
    const auto end = Clock::now() + std::chrono::seconds(30);
    while (!(got_recv && got_send)) {
      check_deadline(what);
      if (Clock::now() > end) fail(std::string(what) + ": no completion within 30 s");
      auto cs = hca->poll_cq(cq, 4);
      if (cs.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      for (auto& c : cs) {
        if (c.status != hca::kWcSuccess)
          fail(std::string(what) + ": completion status " + std::to_string(c.status) + " (vendor " +
               std::to_string(c.vendor_err) + ") for wr_id " + std::to_string(c.wr_id));
        if (c.wr_id == kRxDepth) {
          if (c.opcode != hca::kWcSend || got_send) fail(std::string(what) + ": unexpected send completion");
          got_send = true;
        } else {
          if (c.opcode != hca::kWcRecv || got_recv) fail(std::string(what) + ": unexpected receive completion");
          got_recv = true;
          rx = c;
        }
      }
    }
    return rx;
  }

  boost::asio::io_context io;
  std::unique_ptr<vfio::Device> dev;
  std::unique_ptr<hca::Hca> hca;
  size_t size, slot;
  uint32_t pd = 0, key = 0;
  std::array<uint8_t, 16> gid{};
  hca::Cq cq;
  dma::DmaBuffer buf;
};

// Message k's bytes: zero at every page start (rc_pingpong --chk's check),
// elsewhere an xorshift stream seeded by k (never a run of 0x7b).
void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 0x9e3779b1u + 0x7f4a7c15u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = i % kPage == 0 ? 0 : static_cast<uint8_t>(x);
  }
}
// The buffer of rc_pingpong --chk's client before its first SEND.
void fill_chk(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = i % kPage == 0 ? 0 : kChkFill;
}

struct Totals {
  unsigned iters = 0;
  uint64_t bytes_sent = 0, bytes_verified = 0;
  double seconds = 0;
};

// Compares a received message with the expected bytes.
void verify(const uint8_t* got, const uint8_t* want, size_t n, const hca::WorkCompletion& c, size_t size,
            const std::string& what) {
  if (c.byte_len != size) fail(what + ": received " + std::to_string(c.byte_len) + " bytes, expected " +
                               std::to_string(size));
  if (std::memcmp(got, want, n) != 0) {
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    char b[96];
    std::snprintf(b, sizeof b, ": byte %zu is 0x%02x, expected 0x%02x", i, got[i], want[i]);
    fail(what + b);
  }
}

// The guest is the server: we are rc_pingpong's client.
Totals run_client(Side& s, const Options& o) {
  hca::Qp qp = s.rc_qp();
  const uint32_t psn = 0x0c1000 | (qp.qpn & 0xff);
  Dest me{0, qp.qpn, psn, s.gid};
  const std::string mine = encode_dest(me);
  if (!o.console.empty()) {
    for (;;) {
      check_deadline("client: waiting for the guest's server to start");
      std::ifstream in(o.console);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.find(kServerStartMarker) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // The hostfwd accepts before the guest listens, then drops the
  // connection: retry until the guest's server answers.
  char msg[kMsgLen];
  Fd sock;
  for (int attempt = 1;; ++attempt) {
    check_deadline("client: waiting for the guest's server");
    Fd c(::socket(AF_INET, SOCK_STREAM, 0));
    const sockaddr_in a = loopback(o.tcp_port);
    if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0 &&
        ::send(c.fd, mine.data(), kMsgLen, MSG_NOSIGNAL) == ssize_t(kMsgLen) &&
        read_full(c.fd, msg, kMsgLen, o.timeout, "client: reading the server's address") == kMsgLen) {
      log("client: connected to the guest's server after " + std::to_string(attempt) + " attempt(s)");
      sock = std::move(c);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const Dest guest = decode_dest(msg);
  write_full(sock.fd, "done", 5, "client: done");
  log("client: local  QPN 0x" + Child::fmt_hex(me.qpn).substr(10) + " PSN 0x" + Child::fmt_hex(me.psn).substr(10) +
      " GID " + gid_text(me.gid));
  log("client: remote QPN 0x" + Child::fmt_hex(guest.qpn).substr(10) + " PSN 0x" +
      Child::fmt_hex(guest.psn).substr(10) + " LID " + std::to_string(guest.lid) + " GID " + gid_text(guest.gid));
  for (size_t r = 0; r < kRxDepth; ++r) s.post_recv(qp, r);
  s.connect(qp, guest, psn, o);
  Totals t;
  const auto start = Clock::now();
  for (unsigned k = 0; k < o.iters; ++k) {
    fill_pattern(s.p(kRxDepth), o.size, k + 1);
    s.post_send(qp);
    const std::string what = "client: iteration " + std::to_string(k + 1);
    const auto c = s.wait_pair(true, what.c_str());
    verify(s.p(c.wr_id), s.p(kRxDepth), o.size, c, o.size, what + " (the guest's echo)");
    s.post_recv(qp, c.wr_id);
    ++t.iters;
    t.bytes_sent += o.size;
    t.bytes_verified += o.size;
  }
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  must(s.hca->destroy_qp(qp), "DESTROY_QP");
  return t;
}

// The guest is the client: we are rc_pingpong's server, on the socket
// QEMU's guestfwd connected at start-up.
Totals run_server(Side& s, const Options& o, int listen_fd) {
  check_deadline("server");
  pollfd pf{listen_fd, POLLIN, 0};
  while (::poll(&pf, 1, 200) <= 0) check_deadline("server: waiting for guestfwd's connection");
  Fd conn(::accept(listen_fd, nullptr, nullptr));
  if (conn.fd < 0) fail("server: accept failed");
  char msg[kMsgLen];
  if (read_full(conn.fd, msg, kMsgLen, o.timeout, "server: reading the client's address") != kMsgLen)
    fail("server: the guest's client closed before sending its address");
  const Dest guest = decode_dest(msg);
  hca::Qp qp = s.rc_qp();
  const uint32_t psn = 0x0d2000 | (qp.qpn & 0xff);
  for (size_t r = 0; r < kRxDepth; ++r) s.post_recv(qp, r);
  s.connect(qp, guest, psn, o);
  Dest me{0, qp.qpn, psn, s.gid};
  const std::string mine = encode_dest(me);
  write_full(conn.fd, mine.data(), kMsgLen, "server: sending our address");
  char done[5];
  if (read_full(conn.fd, done, 5, 60, "server: reading done") != 5 || std::memcmp(done, "done", 5) != 0)
    fail("server: no \"done\" from the guest's client");
  log("server: local  QPN 0x" + Child::fmt_hex(me.qpn).substr(10) + " PSN 0x" + Child::fmt_hex(me.psn).substr(10) +
      " GID " + gid_text(me.gid));
  log("server: remote QPN 0x" + Child::fmt_hex(guest.qpn).substr(10) + " PSN 0x" +
      Child::fmt_hex(guest.psn).substr(10) + " LID " + std::to_string(guest.lid) + " GID " + gid_text(guest.gid));
  Totals t;
  std::vector<uint8_t> want(o.size);
  fill_chk(want.data(), o.size);  // the client's first SEND: its --chk buffer
  auto start = Clock::now();
  for (unsigned k = 0; k < o.iters; ++k) {
    const std::string what = "server: iteration " + std::to_string(k + 1);
    const auto c = s.wait_pair(false, what.c_str());
    if (k == 0) start = Clock::now();
    verify(s.p(c.wr_id), want.data(), o.size, c, o.size,
           what + (k == 0 ? " (the client's --chk buffer)" : " (our previous reply, sent back)"));
    t.bytes_verified += o.size;
    s.post_recv(qp, c.wr_id);
    fill_pattern(s.p(kRxDepth), o.size, 0x10000 + k);
    std::memcpy(want.data(), s.p(kRxDepth), o.size);
    s.post_send(qp);
    // Our reply must be acknowledged before the next SEND can come (the
    // client waits for both); take the send completion now.
    const auto end = Clock::now() + std::chrono::seconds(30);
    for (bool sent = false; !sent;) {
      check_deadline(what.c_str());
      if (Clock::now() > end) fail(what + ": reply not acknowledged within 30 s");
      auto cs = s.hca->poll_cq(s.cq, 1);
      if (cs.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      if (cs[0].status != hca::kWcSuccess || cs[0].opcode != hca::kWcSend || cs[0].wr_id != kRxDepth)
        fail(what + ": reply completion status " + std::to_string(cs[0].status) + " opcode " +
             std::to_string(cs[0].opcode));
      sent = true;
    }
    ++t.iters;
    t.bytes_sent += o.size;
  }
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  must(s.hca->destroy_qp(qp), "DESTROY_QP");
  return t;
}

void report(const char* role, const Totals& t, const Options& o) {
  char b[256];
  std::snprintf(b, sizeof b, "RC-%s-COMPLETE iters=%u size=%zu sent=%llu verified=%llu bytes in %.2f s (%.0f us/iter)",
                role, t.iters, o.size, static_cast<unsigned long long>(t.bytes_sent),
                static_cast<unsigned long long>(t.bytes_verified), t.seconds,
                t.iters ? t.seconds * 1e6 / t.iters : 0.0);
  log(b);
}

int run(const Options& o, Child& child) {
  // The server role's socket exists before QEMU starts: guestfwd connects
  // to it at start-up.
  Fd listener;
  if (o.listen_port > 0) {
    listener = Fd(::socket(AF_INET, SOCK_STREAM, 0));
    int one = 1;
    ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in a = loopback(o.listen_port);
    if (::bind(listener.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listener.fd, 1) != 0)
      fail("cannot listen on 127.0.0.1:" + std::to_string(o.listen_port));
  }
  child.start(o);
  log("simhca pid " + std::to_string(g_child) + ", port 1 udp 127.0.0.1:" + std::to_string(o.local_port) +
      " <-> QEMU 127.0.0.1:" + std::to_string(o.remote_port));
  int failures = 0;
  {
    Side s(child.dir + "/hca.sock", o);
    log("READY");  // rxe_rc.sh starts QEMU after this line
    std::fflush(stdout);
    if (o.tcp_port > 0) {
      try {
        report("CLIENT", run_client(s, o), o);
      } catch (const std::exception& e) {
        log(std::string("client role FAILED: ") + e.what());
        ++failures;
      }
    }
    if (o.listen_port > 0 && !g_stop) {
      try {
        report("SERVER", run_server(s, o, listener.fd), o);
      } catch (const std::exception& e) {
        log(std::string("server role FAILED: ") + e.what());
        ++failures;
      }
    }
  }  // the driver leaves: simhca logs its counters
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  child.stop();
  std::ifstream in(child.dir + "/simhca.log");
  for (std::string l; std::getline(in, l);)
    if (l.find("simhca: data path:") != std::string::npos || l.find("simhca: ethernet:") != std::string::npos ||
        l.find("error") != std::string::npos || l.find("warn") != std::string::npos)
      std::printf("%s\n", l.c_str());
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Options o = parse_args(argc, argv);
  g_deadline = Clock::now() + std::chrono::seconds(o.timeout);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  Child child;
  char tmpl[] = "/tmp/openib-rc-peer-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("roce-rc-peer: mkdtemp");
    return 1;
  }
  child.dir = tmpl;
  int failures = 0;
  try {
    failures = run(o, child);
  } catch (const std::exception& e) {
    log(std::string("FAILED: ") + e.what());
    return 1;
  }
  if (failures) {
    log(std::to_string(failures) + " role(s) failed");
    return 1;
  }
  log("all roles verified");
  return 0;
}

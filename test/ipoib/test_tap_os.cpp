// The IPoIB bridge's OS side against the real kernel (src/ipoib_tap;
// docs/ipoib.md "The TAP interface", "ATS registration"), with no ibd:
// a TAP interface, its MAC, MTU and carrier as `ip link` and sysfs show
// them, its addresses followed through rtnetlink, and frames both ways.
// The process moves itself into a network and mount namespace of its
// own first (unshare, a fresh sysfs), so nothing outside sees the
// interfaces and nothing is left behind: the namespace ends with the
// process, however it ends. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "ipoib_tap/addr_watch.hpp"
#include "ipoib_tap/gso.hpp"
#include "ipoib_tap/tap_device.hpp"
#include "ipoib_tap/too_big.hpp"
#include "../unit/shell.hpp"

using namespace openib;
using openib::test::must;
using openib::test::sh;
using namespace openib::ipoib;
using Mac = std::array<std::uint8_t, 6>;

namespace {

constexpr auto kPatience = std::chrono::seconds(10);  // a bound, not a measure

// Once per process: a network namespace (with only `lo`) and a mount
// namespace whose /sys shows it.
void private_namespaces() {
  static bool done = [] {
    int r = ::unshare(CLONE_NEWNET | CLONE_NEWNS);
    INFO("unshare(CLONE_NEWNET | CLONE_NEWNS) needs root: " << std::strerror(errno));
    REQUIRE(r == 0);
    REQUIRE(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0);
    REQUIRE(::umount2("/sys", MNT_DETACH) == 0);
    REQUIRE(::mount("sysfs", "/sys", "sysfs", 0, nullptr) == 0);
    return true;
  }();
  (void)done;
}

std::string sysfs(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

TapDevice open_tap(const std::string& name, const Mac& mac, std::uint32_t mtu) {
  private_namespaces();
  auto t = TapDevice::open(name, mac, mtu);
  INFO((t.ok() ? std::string() : t.error().str()));
  REQUIRE(t.ok());
  return std::move(*t);
}

// Runs `io` until `done()` or kPatience has passed; answers done().
template <typename Pred>
bool run_until(boost::asio::io_context& io, Pred done) {
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  return done();
}

// The watch's reports replayed into a set, to compare with addresses().
struct Reports {
  std::set<std::string> now;
  std::vector<std::string> log;
  AddrWatch::Callback cb() {
    return [this](bool added, const IpAddr& a) {
      log.push_back((added ? "+" : "-") + a.to_string());
      if (added) now.insert(a.to_string()); else now.erase(a.to_string());
    };
  }
  bool has(const std::string& a) const { return now.count(a) > 0; }
  bool logged(const std::string& entry) const {
    for (const auto& l : log)
      if (l == entry) return true;
    return false;
  }
};
std::set<std::string> texts(const std::set<IpAddr>& s) {
  std::set<std::string> out;
  for (const auto& a : s) out.insert(a.to_string());
  return out;
}

}  // namespace

TEST_CASE("A TAP interface shows its MAC and MTU, starts down, and its carrier follows set_carrier", "[ipoib][tap]") {
  {
    auto tap = open_tap("ibt0", {0x02, 0x00, 0x00, 0x00, 0x00, 0x07}, 2044);
    CHECK(tap.name() == "ibt0");
    CHECK(tap.ifindex() == static_cast<int>(::if_nametoindex("ibt0")));
    auto link = sh("ip -o link show dev ibt0");
    REQUIRE(link.status == 0);
    CHECK(link.out.find("mtu 2044") != std::string::npos);
    CHECK(link.out.find("link/ether 02:00:00:00:00:07") != std::string::npos);
    CHECK(link.out.find(",UP") == std::string::npos);  // down until the user says up
    CHECK(link.out.find("<UP") == std::string::npos);

    must("ip link set ibt0 up");
    REQUIRE(tap.set_carrier(false).ok());
    CHECK(sysfs("/sys/class/net/ibt0/carrier") == "0");
    CHECK(sh("ip -o link show dev ibt0").out.find("NO-CARRIER") != std::string::npos);
    REQUIRE(tap.set_carrier(true).ok());
    CHECK(sysfs("/sys/class/net/ibt0/carrier") == "1");
    CHECK(sysfs("/sys/class/net/ibt0/operstate") == "up");

    REQUIRE(tap.set_mtu(1500).ok());
    CHECK(sysfs("/sys/class/net/ibt0/mtu") == "1500");
    auto big = tap.set_mtu(70000);
    REQUIRE_FALSE(big.ok());
    CHECK(big.error().code == EINVAL);
    CHECK(sysfs("/sys/class/net/ibt0/mtu") == "1500");

    // Moved, the interface stays; destroyed, it goes.
    TapDevice moved = std::move(tap);
    CHECK(sh("ip link show dev ibt0").status == 0);
  }
  CHECK(sh("ip link show dev ibt0").status != 0);
}

TEST_CASE("Bad TAP parameters are refused with a clear error", "[ipoib][tap]") {
  private_namespaces();
  auto long_name = TapDevice::open("ibt-name-too-long", {2, 0, 0, 0, 0, 1}, 2044);
  REQUIRE_FALSE(long_name.ok());
  CHECK(long_name.error().code == EINVAL);
  auto multicast_mac = TapDevice::open("ibt1", {0x01, 0, 0, 0, 0, 1}, 2044);
  REQUIRE_FALSE(multicast_mac.ok());
  CHECK(multicast_mac.error().message.find("SIOCSIFHWADDR") != std::string::npos);
  CHECK(sh("ip link show dev ibt1").status != 0);  // the half-made interface went with the fd
  auto tiny_mtu = TapDevice::open("ibt1", {2, 0, 0, 0, 0, 1}, 20);
  REQUIRE_FALSE(tiny_mtu.ok());
  CHECK(tiny_mtu.error().code == EINVAL);
}

TEST_CASE("AddrWatch reports the interface's addresses: those present first, then each added or removed", "[ipoib][addr]") {
  auto tap = open_tap("ibt2", {2, 0, 0, 0, 0, 2}, 2044);
  must("ip link set ibt2 up");
  REQUIRE(tap.set_carrier(true).ok());
  must("ip addr add 198.18.7.1/24 dev ibt2");

  boost::asio::io_context io;
  Reports rep;
  AddrWatch watch(io, tap.ifindex(), rep.cb());
  REQUIRE(watch.start().ok());
  REQUIRE(run_until(io, [&] { return watch.synced(); }));
  CHECK(rep.has("198.18.7.1/24"));
  CHECK(rep.logged("+198.18.7.1/24"));

  must("ip addr add 198.18.7.2/24 dev ibt2");
  must("ip -6 addr add 2001:db8::7/64 dev ibt2 nodad");
  CHECK(run_until(io, [&] { return rep.has("198.18.7.2/24") && rep.has("2001:db8::7/64"); }));

  // Another interface's address is none of this watch's business.
  must("ip addr add 198.18.9.9/32 dev lo");
  must("ip addr del 198.18.7.2/24 dev ibt2");
  must("ip -6 addr del 2001:db8::7/64 dev ibt2");
  CHECK(run_until(io, [&] { return !rep.has("198.18.7.2/24") && !rep.has("2001:db8::7/64"); }));
  CHECK(rep.logged("-198.18.7.2/24"));
  CHECK(rep.logged("-2001:db8::7/64"));
  CHECK_FALSE(rep.logged("+198.18.9.9/32"));
  CHECK(rep.has("198.18.7.1/24"));
  CHECK(rep.now == texts(watch.addresses()));
  CHECK(watch.counters().overruns == 0);
  must("ip addr del 198.18.9.9/32 dev lo");
}

TEST_CASE("AddrWatch misses nothing when the socket overruns: it dumps again and reports the difference", "[ipoib][addr]") {
  auto tap = open_tap("ibt3", {2, 0, 0, 0, 0, 3}, 2044);
  must("ip link set ibt3 up");
  boost::asio::io_context io;
  Reports rep;
  AddrWatch watch(io, tap.ifindex(), rep.cb());
  REQUIRE(watch.start(1).ok());  // the kernel's smallest receive buffer
  REQUIRE(run_until(io, [&] { return watch.synced(); }));

  // 100 events while nobody reads: far more than the buffer holds.
  std::string batch;
  for (int i = 1; i <= 100; ++i) batch += "addr add 198.18.10." + std::to_string(i) + "/32 dev ibt3\n";
  must("printf '" + batch + "' | ip -batch -");
  auto all_there = [&] {
    for (int i = 1; i <= 100; ++i)
      if (!rep.has("198.18.10." + std::to_string(i) + "/32")) return false;
    return true;
  };
  CHECK(run_until(io, all_there));
  CHECK(watch.counters().overruns >= 1);
  CHECK(watch.counters().dumps >= 2);

  std::string del;
  for (int i = 1; i <= 100; ++i) del += "addr del 198.18.10." + std::to_string(i) + "/32 dev ibt3\n";
  must("printf '" + del + "' | ip -batch -");
  auto none_there = [&] {
    for (int i = 1; i <= 100; ++i)
      if (rep.has("198.18.10." + std::to_string(i) + "/32")) return false;
    return true;
  };
  CHECK(run_until(io, none_there));
  CHECK(rep.now == texts(watch.addresses()));
}

namespace {

// Reads frames from the TAP until `match` accepts one (or kPatience).
template <typename Match>
std::vector<std::uint8_t> read_frame(int fd, Match match) {
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::vector<std::uint8_t> f(65536);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, f.data(), f.size());
    if (n <= 0) continue;
    std::vector<std::uint8_t> frame(f.begin(), f.begin() + n);
    if (match(frame)) return frame;
  }
  return {};
}
bool is_arp_request_for(const std::vector<std::uint8_t>& f, const std::array<std::uint8_t, 4>& ip) {
  return f.size() >= 42 && f[12] == 0x08 && f[13] == 0x06 && f[20] == 0 && f[21] == 1 &&
         std::equal(ip.begin(), ip.end(), f.begin() + 38);
}

}  // namespace

TEST_CASE("Frames pass both ways: the kernel's ARP request is read, an ARP reply written teaches it the neighbour", "[ipoib][tap]") {
  const Mac mine{2, 0, 0, 0, 0, 4}, theirs{2, 0, 0, 0, 0, 0x99};
  const std::array<std::uint8_t, 4> my_ip{198, 18, 8, 1}, their_ip{198, 18, 8, 2};
  auto tap = open_tap("ibt4", mine, 2044);
  must("ip link set ibt4 up");
  REQUIRE(tap.set_carrier(true).ok());
  must("ip addr add 198.18.8.1/24 dev ibt4");

  // A datagram to the neighbour: the kernel asks who has 198.18.8.2.
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0));
  REQUIRE(s);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  std::memcpy(&to.sin_addr, their_ip.data(), 4);
  const char payload[] = "over the tap";
  REQUIRE(::sendto(s.get(), payload, sizeof payload, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
          static_cast<ssize_t>(sizeof payload));
  auto req = read_frame(tap.fd(), [&](const auto& f) { return is_arp_request_for(f, their_ip); });
  REQUIRE(!req.empty());
  CHECK(std::equal(mine.begin(), mine.end(), req.begin() + 6));    // Ethernet source: our MAC
  CHECK(std::all_of(req.begin(), req.begin() + 6, [](auto b) { return b == 0xff; }));  // broadcast
  CHECK(std::equal(my_ip.begin(), my_ip.end(), req.begin() + 28));  // sender IP

  // The neighbour answers (RFC 826: htype 1, ptype 0x0800, hlen 6, plen 4, op 2).
  std::vector<std::uint8_t> reply;
  reply.insert(reply.end(), mine.begin(), mine.end());
  reply.insert(reply.end(), theirs.begin(), theirs.end());
  for (std::uint8_t b : {0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02}) reply.push_back(b);
  reply.insert(reply.end(), theirs.begin(), theirs.end());
  reply.insert(reply.end(), their_ip.begin(), their_ip.end());
  reply.insert(reply.end(), mine.begin(), mine.end());
  reply.insert(reply.end(), my_ip.begin(), my_ip.end());
  REQUIRE(::write(tap.fd(), reply.data(), reply.size()) == static_cast<ssize_t>(reply.size()));

  // The datagram it held goes out to the neighbour's MAC, and `ip neigh` knows it.
  auto udp = read_frame(tap.fd(), [&](const auto& f) {
    return f.size() >= 42 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 17 &&
           std::equal(theirs.begin(), theirs.end(), f.begin());
  });
  REQUIRE(!udp.empty());
  CHECK(std::string(udp.begin() + 42, udp.end()).find("over the tap") != std::string::npos);
  CHECK(sh("ip neigh show 198.18.8.2 dev ibt4").out.find("lladdr 02:00:00:00:00:99") != std::string::npos);

  // Garbage written into the TAP does not hurt the interface.
  std::vector<std::uint8_t> junk(7, 0xAB);
  (void)::write(tap.fd(), junk.data(), junk.size());
  CHECK(sh("ip -o link show dev ibt4").out.find("LOWER_UP") != std::string::npos);
}

namespace {

// RFC 4443 §2.3: the ICMPv6 checksum over the pseudo-header (RFC 8200
// §8.1) and the message.
std::uint16_t icmpv6_checksum(const std::uint8_t* src, const std::uint8_t* dst, const std::vector<std::uint8_t>& msg) {
  std::uint32_t sum = 0;
  auto add = [&](const std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 2) sum += (p[i] << 8) + (i + 1 < n ? p[i + 1] : 0);
  };
  add(src, 16);
  add(dst, 16);
  sum += static_cast<std::uint32_t>(msg.size());
  sum += 58;  // next header: ICMPv6
  add(msg.data(), msg.size());
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

}  // namespace

TEST_CASE("An IPv6 address whose duplicate address detection fails is reported removed", "[ipoib][addr]") {
  const Mac mine{2, 0, 0, 0, 0, 5}, theirs{2, 0, 0, 0, 0, 0x55};
  auto tap = open_tap("ibt5", mine, 2044);
  must("ip link set ibt5 up");
  REQUIRE(tap.set_carrier(true).ok());
  boost::asio::io_context io;
  Reports rep;
  AddrWatch watch(io, tap.ifindex(), rep.cb());
  REQUIRE(watch.start().ok());
  REQUIRE(run_until(io, [&] { return watch.synced(); }));

  must("ip -6 addr add 2001:db8::42/64 dev ibt5");  // with DAD
  CHECK(run_until(io, [&] { return rep.has("2001:db8::42/64"); }));
  IpAddr target = *IpAddr::parse("2001:db8::42");
  // The kernel's DAD probe (RFC 4862 §5.4.2): a neighbour solicitation for it.
  auto ns = read_frame(tap.fd(), [&](const auto& f) {
    return f.size() >= 78 && f[12] == 0x86 && f[13] == 0xdd && f[20] == 58 && f[54] == 135 &&
           std::equal(target.bytes.begin(), target.bytes.end(), f.begin() + 62);
  });
  REQUIRE(!ns.empty());

  // Another node has it (RFC 4861 §4.4): a neighbour advertisement to
  // all nodes, Override set, with its link-layer address.
  const std::uint8_t all_nodes[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::vector<std::uint8_t> na = {136, 0, 0, 0, 0x20, 0, 0, 0};
  na.insert(na.end(), target.bytes.begin(), target.bytes.end());
  na.push_back(2);  // target link-layer address option, 8 bytes
  na.push_back(1);
  na.insert(na.end(), theirs.begin(), theirs.end());
  std::uint16_t c = icmpv6_checksum(target.bytes.data(), all_nodes, na);
  na[2] = static_cast<std::uint8_t>(c >> 8);
  na[3] = static_cast<std::uint8_t>(c);
  std::vector<std::uint8_t> frame = {0x33, 0x33, 0, 0, 0, 1};
  frame.insert(frame.end(), theirs.begin(), theirs.end());
  for (std::uint8_t b : {0x86, 0xdd, 0x60, 0, 0, 0, 0, static_cast<int>(na.size()), 58, 255}) frame.push_back(b);
  frame.insert(frame.end(), target.bytes.begin(), target.bytes.end());
  frame.insert(frame.end(), all_nodes, all_nodes + 16);
  frame.insert(frame.end(), na.begin(), na.end());
  REQUIRE(::write(tap.fd(), frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()));

  CHECK(run_until(io, [&] { return !rep.has("2001:db8::42/64"); }));
  CHECK(rep.logged("-2001:db8::42/64"));
  CHECK(sh("ip -6 addr show dev ibt5").out.find("dadfailed") != std::string::npos);  // still listed
  CHECK(rep.now == texts(watch.addresses()));
}

namespace {

// What differs between the two IP versions in the path MTU test.
struct IpVersion {
  int family, level, discover_opt, discover_do, mtu_opt;
  const char* peer;
  std::uint16_t ethertype;
  std::size_t udp_header_end;  // Ethernet, IP and UDP headers
  std::size_t proto_off;       // of the frame's IP protocol / next header byte
};

// SO_ERROR: the error the kernel holds for the socket (read, it is cleared).
int so_error(int fd) {
  int e = 0;
  socklen_t len = sizeof e;
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 ? e : -1;
}

// A connected UDP socket with DF (EMSGSIZE for what the path cannot
// carry) sends 4000 bytes to the neighbour on the TAP; the frame read
// from the TAP is answered with icmp_too_big(frame, 1400) written back.
// The kernel must then know the path MTU: the socket's IP_MTU /
// IPV6_MTU and `ip route get` say 1400, the socket is told EMSGSIZE
// (RFC 1122 4.1.3.3), 4000 bytes are refused and 1400 - 48 sent.
void learns_path_mtu(TapDevice& tap, const Mac& theirs, const IpVersion& v) {
  UniqueFd s(::socket(v.family, SOCK_DGRAM, 0));
  REQUIRE(s);
  REQUIRE(::setsockopt(s.get(), v.level, v.discover_opt, &v.discover_do, sizeof v.discover_do) == 0);
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (v.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&to);
    a->sin_family = AF_INET;
    a->sin_port = htons(9);
    REQUIRE(::inet_pton(AF_INET, v.peer, &a->sin_addr) == 1);
    to_len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&to);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(9);
    REQUIRE(::inet_pton(AF_INET6, v.peer, &a->sin6_addr) == 1);
    to_len = sizeof *a;
  }
  REQUIRE(::connect(s.get(), reinterpret_cast<sockaddr*>(&to), to_len) == 0);
  auto udp_to_them = [&](const std::vector<std::uint8_t>& f) {
    return f.size() > v.udp_header_end && std::equal(theirs.begin(), theirs.end(), f.begin()) &&
           (f[12] << 8 | f[13]) == v.ethertype && f[v.proto_off] == 17;
  };
  const std::vector<char> big(4000, 'x'), fits(1400 - 48, 'y');

  REQUIRE(::send(s.get(), big.data(), big.size(), 0) == static_cast<ssize_t>(big.size()));
  auto frame = read_frame(tap.fd(), udp_to_them);
  REQUIRE(frame.size() == v.udp_header_end + big.size());
  auto answer = icmp_too_big(frame, 1400);
  REQUIRE(answer);
  REQUIRE(::write(tap.fd(), answer->data(), answer->size()) == static_cast<ssize_t>(answer->size()));

  // The kernel handles the ICMP in its own time.
  auto path_mtu = [&] {
    int mtu = 0;
    socklen_t len = sizeof mtu;
    return ::getsockopt(s.get(), v.level, v.mtu_opt, &mtu, &len) == 0 ? mtu : -1;
  };
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (path_mtu() != 1400 && std::chrono::steady_clock::now() < deadline) ::usleep(10'000);
  CHECK(path_mtu() == 1400);
  CHECK(sh(std::string("ip route get ") + v.peer).out.find("mtu 1400") != std::string::npos);
  CHECK(so_error(s.get()) == EMSGSIZE);
  errno = 0;
  CHECK(::send(s.get(), big.data(), big.size(), 0) == -1);
  CHECK(errno == EMSGSIZE);
  REQUIRE(::send(s.get(), fits.data(), fits.size(), 0) == static_cast<ssize_t>(fits.size()));
  CHECK(read_frame(tap.fd(), udp_to_them).size() == v.udp_header_end + fits.size());
}

}  // namespace

TEST_CASE("The kernel takes icmp_too_big's answer: the path MTU drops to what the frame says", "[ipoib][tap][too-big]") {
  const Mac mine{2, 0, 0, 0, 0, 6}, theirs{2, 0, 0, 0, 0, 0x66};
  auto tap = open_tap("ibt6", mine, 9000);
  must("ip link set ibt6 up");
  REQUIRE(tap.set_carrier(true).ok());
  must("ip addr add 198.18.13.1/24 dev ibt6");
  must("ip -6 addr add 2001:db8:13::1/64 dev ibt6 nodad");
  // The neighbour is known already: no ARP/ND in the way.
  must("ip neigh replace 198.18.13.2 lladdr 02:00:00:00:00:66 nud permanent dev ibt6");
  must("ip -6 neigh replace 2001:db8:13::2 lladdr 02:00:00:00:00:66 nud permanent dev ibt6");

  SECTION("IPv4: ICMP fragmentation needed") {
    learns_path_mtu(tap, theirs, {AF_INET, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU, "198.18.13.2",
                                  0x0800, 14 + 20 + 8, 14 + 9});
  }
  SECTION("IPv6: ICMPv6 packet too big") {
    learns_path_mtu(tap, theirs, {AF_INET6, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU,
                                  "2001:db8:13::2", 0x86DD, 14 + 40 + 8, 14 + 6});
  }
}

namespace {

// A child process in a network namespace of its own, for the far end of
// a TCP connection: killed and reaped however the test ends.
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// Reads one byte from `fd` within kPatience; -1 if none came.
int read_byte(int fd) {
  pollfd p{fd, POLLIN, 0};
  std::uint8_t b = 0;
  if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kPatience).count())) != 1 || ::read(fd, &b, 1) != 1)
    return -1;
  return b;
}

std::uint8_t stream_byte(std::size_t i) { return static_cast<std::uint8_t>(i * 13 + i / 4099); }

// The child's side: its own namespace, the TAP `name` (moved in by the
// parent once `to_parent` says 'n'), 198.18.14.2/24, a listener on port
// 5201 ('l' when listening); it reads one connection to its end and
// writes 'o' if every byte is stream_byte(i) and there were `expect`,
// else 'x'. Exits; never returns.
[[noreturn]] void far_end(const char* name, int to_parent, int from_parent, std::size_t expect, const char* peer_mac) {
  auto done = [&](char c) {
    (void)!::write(to_parent, &c, 1);
    ::_exit(0);
  };
  if (::unshare(CLONE_NEWNET) != 0) done('x');
  char c = 'n';
  (void)!::write(to_parent, &c, 1);
  if (read_byte(from_parent) != 'm') done('x');
  const std::string n(name);
  if (std::system(("ip link set lo up && ip link set " + n + " up && ip addr add 198.18.14.2/24 dev " + n +
                   " && ip neigh replace 198.18.14.1 lladdr " + peer_mac + " nud permanent dev " + n)
                      .c_str()) != 0)
    done('x');
  UniqueFd l(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(5201);
  a.sin_addr.s_addr = htonl(0xC6120E02);
  if (!l || ::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l.get(), 1) != 0) done('x');
  c = 'l';
  (void)!::write(to_parent, &c, 1);
  pollfd p{l.get(), POLLIN, 0};
  if (::poll(&p, 1, 10'000) != 1) done('x');
  UniqueFd s(::accept(l.get(), nullptr, nullptr));
  if (!s) done('x');
  std::vector<std::uint8_t> buf(1 << 16);
  std::size_t got = 0;
  bool same = true;
  for (;;) {
    pollfd q{s.get(), POLLIN, 0};
    if (::poll(&q, 1, 10'000) != 1) done('x');
    const ssize_t r = ::read(s.get(), buf.data(), buf.size());
    if (r < 0) done('x');
    if (r == 0) break;
    for (ssize_t i = 0; i < r; ++i) same = same && buf[static_cast<std::size_t>(i)] == stream_byte(got + static_cast<std::size_t>(i));
    got += static_cast<std::size_t>(r);
  }
  done(same && got == expect ? 'o' : 'x');
  ::_exit(1);  // done() does not return
}

}  // namespace

TEST_CASE("With offloads the kernel hands over TCP super-frames; segmented to the MTU they carry the stream", "[ipoib][tap][gso]") {
  // Two offloading TAPs, the second in a child's namespace: the test
  // relays between them what ibd's read_tap/write_tap would (gso.hpp),
  // while 4 MiB cross a TCP connection from here to the child.
  const Mac mine{2, 0, 0, 0, 0, 7}, theirs{2, 0, 0, 0, 0, 0x77};
  constexpr std::uint32_t kMtu = 2044;
  constexpr std::size_t kBytes = 4 << 20;
  private_namespaces();
  auto ta = TapDevice::open("ibt7", mine, kMtu, true);
  auto tb = TapDevice::open("ibt8", theirs, kMtu, true);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  CHECK(ta->vnet_hdr_len() == kVnetHdrLen);
  CHECK(sh("ip -d link show dev ibt7").out.find("vnet_hdr") != std::string::npos);
  REQUIRE(ta->set_carrier(true).ok());
  REQUIRE(tb->set_carrier(true).ok());

  int up[2], down[2];
  REQUIRE(::pipe(up) == 0);
  REQUIRE(::pipe(down) == 0);
  UniqueFd up_r(up[0]), up_w(up[1]), down_r(down[0]), down_w(down[1]);
  Child child;
  child.pid = ::fork();
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) far_end("ibt8", up_w.get(), down_r.get(), kBytes, "02:00:00:00:00:07");
  REQUIRE(read_byte(up_r.get()) == 'n');
  must("ip link set ibt8 netns " + std::to_string(child.pid));
  const char m = 'm';
  REQUIRE(::write(down_w.get(), &m, 1) == 1);
  must("ip link set ibt7 up");
  must("ip addr add 198.18.14.1/24 dev ibt7");
  must("ip neigh replace 198.18.14.2 lladdr 02:00:00:00:00:77 nud permanent dev ibt7");
  REQUIRE(read_byte(up_r.get()) == 'l');

  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  REQUIRE(s);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(5201);
  to.sin_addr.s_addr = htonl(0xC6120E02);
  REQUIRE((::connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 || errno == EINPROGRESS));

  struct Relay {
    std::size_t frames = 0, super_frames = 0, largest = 0, refused = 0, written_over_mtu = 0;
  } from_a, from_b;
  std::vector<std::uint8_t> buf(65536 + 14 + kVnetHdrLen), scratch;
  // One read from `in`, its segments written to `out` after a zero header.
  auto relay = [&](int in, int out, Relay& r) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n <= 0) return;
    ++r.frames;
    const auto h = parse_vnet_hdr(std::span(buf.data(), static_cast<std::size_t>(n)));
    if (!h) return void(++r.refused);
    const std::span<std::uint8_t> f(buf.data() + kVnetHdrLen, static_cast<std::size_t>(n) - kVnetHdrLen);
    r.largest = std::max(r.largest, f.size());
    if ((h->gso_type & ~kGsoEcn) != kGsoNone) ++r.super_frames;
    const std::uint8_t zero[kVnetHdrLen] = {};
    const auto v = gso_segment(*h, f, kMtu, scratch, [&](wire::Bytes seg) {
      if (seg.size() > 14 + kMtu) ++r.written_over_mtu;
      std::vector<std::uint8_t> w(zero, zero + kVnetHdrLen);
      w.insert(w.end(), seg.begin(), seg.end());
      (void)!::write(out, w.data(), w.size());
    });
    if (v != GsoVerdict::ok) ++r.refused;
  };

  std::vector<std::uint8_t> data(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) data[i] = stream_byte(i);
  std::size_t sent = 0;
  int verdict = -1;
  const auto deadline = std::chrono::steady_clock::now() + 3 * kPatience;
  while (verdict < 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p[4] = {{ta->fd(), POLLIN, 0}, {tb->fd(), POLLIN, 0}, {up_r.get(), POLLIN, 0},
                   {s.get(), static_cast<short>(sent < kBytes ? POLLOUT : 0), 0}};
    if (::poll(p, 4, 100) <= 0) continue;
    if (p[0].revents & POLLIN) relay(ta->fd(), tb->fd(), from_a);
    if (p[1].revents & POLLIN) relay(tb->fd(), ta->fd(), from_b);
    if (p[2].revents & POLLIN) verdict = read_byte(up_r.get());
    if (p[3].revents & POLLOUT) {
      const ssize_t w = ::send(s.get(), data.data() + sent, kBytes - sent, MSG_NOSIGNAL);
      if (w > 0 && (sent += static_cast<std::size_t>(w)) == kBytes) ::shutdown(s.get(), SHUT_WR);
    }
  }
  INFO("frames from here " << from_a.frames << " (super-frames " << from_a.super_frames << ", largest "
                           << from_a.largest << "), from the child " << from_b.frames);
  CHECK(sent == kBytes);
  CHECK(verdict == 'o');                      // every byte arrived, in order
  CHECK(from_a.super_frames > 0);             // the kernel used TSO
  CHECK(from_a.largest > 14 + kMtu);          // ... with frames beyond the MTU
  CHECK(from_a.refused + from_b.refused == 0);
  CHECK(from_a.written_over_mtu == 0);
}

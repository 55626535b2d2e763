// ibfabric end to end (docs/ibfabric.md): the program runs a topology of
// two switches and two hosts; the test plays both hosts over their UDP
// cables (endpoints from `ibfabric --print-bindings`), builds packets with
// src/sim/wire and SMPs/GMPs with src/mad, and acts as the subnet manager
// from host A:
//   - directed-route NodeInfo reaches each switch and host B's port, and
//     the responses come back along the reverse path;
//   - after LIDs, LFTs, LinearFDBTop and Active ports are set through the
//     switches' SMAs, a LID-routed data packet goes A -> SwA -> SwB -> B
//     and shows in the PMA PortCounters of the ports it crossed;
//   - `ibfabric ctl SOCK link down SwB 1` makes SwB send trap 128 to the
//     SM's LID, and the port goes Down; host B is told by link-state
//     signals (docs/cables.md "Link state"), none counted malformed;
//   - malformed datagrams are dropped and counted, and the fabric still works;
//   - SIGTERM ends ibfabric with status 0.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.hpp"
#include "mad/mad.hpp"
#include "mad/pma_attrs.hpp"
#include "mad/sma_attrs.hpp"
#include "mad/smp.hpp"
#include "sim/cable/endpoint.hpp"
#include "sim/cable/udp_link.hpp"
#include "sim/fabric/topology.hpp"
#include "sim/wire/packet.hpp"
#include "../unit/tshark.hpp"

using namespace openib;
using namespace openib::sim;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

namespace {

constexpr const char* kTopology = R"(# two switches, two hosts (test/fabric)
Switch 8 "SwA"
[1] "HostA"[1]
[3] "SwB"[3]

Switch 8 "SwB"  # "switch B"
[1] "HostB"[1]
[3] "SwA"[3]

Hca 1 "HostA"
[1] "SwA"[1]

Hca 1 "HostB"
[1] "SwB"[1]
)";

constexpr std::uint16_t kLidA = 1, kLidB = 2, kLidSwA = 10, kLidSwB = 11;
constexpr std::uint8_t kUdSendOnly = 0x64;

std::string run_capture(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  if (status) *status = st;
  return out;
}

// A host port played by the test: a UdpLink and a queue of what arrived.
class Host {
 public:
  Host(const std::string& local, const std::string& peer) {
    UdpLinkOptions o;
    o.local = local;
    o.peer = peer;
    o.name = "test-host";
    auto l = UdpLink::create(o);
    INFO((l ? "" : l.error().str()));
    REQUIRE(l.ok());
    link_ = std::move(l).value();
    link_->set_receiver([this](std::span<const std::byte> p) {
      std::lock_guard lk(mu_);
      q_.emplace_back(p.begin(), p.end());
      cv_.notify_all();
    });
  }
  void send(const Bytes& p) { REQUIRE(link_->send(p).ok()); }
  // The next packet that satisfies `want`, skipping others; nullopt after 3 s.
  template <class F>
  std::optional<wire::ParsedPacket> wait_for(F want, Bytes* raw = nullptr) {
    std::unique_lock lk(mu_);
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (true) {
      while (!q_.empty()) {
        held_.push_back(std::move(q_.front()));
        q_.pop_front();
        auto p = wire::parse_packet(held_.back());
        if (p && want(*p)) {
          if (raw) *raw = held_.back();
          return std::move(p).value();
        }
      }
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && q_.empty()) return std::nullopt;
    }
  }
  UdpLink& link() { return *link_; }

 private:
  std::unique_ptr<UdpLink> link_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Bytes> q_;
  std::deque<Bytes> held_;  // keeps parsed payload views valid
};

Bytes smp_packet(const mad::Mad& m, std::uint16_t dlid, std::uint16_t slid) {
  wire::Headers h;
  h.lrh.vl = 15;
  h.lrh.dlid = dlid;
  h.lrh.slid = slid;
  h.bth.opcode = kUdSendOnly;
  h.bth.dest_qp = 0;
  h.deth = wire::Deth{0, 0};
  auto p = wire::build_packet(h, m);
  REQUIRE(p.ok());
  return *p;
}

Bytes gmp_packet(const mad::Mad& m, std::uint16_t dlid, std::uint16_t slid) {
  wire::Headers h;
  h.lrh.vl = 0;
  h.lrh.dlid = dlid;
  h.lrh.slid = slid;
  h.bth.opcode = kUdSendOnly;
  h.bth.dest_qp = 1;
  h.deth = wire::Deth{0x80010000, 1};
  auto p = wire::build_packet(h, m);
  REQUIRE(p.ok());
  return *p;
}

bool is_mad(const wire::ParsedPacket& p) { return p.payload.size() == mad::kMadBytes; }

class FabricTest {
 public:
  // split: two ibfabric processes, SwA in one and SwB in the other, their
  // cable crossing between them over UDP (--remote).
  explicit FabricTest(bool split = false) {
    const char* bin = std::getenv("OPENIB_IBFABRIC");
    REQUIRE(bin != nullptr);
    bin_ = bin;
    char tmpl[] = "/tmp/ibfabric-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    topo_path_ = dir_ + "/net";
    std::ofstream(topo_path_) << kTopology;
    ctl_ = dir_ + "/ctl.sock";
    base_ = std::to_string(30000 + (::getpid() % 1000) * 16);
    auto topo = fabric::parse_topology(kTopology);
    REQUIRE(topo.ok());
    topo_ = *topo;

    // Host endpoints the way a sandbox script gets them.
    int st = 0;
    const std::string b = run_capture(bin_ + " --print-bindings --base-port " + base_ + " " + topo_path_, &st);
    REQUIRE(st == 0);
    std::istringstream in(b);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string node, port, guidflag, guid, portflag, spec;
      ls >> node >> port >> guidflag >> guid >> portflag >> spec;
      REQUIRE(portflag == "--port1");
      const auto comma = spec.find(",PEER=");
      REQUIRE(spec.rfind("LOCAL=", 0) == 0);
      REQUIRE(comma != std::string::npos);
      bindings_[node] = {spec.substr(6, comma - 6), spec.substr(comma + 6)};
      guids_[node] = std::stoull(guid, nullptr, 16);
    }
    REQUIRE(bindings_.size() == 2);
    CHECK(guids_["HostA"] == topo_.nodes[static_cast<size_t>(topo_.find("HostA"))].guid);

    a_ = std::make_unique<Host>(bindings_["HostA"].first, bindings_["HostA"].second);
    b_ = std::make_unique<Host>(bindings_["HostB"].first, bindings_["HostB"].second);

    if (!split) {
      fs::create_directory(dir_ + "/pcap");
      pid_ = spawn({"--control", ctl_, "--pcap-dir", dir_ + "/pcap"});
    } else {
      pid_ = spawn({"--control", ctl_, "--remote", "SwB=127.0.0.1"});
      pid2_ = spawn({"--control", ctl_ + "2", "--remote", "SwA"});
      for (int i = 0; i < 500 && !fs::exists(ctl_ + "2"); ++i) std::this_thread::sleep_for(10ms);
      REQUIRE(fs::exists(ctl_ + "2"));
    }
    for (int i = 0; i < 500 && !fs::exists(ctl_); ++i) std::this_thread::sleep_for(10ms);
    REQUIRE(fs::exists(ctl_));
  }

  pid_t spawn(std::vector<std::string> extra) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::vector<std::string> args{bin_, "--base-port", base_, "--log", "warn"};
      args.insert(args.end(), extra.begin(), extra.end());
      args.push_back(topo_path_);
      std::vector<char*> argv;
      for (auto& x : args) argv.push_back(x.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return pid;
  }

  ~FabricTest() {
    if (pid2_ > 0) std::swap(pid_, pid2_), (void)terminate(), std::swap(pid_, pid2_);
    if (pid_ > 0) (void)terminate();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Exit status of ibfabric after SIGTERM (bounded; SIGKILL after 5 s).
  int terminate() {
    ::kill(pid_, SIGTERM);
    return wait_exit();
  }

  int wait_exit() {
    int st = 0;
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return -1;
  }

  std::string ctl(const std::string& cmd, int* status = nullptr) {
    return run_capture(bin_ + " ctl " + ctl_ + " " + cmd, status);
  }

  // `ctl cmd` until its output satisfies `done` (3 s at most); the last
  // output. REQUIREs that ctl itself succeeds.
  template <class F>
  std::string ctl_until(const std::string& cmd, F done) {
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (true) {
      int st = 0;
      std::string out = ctl(cmd, &st);
      INFO(out);
      REQUIRE(st == 0);
      if (done(out) || std::chrono::steady_clock::now() > deadline) return out;
      std::this_thread::sleep_for(10ms);
    }
  }

  // A directed-route SMP from host A along `path` (ports out of A, SwA, ...),
  // answered at the far end; returns the response MAD host A receives.
  std::optional<mad::Mad> dr(std::vector<std::uint8_t> path, std::uint8_t method, std::uint16_t attr,
                             std::uint32_t mod = 0, const mad::Mad* data_from = nullptr) {
    mad::SmpRequest r;
    r.method = method;
    r.attr_id = attr;
    r.attr_mod = mod;
    r.tid = ++tid_;
    r.directed = true;
    r.hop_cnt = static_cast<std::uint8_t>(path.size());
    for (size_t i = 0; i < path.size(); ++i) r.initial_path[i + 1] = path[i];
    mad::Mad m = mad::make_smp(r, data_from ? mad::smp_data(mad::ConstBytes(*data_from)) : mad::ConstBytes{});
    const auto d = mad::dr_send(m, false, path.at(0));  // host A is node 0
    REQUIRE(d.action == mad::DrAction::kForward);
    a_->send(smp_packet(m, 0xFFFF, 0xFFFF));
    const std::uint64_t tid = r.tid;
    auto resp = a_->wait_for([tid](const wire::ParsedPacket& p) {
      return is_mad(p) && mad::mad_tid(p.payload) == tid && mad::is_response(mad::mad_method(p.payload));
    });
    if (!resp) return std::nullopt;
    mad::Mad out;
    std::copy(resp->payload.begin(), resp->payload.end(), out.begin());
    return out;
  }

  mad::PortInfo get_port_info(std::vector<std::uint8_t> path, std::uint8_t port) {
    auto r = dr(path, mad::method::kGet, mad::attr::kPortInfo, port);
    REQUIRE(r.has_value());
    REQUIRE(mad::smp_status(*r) == 0);
    auto pi = mad::decode_port_info(mad::smp_data(mad::ConstBytes(*r)));
    REQUIRE(pi.ok());
    return *pi;
  }

  void set_port_info(std::vector<std::uint8_t> path, std::uint8_t port, const mad::PortInfo& pi) {
    mad::Mad data{};
    mad::encode_port_info(mad::smp_data(mad::MutBytes(data)), pi);
    auto r = dr(path, mad::method::kSet, mad::attr::kPortInfo, port, &data);
    REQUIRE(r.has_value());
    INFO("PortInfo Set status " << mad::smp_status(*r));
    REQUIRE(mad::smp_status(*r) == 0);
  }

  // PortCounters (or PortCountersExtended) of switch `lid`'s `port`, over QP1 from host A.
  mad::Mad pma(std::uint16_t lid, std::uint8_t port, std::uint16_t attr) {
    mad::MadHeader h;
    h.mgmt_class = mad::mgmt_class::kPerfMgmt;
    h.class_version = mad::kPmaClassVersion;
    h.method = mad::method::kGet;
    h.tid = ++tid_;
    h.attr_id = attr;
    mad::Mad m = mad::make_mad(h);
    mad::put8(mad::pma_data(mad::MutBytes(m)), 1, port);  // PortSelect (bits 8..15)
    a_->send(gmp_packet(m, lid, kLidA));
    const std::uint64_t tid = h.tid;
    auto resp = a_->wait_for([tid](const wire::ParsedPacket& p) {
      return is_mad(p) && p.hdr.bth.dest_qp == 1 && mad::mad_tid(p.payload) == tid;
    });
    REQUIRE(resp.has_value());
    CHECK(resp->hdr.lrh.slid == lid);
    CHECK(mad::mad_status(resp->payload) == 0);
    mad::Mad out;
    std::copy(resp->payload.begin(), resp->payload.end(), out.begin());
    return out;
  }

  mad::PortCountersExtended counters_ext(std::uint16_t lid, std::uint8_t port) {
    mad::Mad m = pma(lid, port, mad::attr::kPortCountersExtended);
    auto c = mad::decode_port_counters_ext(mad::pma_data(mad::ConstBytes(m)));
    REQUIRE(c.ok());
    return *c;
  }
  mad::PortCounters counters(std::uint16_t lid, std::uint8_t port) {
    mad::Mad m = pma(lid, port, mad::attr::kPortCounters);
    auto c = mad::decode_port_counters(mad::pma_data(mad::ConstBytes(m)));
    REQUIRE(c.ok());
    return *c;
  }

  // Host B answering a DR SMP as its SMA would (the test stands in for simhca).
  void answer_as_host_b() {
    Bytes raw;
    auto p = b_->wait_for([](const wire::ParsedPacket& x) { return is_mad(x) && x.hdr.lrh.vl == 15; }, &raw);
    REQUIRE(p.has_value());
    mad::Mad m;
    std::copy(p->payload.begin(), p->payload.end(), m.begin());
    const auto d = mad::dr_receive(m, false, 1, 1);
    REQUIRE(d.action == mad::DrAction::kLocal);
    mad::NodeInfo ni;
    ni.node_type = static_cast<std::uint8_t>(mad::NodeType::kCa);
    ni.num_ports = 1;
    ni.node_guid = guids_["HostB"];
    ni.port_guid = guids_["HostB"] + 1;
    ni.local_port_num = 1;
    mad::encode_node_info(mad::smp_data(mad::MutBytes(m)), ni);
    mad::smp_make_response(m, 0);
    const auto s = mad::dr_send(m, false, mad::dr_response_port(m, 1));
    REQUIRE(s.action == mad::DrAction::kForward);
    b_->send(smp_packet(m, 0xFFFF, 0xFFFF));
  }

  std::string bin_, dir_, topo_path_, ctl_, base_;
  fabric::Topology topo_;
  std::map<std::string, std::pair<std::string, std::string>> bindings_;
  std::map<std::string, std::uint64_t> guids_;
  std::unique_ptr<Host> a_, b_;
  pid_t pid_ = -1, pid2_ = -1;
  std::uint64_t tid_ = 0x1000;
};

std::uint64_t count_in(const std::string& text, const std::string& key) {
  const auto p = text.find(key + " ");
  if (p == std::string::npos) return ~0ull;
  return std::stoull(text.substr(p + key.size() + 1));
}

// The two switches as the SM sees them from host A: the directed route to
// each, the LID it gets and its LFT (LID -> out port).
struct Sw {
  std::vector<std::uint8_t> path;
  std::uint16_t lid;
  std::vector<std::pair<std::uint16_t, std::uint8_t>> lft;
};
const Sw kSwitches[] = {{{1}, kLidSwA, {{kLidA, 1}, {kLidB, 3}, {kLidSwA, 0}, {kLidSwB, 3}}},
                        {{1, 3}, kLidSwB, {{kLidA, 3}, {kLidB, 1}, {kLidSwB, 0}, {kLidSwA, 3}}}};

// The SM's programming: LIDs (port 0), LFTs, LinearFDBTop, Active ports;
// each Set read back.
void program_subnet(FabricTest& f) {
  for (const Sw& s : kSwitches) {
    mad::PortInfo p0 = f.get_port_info(s.path, 0);
    CHECK(p0.port_state == static_cast<std::uint8_t>(mad::PortState::kActive));
    p0.lid = s.lid;
    p0.master_sm_lid = kLidA;
    p0.port_state = 0;       // no change
    p0.port_phys_state = 0;  // no change
    f.set_port_info(s.path, 0, p0);
    CHECK(f.get_port_info(s.path, 0).lid == s.lid);

    mad::LftBlock blk;
    blk.fill(0xFF);
    for (auto [lid, port] : s.lft) blk[lid] = port;
    mad::Mad data{};
    mad::encode_lft_block(mad::smp_data(mad::MutBytes(data)), blk);
    auto r = f.dr(s.path, mad::method::kSet, mad::attr::kLinearFwdTable, 0, &data);
    REQUIRE(r.has_value());
    REQUIRE(mad::smp_status(*r) == 0);
    auto back = mad::decode_lft_block(mad::smp_data(mad::ConstBytes(*r)));
    REQUIRE(back.ok());
    CHECK(*back == blk);

    auto si = f.dr(s.path, mad::method::kGet, mad::attr::kSwitchInfo);
    REQUIRE(si.has_value());
    auto swi = mad::decode_switch_info(mad::smp_data(mad::ConstBytes(*si)));
    REQUIRE(swi.ok());
    CHECK(swi->linear_fdb_cap >= 64);
    swi->linear_fdb_top = 63;
    mad::Mad sdata{};
    mad::encode_switch_info(mad::smp_data(mad::MutBytes(sdata)), *swi);
    auto sr = f.dr(s.path, mad::method::kSet, mad::attr::kSwitchInfo, 0, &sdata);
    REQUIRE(sr.has_value());
    REQUIRE(mad::smp_status(*sr) == 0);

    for (std::uint8_t port : {std::uint8_t(1), std::uint8_t(3)}) {
      mad::PortInfo pi = f.get_port_info(s.path, port);
      CHECK(pi.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kLinkUp));
      CHECK(pi.port_state == static_cast<std::uint8_t>(mad::PortState::kInit));
      for (auto st : {mad::PortState::kArmed, mad::PortState::kActive}) {
        pi.port_state = static_cast<std::uint8_t>(st);
        pi.port_phys_state = 0;
        f.set_port_info(s.path, port, pi);
      }
      CHECK(f.get_port_info(s.path, port).port_state == static_cast<std::uint8_t>(mad::PortState::kActive));
    }
  }
}

// Headers of a UD data packet from host A to `dlid`, QP 0x123.
wire::Headers data_headers(std::uint16_t dlid) {
  wire::Headers h;
  h.lrh.dlid = dlid;
  h.lrh.slid = kLidA;
  h.bth.opcode = kUdSendOnly;
  h.bth.dest_qp = 0x123;
  h.deth = wire::Deth{0x11111111, 0x77};
  return h;
}

Bytes data_payload() {
  Bytes payload(200);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(static_cast<std::uint8_t>(i * 7));
  return payload;
}

Bytes data_packet(const wire::Headers& h) {
  auto p = wire::build_packet(h, data_payload());
  REQUIRE(p.ok());
  return *p;
}

}  // namespace

// Each SECTION runs on a fresh ibfabric (Catch2 runs the test case once per
// leaf section), so one failure does not hide the others; the ones that
// need a routed subnet program it first.
TEST_CASE("ibfabric: directed route, SM programming, forwarding, PMA, trap 128, bad packets", "[fabric]") {
  FabricTest f;
  const std::uint64_t guid_swa = fabric::guid_for_name("SwA"), guid_swb = fabric::guid_for_name("SwB");

  SECTION("directed route (IBA 14.2.2) reaches each switch, then host B's port, and comes back") {
    auto ni_a = f.dr({1}, mad::method::kGet, mad::attr::kNodeInfo);
    REQUIRE(ni_a.has_value());
    auto n1 = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*ni_a)));
    REQUIRE(n1.ok());
    CHECK(n1->node_type == static_cast<std::uint8_t>(mad::NodeType::kSwitch));
    CHECK(n1->node_guid == guid_swa);
    CHECK(n1->num_ports == 8);
    CHECK(n1->local_port_num == 1);
    CHECK(mad::smp_direction(*ni_a));

    auto ni_b = f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo);
    REQUIRE(ni_b.has_value());
    auto n2 = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*ni_b)));
    REQUIRE(n2.ok());
    CHECK(n2->node_guid == guid_swb);
    CHECK(n2->local_port_num == 3);
    CHECK(mad::smp_return_path(*ni_b, 2) == 3);  // SwB recorded its arrival port

    auto desc = f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeDescription);
    REQUIRE(desc.has_value());
    CHECK(mad::decode_node_description(mad::smp_data(mad::ConstBytes(*desc))).value() == "switch B");

    std::thread hb([&] { f.answer_as_host_b(); });
    auto ni_h = f.dr({1, 3, 1}, mad::method::kGet, mad::attr::kNodeInfo);
    hb.join();
    REQUIRE(ni_h.has_value());
    auto n3 = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*ni_h)));
    REQUIRE(n3.ok());
    CHECK(n3->node_type == static_cast<std::uint8_t>(mad::NodeType::kCa));
    CHECK(n3->node_guid == f.guids_["HostB"]);
  }

  SECTION("the SM programs LIDs, LFTs, LinearFDBTop and Active ports; an unused port stays down") {
    program_subnet(f);
    CHECK(f.get_port_info({1}, 2).port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kPolling));
  }

  SECTION("a LID-routed data packet A -> SwA -> SwB -> B, counted by the PMAs; an unknown DLID is dropped") {
    program_subnet(f);
    const auto swb1_before = f.counters_ext(kLidSwB, 1);
    const auto swa3_before = f.counters(kLidSwA, 3);
    const Bytes data_pkt = data_packet(data_headers(kLidB));
    f.a_->send(data_pkt);
    Bytes got;
    auto arrived = f.b_->wait_for([](const wire::ParsedPacket& p) { return p.hdr.bth.dest_qp == 0x123; }, &got);
    REQUIRE(arrived.has_value());
    CHECK(got == data_pkt);  // ICRC untouched, VCRC recomputed to the same value
    const auto swb1_after = f.counters_ext(kLidSwB, 1);
    const auto swa3_after = f.counters(kLidSwA, 3);
    CHECK(swb1_after.port_xmit_pkts - swb1_before.port_xmit_pkts == 1);
    CHECK(swb1_after.port_xmit_data - swb1_before.port_xmit_data == (data_pkt.size() - 2) / 4);
    CHECK(swb1_after.port_unicast_xmit_pkts - swb1_before.port_unicast_xmit_pkts == 1);
    CHECK(swa3_after.port_xmit_pkts > swa3_before.port_xmit_pkts);
    CHECK(swa3_after.port_xmit_data - swa3_before.port_xmit_data >= (data_pkt.size() - 2) / 4);

    // A DLID no LFT knows is dropped and counted (PortRcvSwitchRelayErrors).
    const auto swa1_before = f.counters(kLidSwA, 1);
    f.a_->send(data_packet(data_headers(40)));
    const auto swa1_after = f.counters(kLidSwA, 1);
    CHECK(swa1_after.port_rcv_switch_relay_errors - swa1_before.port_rcv_switch_relay_errors == 1);
  }

  SECTION("multicast by MFT (IBA 18.2.4.3.3): every port of the mask but the in-port") {
    program_subnet(f);
    const std::uint16_t mlid = 0xC001;
    for (const Sw& s : kSwitches) {
      mad::MftBlock mb{};
      mb[1] = (1u << 1) | (1u << 3);  // MLID 0xC001: ports 1 and 3
      mad::Mad data{};
      mad::encode_mft_block(mad::smp_data(mad::MutBytes(data)), mb);
      auto r = f.dr(s.path, mad::method::kSet, mad::attr::kMulticastFwdTable, 0, &data);
      REQUIRE(r.has_value());
      REQUIRE(mad::smp_status(*r) == 0);
    }
    wire::Headers hm = data_headers(mlid);
    hm.bth.dest_qp = 0xFFFFFF;  // IBA 10.5.1: multicast QPN
    f.a_->send(data_packet(hm));
    auto mc_b = f.b_->wait_for([](const wire::ParsedPacket& p) { return p.hdr.lrh.dlid == 0xC001; });
    REQUIRE(mc_b.has_value());
    // Exactly one copy to B and none back to A: nothing more within
    // wait_for's 3 s (the wait is the behaviour under test).
    CHECK_FALSE(f.b_->wait_for([](const wire::ParsedPacket& p) { return p.hdr.lrh.dlid == 0xC001; }).has_value());
    CHECK_FALSE(f.a_->wait_for([](const wire::ParsedPacket& p) { return p.hdr.lrh.dlid == 0xC001; }).has_value());
  }

  SECTION("a routing loop between the two switches ends (hop limit), counted") {
    program_subnet(f);
    for (const Sw& s : kSwitches) {
      mad::LftBlock blk;
      blk.fill(0xFF);
      for (auto [lid, port] : s.lft) blk[lid] = port;
      blk[50] = 3;  // SwA -> SwB -> SwA ...
      mad::Mad data{};
      mad::encode_lft_block(mad::smp_data(mad::MutBytes(data)), blk);
      auto r = f.dr(s.path, mad::method::kSet, mad::attr::kLinearFwdTable, 0, &data);
      REQUIRE(r.has_value());
    }
    f.a_->send(data_packet(data_headers(50)));
    auto loops = [](const std::string& lc) -> std::uint64_t {
      const auto sa = lc.find("switch \"SwA\""), sb = lc.find("switch \"SwB\"");
      if (sa == std::string::npos || sb == std::string::npos) return ~0ull;
      return count_in(lc.substr(sa), "loops") + count_in(lc.substr(sb), "loops");
    };
    const std::string lc = f.ctl_until("counters", [&](const std::string& c) { return loops(c) == 1; });
    INFO(lc);
    REQUIRE(lc.find("switch \"SwA\"") != std::string::npos);
    REQUIRE(lc.find("switch \"SwB\"") != std::string::npos);
    CHECK(loops(lc) == 1);
  }

  SECTION("malformed datagrams are dropped and counted, and the fabric still works") {
    program_subnet(f);
    const std::string garbage = "this is not an InfiniBand packet at all";
    REQUIRE(f.b_->link().send(std::span(reinterpret_cast<const std::byte*>(garbage.data()), garbage.size())).ok());
    Bytes bad_crc = data_packet(data_headers(kLidB));
    bad_crc[20] ^= std::byte{0x40};
    REQUIRE(f.b_->link().send(bad_crc).ok());
    // A well-framed packet with a permissive DLID on a data VL: relayed nowhere.
    wire::Headers hp = data_headers(0xFFFF);
    hp.lrh.slid = kLidB;
    f.b_->send(data_packet(hp));
    auto cable_bad_crc = [](const std::string& c) -> std::uint64_t {
      const auto cable = c.find("cable SwB[1]");  // SwB's UDP end facing host B
      return cable == std::string::npos ? ~0ull : count_in(c.substr(cable), "bad_crc");
    };
    const std::string c = f.ctl_until("counters SwB", [&](const std::string& out) {
      return cable_bad_crc(out) == 2 && count_in(out, "bad_dlid") == 1;
    });
    INFO(c);
    CHECK(count_in(c, "malformed") == 0);  // the switch saw neither: the cable's check dropped them
    REQUIRE(c.find("cable SwB[1]") != std::string::npos);
    CHECK(cable_bad_crc(c) == 2);  // VCRC first (docs/cables.md): garbage fails it too
    CHECK(count_in(c, "bad_dlid") == 1);
    // Still at work.
    auto again = f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo);
    REQUIRE(again.has_value());
  }

  SECTION("pulling a cable: trap 128 to the SM, the port goes Down, nothing crosses; then it trains again") {
    program_subnet(f);
    // Host B is the far end of the pulled cable: it is told (docs/cables.md
    // "Link state"), by a signal its link takes for neither a packet nor
    // a malformed datagram.
    std::atomic<int> light{-1}, signals{0};
    f.b_->link().set_state_receiver([&](bool up) {
      light = up ? 1 : 0;
      ++signals;
    });
    auto wait_light = [&](int want) {
      for (int i = 0; i < 300 && light != want; ++i) std::this_thread::sleep_for(10ms);
      return light.load();
    };
    int st = 0;
    const std::string r = f.ctl("link down SwB 1", &st);
    CHECK(r == "ok\n");
    CHECK(st == 0);
    auto trap = f.a_->wait_for([](const wire::ParsedPacket& p) {
      return is_mad(p) && p.hdr.lrh.vl == 15 && mad::mad_method(p.payload) == mad::method::kTrap;
    });
    REQUIRE(trap.has_value());
    CHECK(trap->hdr.lrh.dlid == kLidA);
    CHECK(trap->hdr.lrh.slid == kLidSwB);
    CHECK(mad::mad_class(trap->payload) == mad::mgmt_class::kSubnLid);
    CHECK(mad::mad_attr_id(trap->payload) == mad::attr::kNotice);
    // An SMP carries the Notice's first 64 bytes (no IssuerGID); the codec reads 80.
    auto notice = mad::decode_notice(trap->payload.subspan(mad::kSmpDataOff, mad::kNoticeBytes));
    REQUIRE(notice.ok());
    CHECK(notice->is_generic);
    CHECK(notice->trap_number == 128);
    CHECK(notice->issuer_lid == kLidSwB);
    CHECK(notice->data_details[0] == 0);
    CHECK(notice->data_details[1] == kLidSwB);
    const mad::PortInfo down = f.get_port_info({1, 3}, 1);
    CHECK(down.port_state == static_cast<std::uint8_t>(mad::PortState::kDown));
    CHECK(down.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kPolling));
    auto si = f.dr({1, 3}, mad::method::kGet, mad::attr::kSwitchInfo);
    REQUIRE(si.has_value());
    CHECK(mad::decode_switch_info(mad::smp_data(mad::ConstBytes(*si))).value().port_state_change);
    // Nothing crosses a pulled cable (within wait_for's 3 s: the wait is
    // the behaviour under test).
    f.a_->send(data_packet(data_headers(kLidB)));
    CHECK_FALSE(f.b_->wait_for([](const wire::ParsedPacket& p) { return p.hdr.bth.dest_qp == 0x123; }).has_value());
    const std::string show = f.ctl("show", &st);
    CHECK(show.find("port 1 Polling Down peer \"HostB\"[1] udp " + f.bindings_["HostB"].second + " -> " +
                    f.bindings_["HostB"].first + " (pulled)") != std::string::npos);
    CHECK(show.find("port 3 LinkUp Active peer \"SwB\"[3] in-process") != std::string::npos);
    CHECK(wait_light(0) == 0);
    CHECK(f.ctl("link up SwB 1", &st) == "ok\n");
    CHECK(f.get_port_info({1, 3}, 1).port_state == static_cast<std::uint8_t>(mad::PortState::kInit));
    CHECK(wait_light(1) == 1);
    // "up" is repeated a few ticks (UDP may lose one); at least twice here.
    for (int i = 0; i < 300 && signals < 3; ++i) std::this_thread::sleep_for(10ms);
    CHECK(signals >= 3);
    const LinkStats ls = f.b_->link().stats();
    CHECK(ls.rx_link_signals == static_cast<std::uint64_t>(signals.load()));
    CHECK(ls.rx_dropped_malformed == 0);
    CHECK(ls.rx_dropped_bad_crc == 0);

    // The SM disables a port's physical link, then lets it train again (IBA 14.2.5.6).
    mad::PortInfo pi = f.get_port_info({1, 3}, 1);
    pi.port_state = 0;
    pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kDisabled);
    f.set_port_info({1, 3}, 1, pi);
    const mad::PortInfo dis = f.get_port_info({1, 3}, 1);
    CHECK(dis.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kDisabled));
    CHECK(dis.port_state == static_cast<std::uint8_t>(mad::PortState::kDown));
    pi.port_phys_state = static_cast<std::uint8_t>(mad::PhysState::kPolling);
    f.set_port_info({1, 3}, 1, pi);
    const mad::PortInfo back = f.get_port_info({1, 3}, 1);
    CHECK(back.port_phys_state == static_cast<std::uint8_t>(mad::PhysState::kLinkUp));
    CHECK(back.port_state == static_cast<std::uint8_t>(mad::PortState::kInit));
  }

  SECTION("control errors are reported, not fatal") {
    int st = 0;
    CHECK(f.ctl("link down NoSuch 1", &st).rfind("error:", 0) == 0);
    CHECK(st != 0);
    CHECK(f.ctl("frobnicate", &st).rfind("error:", 0) == 0);
    CHECK(st != 0);
    CHECK(f.ctl("show", &st).find("switch \"SwA\"") != std::string::npos);  // still answers
    CHECK(st == 0);
  }

  SECTION("SIGTERM ends ibfabric with status 0; each cable's capture decodes as InfiniBand") {
    // Traffic on every cable: A - SwA (UDP), SwA - SwB (in process), SwB - B (UDP).
    std::thread hb([&] { f.answer_as_host_b(); });
    auto ni_h = f.dr({1, 3, 1}, mad::method::kGet, mad::attr::kNodeInfo);
    hb.join();
    REQUIRE(ni_h.has_value());
    REQUIRE(f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo).has_value());
    CHECK(f.terminate() == 0);

    // Captures, one per cable (pcap + ERF records): the in-process cable
    // SwA-SwB and the UDP cables SwB-HostB and SwA-HostA.
    for (const char* name : {"SwA-3.pcap", "SwB-1.pcap", "SwA-1.pcap"}) {
      INFO(name);
      const auto path = fs::path(f.dir_) / "pcap" / name;
      REQUIRE(fs::exists(path));
      CHECK(fs::file_size(path) > 24 + 2 * (16 + 16 + 26));  // file header + at least two records
      // tshark (a test prerequisite, scripts/setup.sh) decodes them as InfiniBand.
      int tst = 0;
      const std::string dec = openib::test::run_command(openib::test::tshark_read(path.string()), tst);
      INFO(dec);
      CHECK(tst == 0);
      CHECK(dec.find("InfiniBand") != std::string::npos);
      CHECK(dec.find("Malformed") == std::string::npos);
    }
  }
}

TEST_CASE("ibfabric: a cable between two ibfabric processes (--remote)", "[fabric]") {
  FabricTest f(true);
  auto ni = f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo);  // SwA here, SwB in the other process
  REQUIRE(ni.has_value());
  auto n = mad::decode_node_info(mad::smp_data(mad::ConstBytes(*ni)));
  REQUIRE(n.ok());
  CHECK(n->node_guid == fabric::guid_for_name("SwB"));
  std::thread hb([&] { f.answer_as_host_b(); });
  auto nh = f.dr({1, 3, 1}, mad::method::kGet, mad::attr::kNodeInfo);
  hb.join();
  REQUIRE(nh.has_value());
  CHECK(mad::decode_node_info(mad::smp_data(mad::ConstBytes(*nh))).value().node_guid == f.guids_["HostB"]);
  int st = 0;
  const std::string show = f.ctl("show", &st);
  CHECK(show.find("switch \"SwA\"") != std::string::npos);
  CHECK(show.find("switch \"SwB\"") == std::string::npos);  // not run by this process
  // Pulling the cable in this process tells the other (docs/cables.md
  // "Link state"): SwB's port goes down there too; plugged, it trains.
  auto show2_until = [&](const std::string& want) {
    std::string s2;
    for (int i = 0; i < 300; ++i) {
      s2 = run_capture(f.bin_ + " ctl " + f.ctl_ + "2 show");
      if (s2.find(want) != std::string::npos) break;
      std::this_thread::sleep_for(10ms);
    }
    return s2;
  };
  CHECK(f.ctl("link down SwA 3", &st) == "ok\n");
  std::string s2 = show2_until("port 3 Polling Down");
  INFO(s2);
  CHECK(s2.find("port 3 Polling Down peer \"SwA\"[3]") != std::string::npos);
  CHECK(s2.find("(pulled at the far end)") != std::string::npos);
  CHECK_FALSE(f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo).has_value());
  CHECK(f.ctl("link up SwA 3", &st) == "ok\n");
  s2 = show2_until("port 3 LinkUp Init");
  CHECK(s2.find("port 3 LinkUp Init peer \"SwA\"[3]") != std::string::npos);
  CHECK(s2.find("(pulled at the far end)") == std::string::npos);
  CHECK(f.dr({1, 3}, mad::method::kGet, mad::attr::kNodeInfo).has_value());
  std::swap(f.pid_, f.pid2_);
  CHECK(f.terminate() == 0);
  std::swap(f.pid_, f.pid2_);
  CHECK(f.terminate() == 0);
}

// The MAD layer's QP1 on an Ethernet port (docs/cm.md "RoCE", docs/arp.md
// "RoCE destinations"): mad::MadPort over a simhca child with
// --link-layer ethernet. No QP0; a MAD's address handle gets its source
// GID index from the GID table entry of MadAddress::local_gid and its
// destination MAC from the DmacLookup hook (here a fake: which GID it was
// asked for, and "not yet" answers); a MAD whose handle cannot be made is
// dropped and counted, and the next send asks again.
#include <catch2/catch.hpp>

#include "hca/hca.hpp"
#include "mad/mad_port.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using Gid = std::array<uint8_t, 16>;
using Mac = std::array<uint8_t, 6>;

namespace {

const Gid kOurs = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 93, 1};
const Gid kPeer = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 93, 2};
const Mac kPeerMac = {0x02, 0x03, 0x00, 0x00, 0x0d, 0x01};

struct RocePort {
  RocePort() : f({"--link-layer", "ethernet"}) {
    hca::GidEntry e;
    e.gid = kOurs;
    e.type = hca::GidType::kRoceV2;
    auto r = hca::call_sync<void>(*f.hca, [&](hca::Device::Done<void> d) { f.hca->modify_gid_async(1, 3, e, std::move(d)); });
    REQUIRE(r.ok());
    std::optional<Result<std::unique_ptr<mad::MadPort>>> got;
    mad::MadPort::open_async(
        *f.hca, 1, [&](Result<std::unique_ptr<mad::MadPort>> p) { got = std::move(p); },
        [this](uint8_t port, const Gid& dgid) -> Result<Mac> {
          asked.emplace_back(port, dgid);
          if (not_yet > 0) {
            --not_yet;
            return Error{EAGAIN, "not yet"};
          }
          return kPeerMac;
        });
    REQUIRE(run_until([&] { return got.has_value(); }));
    INFO((got->ok() ? std::string() : got->error().str()));
    REQUIRE(got->ok());
    port = std::move(**got);
  }
  bool run_until(const std::function<bool()>& pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred() && std::chrono::steady_clock::now() < deadline) {
      f.io.run_one_for(std::chrono::milliseconds(5));
      if (port) port->on_completion();
    }
    return pred();
  }
  mad::MadAddress to_peer() const {
    mad::MadAddress a;
    a.qpn = 1;
    a.qkey = mad::kGsiQkey;
    a.gid = kPeer;
    a.local_gid = kOurs;
    return a;
  }
  HcaFixture f;
  std::unique_ptr<mad::MadPort> port;
  std::vector<std::pair<uint8_t, Gid>> asked;
  int not_yet = 0;
  std::array<std::byte, mad::kMadBytes> mad{};
};

}  // namespace

TEST_CASE("MAD port on an Ethernet port: QP1 only; a MAD to an IP GID asks the MAC of its DGID and is sent", "[roce-mad]") {
  RocePort p;
  CHECK_FALSE(p.port->has_smi());
  CHECK(p.port->send(0, p.to_peer(), p.mad).error().code == EOPNOTSUPP);
  REQUIRE(p.port->send(1, p.to_peer(), p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().sent == 1; }));
  REQUIRE(p.asked.size() == 1);
  CHECK(p.asked[0].first == 1);
  CHECK(p.asked[0].second == kPeer);
  // The handle is kept: the next MAD to the same place asks nobody.
  REQUIRE(p.port->send(1, p.to_peer(), p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().sent == 2; }));
  CHECK(p.asked.size() == 1);
  CHECK(p.port->counters().send_errors == 0);
}

TEST_CASE("MAD port on an Ethernet port: a MAC not known yet drops the MAD (counted); the next send asks again", "[roce-mad]") {
  RocePort p;
  p.not_yet = 1;
  REQUIRE(p.port->send(1, p.to_peer(), p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().send_errors == 1; }));
  CHECK(p.port->counters().sent == 0);
  REQUIRE(p.port->send(1, p.to_peer(), p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().sent == 1; }));
  CHECK(p.asked.size() == 2);
}

TEST_CASE("MAD port on an Ethernet port: a source GID in no GID table entry, or no DGID, is a counted drop", "[roce-mad]") {
  RocePort p;
  mad::MadAddress a = p.to_peer();
  a.local_gid[15] = 77;  // ::ffff:198.18.93.77: not ours
  REQUIRE(p.port->send(1, a, p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().send_errors == 1; }));
  a = p.to_peer();
  a.gid = {};
  REQUIRE(p.port->send(1, a, p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().send_errors == 2; }));
  CHECK(p.asked.empty());
  CHECK(p.port->counters().sent == 0);
}

// The address-handle cache is bounded (docs/mad.md "Address handles"): on
// RoCE any host can make ibd reply to as many source addresses as it
// forges, and the device's AH table (simhca: 4,096) is shared with every
// client. Past the bound the least recently used handle is destroyed, so
// MADs to more destinations than the device has AHs all go out.
TEST_CASE("MAD port on an Ethernet port: MADs to 4,200 destinations, more than the device's 4,096 AHs, all sent", "[roce-mad]") {
  RocePort p;
  p.port->set_max_ahs(8);
  constexpr int kPeers = 4200;
  for (int i = 0; i < kPeers; ++i) {
    mad::MadAddress a = p.to_peer();
    a.gid[14] = static_cast<uint8_t>(100 + i / 256);
    a.gid[15] = static_cast<uint8_t>(i % 256);
    REQUIRE(p.port->send(1, a, p.mad).ok());
    // Every 50th destination gets a second MAD at once, on the same handle.
    if (i % 50 == 0) REQUIRE(p.port->send(1, a, p.mad).ok());
    INFO("destination " << i);
    const uint64_t want = static_cast<uint64_t>(i + 1 + i / 50 + 1);
    REQUIRE(p.run_until([&] { return p.port->counters().sent == want || p.port->counters().send_errors > 0; }));
    REQUIRE(p.port->counters().send_errors == 0);
  }
  CHECK(p.port->cached_ahs() == 8);
  CHECK(p.port->counters().ahs_evicted == kPeers - 8);
  CHECK(p.asked.size() == kPeers);
}

TEST_CASE("MAD port on an Ethernet port: a burst to 100 new destinations: 64 wait for handles, the rest EAGAIN, counted", "[roce-mad]") {
  RocePort p;
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    mad::MadAddress a = p.to_peer();
    a.gid[15] = static_cast<uint8_t>(i);
    auto r = p.port->send(1, a, p.mad);
    if (!r) {
      CHECK(r.error().code == EAGAIN);
      ++refused;
    }
  }
  CHECK(refused == 100 - static_cast<int>(mad::MadPort::kMaxAhsPending));
  CHECK(p.port->counters().no_send_buffer == static_cast<uint64_t>(refused));
  REQUIRE(p.run_until([&] { return p.port->counters().sent == mad::MadPort::kMaxAhsPending; }));
  CHECK(p.port->counters().send_errors == 0);
  // Once they have their handles, new destinations are taken again.
  mad::MadAddress a = p.to_peer();
  a.gid[15] = 200;
  REQUIRE(p.port->send(1, a, p.mad).ok());
  REQUIRE(p.run_until([&] { return p.port->counters().sent == mad::MadPort::kMaxAhsPending + 1; }));
}

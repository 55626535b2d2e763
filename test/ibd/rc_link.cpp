// rc_pingpong (rc_link.hpp): the ping-pong the recovery and driver-seam
// tests run on a device.
#include <catch2/catch.hpp>
#include <cstring>

#include "rc_link.hpp"

// Two new clients on the (restarted) device: connected RC QPs, 20 SENDs
// each way with their payload checked (ibv_rc_pingpong's exchange).
void openib::testing::rc_pingpong(const std::string& socket) {
  auto a = open_side(socket, 64 * 1024);
  REQUIRE(a.ok());
  auto b = open_side(socket, 64 * 1024);
  REQUIRE(b.ok());
  REQUIRE(connect(**a, **b).ok());
  Side& x = **a;
  Side& y = **b;
  for (uint32_t i = 0; i < 20; ++i) {
    Side& from = (i % 2) ? y : x;
    Side& to = (i % 2) ? x : y;
    REQUIRE(post_recv(*to.qp, *to.mr, 0, 4096, 1) == 0);
    std::memset(from.buf() + 4096, static_cast<int>(0x40 + i), 256);
    REQUIRE(post_send(*from.qp, *from.mr, 4096, 256, 2) == 0);
    auto s = wait_wc(*from.cq, 5000);
    REQUIRE(s.ok());
    CHECK(s->status == 0);
    auto r = wait_wc(*to.cq, 5000);
    REQUIRE(r.ok());
    CHECK(r->status == 0);
    CHECK(r->byte_len == 256);
    CHECK(to.buf()[255] == static_cast<uint8_t>(0x40 + i));
  }
}


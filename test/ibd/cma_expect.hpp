// The next RDMA CM event on a channel, required to be of one type, for the
// RDMA CM tests (test_api_cma.cpp, test_hostile_cma.cpp).
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "openib/cma.hpp"

namespace openib::testing {

inline RdmaCmEvent expect_cma_event(RdmaEventChannel& ch, RdmaCmEventType want, int timeout_ms = 5000) {
  auto e = ch.get_event(timeout_ms);
  INFO("get_event: " << (e ? std::string() : e.error().str()));
  REQUIRE(e.ok());
  INFO("wanted " << rdma_event_str(want) << ", got " << rdma_event_str(e->type) << " (status " << e->status << ")");
  REQUIRE(e->type == want);
  return std::move(e).value();
}

}  // namespace openib::testing

// simhca's command line (docs/simhca.md §13), parsed with CLI11 like the
// other programs of the tree.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "sim/simhca/device.hpp"

namespace openib::simhca::server {

struct Options {
  std::vector<DeviceConfig> devices;  // one per --device group, in order
  std::chrono::microseconds spin = DeviceWaiter::kDefaultSpin;  // --spin-us
  bool spin_yield = true;                                        // --spin-mode
  std::chrono::microseconds contended = DeviceWaiter::kDefaultContended;  // --contended-us
  bool use_helper = false;                                       // --helper
  std::chrono::milliseconds start_delay{0};                      // --start-delay-ms (tests)
};

// The options, or the exit status when the process is to end now (0 after
// --help; 2 after a usage error, which is printed with the usage).
std::optional<int> parse_options(int argc, char** argv, Options& out);

}  // namespace openib::simhca::server

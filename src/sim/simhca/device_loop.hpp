// simhca's device loop (docs/simhca.md §13 "The device loop", "Several
// devices"): one thread runs every device's pass, sleeps when all are
// idle, and (several devices, --helper) wakes the helper thread for bulk
// flows.
#pragma once

#include <csignal>
#include <memory>
#include <vector>

#include "sim/simhca/device.hpp"

namespace openib::simhca::server {

// Runs the devices until `stop` is set or one fails; the exit status (0,
// or 1 if a device or the helper failed). `fatal` set (SIGUSR1, a test
// hook): every device enters its fatal state (§11.4), and it is cleared.
int run_device_loop(std::vector<std::unique_ptr<Device>>& devs, DeviceWaiter& waiter, bool use_helper,
                    const volatile std::sig_atomic_t& stop, volatile std::sig_atomic_t& fatal);

}  // namespace openib::simhca::server

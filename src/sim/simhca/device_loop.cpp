// simhca's device loop (docs/simhca.md §13).
#include "sim/simhca/device_loop.hpp"

#include <algorithm>

#include "sim/simhca/helper.hpp"

namespace openib::simhca::server {

int run_device_loop(std::vector<std::unique_ptr<Device>>& devs, DeviceWaiter& waiter, bool use_helper,
                    const volatile std::sig_atomic_t& stop, volatile std::sig_atomic_t& fatal) {
  const bool shared = devs.size() > 1;
  std::vector<DoorbellScanner*> scanners;
  std::vector<sim::ShmLink*> links;
  std::vector<std::unique_lock<std::mutex>*> locks;  // held by the loop (one device only)
  for (auto& d : devs) {
    scanners.push_back(d->scanner());
    links.push_back(d->shm());
    if (!shared) locks.push_back(d->lock());
  }
  int rc = 0;
  Helper helper(devs, waiter);
  const bool helping = shared && use_helper;
  if (helping) helper.start();
  // The loop's hold on device i for one step: nothing alone; shared, the
  // device's lock, unless the helper runs the device now (false).
  auto claim = [&](size_t i, std::unique_lock<std::mutex>& lk) {
    if (!shared) return true;
    if (helper.owns(i)) return false;
    lk = std::unique_lock(devs[i]->mutex());
    return true;
  };

  while (!stop && !helper.failed()) {
    if (fatal) {  // seen within one sleep (at most 100 ms)
      fatal = 0;
      for (size_t i = 0; i < devs.size(); ++i) {
        std::unique_lock<std::mutex> lk;
        if (shared) lk = std::unique_lock(devs[i]->mutex());
        devs[i]->inject_fatal();
      }
    }
    // One pass over every device (§13 "The device loop"); shared, a device
    // the helper is running is left to it this time.
    bool work = false, again = false;
    auto deadline = Hca::Clock::now() + DeviceWaiter::kMaxSleep;
    for (size_t i = 0; i < devs.size(); ++i) {
      Device* d = devs[i].get();
      std::unique_lock<std::mutex> lk;
      if (!claim(i, lk)) {
        work = true;
        continue;
      }
      const int r = d->pass();
      if (r < 0) {
        rc = 1;
        break;
      }
      work = work || r > 0;
      again = again || r == 2;
      deadline = std::min(deadline, d->deadline());
      // A ring that fills faster than this loop empties it: a bulk flow.
      // Not when the CPUs are contended: a helper preempted in a pass holds
      // its devices up for a whole time slice of someone else.
      if (helping && d->backlog() >= Helper::kBacklog && !waiter.contended()) helper.wake();
    }
    if (rc) break;
    if (again) continue;
    for (size_t i = 0; i < devs.size(); ++i) {
      std::unique_lock<std::mutex> lk;
      if (claim(i, lk)) devs[i]->set_sleep_until(deadline);
    }
    waiter.after_pass(work, scanners, links, deadline, locks, [&] {
      bool any = false;
      for (size_t i = 0; i < devs.size(); ++i) {
        std::unique_lock<std::mutex> lk;
        if (!claim(i, lk)) return true;  // the helper runs it: not idle
        any = devs[i]->recheck() || any;
      }
      return any || stop;
    });
  }
  helper.stop();
  return helper.failed() ? 1 : rc;
}

}  // namespace openib::simhca::server

// Interrupts: each vector of an IRQ index (MSI-X for an HCA, MSI for edu)
// is an eventfd that the transport routes the device's interrupt to
// (VFIO_DEVICE_SET_IRQS / VFIO_USER_DEVICE_SET_IRQS). The eventfds are
// read inside an asio io_context, so a handler runs on the loop's thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/fd.hpp"
#include "common/result.hpp"
#include "vfio/device.hpp"

namespace openib::vfio {

class InterruptSet {
 public:
  // Called on the io_context's thread with the vector that fired and how
  // many times it fired since the last call (the eventfd counter).
  using Handler = std::function<void(uint32_t vector, uint64_t times)>;

  // Creates `count` eventfds, routes vectors [0, count) of `irq_index` to
  // them and starts reading them on `io`.
  static Result<std::unique_ptr<InterruptSet>> create(Device& dev,
                                                      boost::asio::io_context& io,
                                                      uint32_t irq_index,
                                                      uint32_t count, Handler handler);
  // Disables the IRQ index on the device (if it is still alive) and closes
  // the eventfds.
  ~InterruptSet();

  uint32_t size() const { return static_cast<uint32_t>(vectors_.size()); }
  // Total interrupts seen on a vector since creation.
  uint64_t total(uint32_t vector) const { return vectors_.at(vector)->total; }

 private:
  struct Vector {
    explicit Vector(boost::asio::io_context& io) : sd(io) {}
    boost::asio::posix::stream_descriptor sd;
    uint64_t buf = 0;
    uint64_t total = 0;
  };
  InterruptSet(Device& dev, uint32_t irq_index, Handler h)
      : dev_(dev), index_(irq_index), handler_(std::move(h)) {}
  void arm(uint32_t v);

  Device& dev_;
  uint32_t index_;
  Handler handler_;
  std::vector<std::unique_ptr<Vector>> vectors_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Creates a non-blocking eventfd (EFD_CLOEXEC | EFD_NONBLOCK).
Result<UniqueFd> make_eventfd();
// Waits up to timeout_ms for an eventfd to fire; returns its counter, or
// ETIMEDOUT. For tools and tests outside an event loop.
Result<uint64_t> wait_eventfd(int fd, int timeout_ms);

}  // namespace openib::vfio

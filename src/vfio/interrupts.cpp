#include "vfio/interrupts.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.hpp"

namespace openib::vfio {

Result<UniqueFd> make_eventfd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return sys_err("eventfd");
  return UniqueFd(fd);
}

Result<uint64_t> wait_eventfd(int fd, int timeout_ms) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;  // timeout restarts: bounded by signals seen
    if (n < 0) return sys_err("poll on eventfd {}", fd);
    if (n == 0) return err(ETIMEDOUT, "no interrupt on eventfd {} within {} ms", fd, timeout_ms);
    break;
  }
  uint64_t v = 0;
  if (::read(fd, &v, sizeof v) != sizeof v) return sys_err("read of eventfd {}", fd);
  return v;
}

Result<std::unique_ptr<InterruptSet>> InterruptSet::create(Device& dev,
                                                           boost::asio::io_context& io,
                                                           uint32_t irq_index, uint32_t count,
                                                           Handler handler) {
  OPENIB_TRY_ASSIGN(IrqInfo info, dev.irq_info(irq_index));
  if (count == 0 || count > info.count)
    return err(EINVAL, "{}: IRQ index {} has {} vectors, {} requested", dev.name(), irq_index,
               info.count, count);
  if (!(info.flags & VFIO_IRQ_INFO_EVENTFD))
    return err(ENOTSUP, "{}: IRQ index {} cannot signal an eventfd", dev.name(), irq_index);

  std::unique_ptr<InterruptSet> set(new InterruptSet(dev, irq_index, std::move(handler)));
  std::vector<int> fds;
  for (uint32_t v = 0; v < count; ++v) {
    OPENIB_TRY_ASSIGN(UniqueFd fd, make_eventfd());
    fds.push_back(fd.get());
    auto vec = std::make_unique<Vector>(io);
    vec->sd.assign(fd.release());
    set->vectors_.push_back(std::move(vec));
  }
  OPENIB_TRY(dev.set_irq_eventfds(irq_index, 0, fds));
  for (uint32_t v = 0; v < count; ++v) set->arm(v);
  return set;
}

void InterruptSet::arm(uint32_t v) {
  Vector& vec = *vectors_[v];
  vec.sd.async_read_some(
      boost::asio::buffer(&vec.buf, sizeof vec.buf),
      [this, v, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec, size_t n) {
        if (alive.expired() || ec == boost::asio::error::operation_aborted) return;
        if (ec || n != sizeof(uint64_t)) {
          log::get("irq")->error("{}: eventfd of vector {} failed: {}", dev_.name(), v,
                                 ec ? ec.message() : "short read");
          return;  // the vector stays quiet; the device is likely gone
        }
        Vector& fired = *vectors_[v];
        fired.total += fired.buf;
        if (handler_) handler_(v, fired.buf);
        if (!alive.expired()) arm(v);  // the handler may have destroyed the set
      });
}

InterruptSet::~InterruptSet() {
  alive_.reset();
  if (dev_.alive()) {
    if (auto r = dev_.disable_irqs(index_); !r.ok())
      log::get("irq")->warn("{}: disabling IRQ index {}: {}", dev_.name(), index_, r.error().str());
  }
  // stream_descriptor destructors cancel pending reads and close the fds.
}

}  // namespace openib::vfio

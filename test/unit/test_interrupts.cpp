#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include <map>

#include "fake_device.hpp"
#include "vfio/interrupts.hpp"

using namespace openib;
using openib::test::FakeDevice;

TEST_CASE("interrupts: each vector's eventfd reaches its handler in the loop", "[irq]") {
  FakeDevice dev;
  boost::asio::io_context io;
  std::map<uint32_t, uint64_t> seen;
  auto set = vfio::InterruptSet::create(dev, io, VFIO_PCI_MSIX_IRQ_INDEX, 3,
                                        [&](uint32_t v, uint64_t n) { seen[v] += n; });
  REQUIRE(set.ok());
  REQUIRE(dev.irq_fds.size() == 3);
  REQUIRE(dev.fire(0));
  REQUIRE(dev.fire(2));
  REQUIRE(dev.fire(2));
  io.run_for(std::chrono::milliseconds(200));
  CHECK(seen[0] == 1);
  CHECK(seen[1] == 0);
  CHECK(seen[2] >= 1);  // two writes may coalesce into one read of 2
  CHECK((*set)->total(2) == 2);
  // Handlers stay armed.
  REQUIRE(dev.fire(1));
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  CHECK(seen[1] == 1);
}

TEST_CASE("interrupts: destroying the set disables the IRQ index", "[irq]") {
  FakeDevice dev;
  boost::asio::io_context io;
  {
    auto set = vfio::InterruptSet::create(dev, io, VFIO_PCI_MSIX_IRQ_INDEX, 1, nullptr);
    REQUIRE(set.ok());
  }
  CHECK(dev.irqs_disabled);
  CHECK(dev.irq_fds.empty());
  io.run_for(std::chrono::milliseconds(10));  // pending reads are cancelled cleanly
}

TEST_CASE("interrupts: a handler may destroy its own set", "[irq]") {
  FakeDevice dev;
  boost::asio::io_context io;
  std::unique_ptr<vfio::InterruptSet> set;
  int calls = 0;
  auto r = vfio::InterruptSet::create(dev, io, VFIO_PCI_MSIX_IRQ_INDEX, 1,
                                      [&](uint32_t, uint64_t) { calls++; set.reset(); });
  REQUIRE(r.ok());
  set = std::move(*r);
  REQUIRE(dev.fire(0));
  io.run_for(std::chrono::milliseconds(100));
  CHECK(calls == 1);
  CHECK(set == nullptr);
}

TEST_CASE("interrupts: more vectors than the device has is an error", "[irq]") {
  FakeDevice dev;
  boost::asio::io_context io;
  auto r = vfio::InterruptSet::create(dev, io, VFIO_PCI_MSIX_IRQ_INDEX, 5, nullptr);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EINVAL);
  dev.gone = true;
  CHECK(vfio::InterruptSet::create(dev, io, VFIO_PCI_MSIX_IRQ_INDEX, 1, nullptr).error().code ==
        ENODEV);
}

TEST_CASE("interrupts: wait_eventfd times out and then sees a signal", "[irq]") {
  auto fd = vfio::make_eventfd();
  REQUIRE(fd.ok());
  auto none = vfio::wait_eventfd(fd->get(), 20);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == ETIMEDOUT);
  uint64_t three = 3;
  REQUIRE(write(fd->get(), &three, 8) == 8);
  auto got = vfio::wait_eventfd(fd->get(), 20);
  REQUIRE(got.ok());
  CHECK(*got == 3);
}

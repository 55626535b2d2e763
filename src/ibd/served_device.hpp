// One device ibd serves (docs/operations.md "Several devices"): its lock,
// its transport (an embedded simhca child or a named device), its driver
// from the table, its services registered in order, its client socket
// (the Server), its recovery, and its teardown in reverse. The daemon
// (daemon.cpp) holds one per --device / [[device]] table, all on one loop;
// a device that is lost recovers while the others keep serving.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "arp/neigh_lookup.hpp"
#include "arp/resolver.hpp"
#include "common/log.hpp"
#include "common/result.hpp"
#include "hca/device.hpp"
#include "ibd/budget.hpp"
#include "ibd/device_lock.hpp"
#include "ibd/device_slot.hpp"
#include "ibd/options.hpp"
#include "ibd/recovery.hpp"
#include "ibd/service.hpp"

namespace openib::ibd {

class Server;
class SimhcaChild;
class UmadService;
class SaService;
class IpoibService;
class NetdevService;
class CmService;
class IpoibLinks;
class CmaService;

class ServedDevice {
 public:
  // `index` in the daemon's list; `stopped(code)` is called once when the
  // device stopped serving (0: ibd is stopping; 1: it was lost for good).
  ServedDevice(boost::asio::io_context& io, const Options& o, size_t index, std::function<void(int)> stopped);
  ~ServedDevice();
  ServedDevice(const ServedDevice&) = delete;
  ServedDevice& operator=(const ServedDevice&) = delete;

  // The start-up ladder: lock, transport, bring-up, port setup, services,
  // client socket. An error leaves nothing behind (teardown() done).
  Result<void> start();
  // Stops serving (bounded: the SA's answers to unsubscribing, at most
  // 1 s), then calls `stopped(0)`.
  void shutdown();
  // The ladder in reverse; idempotent.
  void teardown();
  const std::string& name() const { return d_.name; }
  const std::string& spec() const { return spec_; }
  bool serving() const { return serving_; }
  // Its IPoIB interface's link if `ifindex` is it (the daemon's view of
  // every device's links, for the RDMA CM's source check).
  // Its RoCE netdev's too (docs/operations.md "RoCE ports": ethernet set).
  std::optional<arp::Link> ipoib_link(int ifindex) const;
  // The ifindex of the netdev of `port` (0: none, or not made yet).
  int netdev_ifindex(uint8_t port) const;
  void set_host_links(std::function<std::optional<arp::Link>(int)> f) { host_links_ = std::move(f); }

 private:
  Result<void> link_name();
  Result<void> open_device();
  Result<void> setup_port();
  void setup_port_async(hca::Device::Done<void> done);
  void build_services();
  Result<void> start_services();
  void watch_child();
  void stop(int code, const std::string& why);
  Recovery::Steps recovery_steps();
  void fence(const std::string& why);
  void attempt(unsigned n, Recovery::AttemptDone done);
  void poll_connect(Recovery::AttemptDone done);
  void bring_up(std::unique_ptr<vfio::Device> d, Recovery::AttemptDone done);
  void attempt_failed(unsigned n, const Error& e);
  void device_back(unsigned attempts, std::chrono::milliseconds down);

  boost::asio::io_context& io_;
  const Options& o_;
  const DeviceOptions& d_;
  std::function<void(int)> stopped_;
  std::shared_ptr<spdlog::logger> log_;
  std::string spec_;  // how it is reached, for logs and INFO
  std::string linked_;  // the first device's name symlink, while it exists
  std::optional<DeviceLock> lock_;
  std::unique_ptr<SimhcaChild> child_;
  DeviceSlot slot_;  // outlives its transports (device recovery)
  std::unique_ptr<hca::Device> hca_;
  // Queued event bytes per client and per uid, shared by the CM and the
  // RDMA CM (docs/operations.md "Limits"); it outlives both services.
  Budget event_bytes_;
  std::unique_ptr<UmadService> umad_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<SaService> sa_;
  std::unique_ptr<IpoibService> ipoib_;
  std::unique_ptr<NetdevService> netdev_;  // an Ethernet port's TAP (docs/operations.md "RoCE ports")
  std::unique_ptr<CmService> cm_;
  std::unique_ptr<IpoibLinks> ipoib_links_;
  std::unique_ptr<arp::Resolver> resolver_;
  // RoCE destination MACs (docs/arp.md "RoCE destinations"): for client
  // AVs (the Server), the CM's QPs and the MAD layer's address handles.
  arp::KernelNeighbours neigh_src_;
  arp::NeighLookup neigh_{neigh_src_};
  Result<std::array<uint8_t, 6>> dmac(uint8_t port, const std::array<uint8_t, 16>& dgid);
  std::unique_ptr<CmaService> cma_;
  ServiceRegistry services_;
  std::unique_ptr<Recovery> recovery_;
  boost::asio::steady_timer connect_timer_;  // an attempt's polls of the child's socket
  std::chrono::steady_clock::time_point connect_deadline_;
  boost::asio::signal_set chld_;
  std::function<std::optional<arp::Link>(int)> host_links_;
  bool serving_ = false, stopping_ = false;
};

}  // namespace openib::ibd

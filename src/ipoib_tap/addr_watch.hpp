// The addresses of one interface, followed through rtnetlink (rtnetlink(7);
// docs/ipoib.md "ATS registration"): what drives the ATS ServiceRecords,
// never a periodic scan of the interfaces.
//
//  - start() joins RTNLGRP_IPV4_IFADDR and RTNLGRP_IPV6_IFADDR, then dumps
//    the interface's addresses (RTM_GETADDR); each is reported as added.
//  - RTM_NEWADDR / RTM_DELADDR of the interface are reported as they come
//    (an address already known, e.g. an IPv6 address leaving its tentative
//    state, is not reported again). One whose duplicate address detection
//    failed (IFA_F_DADFAILED) counts as removed.
//  - An overrun of the socket (ENOBUFS: the kernel dropped events) or an
//    interrupted dump (NLM_F_DUMP_INTR) starts a new dump (after the one
//    under way, if any: the kernel runs one dump per socket); when it
//    ends, the differences from the known set are reported. Events
//    arriving during a dump wait until it ends and are applied after it,
//    in order.
//
// The netlink socket (libmnl) sits in the io_context as a
// posix::stream_descriptor; single-threaded, the callback runs on the
// io_context's thread and may call addresses() but must not destroy the
// AddrWatch.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "common/result.hpp"
#include "ipoib_tap/ip_addr.hpp"

struct mnl_socket;
struct nlmsghdr;

namespace openib::ipoib {

struct AddrWatchCounters {
  std::uint64_t events = 0;     // RTM_NEWADDR / RTM_DELADDR of this interface
  std::uint64_t dumps = 0;      // dumps requested (the first one included)
  std::uint64_t overruns = 0;   // ENOBUFS from the socket
  std::uint64_t malformed = 0;  // messages without a usable address
  std::uint64_t dump_errors = 0;  // dump requests the kernel refused
};

class AddrWatch {
 public:
  using Callback = std::function<void(bool added, const IpAddr&)>;

  AddrWatch(boost::asio::io_context& io, int ifindex, Callback cb);
  ~AddrWatch();
  AddrWatch(const AddrWatch&) = delete;
  AddrWatch& operator=(const AddrWatch&) = delete;

  Result<void> start();
  // The same with the socket's receive buffer set to `rcvbuf_bytes` (the
  // kernel's minimum applies): small buffers overrun sooner (tests).
  Result<void> start(int rcvbuf_bytes);

  // The addresses known now (after the first dump: all of them).
  const std::set<IpAddr>& addresses() const { return known_; }
  // True once the first dump has ended.
  bool synced() const { return synced_; }
  const AddrWatchCounters& counters() const { return counters_; }

 private:
  struct Event {
    bool added;
    IpAddr addr;
  };
  Result<void> request_dump();
  void wait();
  void on_readable();
  void on_message(const nlmsghdr* nlh);
  void end_dump();
  void release_held();
  void want_dump();
  void start_dump();
  void apply(bool added, const IpAddr& a);

  boost::asio::posix::stream_descriptor sd_;
  int ifindex_;
  Callback cb_;
  mnl_socket* nl_ = nullptr;
  unsigned portid_ = 0;
  std::uint32_t seq_ = 0;       // of the dump under way (0: none)
  std::uint32_t next_seq_ = 1;
  bool dump_intr_ = false;
  bool redump_ = false;         // another dump wanted when this one ends
  bool synced_ = false;
  std::set<IpAddr> known_;
  std::set<IpAddr> dumped_;     // collected by the dump under way
  std::vector<Event> held_;     // events that came during the dump
  std::vector<std::uint8_t> buf_;
  AddrWatchCounters counters_;
};

}  // namespace openib::ipoib

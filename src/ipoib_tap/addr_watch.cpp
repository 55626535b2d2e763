// rtnetlink(7), netlink(7); libmnl for the socket and the attributes.
#include "ipoib_tap/addr_watch.hpp"

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstring>

#include "common/log.hpp"

namespace openib::ipoib {

AddrWatch::AddrWatch(boost::asio::io_context& io, int ifindex, Callback cb)
    : sd_(io), ifindex_(ifindex), cb_(std::move(cb)), buf_(MNL_SOCKET_BUFFER_SIZE * 4) {}

AddrWatch::~AddrWatch() {
  if (sd_.is_open()) {
    boost::system::error_code ec;
    sd_.cancel(ec);
    sd_.release();  // the fd is libmnl's: mnl_socket_close closes it
  }
  if (nl_) mnl_socket_close(nl_);
}

Result<void> AddrWatch::start() { return start(0); }

Result<void> AddrWatch::start(int rcvbuf_bytes) {
  if (nl_) return err(EALREADY, "address watch of ifindex {} already started", ifindex_);
  nl_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (!nl_) return sys_err("netlink socket");
  int fd = mnl_socket_get_fd(nl_);
  if (rcvbuf_bytes > 0 && ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof rcvbuf_bytes) != 0)
    return sys_err("SO_RCVBUF {}", rcvbuf_bytes);
  if (mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0) return sys_err("netlink bind");
  portid_ = mnl_socket_get_portid(nl_);
  // Subscribe before dumping: nothing falls between the two.
  for (int group : {RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR})
    if (mnl_socket_setsockopt(nl_, NETLINK_ADD_MEMBERSHIP, &group, sizeof group) < 0)
      return sys_err("NETLINK_ADD_MEMBERSHIP {}", group);
  boost::system::error_code ec;
  sd_.assign(fd, ec);
  if (ec) return err(ec.value(), "asio assign of the netlink socket: {}", ec.message());
  OPENIB_TRY(request_dump());
  wait();
  return ok();
}

// RTM_GETADDR with NLM_F_DUMP: every address of every interface (the
// filter by ifindex is ours; the kernel's needs NETLINK_GET_STRICT_CHK).
Result<void> AddrWatch::request_dump() {
  alignas(nlmsghdr) char req[256] = {};
  nlmsghdr* nlh = mnl_nlmsg_put_header(req);
  nlh->nlmsg_type = RTM_GETADDR;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  seq_ = next_seq_++;
  if (next_seq_ == 0) next_seq_ = 1;
  nlh->nlmsg_seq = seq_;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_UNSPEC;
  dumped_.clear();
  dump_intr_ = false;
  ++counters_.dumps;
  if (mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) return sys_err("RTM_GETADDR dump request");
  return ok();
}

void AddrWatch::wait() {
  sd_.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the watch is going away
    on_readable();
    wait();
  });
}

void AddrWatch::on_readable() {
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(nl_, buf_.data(), buf_.size());
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // events lost: the kernel's view again
        ++counters_.overruns;
        log::get("ipoib")->warn("ifindex {}: rtnetlink overrun, dumping the addresses again", ifindex_);
        want_dump();
        continue;
      }
      log::get("ipoib")->error("ifindex {}: netlink recv: {}", ifindex_, std::strerror(errno));
      return;
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf_.data()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len))
      on_message(nlh);
  }
}

void AddrWatch::on_message(const nlmsghdr* nlh) {
  bool of_dump = seq_ != 0 && nlh->nlmsg_seq == seq_ && nlh->nlmsg_pid == portid_;
  // The kernel marks any part of an inconsistent dump, NLMSG_DONE too.
  if (of_dump && (nlh->nlmsg_flags & NLM_F_DUMP_INTR)) dump_intr_ = true;
  if (nlh->nlmsg_type == NLMSG_DONE) {
    if (of_dump) end_dump();
    return;
  }
  if (nlh->nlmsg_type == NLMSG_ERROR) {
    if (!of_dump || nlh->nlmsg_len < mnl_nlmsg_size(sizeof(nlmsgerr))) return;
    int e = -static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh))->error;
    // ENOBUFS: the dump's first part found the buffer full; the kernel
    // goes on with it as we read (netlink_recvmsg), its DONE will come.
    if (e == ENOBUFS || e == 0) return;
    ++counters_.dump_errors;
    log::get("ipoib")->error("ifindex {}: address dump refused: {}", ifindex_, std::strerror(e));
    seq_ = 0;
    redump_ = false;
    release_held();
    return;
  }
  if (nlh->nlmsg_type != RTM_NEWADDR && nlh->nlmsg_type != RTM_DELADDR) return;
  if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(ifaddrmsg))) {
    ++counters_.malformed;
    return;
  }
  const auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
  if (static_cast<int>(ifa->ifa_index) != ifindex_) return;
  if (!of_dump) ++counters_.events;
  // IPv4: IFA_LOCAL is the interface's own address (IFA_ADDRESS the
  // peer's on a point-to-point link); IPv6 sends IFA_ADDRESS alone.
  const nlattr* local = nullptr;
  const nlattr* address = nullptr;
  std::uint32_t flags = ifa->ifa_flags;
  const char* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  for (auto* a = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, sizeof(ifaddrmsg)));
       mnl_attr_ok(a, static_cast<int>(tail - reinterpret_cast<const char*>(a))); a = mnl_attr_next(a)) {
    if (mnl_attr_get_type(a) == IFA_LOCAL) local = a;
    if (mnl_attr_get_type(a) == IFA_ADDRESS) address = a;
    if (mnl_attr_get_type(a) == IFA_FLAGS && mnl_attr_get_payload_len(a) == 4) flags = mnl_attr_get_u32(a);
  }
  const nlattr* use = local ? local : address;
  std::size_t want = ifa->ifa_family == AF_INET ? 4 : ifa->ifa_family == AF_INET6 ? 16 : 0;
  if (!use || want == 0 || mnl_attr_get_payload_len(use) != want) {
    ++counters_.malformed;
    return;
  }
  IpAddr ip;
  ip.family = ifa->ifa_family;
  ip.prefix_len = ifa->ifa_prefixlen;
  std::memcpy(ip.bytes.data(), mnl_attr_get_payload(use), want);
  // An IPv6 address whose duplicate address detection failed stays
  // listed but is another node's: not ours to announce (RFC 4862 §5.4.5).
  bool added = nlh->nlmsg_type == RTM_NEWADDR && !(flags & IFA_F_DADFAILED);
  if (of_dump) {
    if (added) dumped_.insert(ip);
  } else if (seq_ != 0) {
    held_.push_back({added, ip});
  } else {
    apply(added, ip);
  }
}

// The dump's set against the known one: removals first, then additions;
// then the events held during the dump, in their order.
void AddrWatch::end_dump() {
  seq_ = 0;
  if (dump_intr_ || redump_) {  // stale: another one
    redump_ = false;
    start_dump();
    return;
  }
  synced_ = true;
  std::vector<IpAddr> gone;
  for (const auto& a : known_)
    if (!dumped_.count(a)) gone.push_back(a);
  for (const auto& a : gone) apply(false, a);
  for (const auto& a : std::set<IpAddr>(std::move(dumped_))) apply(true, a);
  dumped_.clear();
  release_held();
}

void AddrWatch::release_held() {
  auto held = std::move(held_);
  held_.clear();
  for (const auto& e : held) apply(e.added, e.addr);
}

// One dump at a time (a second request would be refused, EBUSY): during
// a dump, the next one waits for its end.
void AddrWatch::want_dump() {
  held_.clear();  // the next dump covers them
  if (seq_ != 0) {
    redump_ = true;
    return;
  }
  start_dump();
}

void AddrWatch::start_dump() {
  if (auto r = request_dump(); !r) {
    ++counters_.dump_errors;
    log::get("ipoib")->error("ifindex {}: {}", ifindex_, r.error().str());
    seq_ = 0;
  }
}

void AddrWatch::apply(bool added, const IpAddr& a) {
  bool changed = added ? known_.insert(a).second : known_.erase(a) > 0;
  if (changed && cb_) cb_(added, a);
}

}  // namespace openib::ipoib

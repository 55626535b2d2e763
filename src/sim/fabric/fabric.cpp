// The fabric of one ibfabric process (fabric.hpp; docs/ibfabric.md).
#include "sim/fabric/fabric.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "common/env.hpp"
#include "common/log.hpp"
#include "sim/cable/endpoint.hpp"
#include "sim/fabric/socket_drops.hpp"

namespace openib::sim::fabric {

namespace {

std::string node_addr(const Topology& t, const FabricOptions& o, int node) {
  auto it = o.node_addr.find(t.nodes[static_cast<size_t>(node)].name);
  return it != o.node_addr.end() ? it->second : o.addr;
}

std::string join_endpoint(const std::string& addr, unsigned port) {
  if (addr.find(':') != std::string::npos) return fmt::format("[{}]:{}", addr, port);  // IPv6
  return fmt::format("{}:{}", addr, port);
}

const char* port_state_name(std::uint8_t s) {
  static const char* names[] = {"NoChange", "Down", "Init", "Armed", "Active"};
  return s < 5 ? names[s] : "?";
}
const char* phys_state_name(std::uint8_t s) {
  static const char* names[] = {"NoChange", "Sleep", "Polling", "Disabled", "Training", "LinkUp", "ErrorRecovery",
                                "PhyTest"};
  return s < 8 ? names[s] : "?";
}

}  // namespace

Result<std::pair<Binding, Binding>> cable_ends(const Topology& t, const FabricOptions& o, int link) {
  const TopoLink& l = t.links.at(static_cast<size_t>(link));
  const unsigned pa = o.base_port + 2u * static_cast<unsigned>(link);
  if (pa + 1 > 65535) return err(EINVAL, "--base-port {}: cable {} needs UDP port {}", o.base_port, link, pa + 1);
  Binding a{link, l.a_node, l.a_port, join_endpoint(node_addr(t, o, l.a_node), pa), {}};
  Binding b{link, l.b_node, l.b_port, join_endpoint(node_addr(t, o, l.b_node), pa + 1), {}};
  // An explicit --bind of a host port replaces both endpoints of its cable.
  for (Binding* host : {&a, &b}) {
    Binding* other = host == &a ? &b : &a;
    auto it = o.binds.find({t.nodes[static_cast<size_t>(host->node)].name, host->port});
    if (it == o.binds.end()) continue;
    other->local = it->second.first;
    host->local = it->second.second;
  }
  a.peer = b.local;
  b.peer = a.local;
  for (const Binding* e : {&a, &b})
    if (auto p = parse_endpoint(e->local); !p) return err(EINVAL, "cable {}: {}", link, p.error().message);
  return std::make_pair(a, b);
}

Result<std::vector<Binding>> host_bindings(const Topology& t, const FabricOptions& o) {
  std::vector<Binding> out;
  for (size_t i = 0; i < t.links.size(); ++i) {
    OPENIB_TRY_ASSIGN(auto ends, cable_ends(t, o, static_cast<int>(i)));
    for (const Binding& e : {ends.first, ends.second})
      if (!t.nodes[static_cast<size_t>(e.node)].is_switch()) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Binding& x, const Binding& y) {
    return std::make_pair(x.node, x.port) < std::make_pair(y.node, y.port);
  });
  return out;
}

std::string format_binding(const Topology& t, const Binding& b) {
  const TopoNode& n = t.nodes[static_cast<size_t>(b.node)];
  return fmt::format("{} {} --guid {:#018x} --port{} LOCAL={},PEER={}", n.name, b.port, n.guid, b.port, b.local,
                     b.peer);
}

// ---- construction -------------------------------------------------------

Result<std::unique_ptr<Fabric>> Fabric::create(Topology topo, const FabricOptions& opts) {
  std::unique_ptr<Fabric> f(new Fabric(std::move(topo)));
  OPENIB_TRY(f->build(opts));
  return f;
}

Fabric::~Fabric() {
  for (auto& l : udp_) l->stop();  // no receive thread may touch the inbox any more
}

Result<void> Fabric::build(const FabricOptions& opts) {
  auto log = log::get("fabric");
  inbox_efd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!inbox_efd_) return sys_err("eventfd");
  rx_ring_ = std::make_shared<UdpRxRing>();
  udp_ep_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!udp_ep_) return sys_err("epoll_create1");
  for (const std::string& r : opts.remote) {
    const int n = topo_.find(r);
    if (n < 0 || !topo_.nodes[static_cast<size_t>(n)].is_switch())
      return err(EINVAL, "--remote {}: no such switch in the topology", r);
  }
  for (const auto& [key, v] : opts.binds) {
    const int n = topo_.find(key.first);
    if (n < 0 || topo_.nodes[static_cast<size_t>(n)].is_switch())
      return err(EINVAL, "--bind {}:{}: no such host node", key.first, key.second);
    const TopoNode& node = topo_.nodes[static_cast<size_t>(n)];
    if (key.second < 1 || key.second > node.num_ports || !node.ports[key.second].cabled)
      return err(EINVAL, "--bind {}:{}: that port has no cable in the topology", key.first, key.second);
  }
  std::vector<int> sw_of_node(topo_.nodes.size(), -1);
  for (size_t i = 0; i < topo_.nodes.size(); ++i) {
    const TopoNode& n = topo_.nodes[i];
    if (!n.is_switch() || opts.remote.count(n.name)) continue;
    sw_of_node[i] = static_cast<int>(switches_.size());
    node_of_switch_.push_back(static_cast<int>(i));
    switches_.push_back(std::make_unique<Switch>(n));
    const int sw = sw_of_node[i];
    switches_.back()->set_emit(
        [this, sw](unsigned port, std::span<const std::byte> p, unsigned hops) { emit(sw, port, p, hops); });
  }
  for (size_t li = 0; li < topo_.links.size(); ++li) {
    const TopoLink& l = topo_.links[li];
    const int sa = sw_of_node[static_cast<size_t>(l.a_node)], sb = sw_of_node[static_cast<size_t>(l.b_node)];
    if (sa < 0 && sb < 0) continue;  // not ours (host to host, or between remote switches)
    OPENIB_TRY_ASSIGN(auto ends, cable_ends(topo_, opts, static_cast<int>(li)));
    Cable c;
    c.link = static_cast<int>(li);
    if (sa >= 0 && sb >= 0) {
      c.a = {sa, l.a_port};
      c.b = {sb, l.b_port};
    } else {
      const bool a_local = sa >= 0;
      c.a = a_local ? End{sa, l.a_port} : End{sb, l.b_port};
      const Binding& mine = a_local ? ends.first : ends.second;
      UdpLinkOptions uo;
      uo.local = mine.local;
      uo.peer = mine.peer;
      uo.faults = opts.faults;
      // Each cable its own pattern: one seed on every cable would drop the
      // same packet numbers everywhere (docs/ibfabric.md).
      uo.faults.seed = opts.faults.seed + li;
      uo.polled = true;  // read by the loop, watched through udp_ep_ (no thread)
      // UDP_GRO with one receive ring for all cables (the loop reads them
      // one at a time); 512 KiB per cable if each had its own, so polling
      // off (OPENIB_UDP_POLLED=0) means no GRO here.
      uo.rx_ring = rx_ring_;
      uo.gro = !env_off("OPENIB_FABRIC_GRO");
      uo.name = fmt::format("{}[{}]", topo_.nodes[static_cast<size_t>(mine.node)].name, mine.port);
      if (!opts.pcap_dir.empty()) {
        OPENIB_TRY_ASSIGN(c.pcap, wire::PcapErfWriter::open(fmt::format(
                                      "{}/{}-{}.pcap", opts.pcap_dir,
                                      topo_.nodes[static_cast<size_t>(mine.node)].name, mine.port)));
        uo.pcap = c.pcap.get();
      }
      OPENIB_TRY_ASSIGN(auto link, UdpLink::create(uo));
      const End to = c.a;
      if (link->polled()) {
        // Straight from the link's buffer to the switch, on the loop.
        link->set_receiver([this, to](std::span<const std::byte> p) {
          ++stats_.inbox_packets;
          Cable* cab = cable_at(to.sw, to.port);
          if (cab && !cab->up) {
            ++stats_.dropped_cable_down;
            return;
          }
          switches_[static_cast<size_t>(to.sw)]->receive(to.port, p, 0, rx_now_);
        });
        link->set_state_receiver([this, to](bool up) { far_light(to, up); });
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = udp_.size();
        if (::epoll_ctl(udp_ep_.get(), EPOLL_CTL_ADD, link->fd(), &ev) != 0) return sys_err("{}: epoll_ctl", uo.name);
      } else {
        link->set_receiver([this, to](std::span<const std::byte> p) {
          {
            std::lock_guard lk(inbox_mu_);
            if (inbox_.size() >= 65536) {  // the loop is behind: lost, as in a full buffer
              ++stats_.inbox_dropped;
              return;
            }
            inbox_.push_back({to, std::vector<std::byte>(p.begin(), p.end()), 0});
          }
          const std::uint64_t one = 1;
          (void)!::write(inbox_efd_.get(), &one, sizeof one);
        });
        link->set_state_receiver([this, to](bool up) {
          {
            std::lock_guard lk(inbox_mu_);
            inbox_.push_back({to, {}, 0, up ? 1 : 0});
          }
          const std::uint64_t one = 1;
          (void)!::write(inbox_efd_.get(), &one, sizeof one);
        });
      }
      c.udp = link.get();
      switches_[static_cast<size_t>(c.a.sw)]->attach(c.a.port, link.get());
      log->info("cable {}: {} udp {} -> {}", li, uo.name, uo.local, uo.peer);
      udp_.push_back(std::move(link));
    }
    if (!opts.pcap_dir.empty() && !c.pcap) {
      const TopoNode& na = topo_.nodes[static_cast<size_t>(l.a_node)];
      OPENIB_TRY_ASSIGN(c.pcap, wire::PcapErfWriter::open(
                                    fmt::format("{}/{}-{}.pcap", opts.pcap_dir, na.name, l.a_port)));
    }
    cables_.push_back(std::move(c));
    const int ci = static_cast<int>(cables_.size() - 1);
    const Cable& cc = cables_.back();
    cable_of_[{cc.a.sw, cc.a.port}] = ci;
    if (cc.b.sw >= 0) cable_of_[{cc.b.sw, cc.b.port}] = ci;
  }
  // Every cabled port trains: LinkUp, Init (no SM LID yet, so no trap).
  for (const Cable& c : cables_) {
    switches_[static_cast<size_t>(c.a.sw)]->set_link(c.a.port, true);
    if (c.b.sw >= 0) switches_[static_cast<size_t>(c.b.sw)]->set_link(c.b.port, true);
  }
  return ok();
}

// ---- the loop's work ----------------------------------------------------

Fabric::Cable* Fabric::cable_at(int sw, unsigned port) {
  auto it = cable_of_.find({sw, port});
  return it == cable_of_.end() ? nullptr : &cables_[static_cast<size_t>(it->second)];
}

void Fabric::emit(int sw, unsigned port, std::span<const std::byte> pkt, unsigned hops) {
  Cable* c = cable_at(sw, port);
  if (!c) return;  // an uncabled port: the switch never sends there (its link is down)
  if (!c->up) {
    ++stats_.dropped_cable_down;
    return;
  }
  if (c->udp) {
    if (batching_ && !c->in_batch) {
      c->in_batch = true;
      c->udp->begin_batch();
      batched_.push_back(c);
    }
    (void)c->udp->send(pkt);  // loss on a full buffer is counted by the link
    return;
  }
  const bool from_a = c->a.sw == sw && c->a.port == port;
  if (c->pcap) (void)c->pcap->write(pkt, from_a ? 0 : 1);
  internal_.push_back({from_a ? c->b : c->a, std::vector<std::byte>(pkt.begin(), pkt.end()), hops});
}

Fabric::Batches::~Batches() {
  for (Cable* c : f_.batched_) {
    c->in_batch = false;
    c->udp->end_batch();
  }
  f_.batched_.clear();
  f_.batching_ = false;
}

void Fabric::deliver_inbox() {
  Batches batches(*this);
  std::uint64_t n = 0;
  (void)!::read(inbox_efd_.get(), &n, sizeof n);
  std::deque<Queued> q;
  {
    std::lock_guard lk(inbox_mu_);
    q.swap(inbox_);
  }
  const auto now = Switch::Clock::now();
  for (Queued& p : q) {
    if (p.light >= 0) {
      far_light(p.to, p.light == 1);
      continue;
    }
    ++stats_.inbox_packets;
    Cable* c = cable_at(p.to.sw, p.to.port);
    if (c && !c->up) {
      ++stats_.dropped_cable_down;
      continue;
    }
    switches_[static_cast<size_t>(p.to.sw)]->receive(p.to.port, p.bytes, 0, now);
  }
}

bool Fabric::receive_udp() {
  Batches batches(*this);
  constexpr int kEvents = 64;
  epoll_event ev[kEvents];
  const int n = ::epoll_wait(udp_ep_.get(), ev, kEvents, 0);
  if (n <= 0) return false;
  rx_now_ = Switch::Clock::now();
  bool more = n == kEvents;
  // Fewer than kUdpBatch packets: the socket is drained (UdpLink::poll).
  for (int i = 0; i < n; ++i)
    if (udp_[static_cast<size_t>(ev[i].data.u64)]->poll(kUdpBatch) >= kUdpBatch) more = true;
  return more;
}

std::size_t Fabric::pump_internal(std::size_t max) {
  Batches batches(*this);
  std::size_t n = 0;
  const auto now = Switch::Clock::now();
  while (n < max && !internal_.empty()) {
    Queued p = std::move(internal_.front());
    internal_.pop_front();
    ++n;
    ++stats_.internal_packets;
    switches_[static_cast<size_t>(p.to.sw)]->receive(p.to.port, p.bytes, p.hops, now);
  }
  return n;
}

void Fabric::tick(Switch::Clock::time_point now) {
  for (auto& s : switches_) s->tick(now);
  for (Cable& c : cables_)
    if (c.udp && now >= c.next_signal && (!c.up || c.up_repeats > 0)) signal(c, now);
}

// docs/cables.md "Link state": the cable's state to its far end, repeated
// as UDP may lose any one signal: "down" every kDownEvery for as long as
// the cable is pulled (a host that restarts meanwhile learns it too),
// "up" at the plug and kUpRepeats ticks after.
void Fabric::signal(Cable& c, Switch::Clock::time_point now) {
  (void)c.udp->send_link_state(c.up);  // a loss is counted by the link
  if (c.up) {
    if (c.up_repeats > 0) --c.up_repeats;
    c.next_signal = now;  // the next tick
  } else {
    c.next_signal = now + kDownEvery;
  }
}

// A link-state signal from the far end of a UDP cable (another ibfabric's
// `link down`/`link up`): the switch port goes as the far end's did.
void Fabric::far_light(End to, bool up) {
  Cable* c = cable_at(to.sw, to.port);
  if (!c || c->far_up == up) return;
  c->far_up = up;
  switches_[static_cast<size_t>(to.sw)]->set_link(to.port, up && c->up);
}

Switch* Fabric::find_switch(std::string_view name) {
  for (size_t i = 0; i < switches_.size(); ++i)
    if (topo_.nodes[static_cast<size_t>(node_of_switch_[i])].name == name) return switches_[i].get();
  return nullptr;
}

Result<void> Fabric::set_cable(std::string_view sw_name, unsigned port, bool up) {
  int sw = -1;
  for (size_t i = 0; i < switches_.size(); ++i)
    if (topo_.nodes[static_cast<size_t>(node_of_switch_[i])].name == sw_name) sw = static_cast<int>(i);
  if (sw < 0) return err(ENOENT, "no switch \"{}\" in this fabric", sw_name);
  if (port < 1 || port > switches_[static_cast<size_t>(sw)]->num_ports())
    return err(EINVAL, "\"{}\" has ports 1..{}", sw_name, switches_[static_cast<size_t>(sw)]->num_ports());
  Cable* c = cable_at(sw, port);
  if (!c) return err(ENOTCONN, "\"{}\" port {} has no cable", sw_name, port);
  const bool was = c->up;
  c->up = up;
  // Both ends of the cable see the link go (IBA 5.6: the physical link is shared).
  switches_[static_cast<size_t>(c->a.sw)]->set_link(c->a.port, up && c->far_up);
  if (c->b.sw >= 0) switches_[static_cast<size_t>(c->b.sw)]->set_link(c->b.port, up);
  if (c->udp && was != up) {  // the far end outside is told (docs/cables.md "Link state")
    c->up_repeats = up ? kUpRepeats + 1 : 0;
    signal(*c, Switch::Clock::now());
  }
  return ok();
}

// ---- control ------------------------------------------------------------

std::string Fabric::show() const {
  std::string out;
  for (size_t i = 0; i < switches_.size(); ++i) {
    const Switch& s = *switches_[i];
    const TopoNode& n = topo_.nodes[static_cast<size_t>(node_of_switch_[i])];
    out += fmt::format("switch \"{}\" guid {:#018x} lid {} ports {}\n", n.name, n.guid, s.lid(), s.num_ports());
    for (unsigned p = 1; p <= s.num_ports(); ++p) {
      const TopoPort& tp = n.ports[p];
      const mad::PortInfo pi = s.port_info_raw(p);
      std::string peer = "-";
      if (tp.cabled)
        peer = fmt::format("\"{}\"[{}]", topo_.nodes[static_cast<size_t>(tp.remote_node)].name, tp.remote_port);
      std::string how;
      if (auto it = cable_of_.find({static_cast<int>(i), p}); it != cable_of_.end()) {
        const Cable& c = cables_[static_cast<size_t>(it->second)];
        how = c.udp ? fmt::format(" udp {} -> {}", c.udp->local_endpoint().str(), c.udp->peer().str()) : " in-process";
        if (!c.up) how += " (pulled)";
        if (!c.far_up) how += " (pulled at the far end)";
      }
      out += fmt::format("  port {} {} {} peer {}{}\n", p, phys_state_name(pi.port_phys_state),
                         port_state_name(pi.port_state), peer, how);
    }
  }
  return out;
}

std::string Fabric::counters(std::string_view only) const {
  std::string out;
  bool any = false;
  for (size_t i = 0; i < switches_.size(); ++i) {
    const Switch& s = *switches_[i];
    const std::string& name = topo_.nodes[static_cast<size_t>(node_of_switch_[i])].name;
    if (!only.empty() && name != only) continue;
    any = true;
    const SwitchStats& st = s.stats();
    out += fmt::format(
        "switch \"{}\" rx {} forwarded {} link_down {} malformed {} not_active {} no_route {} out_port_down {} "
        "bad_dlid {} vl15_dropped {} local_dropped {} smps {} gmps {} loops {} traps {}\n",
        name, st.rx_packets, st.forwarded, st.rx_link_down, st.rx_malformed, st.rx_port_not_active, st.no_route,
        st.out_port_down, st.bad_dlid, st.vl15_dropped, st.local_dropped, st.smps_local, st.gmps_local,
        st.loop_drops, st.traps_sent);
    for (unsigned p = 0; p <= s.num_ports(); ++p) {
      const sma::PortCounterValues& c = s.port_counters(p);
      out += fmt::format(
          "  port {} xmit_pkts {} rcv_pkts {} xmit_bytes {} rcv_bytes {} rcv_errors {} xmit_discards {} "
          "relay_errors {} vl15_dropped {} link_downed {}\n",
          p, c.xmit_pkts, c.rcv_pkts, c.xmit_bytes, c.rcv_bytes, c.rcv_errors, c.xmit_discards,
          c.rcv_switch_relay_errors, c.vl15_dropped, c.link_downed);
    }
  }
  if (!only.empty() && !any) return fmt::format("error: no switch \"{}\" in this fabric\n", only);
  // socket_drops: what the kernel dropped at the cable's socket before
  // ibfabric read it, its receive buffer full (socket_drops.hpp).
  const auto kernel_drops = udp_socket_drops();
  std::uint64_t socket_drops = 0;
  for (const auto& l : udp_) {
    const LinkStats ls = l->stats();
    const auto it = kernel_drops.find(socket_inode(l->fd()));
    const std::uint64_t sd = it == kernel_drops.end() ? 0 : it->second;
    socket_drops += sd;
    // injected_drops: --faults drop (docs/cables.md "Fault injection").
    out += fmt::format(
        "cable {} tx {} rx {} bad_crc {} malformed {} foreign {} tx_errors {} injected_drops {} socket_drops {}\n",
        l->name(), ls.tx_packets, ls.rx_packets, ls.rx_dropped_bad_crc, ls.rx_dropped_malformed,
        ls.rx_dropped_foreign, ls.tx_errors, ls.injected_drops, sd);
  }
  std::uint64_t inbox_dropped = 0;
  {
    std::lock_guard lk(inbox_mu_);
    inbox_dropped = stats_.inbox_dropped;
  }
  out += fmt::format("fabric inbox {} inbox_dropped {} internal {} cable_down_drops {} socket_drops {}\n",
                     stats_.inbox_packets, inbox_dropped, stats_.internal_packets, stats_.dropped_cable_down,
                     socket_drops);
  return out + "ok\n";
}

std::string Fabric::control(std::string_view line) {
  std::vector<std::string_view> w;
  while (!line.empty()) {
    const size_t s = line.find_first_not_of(" \t\r\n");
    if (s == std::string_view::npos) break;
    line.remove_prefix(s);
    const size_t e = line.find_first_of(" \t\r\n");
    w.push_back(line.substr(0, e));
    line.remove_prefix(e == std::string_view::npos ? line.size() : e);
  }
  if (w.empty()) return "error: empty command\n";
  if (w[0] == "help" && w.size() == 1)
    return "link down SWITCH PORT\nlink up SWITCH PORT\nshow\ncounters [SWITCH]\nok\n";
  if (w[0] == "show" && w.size() == 1) return show() + "ok\n";
  if (w[0] == "counters" && w.size() <= 2) return counters(w.size() == 2 ? w[1] : std::string_view{});
  if (w[0] == "link" && w.size() == 4 && (w[1] == "up" || w[1] == "down")) {
    unsigned port = 0;
    auto [p, ec] = std::from_chars(w[3].data(), w[3].data() + w[3].size(), port);
    if (ec != std::errc() || p != w[3].data() + w[3].size()) return fmt::format("error: bad port \"{}\"\n", w[3]);
    auto r = set_cable(w[2], port, w[1] == "up");
    if (!r) return fmt::format("error: {}\n", r.error().message);
    return "ok\n";
  }
  return fmt::format("error: unknown command \"{}\" (try help)\n", w[0]);
}

}  // namespace openib::sim::fabric

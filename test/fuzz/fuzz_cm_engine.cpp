// The CM state machine (src/cm/engine.hpp) with a fake Env: the input is a
// script of arriving MADs (raw bytes, or CM messages built from input bytes
// that name the engine's own comm IDs, so that the deep states are reached)
// and consumer calls (listen, connect, accept, reject, RTU, disconnect,
// DREP, SIDR, destroy, ...), with the loop run in between so that timers
// fire (CM timeouts of 4.096 us * 2^0). Nothing may crash or hang, every
// MAD the engine sends must decode, and no event may name an id after its
// destroy().
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "cm/engine.hpp"
#include "fake_mad_port.hpp"  // mad::fuzz::Input

namespace {

using namespace openib;
using namespace openib::cm;
using mad::fuzz::Input;

struct Harness {
  boost::asio::io_context io;
  std::unique_ptr<Engine> engine;
  std::vector<uint32_t> ids;          // ids the consumer was given
  std::set<uint32_t> destroyed;
  std::vector<uint32_t> their_ids;    // comm IDs our engine put in what it sent (local_comm_id)
  std::vector<uint64_t> services{0x100, 0x200};
  uint32_t counter = 0;

  Harness() {
    Env env;
    env.send = [this](const mad::MadAddress&, mad::ByteVec m) -> Result<void> {
      if (m.size() != mad::kMadBytes) __builtin_trap();
      if (std::to_integer<uint8_t>(m[3]) == kMethodGetResp) return {};
      auto d = decode(m);
      if (!d) __builtin_trap();  // the engine sent something its own codec refuses
      std::visit(
          [&](const auto& x) {
            if constexpr (requires { x.local_comm_id; }) their_ids.push_back(x.local_comm_id);
            if constexpr (requires { x.request_id; }) their_ids.push_back(x.request_id);
          },
          d->msg);
      if (their_ids.size() > 64) their_ids.erase(their_ids.begin());
      return {};
    };
    env.event = [this](const Event& e) {
      if (e.id == 0 || destroyed.contains(e.id)) __builtin_trap();
      if (e.private_data.size() > 224 || e.ari.size() > kAriBytes) __builtin_trap();
      ids.push_back(e.id);
    };
    env.random = [this](uint32_t n, uint8_t* out) {  // distinct ids, never a reused one
      ++counter;
      for (uint32_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(counter >> (8 * (i % 4)));
    };
    PortInfo p;
    p.ca_guid = 0x1111;
    p.lid = 1;
    p.ca_ack_delay = 0;
    engine = std::make_unique<Engine>(io, std::move(env), p);
  }
  uint32_t pick_id(Input& in) {
    if (ids.empty()) return in.byte();
    return ids[in.byte() % ids.size()];
  }
  uint32_t pick_theirs(Input& in) {
    uint8_t b = in.byte();
    if (their_ids.empty() || b == 0xff) return b;
    return their_ids[b % their_ids.size()];
  }
};

// A CM message of type `t` whose IDs name the engine's (so that it is
// taken for a live connection's), other fields from the input.
Message craft(Harness& h, Input& in, uint8_t t) {
  uint32_t ours = h.pick_theirs(in);
  uint32_t theirs = 0x9000 + (in.byte() & 3);
  uint32_t qpn = 0x40 + (in.byte() & 3);
  switch (t % 11) {
    case 0: {
      Req q;
      q.local_comm_id = theirs;
      q.service_id = h.services[in.byte() & 1] + (in.byte() & 1);
      q.local_ca_guid = 0x2222 + (in.byte() & 1);
      q.local_qpn = qpn;
      q.path_mtu = 1 + in.byte() % 5;
      q.transport_service_type = in.byte() % 3;
      q.primary.local_lid = 2;
      q.primary.remote_lid = 1;
      q.primary.local_ack_timeout = in.byte() & 3;
      q.max_cm_retries = in.byte() & 3;
      q.remote_cm_response_timeout = in.byte() & 1;
      q.local_cm_response_timeout = in.byte() & 1;
      return q;
    }
    case 1: {
      Mra m;
      m.local_comm_id = theirs;
      m.message_mraed = static_cast<MsgMraed>(in.byte() % 3);
      m.service_timeout = in.byte() & 1;
      m.remote_comm_id = ours;
      return m;
    }
    case 2: {
      Rej r;
      r.local_comm_id = theirs;
      r.remote_comm_id = ours;
      r.message_rejected = static_cast<MsgRejected>(in.byte() % 3);
      r.reason = static_cast<RejReason>(in.byte() % 34);
      r.ari_length = in.byte() % 73;
      return r;
    }
    case 3: {
      Rep p;
      p.local_comm_id = theirs;
      p.remote_comm_id = ours;
      p.local_qpn = qpn;
      p.local_ca_guid = 0x2222;
      p.target_ack_delay = in.byte() & 3;
      return p;
    }
    case 4: return Rtu{theirs, ours, {}};
    case 5: return Dreq{theirs, ours, qpn, {}};
    case 6: return Drep{theirs, ours, {}};
    case 7: {
      SidrReq s;
      s.request_id = theirs;
      s.service_id = h.services[in.byte() & 1];
      return s;
    }
    case 8: {
      SidrRep s;
      s.request_id = ours;
      s.status = static_cast<SidrStatus>(in.byte() % 6);
      return s;
    }
    case 9: {
      Lap l;
      l.local_comm_id = theirs;
      l.remote_comm_id = ours;
      l.alternate.local_lid = 2;
      l.alternate.remote_lid = 1;
      return l;
    }
    default: {
      Apr a;
      a.local_comm_id = theirs;
      a.remote_comm_id = ours;
      return a;
    }
  }
}

std::vector<std::byte> pdata(Input& in) {
  std::vector<std::byte> v(in.byte() % 240);  // sometimes too long: EINVAL, not a crash
  for (auto& b : v) b = std::byte(in.byte());
  return v;
}

void step(Harness& h, Input& in, mad::MadAddress from) {
  Engine& e = *h.engine;
  const uint8_t op = in.byte();
  uint32_t id = h.pick_id(in);
  auto ignore = [](auto&&) {};
  switch (op % 18) {
    case 0: {  // raw bytes
      mad::ByteVec m(in.byte() & 1 ? mad::kMadBytes : in.byte());
      for (auto& b : m) b = std::byte(in.byte());
      e.on_mad(from, m);
      break;
    }
    case 1:
    case 2:
    case 3: {  // a CM message for a live connection
      Message m = craft(h, in, in.byte());
      auto bytes = encode(m, in.byte());
      if (op & 0x80) bytes[24 + (in.byte() % 232)] ^= std::byte(in.byte());
      e.on_mad(from, bytes);
      break;
    }
    case 4: {
      // A REQ or a SIDR listener (engine.hpp: two spaces).
      auto r = e.listen(h.services[in.byte() & 1], in.byte() & 1 ? ~0ull : ~0xffull, in.byte() & 3, in.byte() & 1);
      if (r) h.ids.push_back(*r);
      break;
    }
    case 5: {
      ConnectParams p;
      p.service_id = h.services[in.byte() & 1];
      p.peer.lid = 2;
      p.primary.local_lid = 1;
      p.primary.remote_lid = 2;
      p.path_mtu = in.byte() % 7;
      p.qpn = 0x40 + (in.byte() & 7);
      p.qp_type = in.byte() % 3;
      p.max_cm_retries = in.byte() & 3;
      p.cm_response_timeout = in.byte() & 1;
      auto pd = pdata(in);
      p.private_data = pd;
      auto r = e.connect(p, in.byte() & 3);
      if (r) h.ids.push_back(*r);
      break;
    }
    case 6: {
      AcceptParams a;
      a.qpn = 0x40 + (in.byte() & 7);
      a.target_ack_delay = in.byte() & 3;
      auto pd = pdata(in);
      a.private_data = pd;
      ignore(e.accept(id, a));
      break;
    }
    case 7: {
      auto pd = pdata(in), ari = pdata(in);
      ignore(e.reject(id, in.byte(), ari, pd));
      break;
    }
    case 8: {
      auto pd = pdata(in);
      ignore(e.send_rtu(id, pd));
      break;
    }
    case 9: ignore(e.notify_established(id)); break;
    case 10: {
      auto pd = pdata(in);
      ignore(e.disconnect(id, pd));
      break;
    }
    case 11: {
      auto pd = pdata(in);
      ignore(e.send_drep(id, pd));
      break;
    }
    case 12: {
      SidrParams s;
      s.service_id = h.services[in.byte() & 1];
      s.peer.lid = 2;
      s.max_cm_retries = in.byte() & 3;
      s.cm_response_timeout = in.byte() & 1;
      auto r = e.sidr_request(s, in.byte() & 3);
      if (r) h.ids.push_back(*r);
      break;
    }
    case 13: {
      auto pd = pdata(in);
      ignore(e.sidr_reply(id, in.byte() % 7, in.byte(), in.byte(), pd));
      break;
    }
    case 14: {
      bool live = e.state(id).has_value();
      e.destroy(id);
      if (live) h.destroyed.insert(id);
      if (e.state(id)) __builtin_trap();
      break;
    }
    case 15: {
      uint64_t owner = in.byte() & 3;
      // The ids of that owner are not known here one by one: none is
      // marked destroyed, only the engine's own rule (no events) is relied on.
      e.destroy_owner(owner);
      break;
    }
    case 16:
      ignore(e.qp_params(id, in.byte() & 3));
      (void)e.json();
      break;
    default:  // let timers fire (retries, MRA, timewait)
      h.io.restart();
      h.io.run_for(std::chrono::microseconds(20 + in.byte()));
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  Input in{data, size};
  mad::MadAddress from;
  from.lid = 2;
  from.qpn = 1;
  for (int i = 0; i < 256 && in.n; ++i) step(h, in, from);
  h.io.restart();
  h.io.poll();
  for (uint32_t id : h.ids) {
    if (h.engine->state(id)) h.destroyed.insert(id);
    h.engine->destroy(id);
  }
  h.io.restart();
  h.io.run_for(std::chrono::microseconds(50));
  return 0;
}

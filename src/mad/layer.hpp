// ibd's MAD layer for one port (IBA 13.5, 13.6; the part of Linux's ib_mad
// that user MADs and ibd's own protocols rely on). It owns the port's QP0
// and QP1 (MadPort) and:
//  - agents registered by management class, class version (and OUI for
//    vendor range 2) and a mask of request methods they take; one agent per
//    (class, version, method);
//  - TIDs: every request an agent sends carries the agent's key in TID bits
//    63:32 (the low 32 bits are the sender's), and a response is routed by
//    those bits back to the agent (IBA 13.4.6.4);
//  - send timeouts and retries: a request sent with a timeout is resent
//    `retries` times and then handed back to its agent with ETIMEDOUT, unless
//    a response with its TID arrives first;
//  - RMPP (IBA 13.6) for agents registered with an RMPP version: messages
//    longer than one MAD are segmented and sent with the window/ACK protocol,
//    and DATA segments are ACKed and reassembled before the agent sees one
//    whole message; agents without RMPP see segments as they come;
//  - directed-route SMPs at the endpoint are the device's business (its SMA
//    answers them); the layer sends what the agent built.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "common/result.hpp"
#include "hca/completer.hpp"
#include "mad/bytes.hpp"
#include "mad/transport.hpp"
#include "mad/rmpp.hpp"

namespace openib::hca {
class Device;
}

namespace openib::mad {

struct AgentSpec {
  uint8_t mgmt_class = 0, class_version = 0;
  uint8_t rmpp_version = 0;     // 0: the agent does its own RMPP (or none)
  uint32_t oui = 0;             // vendor range 2 classes (0x30..0x4f) only
  uint64_t methods[2] = {0, 0};  // bit m: request method m is received
};

// What an agent receives: a MAD (256 bytes), a reassembled RMPP message
// (any length), or a request of its own coming back with `status` ETIMEDOUT
// or ECOMM (then only the 24-byte common header, as Linux's ib_umad does).
struct Delivery {
  uint32_t status = 0;
  MadAddress from;
  ByteVec data;
};

struct MadLayerCounters {
  uint64_t sent = 0, send_errors = 0, received = 0, delivered = 0;
  uint64_t timeouts = 0, retries = 0;
  uint64_t unmatched_responses = 0, unclaimed_requests = 0;
  uint64_t rmpp_sent = 0, rmpp_received = 0, rmpp_aborted = 0;
};

class MadLayer {
 public:
  using Handler = std::function<void(const Delivery&)>;

  // The layer over `port`'s QP0 and QP1 on the device, without blocking
  // the loop (MadPort::open_async; defined in mad_port.cpp, with the
  // driver-facing half).
  using OpenDone = hca::Completer<Result<std::unique_ptr<MadLayer>>>;
  static void open_async(boost::asio::io_context& io, hca::Device& hca, uint8_t port, OpenDone done,
                         DmacLookup dmac = {});
  // The layer over any transport (tests, the fuzz target).
  MadLayer(boost::asio::io_context& io, std::unique_ptr<MadTransport> port);
  ~MadLayer();

  uint8_t port() const { return port_->port(); }
  // QP0 exists (an InfiniBand port); without it SMP-class agents are
  // refused (EOPNOTSUPP).
  bool has_smi() const { return port_->has_smi(); }

  // EBUSY: another agent takes one of the methods for this class/version.
  Result<uint32_t> register_agent(const AgentSpec& spec, Handler h);
  void unregister_agent(uint32_t agent);

  // Sends `msg` for `agent`: one MAD (24..256 bytes, zero-padded), or, for
  // an RMPP agent with the RMPP Active flag set in the message, a message of
  // any length. A request gets the agent's TID bits. timeout_ms 0: nothing
  // is awaited.
  Result<void> send(uint32_t agent, const MadAddress& to, std::span<const std::byte> msg, uint32_t timeout_ms,
                    uint32_t retries);

  // A completion event on CQ `cqn`: true if it was this layer's.
  bool on_cq_event(uint32_t cqn);
  // The port's device is gone: every request awaiting its response (and
  // every RMPP request being sent) goes back to its agent now, header only,
  // with `status`, as a timed-out one would; transfers in progress end.
  void fail_outstanding(uint32_t status);

  // At most `n` requests awaiting a response plus RMPP messages being sent
  // per agent (0: no limit); send() past it is ENOBUFS.
  void set_max_outstanding(uint32_t n) { max_outstanding_ = n; }

  const MadLayerCounters& counters() const { return counters_; }
  const MadPortCounters& port_counters() const { return port_->counters(); }

 private:
  struct Agent {
    AgentSpec spec;
    Handler handler;
    uint32_t outstanding = 0;  // its entries in pending_ and outbound_
  };
  struct Pending {  // a request awaiting its response
    uint32_t agent = 0;
    uint8_t qp = 0;
    MadAddress to;
    Mad mad{};
    uint32_t timeout_ms = 0, retries_left = 0;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  struct Outbound {  // an RMPP message being sent
    uint32_t agent = 0;
    MadAddress to;
    std::unique_ptr<RmppSender> sender;
    std::unique_ptr<boost::asio::steady_timer> timer;
    bool request = false;
    uint32_t timeout_ms = 0, retries = 0;
    Mad first{};
  };
  struct Inbound {  // an RMPP message being reassembled
    uint32_t agent = 0;
    std::unique_ptr<RmppReassembler> reasm;
    MadAddress from;
    MadAddress ack_to;  // from, with the Q_Key of the request it answers (a redirected GSI QP's)
    std::unique_ptr<boost::asio::steady_timer> timer;  // gives up on a silent sender
  };
  using TransferKey = std::tuple<uint64_t /*TID*/, uint16_t /*LID*/, uint32_t /*QPN*/>;

  void on_receive(const ReceivedMad& r);
  void handle_receive(const ReceivedMad& r);
  void add_pending(uint64_t tid, Pending p);
  void drop_pending(uint64_t tid);
  void count(uint32_t agent, int delta);
  void on_rmpp(const ReceivedMad& r, const RmppHeader& h);
  Agent* agent_for_request(ConstBytes mad, uint32_t* key);
  Agent* agent_for_response(ConstBytes mad, uint32_t* key);
  void deliver(uint32_t agent, uint32_t status, const MadAddress& from, ConstBytes data);
  Result<void> post(uint8_t qp, const MadAddress& to, ConstBytes mad);
  Result<void> dr_originate(Mad& m, MadAddress& dest);
  void await_response(uint32_t agent, uint8_t qp, const MadAddress& to, const Mad& mad, uint32_t timeout_ms,
                      uint32_t retries);
  void on_request_timeout(uint64_t tid);
  void run_outbound(uint64_t tid, RmppSender::Step step);
  void arm_outbound_timer(uint64_t tid);

  boost::asio::io_context& io_;
  std::unique_ptr<MadTransport> port_;
  std::map<uint32_t, Agent> agents_;  // key = the TID bits 63:32
  uint32_t next_key_ = 1;
  std::map<uint64_t, Pending> pending_;     // by TID
  std::map<uint64_t, Outbound> outbound_;   // by TID
  std::map<TransferKey, Inbound> inbound_;
  MadLayerCounters counters_;
  uint32_t max_outstanding_ = 0;
  // The transport may hand over a MAD from inside its send() (a completion
  // it polls there): such MADs wait here and are handled from the loop, so
  // the layer is never re-entered in the middle of a send.
  int posting_ = 0;
  std::deque<ReceivedMad> deferred_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the deferred handling
};

// IBA 13.4.5 and Linux's ib_response_mad(): the R bit, or TrapRepress.
bool is_response_mad(ConstBytes mad);

}  // namespace openib::mad

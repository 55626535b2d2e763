// The RDMA CM through libopenib (include/openib/cma.hpp, docs/cma.md
// "Library") against ibds without IPoIB: ids created, bound (a port given,
// or an ephemeral one), queried, listened on and destroyed; ports taken
// and freed; address resolution that has no interface to work with ends in
// ADDR_ERROR (-ENODEV) and leaves the id bound; and the passive side of a
// connection whose REQ comes from an IB CM client on the other ibd with
// rdma_cm's service ID and CMA header (the wire format Linux's rdma_cm
// writes): CONNECT_REQUEST with the header's addresses and the private
// data after it, accept, ESTABLISHED, RC data, DISCONNECTED.
// (The active side needs address resolution: test/sandbox/cma.sh, with IPoIB.)
#include <netinet/in.h>

#include "cm_path.hpp"
#include "cma_addr.hpp"
#include "cma_expect.hpp"
#include "cma/header.hpp"
#include "openib/cm.hpp"
#include "openib/cma.hpp"
#include "openib/path.hpp"
#include "test_api.hpp"

using namespace openib;
using namespace openib::testing;
using namespace openib::testing::api;

namespace {

IpEndpoint v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  return ipv4<IpEndpoint>(a, b, c, d, port);
}

template <class T>
int error_of(const Result<T>& r) {
  return r.ok() ? 0 : r.error().code;
}

constexpr uint8_t kStateAddrBound = 7, kStateListen = 8;

// An Ep on ibd A with an RDMA CM channel and a TCP id listening on `port`
// (the channel is closed before the Ep's Context).
struct Listener {
  std::unique_ptr<Ep> ep;
  std::unique_ptr<RdmaEventChannel> ch;
  uint32_t id = 0;
};
Listener listen_on_a(uint16_t port) {
  Listener l;
  l.ep = open_ep(sock_a());
  l.ch = must(RdmaEventChannel::open(*l.ep->ctx), "RdmaEventChannel::open");
  l.id = must(l.ch->create_id(RdmaPortSpace::kTcp), "create_id");
  must(l.ch->bind_addr(l.id, v4(0, 0, 0, 0, port)), "bind_addr");
  must(l.ch->listen(l.id), "listen");
  return l;
}

}  // namespace

TEST_CASE("RDMA CM: create, bind, query, listen, destroy; ports taken and freed", "[api][cma]") {
  auto ctx = must(Context::open(ContextOptions{.socket = sock_a()}), "Context::open");
  auto ch = must(RdmaEventChannel::open(*ctx), "RdmaEventChannel::open");
  CHECK(error_of(RdmaEventChannel::open(*ctx)) == EBUSY);  // one per Context

  // A given port on the wildcard address.
  const uint32_t id = must(ch->create_id(RdmaPortSpace::kTcp), "create_id");
  IpEndpoint bound = must(ch->bind_addr(id, v4(0, 0, 0, 0, 7471)), "bind_addr");
  CHECK(bound.port == 7471);
  CHECK(bound.family == AF_INET);
  CHECK(bound.any());
  RdmaIdInfo q = must(ch->query(id), "query");
  CHECK(q.state == kStateAddrBound);
  CHECK(q.ps == RdmaPortSpace::kTcp);
  CHECK(q.src.port == 7471);
  CHECK(q.src.family == AF_INET);
  CHECK(q.src.any());
  CHECK_FALSE(q.have_path);
  CHECK(q.qpn == 0);
  CHECK(error_of(ch->bind_addr(id, v4(0, 0, 0, 0, 7472))) == EINVAL);  // bound already

  // The loopback address, an ephemeral port.
  const uint32_t lo = must(ch->create_id(RdmaPortSpace::kIb), "create_id");
  IpEndpoint eph = must(ch->bind_addr(lo, v4(127, 0, 0, 1, 0)), "bind_addr");
  CHECK(eph.port >= 32768);
  CHECK(eph.port <= 60999);
  q = must(ch->query(lo), "query");
  CHECK(q.state == kStateAddrBound);
  CHECK(q.ps == RdmaPortSpace::kIb);
  CHECK(q.src.str() == "127.0.0.1:" + std::to_string(eph.port));
  CHECK(q.port == 1);

  // An address of no IPoIB interface of this ibd.
  const uint32_t other = must(ch->create_id(RdmaPortSpace::kTcp), "create_id");
  CHECK(error_of(ch->bind_addr(other, v4(198, 18, 0, 1, 0))) == EADDRNOTAVAIL);

  // The same port from another process's view (another Context): EADDRINUSE
  // until the first id is destroyed.
  auto ctx2 = must(Context::open(ContextOptions{.socket = sock_a()}), "Context::open");
  auto ch2 = must(RdmaEventChannel::open(*ctx2), "RdmaEventChannel::open");
  const uint32_t id2 = must(ch2->create_id(RdmaPortSpace::kTcp), "create_id");
  CHECK(error_of(ch2->bind_addr(id2, v4(0, 0, 0, 0, 7471))) == EADDRINUSE);
  CHECK(error_of(ch2->bind_addr(id2, v4(127, 0, 0, 1, 7471))) == EADDRINUSE);

  // Listen: state LISTEN; a listener cannot resolve an address.
  must(ch->listen(id, 8), "listen");
  q = must(ch->query(id), "query");
  CHECK(q.state == kStateListen);
  CHECK(q.src.port == 7471);
  CHECK(error_of(ch->resolve_addr(id, nullptr, v4(198, 18, 0, 2, 1))) == EINVAL);

  // Destroyed: gone, its port free.
  must(ch->destroy_id(id), "destroy_id");
  CHECK(error_of(ch->query(id)) == ENOENT);
  CHECK(error_of(ch->destroy_id(id)) == ENOENT);
  IpEndpoint again = must(ch2->bind_addr(id2, v4(0, 0, 0, 0, 7471)), "bind_addr after destroy");
  CHECK(again.port == 7471);
  // Another client's id is nothing of ours.
  CHECK(error_of(ch2->query(lo)) == ENOENT);
  CHECK(error_of(ch->create_id(static_cast<RdmaPortSpace>(0x0107))) == EPROTONOSUPPORT);
  // No events were due.
  CHECK(error_of(ch->get_event(kQuietMs)) == ETIMEDOUT);
  CHECK(error_of(ch2->get_event(kQuietMs)) == ETIMEDOUT);
}

TEST_CASE("RDMA CM without IPoIB: address resolution ends in ADDR_ERROR, nothing connects", "[api][cma]") {
  auto e = open_ep(sock_a());
  auto ch = must(RdmaEventChannel::open(*e->ctx), "RdmaEventChannel::open");
  for (RdmaPortSpace ps : {RdmaPortSpace::kTcp, RdmaPortSpace::kIb}) {
    INFO("port space " << static_cast<int>(ps));
    const uint32_t id = must(ch->create_id(ps), "create_id");
    // Nothing to connect yet.
    CHECK(error_of(ch->resolve_route(id)) == EINVAL);
    CHECK(error_of(ch->connect(id, *e->qp, {})) == EINVAL);
    must(ch->resolve_addr(id, nullptr, v4(198, 18, 0, 2, 7471), 1000), "resolve_addr");
    RdmaCmEvent ev = expect_cma_event(*ch, RdmaCmEventType::kAddrError);
    CHECK(ev.id == id);
    CHECK(ev.status == -ENODEV);
    CHECK(ev.dst.str() == "198.18.0.2:7471");
    // The resolution bound the id (an ephemeral port); still no route, no connection.
    RdmaIdInfo q = must(ch->query(id), "query");
    CHECK(q.state == kStateAddrBound);
    CHECK(q.src.port >= 32768);
    CHECK(error_of(ch->resolve_route(id)) == EINVAL);
    CHECK(error_of(ch->connect(id, *e->qp, {})) == EINVAL);
    // Again, with a source address given: the same.
    const IpEndpoint src = v4(127, 0, 0, 1, 0);
    const uint32_t id2 = must(ch->create_id(ps), "create_id");
    must(ch->resolve_addr(id2, &src, v4(198, 18, 0, 3, 1), 1000), "resolve_addr");
    ev = expect_cma_event(*ch, RdmaCmEventType::kAddrError);
    CHECK(ev.id == id2);
    CHECK(ev.status == -ENODEV);
    must(ch->destroy_id(id), "destroy_id");
    must(ch->destroy_id(id2), "destroy_id");
  }
  CHECK(e->qp->query().ok());
  CHECK(error_of(ch->get_event(kQuietMs)) == ETIMEDOUT);
}

TEST_CASE("RDMA CM passive side: a REQ with rdma_cm's service ID and CMA header, accepted, data, disconnect",
          "[api][cma]") {
  Listener l = listen_on_a(7600);
  auto& a = l.ep;
  auto& ch = l.ch;
  const uint32_t lid = l.id;

  // The connector: an IB CM client on ibd B writing what rdma_connect writes.
  auto b = open_ep(sock_b());
  auto bcm = must(CmChannel::open(*b->ctx), "CmChannel::open");
  std::vector<uint8_t> ours(20);
  fill(ours.data(), ours.size(), 0x31);
  CmConnParams cp;
  cp.private_data = with_cma_header(ipv4<cma::Addr>(198, 18, 0, 2, 40000), ipv4<cma::Addr>(198, 18, 0, 1, 7600), ours);
  const PathRecord path = decode_path_record(wire_path(b->lid, a->lid, b->gid.raw, a->gid.raw));
  must(bcm->connect(*b->qp, path, cma::service_id(cma::kPsTcp, 7600), cp), "IB CM connect");

  RdmaCmEvent req = expect_cma_event(*ch, RdmaCmEventType::kConnectRequest);
  CHECK(req.listen_id == lid);
  CHECK(req.id != lid);
  CHECK(req.src.str() == "198.18.0.1:7600");
  CHECK(req.dst.str() == "198.18.0.2:40000");
  // A REQ's private data is 92 bytes on the wire: the 56 after the header
  // (as Linux's rdma_cm reports them), ours first, zeros after.
  REQUIRE(req.private_data.size() == 56);
  CHECK(first_diff(req.private_data.data(), 20, 0x31) == 20);
  CHECK(all_bytes(req.private_data.data() + 20, 36, 0));
  CHECK(req.qp_num == b->qp->qp_num());
  // Not a listener's request: listen and connect are refused on it.
  CHECK(error_of(ch->listen(req.id)) == EINVAL);
  CHECK(error_of(ch->accept(lid, a->qp.get(), {})) == EINVAL);

  RdmaConnParam ap;
  ap.private_data.assign(30, 0);
  fill(ap.private_data.data(), 30, 0x52);
  must(ch->accept(req.id, a->qp.get(), ap), "accept");
  auto rep = bcm->get_event(kWaitMs);
  REQUIRE(rep.ok());
  REQUIRE(rep->type == CmEventType::kReply);
  REQUIRE(rep->private_data.size() >= 30);
  CHECK(first_diff(rep->private_data.data(), 30, 0x52) == 30);
  auto est_b = bcm->get_event(kWaitMs);
  REQUIRE(est_b.ok());
  CHECK(est_b->type == CmEventType::kEstablished);
  RdmaCmEvent est = expect_cma_event(*ch, RdmaCmEventType::kEstablished);
  CHECK(est.id == req.id);
  RdmaIdInfo q = must(ch->query(req.id), "query");
  CHECK(q.qpn == a->qp->qp_num());
  CHECK(q.src.str() == "198.18.0.1:7600");
  CHECK(q.dst.str() == "198.18.0.2:40000");

  // RC data both ways over the QPs ibd moved.
  for (auto [from, to] : {std::pair<Ep*, Ep*>{a.get(), b.get()}, std::pair<Ep*, Ep*>{b.get(), a.get()}}) {
    REQUIRE(post_recv(*to->qp, to->sge(16384, 4096), 1) == 0);
    fill(from->buf(), 1000, 0x77);
    REQUIRE(post_send(*from->qp, from->sge(0, 1000), 2) == 0);
    CHECK(wait_wc(*from->cq).status == kWcSuccess);
    Wc r = wait_wc(*to->cq);
    CHECK(r.status == kWcSuccess);
    CHECK(r.byte_len == 1000);
    CHECK(first_diff(to->buf() + 16384, 1000, 0x77) == 1000);
  }

  // The peer disconnects: DISCONNECTED on the RDMA CM id.
  must(bcm->disconnect(rep->id), "IB CM disconnect");
  RdmaCmEvent disc = expect_cma_event(*ch, RdmaCmEventType::kDisconnected);
  CHECK(disc.id == req.id);
  must(ch->destroy_id(req.id), "destroy_id");
  must(ch->destroy_id(lid), "destroy_id");
}

TEST_CASE("RDMA CM passive side: REQs no listener can take are refused (REJ 28), the listener hears nothing",
          "[api][cma]") {
  Listener l = listen_on_a(7601);  // 0.0.0.0:7601
  auto& a = l.ep;
  auto b = open_ep(sock_b());
  auto bcm = must(CmChannel::open(*b->ctx), "CmChannel::open");
  const PathRecord path = decode_path_record(wire_path(b->lid, a->lid, b->gid.raw, a->gid.raw));
  const auto src = ipv4<cma::Addr>(198, 18, 0, 2, 40001);
  std::vector<uint8_t> bad_version = with_cma_header(src, ipv4<cma::Addr>(198, 18, 0, 1, 7601), {});
  bad_version[0] = 0x55;  // cma_version: only 0x00 exists
  cma::Addr v6{}, src6{};
  v6.family = src6.family = AF_INET6;
  v6.port = 7601;
  v6.addr[15] = 1;  // ::1, which an IPv4 wildcard does not take
  src6.port = 40001;
  src6.addr[0] = 0xfd;
  src6.addr[15] = 2;
  const std::vector<std::vector<uint8_t>> cases = {
      bad_version,
      with_cma_header(src6, v6, {}),
      {},  // no header at all (the REQ's 92 bytes are zeros: version 0, IP version 0)
  };
  for (const auto& pd : cases) {
    QpInit init;
    init.type = QpType::kRc;
    init.send_cq = init.recv_cq = b->cq.get();
    auto qp = must(b->ctx->create_qp(*b->pd, init), "create_qp");
    CmConnParams cp;
    cp.private_data = pd;
    must(bcm->connect(*qp, path, cma::service_id(cma::kPsTcp, 7601), cp), "IB CM connect");
    auto rej = bcm->get_event(kWaitMs);
    REQUIRE(rej.ok());
    INFO("case " << &pd - cases.data() << ": event " << cm_event_str(rej->type));
    CHECK(rej->type == CmEventType::kRejected);
    CHECK(rej->reason == cm_rej::kConsumerReject);
  }
  auto none = l.ch->get_event(300);
  INFO((none ? std::string(rdma_event_str(none->type)) : none.error().str()));
  CHECK(!none.ok());
  must(l.ch->destroy_id(l.id), "destroy_id");
}

TEST_CASE("RDMA CM UD ids on the loopback address: init_qp to RTS with RDMA_UDP_QKEY, a datagram; a join without an SM fails",
          "[api][cma]") {
  EpOptions ud;
  ud.type = QpType::kUd;
  auto a = open_ep(sock_a(), ud);
  auto b = open_ep(sock_b(), ud);
  auto cha = must(RdmaEventChannel::open(*a->ctx), "RdmaEventChannel::open");
  auto chb = must(RdmaEventChannel::open(*b->ctx), "RdmaEventChannel::open");
  const uint32_t ida = must(cha->create_id(RdmaPortSpace::kUdp), "create_id");
  const uint32_t idb = must(chb->create_id(RdmaPortSpace::kUdp), "create_id");
  // No device before a bind or resolution.
  CHECK(error_of(cha->init_qp(ida, *a->qp)) == EINVAL);
  must(cha->bind_addr(ida, v4(127, 0, 0, 1, 0)), "bind_addr");
  must(chb->bind_addr(idb, v4(127, 0, 0, 1, 0)), "bind_addr");
  // A UD id takes a UD QP; a connected id does not.
  QpInit rc_init;
  rc_init.type = QpType::kRc;
  rc_init.send_cq = rc_init.recv_cq = a->cq.get();
  auto rc = must(a->ctx->create_qp(*a->pd, rc_init), "create_qp");
  CHECK(error_of(cha->init_qp(ida, *rc)) == EINVAL);
  const uint32_t tcp = must(cha->create_id(RdmaPortSpace::kTcp), "create_id");
  CHECK(error_of(cha->init_qp(tcp, *a->qp)) == EINVAL);

  // A QP of another Context names nothing on this channel's connection.
  CHECK(error_of(cha->init_qp(ida, *b->qp)) == EINVAL);
  must(cha->init_qp(ida, *a->qp), "init_qp");
  must(chb->init_qp(idb, *b->qp), "init_qp");
  for (Ep* e : {a.get(), b.get()}) {
    QpAttr q = must(e->qp->query(), "query QP");
    CHECK(q.state == QpState::kRts);
    CHECK(q.qkey == kRdmaUdpQkey);
    CHECK(q.port == 1);
  }
  CHECK(must(cha->query(ida), "query").qpn == a->qp->qp_num());

  // A datagram from A to B with RDMA_UDP_QKEY arrives: the Q_Keys are what ibd set.
  AddressVector av;
  av.dlid = b->lid;
  av.port = 1;
  auto ah = must(a->ctx->create_ah(*a->pd, av), "create_ah");
  REQUIRE(post_recv(*b->qp, b->sge(0, 1024), 1) == 0);
  fill(a->buf() + 4096, 200, 0x44);
  REQUIRE(post_send(*a->qp, a->sge(4096, 200), 2,
                    {.ah = ah.get(), .remote_qpn = b->qp->qp_num(), .remote_qkey = kRdmaUdpQkey}) == 0);
  CHECK(wait_wc(*a->cq).status == kWcSuccess);
  Wc r = wait_wc(*b->cq);
  REQUIRE(r.status == kWcSuccess);
  CHECK(r.src_qp == a->qp->qp_num());
  CHECK(r.byte_len == 40 + 200);  // the GRH's room, then the payload
  CHECK(first_diff(b->buf() + 40, 200, 0x44) == 200);

  // A multicast join: no SM answers, so MULTICAST_ERROR; the group is not
  // held (leave: ENOENT; a second join is tried afresh).
  const IpEndpoint group = v4(224, 0, 1, 20, 0);
  for (int round = 0; round < 2; ++round) {
    must(cha->join_multicast(ida, group, *a->qp), "join_multicast");
    RdmaCmEvent e = expect_cma_event(*cha, RdmaCmEventType::kMulticastError, 30000);
    CHECK(e.id == ida);
    CHECK(e.status < 0);
    CHECK(e.dst.str() == "224.0.1.20:0");
    CHECK(error_of(cha->leave_multicast(ida, group)) == ENOENT);
  }
  CHECK(error_of(cha->join_multicast(ida, v4(198, 18, 0, 9, 0), *a->qp)) == EINVAL);  // not a group
  CHECK(error_of(cha->join_multicast(tcp, group, *a->qp)) == EINVAL);                 // not a UD id
  must(cha->destroy_id(ida), "destroy_id");
  must(chb->destroy_id(idb), "destroy_id");
}

// An accept the IB CM refuses (the QP is not in RESET or INIT) leaves the
// request the application's: it may accept again with another QP, or
// reject (rdma_accept failing leaves the id to its owner, as in librdmacm).
TEST_CASE("RDMA CM: after an accept the IB CM refused, the request can be rejected or accepted again",
          "[api][cma]") {
  Listener l = listen_on_a(7700);
  auto& a = l.ep;
  auto& ch = l.ch;
  must(to_rts(*a->qp, 1, 1, a->gid), "A's QP to RTS");  // no QP for an accept
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = init.recv_cq = a->cq.get();
  auto fresh = must(a->ctx->create_qp(*a->pd, init), "create_qp");

  CmConnParams cp;
  cp.private_data = with_cma_header(ipv4<cma::Addr>(198, 18, 0, 2, 40000), ipv4<cma::Addr>(198, 18, 0, 1, 7700), {});
  for (bool accept_again : {false, true}) {
    INFO((accept_again ? "accepted again" : "rejected"));
    auto b = open_ep(sock_b());
    auto bcm = must(CmChannel::open(*b->ctx), "CmChannel::open");
    const PathRecord path = decode_path_record(wire_path(b->lid, a->lid, b->gid.raw, a->gid.raw));
    must(bcm->connect(*b->qp, path, cma::service_id(cma::kPsTcp, 7700), cp), "IB CM connect");
    RdmaCmEvent req = expect_cma_event(*ch, RdmaCmEventType::kConnectRequest);
    CHECK(error_of(ch->accept(req.id, a->qp.get(), {})) == EINVAL);
    if (!accept_again) {
      must(ch->reject(req.id), "reject");
      auto rej = bcm->get_event(kWaitMs);
      REQUIRE(rej.ok());
      CHECK(rej->type == CmEventType::kRejected);
      continue;
    }
    must(ch->accept(req.id, fresh.get(), {}), "accept with a QP in RESET");
    auto rep = bcm->get_event(kWaitMs);
    REQUIRE(rep.ok());
    CHECK(rep->type == CmEventType::kReply);
    auto est = bcm->get_event(kWaitMs);
    REQUIRE(est.ok());
    CHECK(est->type == CmEventType::kEstablished);
    CHECK(expect_cma_event(*ch, RdmaCmEventType::kEstablished).id == req.id);
    CHECK(must(fresh->query(), "query QP").state == QpState::kRts);
    CHECK(must(ch->query(req.id), "query").qpn == fresh->qp_num());
  }
}

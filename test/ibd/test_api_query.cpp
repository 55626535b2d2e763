// Queries through libopenib: device, port, GID, QP attributes and created
// capabilities (include/openib/verbs.hpp; docs/library.md "Tested by").
#include <infiniband/umad.h>
#include <unistd.h>

#include <optional>

#include "test_api.hpp"

using namespace openib;
using namespace openib::testing::api;

namespace {

// Entry 0 of port 1's P_Key table as its SMA answers, apart from the
// device's QUERY_PORT: a directed-route SubnGet(P_KeyTable) of block 0, or
// with `set` a SubnSet of entry 0 (IBA 14.2.1.2, 14.2.5.7), to the port
// itself (hop count 0, DrSLID and DrDLID the permissive LID) through ibd's
// user-MAD service and libibumad.so.3 (docs/umad.md; root's). nullopt if
// no answer came.
std::optional<uint16_t> sma_pkey0(const std::string& socket, std::optional<uint16_t> set = std::nullopt) {
  const char* old = std::getenv("OPENIB_SOCKET");  // libibumad's way to ibd
  const std::string saved = old ? old : "";
  ::setenv("OPENIB_SOCKET", socket.c_str(), 1);
  const int fd = umad_open_port(nullptr, 1);
  const int agent = fd >= 0 ? umad_register(fd, 0x81, 1, 0, nullptr) : -1;  // responses only
  std::vector<uint8_t> out(size_t(umad_size()) + 256), in(size_t(umad_size()) + 256);
  auto* smp = static_cast<uint8_t*>(umad_get_mad(out.data()));
  smp[0] = 1;                   // BaseVersion
  smp[1] = 0x81;                // directed-route SMP
  smp[2] = 1;                   // ClassVersion
  smp[3] = set ? 0x02 : 0x01;   // SubnSet, SubnGet
  smp[15] = 0x2a;               // TransactionID
  smp[17] = 0x16;               // P_KeyTable; AttributeModifier 0: block 0
  std::memset(smp + 32, 0xff, 4);  // DrSLID, DrDLID
  if (set) smp[64] = uint8_t(*set >> 8), smp[65] = uint8_t(*set);  // SMP data: 32 big-endian P_Keys
  umad_set_addr(out.data(), 0xffff, 0, 0, 0);
  int len = 256;
  const bool sent = agent >= 0 && umad_send(fd, agent, out.data(), 256, 1000, 2) == 0;
  const int got = sent ? umad_recv(fd, in.data(), &len, kWaitMs) : -1;
  if (fd >= 0) umad_close_port(fd);
  if (old) ::setenv("OPENIB_SOCKET", saved.c_str(), 1);
  else ::unsetenv("OPENIB_SOCKET");
  const auto* rep = static_cast<const uint8_t*>(umad_get_mad(in.data()));
  // SubnGetResp, Status 0 (bit 15 is the direction).
  if (got < 0 || got != agent || umad_status(in.data()) != 0 || rep[3] != 0x81 || ((rep[4] & 0x7f) | rep[5]) != 0)
    return std::nullopt;
  return static_cast<uint16_t>(rep[64] << 8 | rep[65]);
}

}  // namespace

TEST_CASE("query_device, query_port: the device's limits and each port's LID and state", "[api]") {
  auto a = open_ep(sock_a());
  auto b = open_ep(sock_b());
  DeviceAttr d = must(a->ctx->query_device(), "query_device");
  CHECK(d.name.rfind("simhca", 0) == 0);
  CHECK(d.num_ports >= 1);
  CHECK(d.max_qp > 0);
  CHECK(d.max_srq > 0);
  CHECK(d.max_qp_wr >= 16);
  CHECK(d.max_sge >= 1);
  CHECK(d.node_guid != 0);
  CHECK(d.node_guid != must(b->ctx->query_device(), "query_device B").node_guid);
  // ibv_device_attr's: simhca's capabilities (docs/simhca.md §6.1: every
  // device_cap_flags bit set) as libibverbs values, and its ACK delay.
  CHECK(d.atomic_cap == kAtomicHca);
  CHECK(d.device_cap_flags ==
        (device_cap::kPortActiveEvent | device_cap::kSysImageGuid | device_cap::kRcRnrNakGen));
  CHECK(d.sys_image_guid == d.node_guid);
  CHECK(d.local_ca_ack_delay == 15);

  // harness.cpp: the pair's LIDs are 1 and 2; the cable brings both ports up.
  PortAttr pa = must(a->ctx->query_port(1), "query_port A");
  PortAttr pb = must(b->ctx->query_port(1), "query_port B");
  CHECK(pa.lid == 1);
  CHECK(pb.lid == 2);
  CHECK(pa.state == 4);  // ACTIVE
  CHECK(pb.state == 4);
  CHECK(pa.gid_table_len >= 1);
  CHECK(pa.port_guid != pb.port_guid);
  // A port the device does not have is an error, not garbage.
  CHECK_FALSE(a->ctx->query_port(d.num_ports + 1).ok());
  // Two contexts are two clients.
  CHECK(a->ctx->client_id() != 0);
  auto a2 = open_ep(sock_a());
  CHECK(a2->ctx->client_id() != a->ctx->client_id());
}

TEST_CASE("query_gid: GID 0 is the subnet prefix and the port GUID (IBA 4.1.1); other indexes fail",
          "[api]") {
  auto a = open_ep(sock_a());
  PortAttr p = must(a->ctx->query_port(1), "query_port");
  Gid g = must(a->ctx->query_gid(1, 0), "query_gid");
  uint64_t prefix = 0, guid = 0;
  for (int i = 0; i < 8; ++i) {
    prefix = prefix << 8 | g.raw[size_t(i)];
    guid = guid << 8 | g.raw[size_t(8 + i)];
  }
  CHECK(prefix == p.gid_prefix);
  CHECK(guid == p.port_guid);
  CHECK(g.raw[0] == 0xfe);  // the default link-local prefix fe80::/64
  CHECK(g.raw[1] == 0x80);
  // An entry nobody filled reads as the zero GID (ibv_query_gid); past
  // the table, EINVAL.
  REQUIRE(p.gid_table_len > 1);
  CHECK(must(a->ctx->query_gid(1, 1), "query_gid of an empty entry").raw == Gid{}.raw);
  auto bad = a->ctx->query_gid(1, p.gid_table_len);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == EINVAL);
  // The peer's GID differs: it is what a GRH names as DGID (test_api_ud.cpp).
  auto b = open_ep(sock_b());
  CHECK(b->gid.raw != g.raw);
}

TEST_CASE("query_gid_entry: GID 0 with its type IB and the port's link layer; empty and bad entries fail cleanly",
          "[api]") {
  auto a = open_ep(sock_a());
  PortAttr p = must(a->ctx->query_port(1), "query_port");
  CHECK(p.link_layer == LinkLayer::kInfiniBand);
  GidEntry e = must(a->ctx->query_gid_entry(1, 0), "query_gid_entry");
  CHECK(e.gid.raw == must(a->ctx->query_gid(1, 0), "query_gid").raw);
  CHECK(e.gid_type == GidType::kIb);
  CHECK(e.link_layer == LinkLayer::kInfiniBand);
  CHECK(e.port_num == 1);
  CHECK(e.gid_index == 0);
  // An entry the table has but nobody filled: ENODATA (ibv_query_gid_ex).
  REQUIRE(p.gid_table_len > 1);
  auto empty = a->ctx->query_gid_entry(1, 1);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().code == ENODATA);
  // Past the table, a port the device lacks, a negative index: EINVAL.
  auto past = a->ctx->query_gid_entry(1, p.gid_table_len);
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().code == EINVAL);
  const auto d = must(a->ctx->query_device(), "query_device");
  CHECK(a->ctx->query_gid_entry(uint8_t(d.num_ports + 1), 0).error().code == EINVAL);
  CHECK(a->ctx->query_gid_entry(1, -1).error().code == EINVAL);
  // The connection still answers.
  CHECK(a->ctx->query_gid_entry(1, 0).ok());
}

TEST_CASE("query_pkey: entry 0 is the P_Key the port's SMA reports; past the table and on no port, EINVAL",
          "[api]") {
  auto a = open_ep(sock_a());
  const PortAttr p = must(a->ctx->query_port(1), "query_port");
  REQUIRE(p.pkey_table_len == 1);  // simhca: one P_Key per port (docs/simhca.md §14.4)
  const uint16_t pkey = must(a->ctx->query_pkey(1, 0), "query_pkey");
  CHECK((pkey & 0x7fff) != 0);  // a valid P_Key (IBA 10.9.1.2)
  if (::geteuid() == 0) {
    // The SMA's table is the one the port uses (docs/simhca.md §14.4):
    // entry 0 the same, and what an SM writes there is what query_pkey
    // answers next. Port A then holds another partition than its peer
    // until the default is written back.
    auto sma = sma_pkey0(sock_a());
    REQUIRE(sma);
    CHECK(pkey == *sma);
    constexpr uint16_t kOther = 0x8123;
    auto set = sma_pkey0(sock_a(), kOther);
    auto changed = a->ctx->query_pkey(1, 0);
    auto back = sma_pkey0(sock_a(), pkey);
    REQUIRE(back);
    CHECK(*back == pkey);
    REQUIRE(set);
    CHECK(*set == kOther);
    REQUIRE(changed.ok());
    CHECK(*changed == kOther);
    CHECK(must(a->ctx->query_pkey(1, 0), "query_pkey after the SMA's") == pkey);
  } else {
    WARN("not root: the user-MAD service is root's; the SMA's P_KeyTable is not compared");
  }
  // Past the table, ports the device lacks, a negative index: EINVAL.
  const auto d = must(a->ctx->query_device(), "query_device");
  auto past = a->ctx->query_pkey(1, p.pkey_table_len);
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().code == EINVAL);
  for (uint8_t port : {uint8_t(0), uint8_t(3), uint8_t(d.num_ports + 1)}) {
    auto bad = a->ctx->query_pkey(port, 0);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == EINVAL);
  }
  CHECK(a->ctx->query_pkey(1, -1).error().code == EINVAL);
  // The connection still answers, and the other daemon's port says the same.
  CHECK(must(a->ctx->query_pkey(1, 0), "query_pkey again") == pkey);
  auto b = open_ep(sock_b());
  CHECK(must(b->ctx->query_pkey(1, 0), "query_pkey B") == pkey);
}

TEST_CASE("Qp::query returns what modify set, state by state; a bad transition changes nothing",
          "[api]") {
  auto a = open_ep(sock_a());
  auto b = open_ep(sock_b());
  Qp& qp = *a->qp;
  CHECK(must(qp.query(), "query").state == QpState::kReset);

  // Not from RESET straight to RTS (IBA 10.3.1).
  QpAttr bad;
  bad.state = QpState::kRts;
  CHECK_FALSE(qp.modify(bad, qp_attr::kState).ok());
  CHECK(must(qp.query(), "query").state == QpState::kReset);

  QpAttr a1;
  a1.state = QpState::kInit;
  a1.port = 1;
  a1.pkey_index = 0;
  a1.access = kAccessRemoteWrite | kAccessRemoteAtomic;
  must(qp.modify(a1, qp_attr::kState | qp_attr::kPort | qp_attr::kPkeyIndex | qp_attr::kAccessFlags),
       "to INIT");
  QpAttr q = must(qp.query(), "query INIT");
  CHECK(q.state == QpState::kInit);
  CHECK(q.port == 1);
  CHECK(q.pkey_index == 0);
  CHECK(q.access == (kAccessRemoteWrite | kAccessRemoteAtomic));

  QpAttr a2;
  a2.state = QpState::kRtr;
  a2.path_mtu = Mtu::k2048;
  a2.dest_qpn = b->qp->qp_num();
  a2.rq_psn = 0x123456;
  a2.av.dlid = b->lid;
  a2.av.sl = 3;
  a2.av.port = 1;
  a2.max_dest_rd_atomic = 1;
  a2.min_rnr_timer = 7;
  must(qp.modify(a2, qp_attr::kState | qp_attr::kPathMtu | qp_attr::kDestQpn | qp_attr::kRqPsn |
                         qp_attr::kAv | qp_attr::kMaxDestRdAtomic | qp_attr::kMinRnrTimer),
       "to RTR");
  q = must(qp.query(), "query RTR");
  CHECK(q.state == QpState::kRtr);
  CHECK(q.path_mtu == Mtu::k2048);
  CHECK(q.dest_qpn == b->qp->qp_num());
  CHECK(q.rq_psn == 0x123456);
  CHECK(q.av.dlid == b->lid);
  CHECK(q.av.sl == 3);
  CHECK_FALSE(q.av.grh);
  CHECK(q.max_dest_rd_atomic == 1);
  CHECK(q.min_rnr_timer == 7);
  CHECK(q.access == (kAccessRemoteWrite | kAccessRemoteAtomic));  // kept from INIT

  QpAttr a3;
  a3.state = QpState::kRts;
  a3.sq_psn = 0xabcdef;
  a3.timeout = 17;
  a3.retry_cnt = 5;
  a3.rnr_retry = 3;
  a3.max_rd_atomic = 1;
  must(qp.modify(a3, qp_attr::kState | qp_attr::kSqPsn | qp_attr::kTimeout | qp_attr::kRetryCnt |
                         qp_attr::kRnrRetry | qp_attr::kMaxQpRdAtomic),
       "to RTS");
  q = must(qp.query(), "query RTS");
  CHECK(q.state == QpState::kRts);
  CHECK(q.sq_psn == 0xabcdef);
  CHECK(q.timeout == 17);
  CHECK(q.retry_cnt == 5);
  CHECK(q.rnr_retry == 3);
  CHECK(q.max_rd_atomic == 1);
  CHECK(q.rq_psn == 0x123456);  // kept from RTR
  CHECK(q.dest_qpn == b->qp->qp_num());

  // Back to RESET, then ERR: query follows.
  QpAttr r;
  r.state = QpState::kErr;
  must(qp.modify(r, qp_attr::kState), "to ERR");
  CHECK(must(qp.query(), "query ERR").state == QpState::kErr);
  r.state = QpState::kReset;
  must(qp.modify(r, qp_attr::kState), "to RESET");
  CHECK(must(qp.query(), "query RESET").state == QpState::kReset);
}

TEST_CASE("Qp::query of a UD QP returns its Q_Key; Qp::cap reports the rounded-up sizes", "[api]") {
  EpOptions o;
  o.type = QpType::kUd;
  o.cap.max_send_wr = 10;
  o.cap.max_recv_wr = 5;
  o.cap.max_send_sge = 2;
  auto a = open_ep(sock_a(), o);
  CHECK(a->qp->type() == QpType::kUd);
  CHECK(a->qp->cap().max_send_wr == 16);
  CHECK(a->qp->cap().max_recv_wr == 8);
  CHECK(a->qp->cap().max_send_sge >= 2);
  QpAttr i;
  i.state = QpState::kInit;
  i.port = 1;
  i.qkey = 0x0badcafe;
  must(a->qp->modify(i, qp_attr::kState | qp_attr::kPort | qp_attr::kPkeyIndex | qp_attr::kQkey), "to INIT");
  QpAttr q = must(a->qp->query(), "query");
  CHECK(q.state == QpState::kInit);
  CHECK(q.qkey == 0x0badcafe);
}

TEST_CASE("object numbers: each CQ, SRQ, QP and AH has its own", "[api]") {
  EpOptions o;
  o.srq = true;
  auto a = open_ep(sock_a(), o);
  auto cq2 = must(a->ctx->create_cq(8), "second CQ");
  auto srq2 = must(a->ctx->create_srq(*a->pd, 8, 1), "second SRQ");
  CHECK(cq2->cqn() != a->cq->cqn());
  CHECK(srq2->srqn() != a->srq->srqn());
  AddressVector av;
  av.dlid = 2;
  auto ah1 = must(a->ctx->create_ah(*a->pd, av), "AH 1");
  auto ah2 = must(a->ctx->create_ah(*a->pd, av), "AH 2");
  CHECK(ah1->ahn() != ah2->ahn());
  CHECK(a->pd->handle() != 0);
  // A second context's objects are its own: another PD handle space, other QPNs.
  auto b = open_ep(sock_a());
  CHECK(b->qp->qp_num() != a->qp->qp_num());
  CHECK(b->cq->cqn() != a->cq->cqn());
}

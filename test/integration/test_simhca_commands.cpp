// Every command of docs/simhca.md §6 on its success path, and the
// resource-number, busy and limit errors of §5.5.
#include "hca/prm.hpp"
#include "test_simhca_fixture.hpp"

using namespace openib;
using namespace openib::test;
using namespace openib::hca;

TEST_CASE("simhca: port query and the static port setup", "[simhca][commands]") {
  HcaFixture f;
  auto p = f.hca->query_port(1);
  REQUIRE(p.ok());
  CHECK(p->state == kPortDown);  // §6.3 power-on values of a port without a cable
  CHECK(p->phys_state == 2);     // Polling
  CHECK(p->lid == 0);
  CHECK(p->max_mtu == 5);
  CHECK(p->pkey_table_len == 1);
  CHECK(p->pkey0 == 0xffff);
  CHECK(p->gid_prefix == 0xfe80000000000000ull);
  CHECK(p->port_guid == f.hca->caps().node_guid + 1);  // §14.2: node GUID + port number

  PortSetup s;
  s.lid = 0x11;
  s.state = kPortActive;
  s.sm_lid = 1;
  REQUIRE(f.hca->set_port(1, s).ok());
  p = f.hca->query_port(1);
  REQUIRE(p.ok());
  CHECK(p->state == kPortActive);
  CHECK(p->lid == 0x11);
  CHECK(p->sm_lid == 1);
  // §9.4 events, after the completion.
  REQUIRE(f.hca->wait_event(prm::kEvPortStateChange, 2000));
  REQUIRE(f.hca->wait_event(prm::kEvLidChange, 2000));
  for (const EventEntry& e : f.hca->events()) {
    if (e.type == prm::kEvPortStateChange) {
      CHECK(prm::get8(e.data, 0) == 1);
      CHECK(prm::get8(e.data, 1) == kPortDown);
      CHECK(prm::get8(e.data, 2) == kPortActive);
    }
    if (e.type == prm::kEvLidChange) CHECK(prm::get16(e.data, 2) == 0x11);
  }

  SECTION("bad port and bad values are refused and change nothing") {
    CHECK(f.hca->query_port(2).error().code == EINVAL);
    CHECK(f.hca->last_status() == prm::kBadParam);
    PortSetup bad;
    bad.lid = 0xc000;  // multicast: not a port LID
    CHECK_FALSE(f.hca->set_port(1, bad).ok());
    bad = {};
    bad.state = 5;
    CHECK_FALSE(f.hca->set_port(1, bad).ok());
    bad = {};
    bad.active_mtu = 6;
    CHECK_FALSE(f.hca->set_port(1, bad).ok());
    CHECK(f.hca->query_port(1)->lid == 0x11);
    CHECK(f.hca->query_port(1)->active_mtu == 5);
  }
}

TEST_CASE("simhca: PDs, UARs, EQs and CQs", "[simhca][commands]") {
  HcaFixture f;
  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  auto pd2 = f.hca->alloc_pd();
  REQUIRE(pd2.ok());
  CHECK(*pd2 != *pd);
  auto uar = f.hca->alloc_uar();
  REQUIRE(uar.ok());
  CHECK(*uar >= 1);  // UAR 0 is the driver's

  auto cq = f.hca->create_cq(6, std::nullopt, *uar);
  REQUIRE(cq.ok());
  auto ctx = f.hca->query_cq(cq->cqn);
  REQUIRE(ctx.ok());
  CHECK(ctx->log_size == 6);
  CHECK(ctx->eqn == f.hca->eq0());
  CHECK(ctx->uar == *uar);
  CHECK(ctx->ring_iova == cq->ring.iova());
  CHECK(ctx->dbr_iova == cq->dbr.iova());
  CHECK(ctx->arm == 0);

  // §7.3 arming by doorbell on the CQ's own UAR.
  REQUIRE(f.hca->arm_cq(*cq, false).ok());
  ctx = f.hca->query_cq(cq->cqn);
  CHECK(ctx->arm == 1);
  CHECK(ctx->arm_sn == cq->arm_sn);
  REQUIRE(f.hca->arm_cq(*cq, true).ok());
  CHECK(f.hca->query_cq(cq->cqn)->arm == 2);
  // The same doorbell on another UAR page is ignored and counted (§4).
  const uint32_t bad_before = f.reg(prm::kBadAccess);
  Cq wrong_uar;
  wrong_uar.cqn = cq->cqn;
  wrong_uar.uar = 0;
  REQUIRE(f.hca->arm_cq(wrong_uar, false).ok());
  CHECK(f.hca->query_cq(cq->cqn)->arm == 2);
  CHECK(f.reg(prm::kBadAccess) == bad_before + 1);

  // A second EQ, and a CQ on it; EQ busy while the CQ lives.
  Bytes in(32);
  auto ring = f.hca->pool().alloc(16 * 32, 64);
  REQUIRE(ring.ok());
  prm::put64(in, 0, ring->iova());
  prm::put64(in, 8, 1ull << prm::kEvCqCompletion);
  prm::put8(in, 0x10, 4);
  prm::put16(in, 0x12, 3);
  auto eqn_out = f.hca->command(prm::kOpCreateEq, in, 4);
  REQUIRE(eqn_out.ok());
  const uint32_t eqn = prm::get32(*eqn_out, 0);
  CHECK(eqn != f.hca->eq0());
  auto eq = f.hca->query_eq(eqn);
  REQUIRE(eq.ok());
  CHECK(eq->vector == 3);
  CHECK(eq->log_size == 4);
  CHECK(eq->armed);
  auto cq2 = f.hca->create_cq(2, eqn);
  REQUIRE(cq2.ok());
  CHECK(f.hca->command(prm::kOpDestroyEq, encode_u32(eqn), 0).error().code == EBUSY);
  CHECK(f.hca->last_status() == prm::kResourceBusy);
  CHECK(f.hca->dealloc_uar(*uar).error().code == EBUSY);  // the CQ uses it

  REQUIRE(f.hca->destroy_cq(*cq2).ok());
  REQUIRE(f.hca->command(prm::kOpDestroyEq, encode_u32(eqn), 0).ok());
  CHECK(f.hca->query_eq(eqn).error().code == ENOENT);
  REQUIRE(f.hca->destroy_cq(*cq).ok());
  REQUIRE(f.hca->dealloc_uar(*uar).ok());
  CHECK(f.hca->dealloc_uar(0).error().code == ENOENT);  // the driver's UAR is not deallocatable
  REQUIRE(f.hca->dealloc_pd(*pd).ok());
  REQUIRE(f.hca->dealloc_pd(*pd2).ok());
  CHECK(f.hca->close().ok());  // graceful teardown: nothing left behind
}

TEST_CASE("simhca: QPs, SRQs, memory keys and address handles", "[simhca][commands]") {
  HcaFixture f;
  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  auto cq = f.hca->create_cq(4);
  REQUIRE(cq.ok());

  auto srq = f.hca->create_srq(*pd, 6, 6, 10);
  REQUIRE(srq.ok());
  auto sctx = f.hca->query_srq(srq->srqn);
  REQUIRE(sctx.ok());
  CHECK(sctx->log_size == 6);
  CHECK(sctx->log_stride == 6);
  CHECK(sctx->limit == 10);
  CHECK(sctx->armed);
  REQUIRE(f.hca->arm_srq(srq->srqn, 20).ok());
  CHECK(f.hca->query_srq(srq->srqn)->limit == 20);
  CHECK(f.hca->arm_srq(srq->srqn, 64).error().code == EINVAL);  // >= 2^log_size
  REQUIRE(f.hca->arm_srq(srq->srqn, 0).ok());
  CHECK_FALSE(f.hca->query_srq(srq->srqn)->armed);

  QpInit init;
  init.type = QpType::kRc;
  init.pdn = *pd;
  init.send_cqn = cq->cqn;
  init.recv_cqn = cq->cqn;
  init.srqn = srq->srqn;
  auto rc = f.hca->create_qp(init);
  REQUIRE(rc.ok());
  CHECK(rc->qpn >= 2);
  auto info = f.hca->query_qp(rc->qpn);
  REQUIRE(info.ok());
  CHECK(info->attr.state == QpState::kReset);
  CHECK(info->init.type == QpType::kRc);
  CHECK(info->init.pdn == *pd);
  CHECK(info->init.srqn == srq->srqn);
  CHECK(info->init.sq_iova == rc->sq.iova());
  // The whole CREATE_QP input comes back, its last bytes too (QUERY_QP's
  // 144 bytes: the attributes, then the input, §6.10).
  CHECK(info->init.log_sq_size == init.log_sq_size);
  CHECK(info->init.log_sq_stride == init.log_sq_stride);
  CHECK(info->init.log_sq_size != 0);
  CHECK(f.hca->query_srq(srq->srqn)->users == 1);
  CHECK(f.hca->query_cq(cq->cqn)->users == 2);

  init.srqn.reset();
  init.type = QpType::kUd;
  auto ud = f.hca->create_qp(init);
  REQUIRE(ud.ok());
  init.type = QpType::kSmi;
  init.port = 1;
  auto smi = f.hca->create_qp(init);
  REQUIRE(smi.ok());
  CHECK(smi->qpn == 0);
  init.type = QpType::kGsi;
  auto gsi = f.hca->create_qp(init);
  REQUIRE(gsi.ok());
  CHECK(gsi->qpn == 1);
  CHECK(f.hca->create_qp(init).error().code == ENOSPC);  // one GSI per port
  CHECK(f.hca->last_status() == prm::kNoResources);
  CHECK(f.hca->query_qp(1)->attr.port == 1);

  // §6.7 memory key over a page list.
  MkeyParams mp;
  mp.pdn = *pd;
  mp.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  mp.start_va = 0x7f0000001800;
  mp.length = 3 * 4096;
  mp.log_page_size = 12;
  mp.pages = {0x100000, 0x200000, 0x300000, 0x400000};  // 0x800 + 3 pages spans 4
  auto mk = f.hca->create_mkey(mp);
  REQUIRE(mk.ok());
  CHECK(mk->lkey == mk->rkey);
  CHECK((mk->lkey & 0xff) != 0);
  auto mctx = f.hca->query_mkey(mk->lkey);
  REQUIRE(mctx.ok());
  CHECK(mctx->num_pages == 4);
  CHECK(mctx->start_va == mp.start_va);
  CHECK(mctx->access == mp.access);

  // §7.6 address handle.
  AddressVector av;
  av.dlid = 0x22;
  av.sl = 3;
  av.port = 1;
  av.grh = true;
  av.flow_label = 0x12345;
  av.dgid[15] = 9;
  auto ah = f.hca->create_ah(*pd, av);
  REQUIRE(ah.ok());
  auto aq = f.hca->query_ah(*ah);
  REQUIRE(aq.ok());
  CHECK(aq->first == *pd);
  CHECK(aq->second.dlid == 0x22);
  CHECK(aq->second.sl == 3);
  CHECK(aq->second.grh);
  CHECK(aq->second.flow_label == 0x12345);
  CHECK(aq->second.dgid[15] == 9);

  // §6.11 multicast groups, through the driver's calls: UD QPs only,
  // attach idempotent, a detach of a non-member ENOENT; the async calls too.
  const std::array<uint8_t, 16> mgid{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  CHECK((f.hca->caps().cap_flags & (1u << 7)) != 0);  // §6.1 UD multicast
  CHECK(f.hca->attach_mcast(rc->qpn, mgid, 0xc001).error().code == EINVAL);
  CHECK(f.hca->attach_mcast(ud->qpn, mgid, 0x0001).error().code == EINVAL);
  CHECK(f.hca->detach_mcast(ud->qpn, mgid, 0xc001).error().code == ENOENT);
  REQUIRE(f.hca->attach_mcast(ud->qpn, mgid, 0xc001).ok());
  REQUIRE(f.hca->attach_mcast(ud->qpn, mgid, 0xc001).ok());
  std::optional<Result<void>> detached, again;
  f.hca->detach_mcast_async(ud->qpn, mgid, 0xc001, [&](Result<void> r) { detached = std::move(r); });
  f.hca->detach_mcast_async(ud->qpn, mgid, 0xc001, [&](Result<void> r) { again = std::move(r); });
  REQUIRE(f.hca->drain(5000));
  REQUIRE(detached);
  CHECK(detached->ok());
  REQUIRE(again);
  CHECK(again->error().code == ENOENT);
  REQUIRE(f.hca->attach_mcast(ud->qpn, mgid, 0xc001).ok());  // DESTROY_QP below detaches it

  // Busy: the PD has a QP, SRQ, MKEY and AH; the CQ has QPs; the SRQ a QP.
  CHECK(f.hca->dealloc_pd(*pd).error().code == EBUSY);
  CHECK(f.hca->destroy_cq(*cq).error().code == EBUSY);
  CHECK(f.hca->destroy_srq(*srq).error().code == EBUSY);

  REQUIRE(f.hca->destroy_ah(*ah).ok());
  REQUIRE(f.hca->destroy_mkey(mk->lkey).ok());
  CHECK(f.hca->query_mkey(mk->lkey).error().code == ENOENT);
  // A re-registered key in the same slot gets a different tag (§6.7).
  auto mk2 = f.hca->create_mkey(mp);
  REQUIRE(mk2.ok());
  CHECK(mk2->lkey != mk->lkey);
  CHECK(f.hca->destroy_mkey(mk->lkey).error().code == ENOENT);  // stale key
  REQUIRE(f.hca->destroy_mkey(mk2->lkey).ok());
  for (Qp* q : {&*rc, &*ud, &*smi, &*gsi}) REQUIRE(f.hca->destroy_qp(*q).ok());
  REQUIRE(f.hca->destroy_srq(*srq).ok());
  REQUIRE(f.hca->destroy_cq(*cq).ok());
  REQUIRE(f.hca->dealloc_pd(*pd).ok());
  CHECK(f.hca->close().ok());
}

TEST_CASE("simhca: bad resource numbers, bad parameters, limits", "[simhca][commands]") {
  HcaFixture f;
  CHECK(f.hca->dealloc_pd(77).error().code == ENOENT);
  CHECK(f.hca->last_status() == prm::kBadResource);
  CHECK(f.hca->query_cq(5000).error().code == ENOENT);
  CHECK(f.hca->query_qp(0xffffff).error().code == ENOENT);
  CHECK(f.hca->query_srq(3).error().code == ENOENT);
  CHECK(f.hca->destroy_ah(0).error().code == ENOENT);
  CHECK(f.hca->query_eq(31).error().code == ENOENT);
  Cq fake;
  fake.cqn = 12;
  CHECK(f.hca->destroy_cq(fake).error().code == ENOENT);
  CHECK(f.hca->create_cq(4, 9).error().code == ENOENT);  // no EQ 9

  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  auto cq = f.hca->create_cq(2);
  REQUIRE(cq.ok());
  CHECK(f.hca->create_cq(17).error().code == EINVAL);  // > log_max_cqe (16)

  QpInit init;
  init.pdn = *pd + 1;  // no such PD
  init.send_cqn = cq->cqn;
  init.recv_cqn = cq->cqn;
  CHECK(f.hca->create_qp(init).error().code == ENOENT);
  init.pdn = *pd;
  init.log_sq_stride = 5;  // send WQEs are at least 64 bytes
  CHECK(f.hca->create_qp(init).error().code == EINVAL);
  init.log_sq_stride = 6;
  init.port = 1;  // only SMI/GSI take a port at creation
  CHECK(f.hca->create_qp(init).error().code == EINVAL);

  // §6.7 key parameters.
  MkeyParams mp;
  mp.pdn = *pd;
  mp.access = kAccessRemoteWrite;  // without LOCAL_WRITE (IBA 10.6.3.1)
  mp.start_va = 0x1000;
  mp.length = 4096;
  mp.pages = {0x100000};
  CHECK(f.hca->create_mkey(mp).error().code == EINVAL);
  mp.access = kAccessLocalWrite;
  mp.pages = {0x100000, 0x101000};  // one page too many
  CHECK(f.hca->create_mkey(mp).error().code == EINVAL);
  mp.pages = {0x100800};  // not page aligned
  CHECK(f.hca->create_mkey(mp).error().code == EINVAL);
  mp.pages = {0x100000};
  mp.length = 0;
  CHECK(f.hca->create_mkey(mp).error().code == EINVAL);

  AddressVector av;
  av.dlid = 0;  // §7.6: no LID 0
  CHECK(f.hca->create_ah(*pd, av).error().code == EINVAL);
  av.dlid = 5;
  av.sl = 16;
  CHECK(f.hca->create_ah(*pd, av).error().code == EINVAL);

  // §6.6: the PD table is bounded by max_pd; exhausting it is NO_RESOURCES.
  std::vector<uint32_t> pds{*pd};
  for (uint32_t i = 1; i < f.hca->caps().max_pd; ++i) {
    auto p = f.hca->alloc_pd();
    REQUIRE(p.ok());
    pds.push_back(*p);
  }
  CHECK(f.hca->alloc_pd().error().code == ENOSPC);
  CHECK(f.hca->last_status() == prm::kNoResources);
  REQUIRE(f.hca->destroy_cq(*cq).ok());
  for (uint32_t p : pds) REQUIRE(f.hca->dealloc_pd(p).ok());
  auto again = f.hca->alloc_pd();  // every number free again
  REQUIRE(again.ok());
  REQUIRE(f.hca->dealloc_pd(*again).ok());
}

TEST_CASE("simhca: graceful teardown with objects alive is refused, then forced", "[simhca][commands]") {
  HcaFixture f;
  REQUIRE(f.hca->alloc_pd().ok());
  REQUIRE(f.hca->alloc_pd().ok());
  auto r = f.hca->close();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == EBUSY);
  CHECK(f.reg(prm::kStatus) == 0);  // torn down by force all the same
}

// docs/simhca.md §3.1: the object-count registers are gauges that follow
// creates and destroys exactly, are not moved by a failed command, go to 0
// on a reset (the DMA mappings aside), and may be read as one block.
TEST_CASE("simhca: object-count registers follow creates, destroys and a reset", "[simhca][commands]") {
  HcaFixture f;
  auto counts = [&] {
    auto o = f.hca->device_objects();
    REQUIRE(o.ok());
    return *o;
  };
  const DeviceObjects base = counts();
  // After bring-up: EQ 0 and UAR 0 (§5.1, §6.2), nothing else.
  CHECK(base.eqs == 1);
  CHECK(base.uars == 1);
  CHECK(base.pds + base.mkeys + base.cqs + base.qps + base.srqs + base.ahs == 0);
  // The driver's DMA mappings are its pool's blocks.
  CHECK(base.dma_maps == f.hca->pool().stats().blocks);
  CHECK(base.dma_maps > 0);
  // The block read is the nine 4-byte reads.
  CHECK(f.reg(prm::kObjBlock + 6 * 4) == base.eqs);
  CHECK(f.reg(prm::kObjBlock + 7 * 4) == base.uars);
  CHECK(f.reg(prm::kObjBlock + 8 * 4) == base.dma_maps);

  auto pd = f.hca->alloc_pd();
  REQUIRE(pd.ok());
  auto cq = f.hca->create_cq(4);
  REQUIRE(cq.ok());
  auto srq = f.hca->create_srq(*pd, 4, 6, 0);
  REQUIRE(srq.ok());
  QpInit init;
  init.pdn = *pd;
  init.send_cqn = init.recv_cqn = cq->cqn;
  init.srqn = srq->srqn;
  auto qp = f.hca->create_qp(init);
  REQUIRE(qp.ok());
  MkeyParams mp;
  mp.pdn = *pd;
  mp.start_va = 0x10000;
  mp.length = 4096;
  mp.log_page_size = 12;
  mp.pages = {0x100000};
  auto mk = f.hca->create_mkey(mp);
  REQUIRE(mk.ok());
  AddressVector av;
  av.dlid = 5;
  av.port = 1;
  auto ah = f.hca->create_ah(*pd, av);
  REQUIRE(ah.ok());
  auto uar = f.hca->alloc_uar();
  REQUIRE(uar.ok());
  DeviceObjects c = counts();
  CHECK(c.pds == 1);
  CHECK(c.mkeys == 1);
  CHECK(c.cqs == 1);
  CHECK(c.qps == 1);
  CHECK(c.srqs == 1);
  CHECK(c.ahs == 1);
  CHECK(c.eqs == 1);
  CHECK(c.uars == 2);
  CHECK(c.dma_maps == f.hca->pool().stats().blocks);

  // Failed commands move nothing: a busy PD, an SRQ with a QP, a stale AH.
  CHECK(f.hca->dealloc_pd(*pd).error().code == EBUSY);
  CHECK(f.hca->destroy_srq(*srq).error().code == EBUSY);
  CHECK(f.hca->destroy_ah(*ah + 1).error().code != 0);
  DeviceObjects same = counts();
  CHECK(same.pds == 1);
  CHECK(same.srqs == 1);
  CHECK(same.ahs == 1);

  REQUIRE(f.hca->destroy_ah(*ah).ok());
  CHECK(counts().ahs == 0);
  REQUIRE(f.hca->destroy_qp(*qp).ok());
  CHECK(counts().qps == 0);
  REQUIRE(f.hca->destroy_srq(*srq).ok());
  CHECK(counts().srqs == 0);
  REQUIRE(f.hca->destroy_mkey(mk->lkey).ok());
  REQUIRE(f.hca->destroy_cq(*cq).ok());
  REQUIRE(f.hca->dealloc_uar(*uar).ok());
  REQUIRE(f.hca->dealloc_pd(*pd).ok());
  c = counts();
  CHECK(c.pds + c.mkeys + c.cqs + c.qps + c.srqs + c.ahs == 0);
  CHECK(c.eqs == 1);
  CHECK(c.uars == 1);

  // §1: a block read must lie inside 0x080-0x0a3; one that leaves it, or
  // a multi-register read elsewhere, reads all ones and is counted.
  const uint32_t bad = f.reg(prm::kBadAccess);
  std::array<std::byte, 8> two{};
  REQUIRE(f.dev->region_read(VFIO_PCI_BAR0_REGION_INDEX, prm::kObjBlock + 8 * 4, two).ok());
  CHECK(two[0] == std::byte{0xff});
  REQUIRE(f.dev->region_read(VFIO_PCI_BAR0_REGION_INDEX, prm::kFwRev, two).ok());
  CHECK(two[0] == std::byte{0xff});
  CHECK(f.reg(prm::kBadAccess) == bad + 2);

  // §11.5: a reset empties the tables; the DMA mappings stay.
  const uint32_t maps = counts().dma_maps;
  auto pd2 = f.hca->alloc_pd();
  REQUIRE(pd2.ok());
  REQUIRE(f.dev->write32(VFIO_PCI_BAR0_REGION_INDEX, prm::kReset, 1).ok());
  c = counts();
  CHECK(c.pds + c.mkeys + c.cqs + c.qps + c.srqs + c.ahs + c.eqs + c.uars == 0);
  CHECK(c.dma_maps == maps);
  f.hca.reset();  // its queue is gone: close() copes (see the RESET case)
}

// The device's resource tables (docs/simhca.md §6 - §7): one bounded table
// per object kind and the per-index MKEY tags, owned here and handed by
// reference to the units that need them (the commands create and destroy
// objects; the event unit reads EQs and CQs; the queue engine and the
// transport read QPs, CQs, SRQs, MKEYs and AHs).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/simhca/codec.hpp"
#include "sim/simhca/mcast_groups.hpp"
#include "sim/simhca/resources.hpp"

namespace openib::simhca {

struct ResourceTables {
  Table<Pd> pds;
  Table<Uar> uars;
  Table<Eq> eqs;
  Table<Cq> cqs;
  Table<Srq> srqs;
  Table<Mkey> mkeys;
  std::vector<uint8_t> mkey_tags;  // §6.7 per-index key tag
  uint64_t mkey_pages = 0;         // §6.7: translation entries held by all MKEYs
  Table<Ah> ahs;
  Table<Qp> qps;
  // The QPs in a state that gives the data path work (RTR, RTS, SQD,
  // SQE, ERR). The data path's tick and due time visit only these, so a
  // command costs the device the same with 10,000 idle QPs as with none.
  SparseBitSet live_qps;
  McastGroups mcgs;  // §6.11: UD QPs attached to multicast groups

  // Empty tables of the sizes `c` gives (§6.1), as after a reset (§11.5).
  void reset(const Caps& c) {
    pds.reset(c.max_pd);
    uars.reset(c.max_uar, 1);  // UAR 0 is the driver's, allocated by INIT_HCA (§6.2)
    eqs.reset(c.max_eq);
    cqs.reset(c.max_cq);
    srqs.reset(c.max_srq);
    mkeys.reset(c.max_mkey);
    mkey_tags.assign(c.max_mkey, 0);
    mkey_pages = 0;
    ahs.reset(c.max_ah);
    qps.reset(c.max_qp, 2u * c.num_ports);  // QPN 0 .. 2n-1: each port's SMI and GSI (§6.10)
    live_qps.reset(c.max_qp);
    mcgs.reset();
  }
  // §6.2 TEARDOWN_HCA: the objects the driver still holds (UAR 0 aside).
  uint32_t live_objects() const {
    return pds.count() + eqs.count() + cqs.count() + srqs.count() + mkeys.count() + ahs.count() + qps.count() +
           (uars.count() - 1);
  }
};

}  // namespace openib::simhca

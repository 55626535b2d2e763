// librdmacm.so.1 over libopenib's RDMA CM (include/openib/cma.hpp,
// docs/cma.md "Library"), compiled against Debian's <rdma/rdma_cma.h> so
// that every struct an application reads (rdma_cm_id, rdma_cm_event,
// rdma_event_channel) is rdma-core 44's: each is the first member of ours.
//
// One context per event channel. libopenib allows one RdmaEventChannel per
// openib Context (CMA_OPEN answers EBUSY on a second), and ids are handles
// on that Context's connection to ibd. So rdma_create_event_channel opens
// its own ibv_context (through our libibverbs.so.1: the device named by
// $OPENIB_DEVICE, else the first one listed) and every id of the channel
// has that context as id->verbs, from rdma_create_id on. Applications
// allocate their PDs, CQs and QPs on id->verbs (rping, ucmatose, perftest
// do), which is then the context the connection is made on; a QP of
// another context cannot be connected (EINVAL). rdma_migrate_id between
// two channels is therefore refused (ENOSYS): their contexts differ.
// A NULL channel (rdma_create_id, rdma_create_ep) makes a synchronous id
// with a channel of its own, as rdma-core does.
#pragma once

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "openib/cma.hpp"

namespace openib::rdmacm {

struct Id;

// A CQ rdma_create_qp made for an id (qp.cpp "own CQs") and who uses it.
struct OwnCq {
  ibv_comp_channel* channel = nullptr;
  int users = 0;          // QPs of rdma_create_qp on it (send and receive side each)
  bool released = false;  // its id's QP destroyed: it goes when the last user does
};

struct Channel {
  rdma_event_channel ch{};  // first: rdma_event_channel* is Channel*
  ibv_context* verbs = nullptr;
  ibv_pd* default_pd = nullptr;  // rdma_create_qp with no PD
  std::unique_ptr<openib::RdmaEventChannel> impl;
  std::mutex mu;  // impl, ids and own_cqs: libopenib's channel is one thread at a time
  std::map<uint32_t, Id*> ids;
  std::map<ibv_cq*, OwnCq> own_cqs;
};

struct Id {
  rdma_cm_id id{};  // first: rdma_cm_id* is Id*
  Channel* ch = nullptr;
  uint32_t handle = 0;
  bool sync = false;  // owns ch (a NULL channel given)
  ibv_sa_path_rec path{};
  std::map<std::vector<uint8_t>, void*> groups;  // multicast address -> join context
};

struct Event {
  rdma_cm_event ev{};  // first: rdma_cm_event* is Event*
  std::vector<uint8_t> private_data;
};

inline Id* id_of(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* channel_of(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }

// Failure as librdmacm reports it: -1 (or NULL) with errno; the message to
// libopenib's log, component "rdmacm" (OPENIB_LOG=debug shows it).
void log_failure(const char* call, const openib::Error& e);
inline int fail(const char* call, const openib::Error& e) {
  log_failure(call, e);
  errno = e.code;
  return -1;
}
inline int fail(const char* call, int code, const char* why) { return fail(call, openib::err(code, "{}", why)); }

// The channel's part (cma.cpp) used by the others.
Channel* open_channel();
void close_channel(Channel* c);
// Refreshes id->route and port_num from ibd (query).
void refresh(Id& id);

}  // namespace openib::rdmacm

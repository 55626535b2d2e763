// Service registrations of the ports (IBA 15.2.5.14 ServiceRecord;
// docs/sa.md "Service registrations"): what ibd registers with the SA for
// its owners (clients), over an SaRequester (sa_requester.hpp) and a
// Clock, with no I/O and no timer of its own (the owner calls tick()).
//
//  - a registration is (port, ServiceID, ServiceGID, ServiceP_Key), the
//    SA's own key for a ServiceRecord; one owner each (another owner's
//    Set of the same key is EEXIST; the same owner's replaces it). A
//    ServiceGID of zero is made the port's GID 0 before the key is taken
//    (issue 29 finding 2): the SA keeps one record for both, so a record
//    given with GID 0 and one naming the port's GID are the same key;
//  - register: SubnAdmSet(ServiceRecord) selecting every component (a
//    ServiceGID of zero is the port's GID 0); the SA's echo goes back;
//  - a finite lease (seconds; 0xFFFFFFFF none) is renewed by the same Set
//    when half of it has passed, while the registration lives (tick());
//    an `own` registration (ibd's: ATS) is set again every
//    kOwnRefresh whatever its lease, so a record someone else deleted at
//    the SA comes back (issue 29 finding 2);
//  - unregister, and owner_gone() for every registration of an owner:
//    SubnAdmDelete(ServiceRecord) selecting ServiceID, ServiceGID,
//    ServiceP_Key, in the background;
//  - reregister(port) (ClientReregister, SM change: IBA 14.4.11) sets
//    every registration of the port again; one whose Set failed is tried
//    again by tick().
//
// Single-threaded; callbacks may call back in. Destruction completes
// waiting registrations with ECANCELED; later answers are dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "common/result.hpp"
#include "sa/path_source.hpp"
#include "sa/sa_requester.hpp"
#include "sa/service_record.hpp"

namespace openib::sa {

struct ServiceCounters {
  std::uint64_t registered = 0;  // register_service() calls accepted
  std::uint64_t removed = 0;     // registrations removed (unregister, owner gone)
  std::uint64_t sets = 0;        // SubnAdmSet(ServiceRecord) sent (renewals included)
  std::uint64_t renewals = 0;    // Sets sent to renew a lease
  std::uint64_t deletes = 0;     // SubnAdmDelete(ServiceRecord) sent
  std::uint64_t errors = 0;      // Sets and Deletes that failed
  std::uint64_t reregisters = 0; // registrations set again by reregister()
};

class ServiceRegs {
 public:
  using SetFn = std::function<void(Result<ServiceRecord>)>;

  ServiceRegs(SaRequester& sa, const Clock& clock) : sa_(sa), clock_(clock) {}
  ~ServiceRegs();
  ServiceRegs(const ServiceRegs&) = delete;
  ServiceRegs& operator=(const ServiceRegs&) = delete;

  // `done` gets the SA's echo of the record; EEXIST if another owner holds
  // the key; EBUSY if this owner's earlier Set of it is still out.
  void register_service(Owner owner, std::uint8_t port, const ServiceRecord& rec, SetFn done, bool own = false);
  static constexpr std::chrono::seconds kOwnRefresh{60};
  // ENOENT if `owner` holds no such registration (`gid` zero: the one it
  // gave with ServiceGID zero, the port's).
  Result<void> unregister(Owner owner, std::uint8_t port, std::uint64_t id, const Gid& gid, std::uint16_t pkey);
  void owner_gone(Owner owner);
  // Does `owner` hold it (unregister()'s lookup)?
  bool holds(Owner owner, std::uint8_t port, std::uint64_t id, const Gid& gid, std::uint16_t pkey) const;
  void reregister(std::uint8_t port);
  // Renews the leases due, retries the failed Sets.
  void tick();

  std::size_t registrations(Owner owner) const;
  std::size_t size() const { return regs_.size(); }
  const ServiceCounters& counters() const { return counters_; }

 private:
  using Key = std::tuple<std::uint8_t, std::uint64_t, Gid, std::uint16_t>;
  struct Reg {
    Owner owner = 0;
    ServiceRecord rec;  // ServiceGID zero made the port's
    bool port_gid = false;  // given with ServiceGID zero
    bool own = false;       // set again every kOwnRefresh
    SetFn waiting;
    bool busy = false;
    bool redo = false;    // set again after the answer out (reregister while busy, a newer record)
    bool failed = false;  // the last Set failed: tick() asks again
    bool done_once = false;  // the SA has answered a Set of it
    Clock::time_point renew_at{};
  };

  // register_service() once the ServiceGID is known.
  void register_keyed(Owner owner, std::uint8_t port, const ServiceRecord& rec, bool port_gid, bool own,
                      SetFn done);
  void send_set(const Key& k, bool renewal);
  void remove(std::map<Key, Reg>::iterator it);
  std::map<Key, Reg>::const_iterator find(Owner owner, std::uint8_t port, std::uint64_t id, const Gid& gid,
                                          std::uint16_t pkey) const;  // its Delete sent, its waiting Set cancelled
  void set_answered(const Key& k, Result<ServiceRecord> r);
  void send_delete(std::uint8_t port, ServiceRecord rec);
  void send_record(std::uint8_t port, std::uint8_t method, std::uint64_t mask, ServiceRecord rec,
                   std::function<void(Result<ServiceRecord>)> done);
  // `rec` with a zero ServiceGID made the port's, then `f`.
  void with_gid(std::uint8_t port, ServiceRecord rec, std::function<void(Result<ServiceRecord>)> f);

  SaRequester& sa_;
  const Clock& clock_;
  std::map<Key, Reg> regs_;
  ServiceCounters counters_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

}  // namespace openib::sa

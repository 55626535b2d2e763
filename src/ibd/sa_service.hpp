// ibd's SA client and path cache (docs/sa.md "In ibd"; issue 15): one
// SaClient (src/sa/sa_client.hpp) per port on the port's MAD layer, which
// the user-MAD service owns and hands over as it opens and goes
// (UmadService::watch_layer), and one PathCache (src/sa/path_cache.hpp)
// over them. Clients ask through PATH_QUERY (docs/client-protocol.md
// "Path records"); `ibdctl path` is one.
//
// Invalidation from the device's port events (docs/simhca.md §9.4): the
// port going down, a change from one LID to another and a device loss drop
// the port's entries ("normal"); the port coming up (Init, Armed, Active),
// its first LID, SM change and ClientReregister (IBA 14.4.11) make them
// stale and start revalidations ("light"); P_Key and GID changes drop them
// ("heavy").
// GID traps: each port's SA client subscribes to traps 64 and 65
// (InformInfo, IBA 13.4.8.3) when attached and again after a light event
// (a new SM, or ClientReregister: IBA 14.4.11 asks for it); the Reports
// feed the cache (trap 65 drops the GID's entries, 64 its negative ones).
// What is not wired yet (joins) is listed in docs/sa.md.
//
// Expired entries (negative ones after their 2 s, positive ones past the
// age ceiling) are freed every 5 s. A client has one request in flight at
// a time (the server's rule), so lookups in flight are bounded by the
// clients; entries by what the SA answers within the TTLs.
//
// Saved to disk (issue 15 part 3): each port's positive entries go to
// `<state dir>/path-cache-port<N>.bin` (atomic: temporary file, fsync,
// rename), every 30 s when they changed and when ibd stops; at start the
// file is loaded, checked against the port's subnet prefix, and its
// entries restored stale, so they answer at once and are revalidated.
// The file is tagged with the SM's port GUID too (learned by a NodeRecord
// query for the SM's LID once the port is Active): a file from another SM
// is loaded (at start the SM is not known yet), and once the SM is known
// and is another one, the port's entries are dropped (normal), counted
// in path_cache_other_sm: another SM may have given other LIDs.
//
// Single-threaded on ibd's io_context.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clientproto/messages.hpp"
#include "hca/completer.hpp"
#include "hca/hca.hpp"
#include "ibd/umad_service.hpp"
#include "sa/path_cache.hpp"
#include "sa/sa_client.hpp"

namespace openib::ibd {

class SaService {
 public:
  // `state_dir`: where each port's cache file lives (sa/cache_file.hpp);
  // empty: nothing is saved or loaded.
  SaService(boost::asio::io_context& io, hca::Hca& hca, UmadService& umad, uint8_t num_ports,
            std::string state_dir, sa::PathCacheConfig cfg = {});
  ~SaService();
  SaService(const SaService&) = delete;
  SaService& operator=(const SaService&) = delete;

  // Loads each port's cache file (its entries stale: served at once and
  // revalidated), asks the user-MAD service for each port's MAD layer.
  void start();
  // Writes each port's cache file now if its entries changed since the
  // last save (also every 30 s; ibd calls it when it stops).
  void save();

  // PATH_QUERY: the path from the port's GID 0 to req.dgid within req.pkey
  // (0: the port's P_Key at index 0). EHOSTUNREACH when the SA has no path;
  // the SA client's errors otherwise (ENETUNREACH: no SM known, ETIMEDOUT,
  // EBUSY, ENODEV while the device is away).
  void path_query(const proto::PathQueryReq& req, hca::Completer<Result<proto::PathRep>> done);

  // A port event, at the cache's level for it: kNormal (state or LID
  // change: the port's paths go), kLight (SM change, ClientReregister:
  // they become stale, are still served, and are revalidated in the
  // background), kHeavy (P_Key or GID change: they go).
  void port_event(uint8_t port, sa::Invalidation level);
  // LID_CHANGE: the port's first LID in this ibd's life (from 0) keeps its
  // paths stale and revalidates them (a warm start's restored paths carry
  // the LID of the last run, which the SM usually gives again); a change
  // from one LID to another drops them (normal).
  void lid_changed(uint8_t port, uint16_t lid);
  // PORT_STATE_CHANGE: to Down normal, to Init/Armed/Active light.
  void port_state(uint8_t port, uint8_t state);

  // PATH_LIST (path_list.cpp): one page of the cache's entries as JSON
  // text of at most `max_bytes` (but one entry), from index `start` of
  // the sorted list; port 0: every port's.
  std::string list_json(uint8_t port, uint32_t start, size_t max_bytes) const;
  // PATH_FLUSH: drops the port's entries (0: every port's), or only
  // `dgid`'s; returns how many (PathCache::flush).
  size_t flush(uint8_t port, const std::optional<sa::Gid>& dgid);

  // Flat name -> value pairs for INFO's counters (sa.*, path_cache.*).
  std::vector<std::pair<std::string, uint64_t>> counter_list() const;
  const sa::PathCache& cache() const { return cache_; }

 private:
  struct PortQuerier final : sa::PathQuerier {  // the cache's querier: the key's port's client
    SaService* self = nullptr;
    void query_path(const sa::PathKey& key, sa::PathAnswerFn done) override;
  };

  sa::SaClient* client(uint8_t port);
  void subscribe(uint8_t port);
  void load(uint8_t port);
  void save_port(uint8_t port);
  void arm_save();
  void refresh(uint8_t port);
  void learn_sm(uint8_t port);
  void sm_known(uint8_t port, uint64_t guid);
  void on_report(const mad::Notice& n);
  void arm_sweep();

  boost::asio::io_context& io_;
  hca::Hca& hca_;
  UmadService& umad_;
  uint8_t num_ports_;
  std::map<uint8_t, std::unique_ptr<sa::SaClient>> clients_;
  PortQuerier querier_;
  sa::SteadyClock clock_;
  sa::PathCache cache_;
  boost::asio::steady_timer sweep_timer_;  // frees expired entries (kSweepEvery)
  boost::asio::steady_timer save_timer_;
  std::string state_dir_;
  std::map<uint8_t, uint16_t> lid_;               // per port, from LID_CHANGE
  std::map<uint8_t, uint8_t> state_;              // per port, from PORT_STATE_CHANGE
  std::map<uint8_t, std::unique_ptr<boost::asio::steady_timer>> refresh_;
  std::map<uint8_t, uint64_t> subnet_prefix_;  // per port, as last read (the file's tag)
  std::map<uint8_t, std::string> saved_sig_;   // per port: what the last save wrote
  std::map<uint8_t, uint64_t> sm_guid_;        // per port: the SM's port GUID (the file's tag)
  std::map<uint8_t, uint64_t> file_sm_guid_;   // per port: the loaded file's, until the SM is known
  uint64_t other_sm_ = 0, sm_lookups_failed_ = 0;
  uint64_t loaded_ = 0, load_errors_ = 0, saves_ = 0, save_errors_ = 0;
  uint64_t subscribed_ = 0, subscribe_errors_ = 0, gid_reports_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace openib::ibd

// A small vfio-user 0.9.1 server framework (docs/vfio-user.md, "Server").
//
// It owns the socket and the protocol: VERSION, DMA_MAP/UNMAP (client
// memory mmap-ed from the fds that come with DMA_MAP), the info queries,
// SET_IRQS (eventfds kept per vector), REGION_READ/WRITE and DEVICE_RESET.
// A DeviceModel supplies what is device-specific: its regions and IRQs,
// register reads and writes, and reset. The model reaches client memory
// only through dma_read()/dma_write(), which refuse any byte outside a
// mapped range, and raises interrupts with trigger_irq().
//
// Single-threaded: the model's callbacks run inside handle_message(), on
// the caller's thread. A malformed client message is answered with an
// error reply and counted; a message that cannot be framed (bad header)
// ends the connection. Nothing a client sends can crash the server.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/fd.hpp"
#include "common/log.hpp"
#include "common/result.hpp"
#include "vfio/device.hpp"
#include "vfio/vfio_user_proto.hpp"

namespace openib::vfio::user {

// One region as the server offers it.
struct ServerRegion {
  uint64_t size = 0;
  uint32_t flags = 0;      // VFIO_REGION_INFO_FLAG_{READ,WRITE,MMAP}
  int mmap_fd = -1;        // with FLAG_MMAP: the fd the client mmaps (not owned)
  uint64_t mmap_offset = 0;
  std::vector<SparseArea> sparse;  // mmap-able areas; empty = whole region
  // VFIO_REGION_INFO_CAP_TYPE (a device-specific region); 0: none.
  uint32_t type = 0, subtype = 0;
};

class VfioUserServer;

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  // VFIO_DEVICE_FLAGS_*; the server adds nothing.
  virtual uint32_t device_flags() const { return VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET; }
  virtual uint32_t num_regions() const { return VFIO_PCI_NUM_REGIONS; }
  virtual uint32_t num_irqs() const { return VFIO_PCI_NUM_IRQS; }
  // A region the device has, or nullopt (reported as size 0, no flags).
  virtual std::optional<ServerRegion> region(uint32_t index) const = 0;
  // IRQ index info (count 0 = not supported).
  virtual IrqInfo irq(uint32_t index) const = 0;

  // Accesses inside a region's bounds with its READ/WRITE flag checked by
  // the server. An error is sent to the client as an error reply.
  virtual Result<void> read(uint32_t region, uint64_t offset, std::span<std::byte> out) = 0;
  virtual Result<void> write(uint32_t region, uint64_t offset, std::span<const std::byte> in) = 0;
  virtual void reset() {}

 protected:
  // The server this model is attached to (set by VfioUserServer's
  // constructor); valid inside every callback.
  VfioUserServer& server() { return *server_; }
  const VfioUserServer& server() const { return *server_; }

 private:
  friend class VfioUserServer;
  VfioUserServer* server_ = nullptr;
};

struct ServerOptions {
  int message_timeout_ms = 5000;  // for the rest of a message once it began
  uint64_t max_data_xfer_size = kMaxDataXfer;
  uint32_t max_dma_maps = 1024;
};

struct ServerStats {
  uint64_t messages = 0;        // commands handled
  uint64_t bad_messages = 0;    // answered with an error for being malformed
  uint64_t error_replies = 0;   // every error reply, malformed or refused
  uint64_t dma_faults = 0;      // dma_read/dma_write refused: outside mapped memory, or a bus error
  uint64_t dma_bus_errors = 0;  // of those, copies that took SIGBUS (common/bus_fault.hpp)
  uint64_t irqs_triggered = 0;  // eventfd writes
  uint64_t irqs_dropped = 0;    // trigger_irq with no eventfd routed
};

class VfioUserServer {
 public:
  VfioUserServer(DeviceModel& model, ServerOptions opts = {});
  ~VfioUserServer();
  VfioUserServer(const VfioUserServer&) = delete;
  VfioUserServer& operator=(const VfioUserServer&) = delete;

  // Binds and listens on `path` (replacing a stale socket file); the file
  // is removed again by the destructor.
  Result<void> listen(const std::string& path);
  // Waits up to timeout_ms (< 0: forever) for a client and accepts it.
  Result<void> accept_client(int timeout_ms);
  // Serves an already-connected socket (tests: one end of a socketpair).
  void adopt_client(UniqueFd sock);
  // The connected client's socket (poll it for POLLIN), or -1.
  int client_fd() const { return client_.get(); }
  bool connected() const { return client_.valid(); }

  // Reads and handles one message. Returns false once the client is gone
  // (EOF, reset, or a message that could not be framed), after dropping
  // its DMA mappings and eventfds.
  Result<bool> handle_message(int timeout_ms);
  // Handles messages until the client goes away.
  Result<void> serve();

  // Device-side access to client memory: the whole range must lie in
  // mappings with the needed permission, or nothing is copied, the fault is
  // counted and EFAULT returned. A copy that takes SIGBUS (the client's
  // file no longer backs a page) stops part way, is counted as a bus error
  // and is EFAULT too; the server goes on (common/bus_fault.hpp).
  Result<void> dma_read(uint64_t iova, std::span<std::byte> out);
  Result<void> dma_write(uint64_t iova, std::span<const std::byte> in);
  // Signals vector `vector` of IRQ index `index` (writes its eventfd).
  // False if no eventfd is routed there.
  bool trigger_irq(uint32_t index, uint32_t vector);
  bool irq_routed(uint32_t index, uint32_t vector) const;

  const ServerStats& stats() const { return stats_; }
  size_t dma_mappings() const { return dma_.size(); }
  const Capabilities& client_caps() const { return client_caps_; }

 private:
  struct DmaRegion {
    uint64_t size = 0;
    uint32_t flags = 0;
    void* addr = nullptr;  // our mmap of the client's fd
  };

  // Handlers return the reply payload, or the errno to answer with.
  Result<Bytes> dispatch(const Header& h, ByteSpan payload, std::vector<UniqueFd>& fds);
  Result<Bytes> on_version(ByteSpan p);
  Result<Bytes> on_dma_map(ByteSpan p, std::vector<UniqueFd>& fds);
  Result<Bytes> on_dma_unmap(ByteSpan p);
  Result<Bytes> on_device_info(ByteSpan p);
  Result<Bytes> on_region_info(ByteSpan p);
  Result<Bytes> on_irq_info(ByteSpan p);
  Result<Bytes> on_set_irqs(ByteSpan p, std::vector<UniqueFd>& fds);
  Result<Bytes> on_region_read(ByteSpan p);
  Result<Bytes> on_region_write(ByteSpan p);
  Result<Bytes> on_reset(ByteSpan p);
  Result<void> check_access(uint32_t region, uint64_t offset, uint64_t count, bool write);
  // Walks [iova, iova+len) over the mappings, calling f (a copy, false on
  // a bus error) only once the whole range is mapped with `need`.
  enum class DmaOutcome { kOk, kUnmapped, kBusError };
  template <typename F>
  DmaOutcome dma_walk(uint64_t iova, uint64_t len, uint32_t need, F&& f);
  Result<void> dma_result(DmaOutcome o, const char* dir, uint64_t iova, uint64_t len);
  void drop_client();

  DeviceModel& model_;
  ServerOptions opts_;
  std::shared_ptr<spdlog::logger> log_;
  UniqueFd listen_;
  std::string path_;
  UniqueFd client_;
  bool versioned_ = false;
  int reply_fd_ = -1;  // an fd to send with the current reply (region info)
  Capabilities client_caps_;
  std::map<uint64_t, DmaRegion> dma_;                  // by IOVA
  using DmaEntry = std::pair<const uint64_t, DmaRegion>;
  const DmaEntry* dma_last_ = nullptr;  // find_dma()'s last hit (reset when dma_ loses one)
  const DmaEntry* find_dma(uint64_t iova);
  std::map<uint32_t, std::vector<UniqueFd>> irq_fds_;  // per IRQ index, per vector
  ServerStats stats_;
};

}  // namespace openib::vfio::user

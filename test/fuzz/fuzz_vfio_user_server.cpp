// libFuzzer target: the vfio-user server framework (VfioUserServer) fed
// arbitrary bytes as a client's message stream, after a valid VERSION and
// a DMA_MAP of a real memfd. Whatever arrives, the server must answer or
// drop the connection: no crash, no hang, no access outside mapped memory.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/log.hpp"
#include "vfio/vfio_user_server.hpp"
#include "vfio/vfio_user_socket.hpp"

using namespace openib;
using namespace openib::vfio;
using namespace openib::vfio::user;

namespace {

constexpr uint64_t kIova = 0x10000, kMapSize = 0x2000;

// Config space, a 4 KiB BAR0 whose writes start a small DMA, one MSI.
class Model final : public DeviceModel {
 public:
  std::optional<ServerRegion> region(uint32_t index) const override {
    constexpr uint32_t rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    if (index == VFIO_PCI_CONFIG_REGION_INDEX) return ServerRegion{256, rw};
    if (index == VFIO_PCI_BAR0_REGION_INDEX) return ServerRegion{4096, rw};
    return std::nullopt;
  }
  IrqInfo irq(uint32_t index) const override {
    return index == VFIO_PCI_MSI_IRQ_INDEX ? IrqInfo{index, VFIO_IRQ_INFO_EVENTFD, 1}
                                           : IrqInfo{index, 0, 0};
  }
  Result<void> read(uint32_t, uint64_t off, std::span<std::byte> out) override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = mem_[(off + i) % sizeof mem_];
    return ok();
  }
  Result<void> write(uint32_t region, uint64_t off, std::span<const std::byte> in) override {
    for (size_t i = 0; i < in.size(); ++i) mem_[(off + i) % sizeof mem_] = in[i];
    if (region == VFIO_PCI_BAR0_REGION_INDEX && in.size() >= 8) {
      // The written value picks an IOVA near the mapping: in, across its
      // edges, or outside it.
      uint64_t v = 0;
      std::memcpy(&v, in.data(), 8);
      const uint64_t iova = kIova - 0x100 + (v % (kMapSize + 0x200));
      std::byte buf[64];
      if (v & 1) (void)server().dma_write(iova, buf);
      else (void)server().dma_read(iova, buf);
      (void)server().trigger_irq(VFIO_PCI_MSI_IRQ_INDEX, 0);
    }
    return ok();
  }

 private:
  std::byte mem_[256] = {};
};

int g_memfd = -1;

void call(int sock, Command c, const Bytes& payload, std::span<const int> fds = {}) {
  if (!send_message(sock, encode_command(1, c, payload), fds, 1000)) std::abort();
}

}  // namespace

// After static initialisation, so the log level set here sticks.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::set_level("off");
  g_memfd = ::memfd_create("fuzz-dma", MFD_CLOEXEC);
  if (g_memfd < 0 || ::ftruncate(g_memfd, kMapSize) < 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) std::abort();
  UniqueFd client(sv[1]);
  Model model;
  // message_timeout 0: a reply the client does not read, or a message cut
  // short, drops the connection instead of waiting.
  VfioUserServer server(model, {.message_timeout_ms = 0});
  server.adopt_client(UniqueFd(sv[0]));

  call(client.get(), Command::kVersion, encode_version({0, 1, capabilities_json({})}));
  call(client.get(), Command::kDmaMap,
       encode_dma_map({VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE, 0, kIova, kMapSize}),
       std::span<const int>(&g_memfd, 1));
  // The fuzz input, then end of stream.
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(client.get(), data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(client.get(), SHUT_WR);

  std::byte drain[65536];
  for (int i = 0; i < 256 && server.connected(); ++i) {
    auto r = server.handle_message(0);
    if (!r) break;
    while (::recv(client.get(), drain, sizeof drain, MSG_DONTWAIT) > 0) {
    }
  }
  if (server.stats().messages < 2) std::abort();  // VERSION and DMA_MAP were handled
  return 0;
}
